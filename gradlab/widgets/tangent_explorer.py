"""Chapter 00's first interactive taste: drag w, see the slope and the step it implies."""

from __future__ import annotations

import numpy as np

from ..i18n import _
from ..plots.view import COLORS, line_plot
from ..topics.intro import slope_and_step, toy_loss
from .base import Explorer
from .controls import Slider

__all__ = ["TangentExplorer"]

_W_RANGE = (-1.0, 5.0)
_LR_RANGE = (0.0, 2.0)


def _exact(x: float) -> str:
    """``x`` with two decimals, or with the digits (up to 4) it needs: ``-0.50``, ``0.333``.

    A slider's grid value carries float noise (an arrow key gives 0.3999999999999999): that
    still reads ``0.40``.
    """
    two = f"{x:.2f}"
    return two if abs(float(two) - x) <= 1e-9 else f"{x:.4g}"


class TangentExplorer(Explorer):
    """Sliders ``w`` and ``learning_rate``; the plot shows L(w), its tangent and one step (chapter 00)."""

    #: The page moves ``w`` without waiting: every grid value of the slider is sent ahead.
    axis_control = "w"
    compute_ahead = True

    def __init__(self, w: float = -0.5, learning_rate: float = 0.3):
        slope_and_step(w, learning_rate)  # validates both
        if not _W_RANGE[0] <= w <= _W_RANGE[1]:
            raise ValueError(f"w must be between -1 and 5, got {w}")
        if not _LR_RANGE[0] <= learning_rate <= _LR_RANGE[1]:
            raise ValueError(f"learning_rate must be between 0 and 2, got {learning_rate}")
        self._ws = np.linspace(*_W_RANGE, 241, dtype=np.float32)
        self._losses = toy_loss(self._ws).numpy()
        # exactly the values passed (w=0.33 stays 0.33), updated when a drag ends:
        # gradlab.widgets.sliders says why
        self.w = self.control(Slider("w", value=w, min=_W_RANGE[0], max=_W_RANGE[1], step=0.05, description="w"))
        self.learning_rate = self.control(Slider(
            "learning_rate", value=learning_rate, min=_LR_RANGE[0], max=_LR_RANGE[1], step=0.05,
            description=_("learning rate")))
        self.start()

    def _compute(self):
        w, lr = float(self.w.value), float(self.learning_rate.value)
        self.loss, self.slope, self.w_next = slope_and_step(w, lr)
        self.loss_next = float(toy_loss(np.float32(self.w_next)).numpy())
        return (w, self.loss, self.slope, self.w_next, self.loss_next)

    def _axis_values(self) -> list:
        # the page's slider grid: -1, -0.95, ..., 5 (as the page computes them)
        return [round(_W_RANGE[0] + 0.05 * k, 10) for k in range(121)]

    def _plots(self) -> list[dict]:
        w, loss, slope, w_next, loss_next = self.report
        dx = np.array([-0.8, 0.8])
        span = float(self._losses.max() - self._losses.min())
        series = [
            {"label": _("loss L(w)"), "y": self._losses, "color": COLORS["forward"], "width": 1.5},
            {"label": _("tangent: slope = dL/dw"), "x": w + dx, "y": loss + slope * dx, "color": COLORS["signal"],
             "width": 1.8},
            {"label": "", "x": [w], "y": [loss], "color": COLORS["signal"], "line": False, "marker": "dot"},
            {"label": _("w after one step"), "x": [w_next], "y": [loss_next], "color": COLORS["clipped"],
             "line": False, "marker": "dot"},
        ]
        title = _("w = {w}   dL/dw = {slope}   step → w = {w_next}").format(
            w=f"{w:.2f}", slope=f"{slope:+.3f}", w_next=f"{w_next:.2f}")
        return [line_plot(x=self._ws, series=series, xlabel="w", ylabel="L(w)", title=title, ylog=False,
                          xlim=(float(self._ws.min()), float(self._ws.max())),
                          ylim=(float(self._losses.min()) - 0.1 * span, float(self._losses.max()) + 0.1 * span),
                          height=260)]

    def _report_fields(self) -> dict:
        w, loss, slope, w_next, loss_next = self.report
        return {"w": w, "loss": loss, "slope": slope, "w_next": w_next, "loss_next": loss_next}

    def _status_color(self):
        return None

    @property
    def status_text(self) -> str:
        w, loss, slope, w_next, loss_next = self.report
        if slope < 0:
            text = _("w = {w}: loss {loss}, slope {slope}, so gradient descent moves w to the right: "
                     "{w_next} (loss {loss_next})")
        else:
            text = _("w = {w}: loss {loss}, slope {slope}, so gradient descent moves w to the left: "
                     "{w_next} (loss {loss_next})")
        return text.format(w=_exact(w), loss=f"{loss:.3f}", slope=f"{slope:+.3f}",
                           w_next=f"{w_next:.2f}", loss_next=f"{loss_next:.3f}")
