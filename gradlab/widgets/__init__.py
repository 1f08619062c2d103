"""ipywidgets explorers. Imported lazily by ``gradlab`` so the computation stays headless."""

from __future__ import annotations

import importlib

from .gradient_explorer import GradientExplorer
from .tangent_explorer import TangentExplorer

__all__ = ["GradientExplorer", "TangentExplorer", "JacobianViewer", "TracingLab", "TimeExplorer",
           "TransformerExplorer", "TrainingExplorer"]

_LAZY = {"JacobianViewer": ".jacobian_viewer", "TracingLab": ".tracing_lab", "TimeExplorer": ".time_explorer",
         "TransformerExplorer": ".transformer_explorer", "TrainingExplorer": ".training_explorer"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)
