"""Issue 20 in a real JupyterLab: saved chapters keep their pictures, open unmodified, fit a laptop.

- a notebook with every explorer, run (Run All Cells), one slider moved, and saved, then
  reopened with a fresh kernel, shows each explorer's last picture (the moved one's last
  state, pixel for pixel), a line saying to re-run the cell, and no "Error displaying widget";
- stored chapters open without being marked modified and show their stored pictures, with
  no widget error (a real chapter, opened, never re-run: nbval runs the chapters);
- at a 1366×768 viewport with the file browser open, no explorer is wider than the notebook's
  output area, nothing inside one is clipped, no control label is cut off (issue 29: "run
  the first 10…"), and chapter 01's depth track is at least 300 px wide.

Screenshots go to ``test-artifacts/browser/`` (the 1366 px page, the reopened notebook).
"""

from __future__ import annotations

import json
import time

import pytest

from . import labpage, view
from .conftest import ARTIFACTS, CHAPTERS, EXPLORER_KINDS, SCRATCH_REOPEN

pytestmark = pytest.mark.browser

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Real chapters opened unrun (nbval runs them): chapter 01 (explorer outputs and snapshots),
#: 09 (the TransformerExplorer), 10 (no explorer, stored figures) and a Chinese twin.
OPENED = [p for p in ("01-vanishing-exploding.ipynb", "09-transformers.ipynb", "10-checking-and-memory.ipynb",
                      "zh/00-introduction.ipynb") if (CHAPTERS / p).exists()]


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=False)


