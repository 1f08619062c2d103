"""ipywidgets explorers. Imported lazily by ``gradlab`` so the computation stays headless."""

from .explorer import GradientExplorer
from .intro import TangentExplorer

__all__ = ["GradientExplorer", "TangentExplorer"]
