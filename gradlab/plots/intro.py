"""The chapter-00 tangent plot: a loss curve, the slope at w, and one gradient-descent step."""

from __future__ import annotations

import numpy as np

from ..i18n import _
from .live import LIVE_DPI, LivePlot, legend_handle, new_figure

__all__ = ["TangentPlot"]


class TangentPlot(LivePlot):
    """Loss curve with the tangent at ``w`` and an arrow to ``w - lr·slope``; updated in place.

    The loss curve, the axes and the legend are the cached background; the tangent, the two
    points, the arrow and the title are blitted over it.
    """

    def __init__(self, ws, losses, *, figsize=(6.4, 3.4)):
        self.fig, self.ax = new_figure(figsize, layout=None, dpi=LIVE_DPI)
        self.fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.9)
        (curve,) = self.ax.plot(ws, losses, color="#6e7781", lw=1.5)
        (self.tangent,) = self.ax.plot([], [], color="#0969da", lw=1.8)
        (self.point,) = self.ax.plot([], [], "o", color="#0969da", ms=7)
        (self.next,) = self.ax.plot([], [], "o", color="#1a7f37", ms=7)
        self.arrow = self.ax.annotate("", xy=(0, 0), xytext=(0, 0),
                                      arrowprops=dict(arrowstyle="->", color="#1a7f37", lw=2))
        self.arrow.set_in_layout(False)
        self.ax.set_xlabel("w")
        self.ax.set_ylabel("L(w)")
        self.ax.set_xlim(ws.min(), ws.max())
        span = losses.max() - losses.min()
        self.ax.set_ylim(losses.min() - 0.1 * span, losses.max() + 0.1 * span)
        self.ax.legend([curve, legend_handle(self.tangent), legend_handle(self.next)],
                       [_("loss L(w)"), _("tangent: slope = dL/dw"), _("w after one step")],
                       fontsize=8, loc="upper center")
        self.title = self.ax.set_title("", fontsize=10, loc="left")
        self.animate(self.tangent, self.point, self.next, self.arrow, self.title)

    def update(self, w, loss, slope, w_next, loss_next):
        dx = np.array([-0.8, 0.8])
        self.tangent.set_data(w + dx, loss + slope * dx)
        self.point.set_data([w], [loss])
        self.next.set_data([w_next], [loss_next])
        self.arrow.xy = (w_next, loss_next)
        self.arrow.set_position((w, loss))
        self.title.set_text(_("w = {w}   dL/dw = {slope}   step → w = {w_next}").format(
            w=f"{w:.2f}", slope=f"{slope:+.3f}", w_next=f"{w_next:.2f}"))
        return self
