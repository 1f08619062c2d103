"""Stored chapters carry the metadata JupyterLab would write, so opening one does not mark it modified.

JupyterLab copies the kernel's ``language_info`` into every notebook it opens; a chapter that
stores less (``{"name": "python"}``, as the build used to) opens marked modified and asks to be
saved on close (issue 20; ``tests/browser/test_saved_chapters.py`` shows it in a real
JupyterLab). The build (``tools/nbtools.execute``) stores the kernel's own; these checks read
every stored chapter, English and Chinese. No stored widget state either: the explorers'
outputs are pictures, so widget models saved beside them would be dead weight.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("[0-9][0-9]-*.ipynb")) + sorted(
    (ROOT / "chapters" / "zh").glob("[0-9][0-9]-*.ipynb"))
#: What ipykernel reports as language_info (and JupyterLab writes) for this environment.
KERNEL_LANGUAGE_INFO = {
    "name": "python",
    "version": platform.python_version(),
    "mimetype": "text/x-python",
    "codemirror_mode": {"name": "ipython", "version": 3},
    "pygments_lexer": "ipython3",
    "nbconvert_exporter": "python",
    "file_extension": ".py",
}
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def test_the_reference_is_what_the_kernel_reports():
    from ipykernel.ipkernel import IPythonKernel

    assert IPythonKernel.language_info == KERNEL_LANGUAGE_INFO | {"version": IPythonKernel.language_info["version"]}
    assert IPythonKernel.language_info["version"] == platform.python_version()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT / "chapters")) for p in NOTEBOOKS])
def test_stored_chapter_metadata_is_what_jupyterlab_writes(path):
    meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    assert meta.get("language_info") == KERNEL_LANGUAGE_INFO, (
        f"{path.name}: rebuild it with tools/build_notebooks.py (language_info {meta.get('language_info')})")
    assert meta.get("kernelspec") == KERNELSPEC
    assert "widgets" not in meta, f"{path.name} stores widget state; rebuild it with tools/build_notebooks.py"
