"""Shared test set-up: a quiet TensorFlow, a headless matplotlib, the repo root on sys.path,
and the scheduling that lets ``make test`` run on two workers (pytest-xdist, ``--dist loadfile``).

``make test`` runs ``pytest -n 2 --dist loadfile``: a test file (a notebook under nbval too,
whose cells share one kernel and must run in order) never splits across workers, and
:func:`pytest_xdist_make_scheduler` keeps the whole browser tier (``tests/browser/``) together
as well, so one worker starts one JupyterLab and one Chromium while the other runs unit tests
and notebooks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gradlab  # noqa: E402,F401  (imports TensorFlow quietly before any test module does)

#: Node ids under this prefix run on one worker, as one unit (one JupyterLab, one Chromium).
BROWSER_PREFIX = "tests/browser/"


def scope_of(nodeid: str) -> str:
    """The unit of work of ``nodeid`` under ``--dist loadfile``: the browser tier, or its file."""
    if nodeid.startswith(BROWSER_PREFIX):
        return BROWSER_PREFIX
    return nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with every browser test file in one unit (see the module docstring)."""
    if config.getoption("dist", "no") != "loadfile":
        return None

    class FileOrBrowserScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return FileOrBrowserScheduling(config, log)
