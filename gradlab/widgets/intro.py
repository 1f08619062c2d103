"""Chapter 00's first interactive taste: drag w, see the slope and the step it implies."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from ..intro import slope_and_step, toy_loss
from ..plots.intro import TangentPlot
from ._base import FigureView, SnapshotMixin, css, static_bundle, status_html

__all__ = ["TangentExplorer"]


class TangentExplorer(SnapshotMixin, widgets.VBox):
    """Sliders ``w`` and ``learning_rate``; the plot shows L(w), its tangent and one step."""

    def __init__(self, w: float = -0.5, learning_rate: float = 0.3):
        slope_and_step(w, learning_rate)  # validates both
        if not -1.0 <= w <= 5.0:
            raise ValueError(f"w must be between -1 and 5, got {w}")
        if not 0.0 <= learning_rate <= 2.0:
            raise ValueError(f"learning_rate must be between 0 and 2, got {learning_rate}")
        ws = np.linspace(-1.0, 5.0, 241, dtype=np.float32)
        self._plot = TangentPlot(ws, toy_loss(ws).numpy())
        self.w = css(widgets.FloatSlider(value=w, min=-1.0, max=5.0, step=0.05, description="w"),
                     "tangent-w")
        self.learning_rate = css(
            widgets.FloatSlider(value=learning_rate, min=0.0, max=2.0, step=0.05,
                                description="learning rate"),
            "tangent-lr",
        )
        self.status = css(widgets.HTML(), "tangent-status")
        self._recompute()
        self.plot = FigureView(self._plot.fig, css_name="tangent-plot")
        for c in (self.w, self.learning_rate):
            c.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.w, self.learning_rate]), self.plot, self.status])
        css(self, "tangent")

    def _recompute(self):
        w, lr = float(self.w.value), float(self.learning_rate.value)
        self.loss, self.slope, self.w_next = slope_and_step(w, lr)
        loss_next = float(toy_loss(np.float32(self.w_next)).numpy())
        self._plot.update(w, self.loss, self.slope, self.w_next, loss_next)
        direction = "right" if self.slope < 0 else "left"
        self.status_text = (
            f"w = {w:.2f}: loss {self.loss:.3f}, slope {self.slope:+.3f}, so gradient descent "
            f"moves w to the {direction}: {self.w_next:.2f} (loss {loss_next:.3f})"
        )
        self.status.value = status_html(self.status_text)

    def _on_change(self, change=None):
        self._recompute()
        self.plot.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return static_bundle(self, self.plot.value, self.status_text, **kwargs)

    def __repr__(self) -> str:
        return f"TangentExplorer({self.status_text})"
