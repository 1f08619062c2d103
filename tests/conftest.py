"""Shared test set-up: a quiet TensorFlow, a headless matplotlib, the repo root on sys.path,
and the scheduling that lets ``make test`` run on two workers (pytest-xdist, ``--dist loadfile``).

``make test`` runs ``pytest -n 2 --dist loadfile``: a test file (a notebook under nbval too,
whose cells share one kernel and must run in order) never splits across workers, and
:func:`pytest_xdist_make_scheduler` keeps the whole browser tier (``tests/browser/``) together
as well, so one worker starts one JupyterLab and one Chromium while the other runs unit tests
and notebooks.

The units start longest first (:data:`UNIT_SECONDS`, :func:`pytest_collection_modifyitems`):
with two workers, a long chapter that starts last would keep one worker busy while the other
sits idle, so the slowest units go out first and the many short test files fill the gaps.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# ``engine``: chapter 01's MLP engine, built once per session for every test file that reads it (a
# file that needs another engine defines its own). Its one home is the plugin that make test-oldest
# loads in place of this conftest; tests/test_book.py checks it is the grids' CH01_ENGINE.
sys.path.insert(0, str(ROOT / "tests" / "oldest"))

from oldest_fixtures import engine  # noqa: E402,F401

import gradlab  # noqa: E402,F401  (imports TensorFlow quietly before any test module does)


@pytest.fixture(autouse=True)
def _no_leftover_event_loop(request):
    """Outside the browser tier, no event loop is marked running in this thread.

    Playwright's sync API (the browser tier's ``browser`` fixture, alive until the session ends)
    runs its asyncio loop in another greenlet of this thread, so ``asyncio.get_running_loop()``
    finds it from every later test on the same worker. An explorer would then schedule its
    picture and its work ahead on a loop that never runs them (CI, stop 40: the save-hook tests
    failed only after the browser tier). The loop is hidden during the test and put back after.
    """
    import asyncio

    loop = asyncio._get_running_loop()
    if loop is None or request.node.nodeid.startswith(BROWSER_PREFIX):
        yield
        return
    asyncio._set_running_loop(None)
    try:
        yield
    finally:
        asyncio._set_running_loop(loop)


#: Node ids under this prefix run on one worker, as one unit (one JupyterLab, one Chromium).
BROWSER_PREFIX = "tests/browser/"


def scope_of(nodeid: str) -> str:
    """The unit of work of ``nodeid`` under ``--dist loadfile``: the browser tier, or its file."""
    if nodeid.startswith(BROWSER_PREFIX):
        return BROWSER_PREFIX
    return nodeid.split("::", 1)[0]


#: Measured seconds of the slowest units (one edition of a chapter, or a test file; issue 28,
#: ``make test --durations``, two workers on the 2-core CI machine). Only their order matters:
#: units missing here count as :data:`DEFAULT_UNIT_SECONDS` and keep their collection order.
UNIT_SECONDS = {
    BROWSER_PREFIX: 420,  # 375 s quiet at the last stop, and chapter 11's page tests
    "09-transformers.ipynb": 190,
    "11-watch-training.ipynb": 45,
    "tests/test_training_run.py": 35,
    "07-through-time.ipynb": 98,
    "08-distributed.ipynb": 75,
    "04-summary.ipynb": 72,
    "01-vanishing-exploding.ipynb": 55,
    "tests/test_explorer.py": 120,
    "tests/test_exercises_ch09.py": 80,
    "tests/test_models_matrix3.py": 60,
    "03-tape-and-function.ipynb": 47,
    "10-checking-and-memory.ipynb": 44,
    "02-jacobians.ipynb": 32,
    "05-beyond-the-source.ipynb": 32,
    "tests/test_distribute.py": 40,
    "tests/test_engine.py": 30,
    "tests/test_i18n.py": 25,
}
DEFAULT_UNIT_SECONDS = 5


def unit_seconds(scope: str) -> float:
    """The expected seconds of the unit ``scope`` (a chapter of either edition, a file, the browser tier)."""
    if scope in UNIT_SECONDS:
        return UNIT_SECONDS[scope]
    return UNIT_SECONDS.get(Path(scope).name, DEFAULT_UNIT_SECONDS)


def longest_first(nodeids: list[str]) -> list[str]:
    """``nodeids`` regrouped by unit, the longest unit first; within a unit the order is kept."""
    first_seen: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(scope_of(nodeid), i)
    return sorted(nodeids, key=lambda n: (-unit_seconds(scope_of(n)), first_seen[scope_of(n)]))


def pytest_collection_modifyitems(session, config, items):
    """Longest unit first (see the module docstring); the same order on every worker."""
    order = {nodeid: i for i, nodeid in enumerate(longest_first([item.nodeid for item in items]))}
    items.sort(key=lambda item: order[item.nodeid])


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with every browser test file in one unit (see the module docstring)."""
    if config.getoption("dist", "no") != "loadfile":
        return None
    # xdist would otherwise re-sort the units by their number of tests (a notebook's cells
    # count as tests, which says little about its time); keep the longest-first order.
    config.option.loadscopereorder = False

    class FileOrBrowserScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return FileOrBrowserScheduling(config, log)
