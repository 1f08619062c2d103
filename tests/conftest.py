"""Shared test set-up: a quiet TensorFlow, a headless matplotlib, the repo root on sys.path,
and the grouping that lets ``make test`` run on two workers (pytest-xdist, ``--dist loadgroup``).

``make test`` runs ``pytest -n 2 --dist loadgroup``: every test file (a notebook under nbval
too, whose cells share one kernel and must run in order) is one group, so a file never splits
across workers; the whole browser tier is a single group, so one worker starts one JupyterLab
and one Chromium for it while the other worker runs unit tests and notebooks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gradlab  # noqa: E402,F401  (imports TensorFlow quietly before any test module does)

#: The group of every browser test (one JupyterLab server, one Chromium).
BROWSER_GROUP = "browser"


def xdist_group_of(item) -> str:
    """The pytest-xdist group of ``item``: ``browser`` for the browser tier, else its file."""
    if item.get_closest_marker("browser") is not None:
        return BROWSER_GROUP
    return str(Path(str(item.path)).resolve().relative_to(ROOT)) if str(item.path).startswith(str(ROOT)) \
        else str(item.path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))
