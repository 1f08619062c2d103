"""The explorers' log y-axis is labelled on every range, a range under a decade included (issue 37).

The reader found chapter 09's explorer without a single y-axis label in 20 of its 46 settings,
its default among them: its norms (0.26 to 6.4) hold one power of ten or none, and the axis
labelled powers of ten only. ``logTicks`` in the view (gradlab/widgets/static/explorer.js), the
one function the Lab and the site draw their log axes with, now falls back to round numbers
inside such a range. This runs that function, as the module ships it, in Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.test_book import page  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
VIEW = ROOT / "gradlab" / "widgets" / "static" / "explorer.js"
pytestmark = pytest.mark.browser


def _function(name: str) -> str:
    """The source of a top-level ``function name(...) {...}`` of the view (ends at a closing brace in column 0)."""
    m = re.search(rf"^function {name}\(.*?^\}}$", VIEW.read_text(encoding="utf-8"), re.S | re.M)
    assert m, f"{name} is no longer a top-level function of {VIEW.name}"
    return m.group(0)


# (log10 min, log10 max) of a y-axis: chapter 09's default (0.259 .. 6.41, one decade inside),
# a range inside one decade (1.4 .. 2.9), one just under a decade between powers (0.2 .. 0.9), and
# chapter 01's vanishing default (1e-12 .. 10, powers of ten)
RANGES = [(-0.587, 0.807), (0.146, 0.462), (-0.699, -0.046), (-12.0, 1.0)]


@pytest.mark.parametrize(("lo", "hi"), RANGES, ids=[f"{lo}..{hi}" for lo, hi in RANGES])
def test_every_log_axis_has_at_least_two_labels(page, lo, hi):  # noqa: F811
    ticks = page.evaluate(f"""() => {{ const superscript = (n) => String(n);
        {_function("logTicks")}
        {_function("logLabel")}
        const t = logTicks({lo}, {hi});
        return t.map((k) => [k, logLabel(k)]); }}""")
    assert len(ticks) >= 2, (lo, hi, ticks)
    assert all(lo - 1e-9 <= k <= hi + 1e-9 for k, _label in ticks), (lo, hi, ticks)
    labels = [label for _k, label in ticks]
    assert len(set(labels)) == len(labels) and all(labels), labels
