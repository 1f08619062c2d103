"""Clipping before versus after the all-reduce, as a picture (chapter 08).

matplotlib and NumPy only, no widgets, no TensorFlow: it draws what
:func:`gradlab.train.distribute.clip_placement` computed (the core clips; the plot only draws).
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Circle

from ..i18n import _
from .gradients import new_figure

__all__ = ["plot_clip_placement"]

_REPLICAS = ("#8c959f", "#57606a")
_SUM = "#24292f"
_AFTER = "#1a7f37"
_BEFORE = "#cf222e"


def plot_clip_placement(placement, *, figsize=(6.6, 5.4)):
    """Draw :func:`gradlab.train.distribute.clip_placement`'s vectors (chapter 08).

    Drawn in the plane of the placement: each replica's gradient (grey), the sum (black, what
    one device computes), the sum clipped to the threshold (green, clip after the all-reduce),
    the sum of the clipped replica gradients (red, clip before), and the circle of radius of
    the threshold. The title states the placement's ratio and cosine. Returns the figure.
    """
    if not all(hasattr(placement, a) for a in ("parts", "total", "after", "before", "xy", "clip_norm")):
        raise ValueError("placement must be what gl.train.distribute.clip_placement(replica_grads, clip) returns; "
                         f"got {type(placement).__name__}")
    c = placement.clip_norm
    fig, ax = new_figure(figsize)
    ax.add_patch(Circle((0, 0), c, fill=False, ls=":", color="#57606a"))
    handles = []

    def arrow(v, color, label, *, ls="-", lw=2.0):
        x, y = placement.xy(v)
        ax.annotate("", xy=(x, y), xytext=(0.0, 0.0),
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=lw, ls=ls, shrinkA=0, shrinkB=0))
        handles.append(ax.plot([], [], color=color, lw=lw, ls=ls, label=label)[0])

    def norm(v) -> str:
        return f"{placement.norm(v):.3g}"

    for i, p in enumerate(placement.parts):
        arrow(p, _REPLICAS[i % 2], _("replica {i}: norm {norm}").format(i=i, norm=norm(p)), lw=1.5)
    arrow(placement.total, _SUM, _("sum = one device: norm {norm}").format(norm=norm(placement.total)))
    arrow(placement.after, _AFTER, _("clip after the all-reduce: norm {norm}").format(norm=norm(placement.after)),
          lw=3.0)
    arrow(placement.before, _BEFORE, _("clip before the all-reduce: norm {norm}").format(
        norm=norm(placement.before)), ls="--")
    handles.append(ax.plot([], [], ls=":", color="#57606a", label=_("clip_norm = {c}").format(c=f"{c:g}"))[0])
    _frame(ax, [placement.xy(v) for v in (*placement.parts, placement.total, placement.after, placement.before)], c)
    ax.set_title(_("global-norm clipping at {c}: clipped before the sum, the step is {ratio}× as long as on\n"
                   "one device, at cosine {cosine} to its direction").format(
                       c=f"{c:g}", ratio=f"{placement.ratio:.3g}", cosine=f"{placement.cosine:.4f}"), fontsize=10)
    ax.set_xlabel(_("along the one-device gradient"))
    ax.set_ylabel(_("across it"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    return fig


def _frame(ax, points, c: float) -> None:
    """Limits that show every arrow tip and the whole circle, equal aspect."""
    pts = np.array([*points, (0.0, 0.0)])
    span = max(float(np.abs(pts).max()), c) * 1.15
    ax.set_xlim(min(pts[:, 0].min(), -c) - 0.1 * span, max(pts[:, 0].max(), c) + 0.1 * span)
    ax.set_ylim(min(pts[:, 1].min(), -c) - 0.1 * span, max(pts[:, 1].max(), c) + 0.1 * span)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