def output_images(page) -> list[dict]:
    """Every image in the notebook's outputs: its natural size and whether it sits in a widget view."""
    return page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output img')].map((img) => ({
        w: img.naturalWidth, h: img.naturalHeight, complete: img.complete,
        widget: !!img.closest('.jupyter-widgets')}))""")


def test_saved_explorers_reopen_with_a_fresh_kernel_and_show_their_pictures(page, lab_server):
    t0 = time.perf_counter()
    labpage.run_notebook(page, lab_server, SCRATCH_REOPEN)  # Run All Cells, then Ctrl+S
    assert labpage.wait_widgets_rendered(page) == []
    live = page.locator(".jp-OutputArea-output [data-gradlab-explorer]").count()
    assert live >= len(EXPLORER_KINDS), f"only {live} live explorers after Run All"
    # the learner moves chapter 01's depth after the cell ran, then saves: the file must
    # show that last state (issue 29: it showed the starting picture), with the re-run line
    ex = page.locator(".jp-OutputArea-output [data-gradlab-explorer]").first
    ex.scroll_into_view_if_needed()
    view.set_control(ex, "depth", 37)
    last_status = view.wait_report(page, ex, {"depth": 37})["status_text"]
    page.wait_for_timeout(1500)  # the kernel stores the picture for a save 0.3 s after the last change
    saved_path = lab_server.root / SCRATCH_REOPEN
    before = saved_path.stat().st_mtime_ns
    labpage.save(page)  # a slider move leaves the document clean: wait for the file itself
    deadline = time.monotonic() + 30
    while saved_path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert saved_path.stat().st_mtime_ns != before, "Ctrl+S did not write the notebook"
    # the saved file: every explorer output holds its PNG, and no view of a model that dies
    # with the kernel (the project's pre-save hook, tools/nbtools.lab_pre_save_hook)
    deadline = time.monotonic() + 30
    while True:  # the write may still be under way when the file's time has changed
        try:
            saved = json.loads((lab_server.root / SCRATCH_REOPEN).read_text())
            break
        except json.JSONDecodeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    outputs = [o for c in saved["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= len(EXPLORER_KINDS)
    assert not [o for o in pngs if WIDGET_VIEW in o["data"]], "the saved file still points at live widget models"
    first = next(o for o in pngs if "GradientExplorer(" in "".join(o["data"]["text/plain"]))
    assert "depth 37 ·" in "".join(first["data"]["text/plain"]), first["data"]["text/plain"]
    # the picture is the last state's: the same PNG as this process draws for depth 37
    import base64

    import gradlab as gl

    gl.setup(seed=0)
    saved_png = base64.b64decode("".join(first["data"]["image/png"]))
    assert saved_png[:8] == b"\x89PNG\r\n\x1a\n"
    import io

    import numpy as np
    from PIL import Image

    def pixels(png):
        return np.asarray(Image.open(io.BytesIO(png)).convert("L").resize((400, 250)), dtype=float)

    def picture(depth):
        return pixels(gl.GradientExplorer(depth=depth, activation="sigmoid", initializer="glorot_uniform").png())

    saved = pixels(saved_png)
    # closer to the picture of depth 37 (the last state) than to that of depth 20 (the display's)
    assert np.abs(saved - picture(37)).mean() < np.abs(saved - picture(20)).mean(), last_status
    notes = [o for o in outputs if o.get("metadata", {}).get("gradlab_rerun_note")]
    assert len(notes) == len(pngs), f"{len(notes)} re-run lines for {len(pngs)} saved explorers"
    size_kb = (lab_server.root / SCRATCH_REOPEN).stat().st_size / 1024
    print(f"\nsaved notebook with {len(pngs)} explorer pictures: {size_kb:.0f} KB")
    # the page that saved keeps its live widgets
    assert page.locator(".jp-OutputArea-output [data-gradlab-explorer]").count() == live
    lab_server.shutdown_kernel_of(SCRATCH_REOPEN)
    page.close()

    fresh = page.context.new_page()
    labpage.open_notebook(fresh, lab_server, SCRATCH_REOPEN)  # a new kernel starts; no cell runs
    fresh.wait_for_timeout(1500)  # the widget manager has restored (nothing) from the kernel
    assert labpage.widget_problems(fresh) == [], labpage.widget_problems(fresh)
    images = output_images(fresh)
    shown = [i for i in images if i["complete"] and i["w"] > 100 and i["h"] > 100]
    assert len(shown) >= len(EXPLORER_KINDS), f"{len(shown)} pictures shown after reopening: {images}"
    assert not labpage.is_dirty(fresh), "the reopened notebook is marked modified"
    # the reopened picture is the saved one (the last state's), and says to re-run the cell
    reopened = fresh.locator(".jp-OutputArea-output img").first
    assert reopened.evaluate("(img) => img.src.startsWith('data:image/png')")
    lines = fresh.locator(".jp-OutputArea-output", has_text="run the cell again")
    assert lines.count() >= len(EXPLORER_KINDS), f"{lines.count()} re-run lines shown"
    _shot(fresh, "reopened-fresh-kernel.png")
    lab_server.shutdown_kernel_of(SCRATCH_REOPEN)
    fresh.close()
    none = page.context.new_page()  # and with no kernel at all
    labpage.open_notebook(none, lab_server, SCRATCH_REOPEN, kernel=False)
    none.wait_for_timeout(1000)
    assert labpage.widget_problems(none) == []
    shown = [i for i in output_images(none) if i["complete"] and i["w"] > 100]
    assert len(shown) >= len(EXPLORER_KINDS), f"{len(shown)} pictures shown without a kernel"
    print(f"save + reopen with a fresh kernel: {time.perf_counter() - t0:.1f} s")


def test_a_notebook_built_by_the_chapter_build_opens_unmodified(page, lab_server):
    """tools/nbtools.execute (what builds every chapter) stores metadata JupyterLab keeps as is.

    With the trimmed ``language_info`` the build used to store, JupyterLab wrote the kernel's
    in on opening and marked every chapter modified; closing its tab then asked to save.
    """
    import nbformat

    from tools.nbtools import execute

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    nb.cells = [nbformat.v4.new_code_cell("import gradlab as gl\ngl.TangentExplorer()")]
    path = lab_server.root / "built-by-execute.ipynb"
    execute(nb, path)
    nbformat.write(nb, path)
    assert "widgets" not in nb.metadata  # no dead widget state stored
    labpage.open_notebook(page, lab_server, path.name)
    page.wait_for_timeout(2000)
    assert not labpage.is_dirty(page), page.evaluate(
        "() => JSON.stringify(window.jupyterapp.shell.currentWidget.context.model.metadata)")
    assert labpage.widget_problems(page) == []
    lab_server.shutdown_kernel_of(path.name)


@pytest.mark.skipif(not OPENED, reason="no stored chapter to open")
def test_stored_chapters_open_unmodified_with_their_pictures(page, lab_server):
    """Real chapters, opened one after another in one page and never run (nbval runs them).

    Chapter 01 with a kernel (JupyterLab writes the kernel's language_info in: the stored one
    must already match; tests/test_notebook_metadata.py checks every chapter), the others
    without one, as a reader without a running kernel sees them.
    """
    labpage.open_notebook(page, lab_server, f"chapters/{OPENED[0]}")
    for k, relpath in enumerate(OPENED):
        t0 = time.perf_counter()
        if k:
            labpage.open_in_page(page, f"chapters/{relpath}", kernel=False)
        page.wait_for_timeout(1000)  # JupyterLab writes the kernel's language_info in once connected
        assert not labpage.is_dirty(page), f"{relpath} is marked modified right after opening"
        assert labpage.widget_problems(page) == [], relpath
        stored = json.loads((CHAPTERS / relpath).read_text())
        n_png = sum("image/png" in o.get("data", {}) for c in stored["cells"] for o in c.get("outputs", []))
        images = [i for i in output_images(page) if i["w"] > 0]
        assert len(images) >= n_png, f"{relpath}: {n_png} stored pictures, {len(images)} shown"
        print(f"\n{relpath}: opened unmodified ({'with a' if k == 0 else 'no'} kernel), {len(images)} "
              f"pictures, {time.perf_counter() - t0:.1f} s")
        labpage.close_current(page)


#: Every label, button and readout in the explorers whose text is wider than its box.
CLIPPED_LABELS_JS = """(roots) => {
    const out = [];
    for (const root of document.querySelectorAll(roots))
        for (const el of root.querySelectorAll('.widget-label, .widget-label-basic, button, .widget-readout, label'))
            if (el.offsetParent && el.scrollWidth > el.clientWidth + 1)
                out.push(`${(el.innerText || el.value || '').trim()} (${el.scrollWidth} > ${el.clientWidth} px)`);
    return out;
}"""


def test_explorers_fit_1366_px_with_the_file_browser_open(explorers_page):
    page, server = explorers_page
    page.set_viewport_size({"width": 1366, "height": 768})
    try:
        labpage.open_file_browser(page)
        page.wait_for_timeout(800)  # the output area re-lays out
        roots = ".jp-OutputArea-output [data-gradlab-explorer]"
        boxes = labpage.overflowing(page, roots)
        assert len(boxes) >= len(EXPLORER_KINDS), boxes
        for b in boxes:
            assert b["right"] <= b["area_right"] + 1, f"{b['cls']} sticks out of the output area: {b}"
            assert b["scroll"] <= b["client"] + 1, f"{b['cls']} content is wider than the explorer: {b}"
            assert not b["clipped"], f"{b['cls']} clips some of its parts: {b}"
        clipped = page.evaluate(CLIPPED_LABELS_JS, roots)
        assert not clipped, f"control labels cut off at 1366 px: {clipped}"
        track = page.locator('.jp-OutputArea-output [data-gradlab-explorer="GradientExplorer"] [name="depth"]').first
        width = track.bounding_box()["width"]
        assert width >= 300, f"chapter 01's depth track is {width:.0f} px for 100 values"
        for canvas in page.locator(".jp-OutputArea-output [data-gradlab-explorer] canvas").all():
            box = canvas.bounding_box()
            area = canvas.evaluate("(i) => i.closest('.jp-OutputArea-output').getBoundingClientRect().right")
            assert box["x"] + box["width"] <= area + 1, "a figure is cut off at the right"
        page.locator('[data-gradlab-explorer="GradientExplorer"]').first.scroll_into_view_if_needed()
        _shot(page, "explorers-1366-file-browser.png")
        page.locator('[data-gradlab-explorer="TimeExplorer"]').first.scroll_into_view_if_needed()
        _shot(page, "time-explorer-1366-file-browser.png")
        print("\nat 1366 px: " + ", ".join(f"{b['cls']} {b['width']:.0f}/{b['area_width']:.0f} px" for b in boxes))
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
