"""The fixtures the tools' tests share, in one place for ``make test`` and ``make test-oldest``.

``tests/conftest.py`` imports them. ``make test-oldest`` runs the tests against the installed wheel
without that conftest (which puts the checkout first on ``sys.path``), so ``tools/test_oldest.py``
loads this module as a plugin instead (``-p oldest_fixtures``, with only this folder on ``PYTHONPATH``).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine():
    """Chapter 01's MLP engine: the engine's defaults, which are the settings the book's grids
    store (``tools/book/grids.CH01_ENGINE``; ``tests/test_book.py`` checks that they agree)."""
    from gradlab.engines.mlp import MLPGradientEngine

    return MLPGradientEngine()
