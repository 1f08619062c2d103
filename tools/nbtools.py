"""Build, navigate and execute the chapters, in both editions.

A chapter's source of truth is ``chapters/src/NN-slug.py``, a plain Python file in the
"percent" cell format, read with jupytext (``# %%`` starts a code cell, ``# %% [markdown]`` a Markdown cell,
``# %% tags=["raises-exception"]`` adds cell tags). It gives readable diffs and reviews.
``make notebooks`` turns each source into ``chapters/NN-slug.ipynb``, writes the navigation
cell, and runs it top to bottom in a fresh kernel (Restart & Run All), saving the outputs
that nbval later compares. ``tests/test_chapters.py`` checks that every committed notebook
still matches its source.

The Chinese edition (``chapters/zh/NN-slug.ipynb``) is built from the same source plus the
chapter's translation ``chapters/zh/src/NN-slug.yml`` (see :mod:`tools.zh`); a chapter has a
Chinese twin exactly when it has a translation file. Each edition's navigation links to its
own neighbours, and to the same chapter in the other edition.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat

from gradlab_jupyter import lab_pre_save_hook as _lab_pre_save_hook

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
SRC = CHAPTERS / "src"
NAV_KEY = "gradlab_nav"
#: ``# %% tags=["solution"]``: a worked solution, stored with its source collapsed
#: (``"jupyter": {"source_hidden": true}``) so nobody reads it by accident.
SOLUTION_TAG = "solution"
CONTENTS_ANCHOR = "Contents"
ZH_DIR = CHAPTERS / "zh"
ZH_SRC = ZH_DIR / "src"
#: What the navigation cell says, per edition.
NAV_WORDS = {
    "en": {"previous": "&lt; Previous", "next": "Next &gt;", "contents": "Contents",
           "anchor": CONTENTS_ANCHOR, "other": "中文"},
    "zh": {"previous": "&lt; 上一章", "next": "下一章 &gt;", "contents": "目录", "anchor": "目录",
           "other": "English"},
}


def chapter_paths() -> list[Path]:
    """Every chapter notebook path that has a source, in order."""
    return [CHAPTERS / (p.stem + ".ipynb") for p in sorted(SRC.glob("[0-9][0-9]-*.py"))]


def has_twin(stem: str) -> bool:
    """Whether chapter ``stem`` has a Chinese twin (it has a translation file)."""
    return (ZH_SRC / f"{stem}.yml").is_file() and (SRC / f"{stem}.py").is_file()


def zh_chapter_paths() -> list[Path]:
    """Every Chinese twin's notebook path, in order: the chapters with a translation file."""
    return [ZH_DIR / (p.stem + ".ipynb") for p in sorted(ZH_SRC.glob("[0-9][0-9]-*.yml"))
            if has_twin(p.stem)]


def edition_of(path: Path) -> str:
    """``"zh"`` for a notebook under chapters/zh/, else ``"en"``."""
    return "zh" if path.parent.name == "zh" else "en"


def parse_percent(text: str) -> list[nbformat.NotebookNode]:
    """Cells of a percent-format source, as jupytext reads it (``py:percent``), numbered
    ``cell-000``, ... A ``solution`` cell's source is collapsed; jupytext's own spacing note
    (``lines_to_next_cell``, for writing the source back) is not kept in the notebook."""
    cells = jupytext.reads(text, fmt="py:percent").cells
    for i, cell in enumerate(cells):
        cell.metadata.pop("lines_to_next_cell", None)
        if SOLUTION_TAG in cell.metadata.get("tags", []):  # solutions stay runnable, collapsed until clicked
            cell.metadata["jupyter"] = {"source_hidden": True}
        cell["id"] = f"cell-{i:03d}"
    return cells


