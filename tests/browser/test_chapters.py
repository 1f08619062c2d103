"""Every chapter in a real JupyterLab: Run All Cells, save, no unexpected errors, widgets render."""

from __future__ import annotations

import json

import pytest

from . import labpage
from .conftest import chapter_notebooks

pytestmark = pytest.mark.browser

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CHAPTERS = chapter_notebooks()


def saved_errors(path) -> tuple[list[str], list[int], int]:
    """(unexpected errors, code cells without execution count, widget outputs) of a saved notebook."""
    nb = json.loads(path.read_text())
    errors, unexecuted, widgets = [], [], 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if source.strip() and cell.get("execution_count") is None:
            unexecuted.append(i)
        tags = cell.get("metadata", {}).get("tags", [])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and "raises-exception" not in tags:
                first = source.strip().splitlines()[0][:80]
                errors.append(f"cell {i} ({first!r}): {out['ename']}: {out['evalue'][:300]}")
            widgets += WIDGET_VIEW in out.get("data", {})
    return errors, unexecuted, widgets


@pytest.mark.skipif(not CHAPTERS, reason="no chapters/NN-*.ipynb exist yet")
@pytest.mark.parametrize("notebook", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_in_jupyterlab(page, lab_server, notebook):
    relpath = f"chapters/{notebook.name}"
    elapsed = labpage.run_notebook(page, lab_server, relpath)
    print(f"{notebook.name}: Run All Cells took {elapsed:.1f} s in JupyterLab")

    in_dom, in_model = page.evaluate(
        "() => [document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell').length,"
        " window.jupyterapp.shell.currentWidget.content.model.cells.length]"
    )
    assert in_dom == in_model, f"{relpath}: {in_dom} of {in_model} cells in the page (windowing on?)"

    errors, unexecuted, n_widget_outputs = saved_errors(lab_server.root / relpath)
    assert not unexecuted, f"{relpath}: code cells never executed: {unexecuted}"
    assert not errors, f"{relpath}: cells raised without the raises-exception tag:\n" + "\n".join(errors)

    problems = labpage.wait_widgets_rendered(page)
    assert not problems, f"{relpath}: widgets did not render: {problems}"
    # A widget output's view is the direct child of its output element.
    rendered = page.locator(".jp-OutputArea-output > .jupyter-widgets")
    assert rendered.count() >= n_widget_outputs, (
        f"{relpath}: {n_widget_outputs} widget outputs saved but {rendered.count()} shown"
    )
    for i in range(rendered.count()):
        box = rendered.nth(i).bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0, f"{relpath}: widget {i} is empty"
    if notebook.name[:2] not in ("01", "02", "03", "07"):
        lab_server.shutdown_kernel_of(relpath)  # no later test drives this chapter's widgets
