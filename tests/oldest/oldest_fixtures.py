"""The fixtures of ``tests/conftest.py`` that the tools' tests use, for ``make test-oldest``.

That tier runs the tests against the installed wheel without ``tests/conftest.py`` (which puts
the checkout first on ``sys.path``), so ``tools/test_oldest.py`` loads this plugin instead
(``-p oldest_fixtures``, with only this folder on ``PYTHONPATH``).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def engine():
    """Chapter 01's MLP engine: the engine's defaults, which are the settings the book's grids
    store (``tools/book/grids.CH01_ENGINE``; ``tests/test_book.py`` checks that they agree)."""
    from gradlab.engines.mlp import MLPGradientEngine

    return MLPGradientEngine()
