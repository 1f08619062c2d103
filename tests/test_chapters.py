"""The committed chapters, both editions: in sync with their sources, executed, navigable, honest.

nbval (run by the same `make test`) re-executes each notebook and compares outputs; these
tests check what nbval does not: that the notebook is the one its source describes, that it
was stored from a fresh Restart & Run All, that every link resolves, and that tags are used
only where they belong. The Chinese twins (chapters/zh/NN-slug.ipynb, built from the same
source plus chapters/zh/src/NN-slug.yml) get every one of these checks too; the state of their
translations is tests/test_translations.py's business.
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
    ZH_DIR,
    add_navigation,
    chapter_paths,
    code_sources,
    heading_anchors,
    notebook_from_source,
    zh_chapter_paths,
)
from tools.zh import SETUP_ZH, build_twins

# Chapters 00-04 follow the source text; 05 onwards go beyond it. Every source has its notebook.
CORE = ["00-introduction", "01-vanishing-exploding", "02-jacobians", "03-tape-and-function",
        "04-summary"]
EXPECTED = [p.stem for p in chapter_paths()]
ZH_EXPECTED = [p.stem for p in zh_chapter_paths()]
#: Every notebook of both editions, by its path under chapters/ without ".ipynb".
ALL = EXPECTED + [f"zh/{s}" for s in ZH_EXPECTED]
ALLOWED_TAGS = {"raises-exception", "nbval-ignore-output", SOLUTION_TAG}
TIMING_WORDS = re.compile(r"time|timing|perf_counter|timeit|bench|\bms\b|speed", re.I)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CJK = re.compile(r"[\u4e00-\u9fff]")
#: Fixed section names per edition (GLOSSARY-zh.md: 准备工作, 小结, 练习, 答案).
SECTIONS = {"en": {"setup": "## Setup", "summary": "## Summary", "exercises": "## Exercises",
                   "solutions": "## Solutions"},
            "zh": {"setup": "## 准备工作", "summary": "## 小结", "exercises": "## 练习",
                   "solutions": "## 答案"}}


def load(path: Path):
    return nbformat.read(path, as_version=4)


def lang_of(name: str) -> str:
    return "zh" if name.startswith("zh/") else "en"


def path_of(name: str) -> Path:
    return CHAPTERS / f"{name}.ipynb"


@pytest.fixture(scope="module")
def notebooks():
    found = sorted(CHAPTERS.glob("*.ipynb")) + sorted(ZH_DIR.glob("*.ipynb"))
    return {str(p.relative_to(CHAPTERS).with_suffix("")): load(p) for p in found}


@pytest.fixture(scope="module")
def zh_built():
    """The twins as the build makes them from today's sources (no navigation, no outputs)."""
    return build_twins(ZH_EXPECTED) if ZH_EXPECTED else {}


def test_every_chapter_exists_with_its_source():
    assert EXPECTED[: len(CORE)] == CORE
    assert sorted(p.stem for p in CHAPTERS.glob("*.ipynb")) == EXPECTED


def test_every_translation_has_its_twin_and_no_twin_lacks_one():
    """chapters/zh/NN-slug.ipynb exists exactly for the chapters with a translation file."""
    assert sorted(p.stem for p in ZH_DIR.glob("*.ipynb")) == ZH_EXPECTED, (
        "run `python tools/build_notebooks.py --lang zh NN` for a new translation file, and delete a "
        "twin whose translation file was removed"
    )


@pytest.mark.parametrize("name", ALL)
def test_solutions_are_collapsed(name, notebooks):
    """Worked solutions run and are tested, but a learner does not read them by accident."""
    cells = notebooks[name].cells
    heading = SECTIONS[lang_of(name)]["solutions"]
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith(heading)]
    for i, cell in enumerate(cells):
        solution = SOLUTION_TAG in cell.metadata.get("tags", [])
        assert solution == bool(cell.metadata.get("jupyter", {}).get("source_hidden")), (
            f"cell {i}: a solution cell must be collapsed, and only solution cells are"
        )
        if heads and i > heads[0] and cell.cell_type == "code":
            assert solution, f"cell {i}: code after '{heading}' must be tagged solution"


def stored_without_navigation(nb):
    stored_nb = copy.copy(nb)
    stored_nb.cells = [c for c in nb.cells if not c.metadata.get(NAV_KEY)]
    return stored_nb


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_matches_its_source(name, notebooks):
    built = notebook_from_source(SRC / f"{name}.py")
    assert code_sources(stored_without_navigation(notebooks[name])) == code_sources(built), (
        f"chapters/{name}.ipynb differs from chapters/src/{name}.py: run `make notebooks`"
    )


@pytest.mark.parametrize("name", ZH_EXPECTED)
def test_twin_matches_its_source_and_translation(name, notebooks, zh_built):
    """The stored twin is what the English source and the translation build today."""
    stored = code_sources(stored_without_navigation(notebooks[f"zh/{name}"]))
    built = code_sources(zh_built[name])
    first = next((i for i, (a, b) in enumerate(zip(stored, built, strict=False)) if a != b), min(len(stored), len(built)))
    assert stored == built, (
        f"chapters/zh/{name}.ipynb differs from chapters/src/{name}.py + chapters/zh/src/{name}.yml "
        f"from cell {first} on: run `python tools/build_notebooks.py --lang zh {name[:2]}`"
    )


