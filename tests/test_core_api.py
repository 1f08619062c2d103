"""docs/api.md: every public tool is documented, and every example in it runs (issue 19)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import gradlab as gl

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_every_public_name_has_an_entry():
    text = DOC.read_text(encoding="utf-8")
    headings = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    missing = [n for n in gl.__all__ if f"`{n}" not in headings and f" {n}`" not in headings
               and f"`{n}`" not in text]
    assert not missing, f"docs/api.md has no entry for {missing}"


def test_every_documented_example_runs_in_order():
    """The blocks share one namespace, as a reader runs them one after the other."""
    namespace: dict = {}
    ran = 0
    for block in BLOCKS:
        if "# notebook only" in block:
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the documentation's own code
        ran += 1
    assert ran >= 25
    # the examples show what they claim
    assert namespace["causes"][0].kinds == ("no-gradient-op",)
    assert namespace["v"].status == "vanishing" and namespace["v"].cause == "saturating-activation"
    assert namespace["tc"].count == 3
    assert namespace["clipped"][1] is None
    assert namespace["tm"] is not None and namespace["logger"].steps == [2, 4]
    assert namespace["run"].report.diverged_at is None and namespace["run"].clip == ("global_norm", 1.0)


def test_the_api_has_no_star_exports_and_only_curated_names():
    source = (Path(gl.__file__)).read_text(encoding="utf-8")
    assert "import *" not in source
    assert len(gl.__all__) == len(set(gl.__all__)) and 25 <= len(gl.__all__) <= 45
    for name in ("build_mlp", "MLPGradientEngine", "check_array", "toy_model", "jacobian", "plot_report"):
        assert name not in gl.__all__


def test_workbook_machinery_is_reached_through_its_module():
    import pytest

    assert gl.models.mlp.build_mlp and gl.exercises.checks.check_array and gl.topics.jacobians.jacobian and gl.plots.plot_report
    for name, module in (("build_mlp", "models.mlp"), ("MLPGradientEngine", "engines.mlp"), ("toy_model", "train.distribute"),
                         ("bptt_reference", "topics.rnn_theory"), ("JacobianBench", "topics.jacobian_timing")):
        with pytest.raises(AttributeError, match=rf"reachable as gl\.{module}\.{name}"):
            getattr(gl, name)
    assert gl.GradientExplorer.__name__ == "GradientExplorer"  # the explorers load lazily