def title_of(nb) -> str:
    """The first H1 of a notebook, without the '# '."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError("notebook has no '# ' title")


def short_title(title: str) -> str:
    """'Vanishing and exploding gradients · 梯度消失…' -> 'Vanishing and exploding gradients'."""
    return title.split(" · ")[0].strip()


def nav_source(paths: list[Path], i: int, titles: list[str], lang: str = "en") -> str:
    """``< prev | Contents | next >`` of ``paths[i]`` in its edition, then the other edition."""
    words = NAV_WORDS[lang]
    prev = (f"[< {paths[i - 1].stem[:2]} · {short_title(titles[i - 1])}]({paths[i - 1].name})"
            if i > 0 else words["previous"])
    nxt = (
        f"[{paths[i + 1].stem[:2]} · {short_title(titles[i + 1])} >]({paths[i + 1].name})"
        if i + 1 < len(paths)
        else words["next"]
    )
    contents = f"[{words['contents']}]({paths[0].name}#{words['anchor']})"
    nav = f"{prev} | {contents} | {nxt}"
    stem = paths[i].stem
    if lang == "zh":
        nav += f" | [{words['other']}](../{stem}.ipynb)"
    elif has_twin(stem):
        nav += f" | [{words['other']}](zh/{stem}.ipynb)"
    return nav


def add_navigation(nbs: list, paths: list[Path]) -> None:
    """Insert or amend the navigation cell (right after the title) of every notebook. Idempotent.

    ``paths`` are the notebooks of one edition, in order (the edition comes from the paths).
    """
    titles = [title_of(nb) for nb in nbs]
    lang = edition_of(paths[0]) if paths else "en"
    for i, nb in enumerate(nbs):
        source = nav_source(paths, i, titles, lang)
        existing = [c for c in nb.cells if c.metadata.get(NAV_KEY)]
        if existing:
            existing[0].source = source
        else:
            cell = nbformat.v4.new_markdown_cell(source)
            cell.metadata[NAV_KEY] = True
            cell["id"] = "navigation"
            nb.cells.insert(1, cell)


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


def notebook_from_source(src: Path):
    nb = nbformat.v4.new_notebook()
    nb.cells = parse_percent(src.read_text(encoding="utf-8"))
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


def code_sources(nb) -> list[tuple[str, str, list]]:
    """(type, source, tags) of each cell, ignoring outputs: what must match the source file."""
    return [
        (c.cell_type, c.source, sorted(c.metadata.get("tags", [])),
         bool(c.metadata.get("jupyter", {}).get("source_hidden")))
        for c in nb.cells
    ]


def execute(nb, path: Path, timeout: int = 900):
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        # The chapters store no widget state: their widget views are dropped below, so the
        # state (every model of every explorer, ~100 KB a chapter) would only be dead weight.
        store_widget_state=False,
    )
    client.execute()
    nb.metadata.pop("widgets", None)
    # Keep the kernel's whole language_info (name, version, mimetype, codemirror_mode, ...):
    # JupyterLab writes the kernel's into a notebook it opens, and a trimmed copy would mark
    # every freshly opened chapter as modified (issue 20). The kernelspec is JupyterLab's own
    # form of the one the chapters run with.
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    drop_live_widget_views(nb)
    return nb


#: The kernelspec metadata JupyterLab writes for this environment's ``python3`` kernel.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def drop_live_widget_views(nb) -> int:
    """Keep only the static PNG (and text) of widget outputs that carry one; return how many.

    A stored widget view points at a model that exists only while its kernel runs. Opened
    later, JupyterLab shows "Error displaying widget" and nbconvert an empty box, because they
    prefer the widget view over the PNG in the same output. gradlab's explorers put a PNG of
    their starting state beside the view, so dropping the view leaves a figure that every
    viewer shows; running the cell brings the live widget back. nbval ignores widget views.
    (This is the chapter build's step; a save in JupyterLab goes through ``gradlab_jupyter``'s
    hook, which also writes the learner's last picture and a line to re-run the cell.)
    """
    dropped = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "image/png" in data:
                del data[WIDGET_VIEW]
                dropped += 1
    return dropped


#: JupyterLab's pre-save hook for saved explorers: it lives in the installed ``gradlab_jupyter``
#: (installing gradlab enables it in every ``jupyter lab`` of the environment); kept here under
#: its old name for ``--ContentsManager.pre_save_hook=tools.nbtools.lab_pre_save_hook``.
lab_pre_save_hook = _lab_pre_save_hook