@pytest.mark.parametrize("name", ALL)
def test_stored_from_a_fresh_run_all(name, notebooks):
    counts = [c.execution_count for c in notebooks[name].cells if c.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), "re-run with `make notebooks` (Restart & Run All)"


@pytest.mark.parametrize("name", ALL)
def test_structure_title_navigation_setup(name, notebooks):
    lang = lang_of(name)
    words = SECTIONS[lang]
    cells = notebooks[name].cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    title = cells[0].source.splitlines()[0]
    if lang == "en":
        assert " · " in title, "the title carries English · 中文"
    else:
        assert CJK.search(title) and not re.search(r"[A-Za-z]{4,} ·", title), (
            f"the Chinese edition's title is Chinese: {title!r}"
        )
    assert cells[1].metadata.get(NAV_KEY), "the navigation cell follows the title"
    lines = [ln for c in cells if c.cell_type == "markdown" for ln in c.source.splitlines()]
    assert words["setup"] in lines
    setup = next(c for c in cells if c.cell_type == "code")
    # gradlab is imported before TensorFlow; only environment settings that its import reads
    # (such as GRADLAB_LOGICAL_CPUS in chapter 08) may come first
    before, _, _ = setup.source.partition("import gradlab as gl")
    assert "import gradlab as gl" in setup.source, "the Setup cell imports gradlab"
    assert all(ln.startswith(("import os", "os.environ", "#")) or not ln.strip()
               for ln in before.splitlines()), "gradlab is imported before TensorFlow"
    assert (SETUP_ZH if lang == "zh" else "gl.setup(seed=0)") in setup.source
    assert any(ln.startswith(words["summary"]) for ln in lines)
    assert any(ln.startswith(words["exercises"]) for ln in lines)


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


@pytest.mark.skipif(not ZH_EXPECTED, reason="no Chinese twin yet")
def test_chinese_navigation_is_current_and_links_both_ways(notebooks):
    paths = zh_chapter_paths()
    nbs = [copy.deepcopy(notebooks[f"zh/{p.stem}"]) for p in paths]
    before = [[c.source for c in nb.cells] for nb in nbs]
    add_navigation(nbs, paths)
    assert [[c.source for c in nb.cells] for nb in nbs] == before, "run `make nav`"
    for p, nb in zip(paths, nbs, strict=True):
        nav = nb.cells[1].source
        assert "目录" in nav and f"[English](../{p.name})" in nav, nav
        english_nav = notebooks[p.stem].cells[1].source
        assert f"[中文](zh/{p.name})" in english_nav, f"{p.stem}: the English chapter links to its twin"
    assert "上一章" in nbs[0].cells[1].source
    assert "下一章" in nbs[-1].cells[1].source


def test_every_link_resolves(notebooks):
    checked = 0
    for name, nb in notebooks.items():
        base = path_of(name).parent
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for target in LINK.findall(cell.source):
                if re.match(r"https?://", target):
                    continue  # external references are not fetched (no network in CI)
                file, _, anchor = target.partition("#")
                dest = (base / file) if file else path_of(name)
                assert dest.exists(), f"{name}: link to missing file {target!r}"
                if anchor and dest.suffix == ".ipynb":
                    assert anchor in heading_anchors(load(dest)), f"{name}: no heading for {target!r}"
                checked += 1
    assert checked >= 20


@pytest.mark.parametrize("name", ALL)
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


@pytest.mark.parametrize("name", ALL)
def test_no_stderr_in_outputs(name, notebooks):
    for i, cell in enumerate(notebooks[name].cells):
        for out in getattr(cell, "outputs", []):
            assert not (out.output_type == "stream" and out.name == "stderr"), (
                f"cell {i} wrote to stderr: {out.text[:200]!r}"
            )


@pytest.mark.parametrize("name", ALL)
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


def test_percent_sources_are_read_by_jupytext_into_plain_cells():
    """tools.nbtools.parse_percent is jupytext's py:percent reader (issue 38): markdown uncommented,
    tags kept, a solution collapsed, blank lines between cells dropped, no jupytext spacing note."""
    from tools.nbtools import parse_percent

    text = ('# %% [markdown]\n# # Title\n#\n# Some *prose*.\n\n# %%\nx = 1\n\n\n'
            '# %% tags=["raises-exception"]\n1 / 0\n\n# %% tags=["solution"]\ny = 2\n')
    cells = parse_percent(text)
    assert [(c.cell_type, c.source) for c in cells] == [
        ("markdown", "# Title\n\nSome *prose*."), ("code", "x = 1"), ("code", "1 / 0"), ("code", "y = 2")]
    assert [dict(c.metadata) for c in cells] == [
        {}, {}, {"tags": ["raises-exception"]}, {"tags": ["solution"], "jupyter": {"source_hidden": True}}]
    assert [c.id for c in cells] == ["cell-000", "cell-001", "cell-002", "cell-003"]
