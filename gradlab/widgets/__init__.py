"""ipywidgets explorers. Imported lazily by ``gradlab`` so the computation stays headless."""

from __future__ import annotations

import importlib

from .explorer import GradientExplorer
from .intro import TangentExplorer

__all__ = ["GradientExplorer", "TangentExplorer", "JacobianViewer", "TracingLab", "TimeExplorer"]

_LAZY = {"JacobianViewer": ".jacobian", "TracingLab": ".tracing", "TimeExplorer": ".time"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)
