"""The committed chapters: in sync with their sources, executed, navigable, honestly tagged.

nbval (run by the same `make test`) re-executes each notebook and compares outputs; these
tests check what nbval does not: that the notebook is the one its source describes, that it
was stored from a fresh Restart & Run All, that every link resolves, and that tags are used
only where they belong.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest

from tools.nbtools import (
    CHAPTERS,
    NAV_KEY,
    SOLUTION_TAG,
    SRC,
    add_navigation,
    chapter_paths,
    code_sources,
    notebook_from_source,
)

# Chapters 00-04 follow the source text; 05 onwards go beyond it. Every source has its notebook.
CORE = ["00-introduction", "01-vanishing-exploding", "02-jacobians", "03-tape-and-function",
        "04-summary"]
EXPECTED = [p.stem for p in chapter_paths()]
ALLOWED_TAGS = {"raises-exception", "nbval-ignore-output", SOLUTION_TAG}
TIMING_WORDS = re.compile(r"time|timing|perf_counter|timeit|bench|\bms\b|speed", re.I)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def load(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.fixture(scope="module")
def notebooks():
    return {p.stem: load(p) for p in sorted(CHAPTERS.glob("*.ipynb"))}


def test_every_chapter_exists_with_its_source():
    assert EXPECTED[: len(CORE)] == CORE
    assert sorted(p.stem for p in CHAPTERS.glob("*.ipynb")) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_solutions_are_collapsed(name, notebooks):
    """Worked solutions run and are tested, but a learner does not read them by accident."""
    cells = notebooks[name].cells
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Solutions")]
    for i, cell in enumerate(cells):
        solution = SOLUTION_TAG in cell.metadata.get("tags", [])
        assert solution == bool(cell.metadata.get("jupyter", {}).get("source_hidden")), (
            f"cell {i}: a solution cell must be collapsed, and only solution cells are"
        )
        if heads and i > heads[0] and cell.cell_type == "code":
            assert solution, f"cell {i}: code after '## Solutions' must be tagged solution"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_matches_its_source(name, notebooks):
    nb = notebooks[name]
    built = notebook_from_source(SRC / f"{name}.py")
    stored = [c for c in nb.cells if not c.metadata.get(NAV_KEY)]
    stored_nb = copy.copy(nb)
    stored_nb.cells = stored
    assert code_sources(stored_nb) == code_sources(built), (
        f"chapters/{name}.ipynb differs from chapters/src/{name}.py: run `make notebooks`"
    )


@pytest.mark.parametrize("name", EXPECTED)
def test_stored_from_a_fresh_run_all(name, notebooks):
    counts = [c.execution_count for c in notebooks[name].cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "re-run with `make notebooks` (Restart & Run All)"


@pytest.mark.parametrize("name", EXPECTED)
def test_structure_title_navigation_setup(name, notebooks):
    cells = notebooks[name].cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert " · " in cells[0].source.splitlines()[0], "the title carries English · 中文"
    assert cells[1].metadata.get(NAV_KEY), "the navigation cell follows the title"
    lines = [ln for c in cells if c.cell_type == "markdown" for ln in c.source.splitlines()]
    assert "## Setup" in lines
    setup = next(c for c in cells if c.cell_type == "code")
    # gradlab is imported before TensorFlow; only environment settings that its import reads
    # (such as GRADLAB_LOGICAL_CPUS in chapter 08) may come first
    before, _, _ = setup.source.partition("import gradlab as gl")
    assert "import gradlab as gl" in setup.source, "the Setup cell imports gradlab"
    assert all(ln.startswith(("import os", "os.environ", "#")) or not ln.strip()
               for ln in before.splitlines()), "gradlab is imported before TensorFlow"
    assert "gl.setup(seed=0)" in setup.source
    assert any(ln.startswith("## Summary") for ln in lines)
    assert any(ln.startswith("## Exercises") for ln in lines)


def test_navigation_is_idempotent_and_current(notebooks):
    paths = chapter_paths()
    nbs = [copy.deepcopy(notebooks[p.stem]) for p in paths]
    before = [[c.source for c in nb.cells] for nb in nbs]
    add_navigation(nbs, paths)
    add_navigation(nbs, paths)
    assert [[c.source for c in nb.cells] for nb in nbs] == before
    assert sum(bool(c.metadata.get(NAV_KEY)) for c in nbs[2].cells) == 1
    assert "Previous" in nbs[0].cells[1].source and "[< 00 ·" in nbs[1].cells[1].source
    assert "[01 · " in nbs[0].cells[1].source and "Next &gt;" in nbs[-1].cells[1].source


def heading_anchors(nb) -> set[str]:
    """Anchors JupyterLab gives Markdown headings: the rendered text, spaces replaced by '-'."""
    anchors = set()
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            m = re.match(r"^#{1,6}\s+(.*)$", line)
            if m:
                text = re.sub(r"`|\*\*", "", m.group(1)).strip()  # code spans, bold
                text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
                anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_link_resolves(notebooks):
    checked = 0
    for name, nb in notebooks.items():
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for target in LINK.findall(cell.source):
                if re.match(r"https?://", target):
                    continue  # external references are not fetched (no network in CI)
                file, _, anchor = target.partition("#")
                dest = (CHAPTERS / file) if file else CHAPTERS / f"{name}.ipynb"
                assert dest.exists(), f"{name}: link to missing file {target!r}"
                if anchor and dest.suffix == ".ipynb":
                    assert anchor in heading_anchors(load(dest)), f"{name}: no heading for {target!r}"
                checked += 1
    assert checked >= 20


@pytest.mark.parametrize("name", EXPECTED)
def test_tags_are_honest(name, notebooks):
    for i, cell in enumerate(notebooks[name].cells):
        tags = set(cell.metadata.get("tags", []))
        assert tags <= ALLOWED_TAGS, f"cell {i}: unexpected tags {tags - ALLOWED_TAGS}"
        if cell.cell_type != "code":
            assert not tags
            continue
        errored = any(o.output_type == "error" for o in cell.outputs)
        assert errored == ("raises-exception" in tags), (
            f"cell {i}: an error output must be tagged raises-exception, and a tagged cell must raise"
        )
        if "nbval-ignore-output" in tags:
            text = cell.source + "".join(o.get("text", "") for o in cell.outputs)
            assert TIMING_WORDS.search(text), f"cell {i}: nbval-ignore-output is for timing cells only"


@pytest.mark.parametrize("name", EXPECTED)
def test_no_stderr_in_outputs(name, notebooks):
    for i, cell in enumerate(notebooks[name].cells):
        for out in getattr(cell, "outputs", []):
            assert not (out.output_type == "stream" and out.name == "stderr"), (
                f"cell {i} wrote to stderr: {out.text[:200]!r}"
            )


@pytest.mark.parametrize("name", EXPECTED)
def test_figures_are_stored_as_images(name, notebooks):
    """Every displayed figure or widget carries a PNG, so the chapter reads without a kernel."""
    for i, cell in enumerate(notebooks[name].cells):
        for out in getattr(cell, "outputs", []):
            data = out.get("data", {})
            if data.get("text/plain", "").startswith("<Figure"):
                assert "image/png" in data, f"cell {i} shows a figure without a PNG"
            # a stored widget view renders as an error without its kernel; the PNG stays
            assert "application/vnd.jupyter.widget-view+json" not in data, (
                f"cell {i} stores a live widget view: widgets need a static PNG fallback"
            )
