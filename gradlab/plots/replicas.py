"""Clipping before versus after the all-reduce, as a picture (chapter 08).

matplotlib and NumPy only, no widgets, no TensorFlow: the chapter measures each replica's
gradients and hands them over as arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.patches import Circle

from ..i18n import _
from .gradients import new_figure

__all__ = ["plot_clip_placement"]

_REPLICAS = ("#8c959f", "#57606a")
_SUM = "#24292f"
_AFTER = "#1a7f37"
_BEFORE = "#cf222e"


def _flat(grads) -> np.ndarray:
    return np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads])


def _clip(v: np.ndarray, c: float) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v * (c / n) if n > c else v


def plot_clip_placement(replica_grads: Sequence[Sequence], clip_norm: float, *, figsize=(6.6, 5.4)):
    """The replicas' gradients, their sum, and global-norm clipping before and after the sum.

    ``replica_grads`` holds one list of gradient arrays per replica (each replica's share of
    the global loss, so their sum is the one-device gradient). Every gradient list is one
    vector; the picture is the plane through the summed gradient and the sum of the clipped
    replica gradients, which for two replicas contains every vector drawn, so lengths and
    angles are true. Drawn: each replica's gradient (grey), the sum (black, what one device
    computes), the sum clipped to ``clip_norm`` (green, clip after the all-reduce), the sum of
    the clipped replica gradients (red, clip before), and the circle of radius ``clip_norm``.
    Returns the figure (chapter 08).
    """
    if len(replica_grads) < 2:
        raise ValueError(f"replica_grads must hold the gradients of at least 2 replicas; got {len(replica_grads)}")
    if not (isinstance(clip_norm, (int, float)) and clip_norm > 0):
        raise ValueError(f"clip_norm must be a number > 0; got {clip_norm!r}")
    parts = [_flat(g) for g in replica_grads]
    if len({p.size for p in parts}) != 1:
        raise ValueError("every replica's gradient list must have the same shapes")
    total = np.sum(parts, axis=0)
    after = _clip(total, clip_norm)
    before = np.sum([_clip(p, clip_norm) for p in parts], axis=0)
    e1 = total / np.linalg.norm(total)
    rest = before - (before @ e1) * e1
    if np.linalg.norm(rest) < 1e-12 * np.linalg.norm(before):  # before is parallel to the sum: use a replica
        rest = parts[0] - (parts[0] @ e1) * e1
    e2 = rest / np.linalg.norm(rest) if np.linalg.norm(rest) > 0 else np.zeros_like(e1)

    def xy(v):
        return float(v @ e1), float(v @ e2)

    fig, ax = new_figure(figsize)
    ax.add_patch(Circle((0, 0), clip_norm, fill=False, ls=":", color="#57606a"))
    handles = []

    def arrow(v, color, label, *, start=(0.0, 0.0), ls="-", lw=2.0):
        x, y = xy(v)
        ax.annotate("", xy=(start[0] + x, start[1] + y), xytext=start,
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=lw, ls=ls, shrinkA=0, shrinkB=0))
        handles.append(ax.plot([], [], color=color, lw=lw, ls=ls, label=label)[0])

    for i, p in enumerate(parts):
        arrow(p, _REPLICAS[i % 2], _("replica {i}: norm {norm}").format(i=i, norm=f"{np.linalg.norm(p):.3g}"), lw=1.5)
    arrow(total, _SUM, _("sum = one device: norm {norm}").format(norm=f"{np.linalg.norm(total):.3g}"))
    arrow(after, _AFTER, _("clip after the all-reduce: norm {norm}").format(norm=f"{np.linalg.norm(after):.3g}"),
          lw=3.0)
    arrow(before, _BEFORE, _("clip before the all-reduce: norm {norm}").format(
        norm=f"{np.linalg.norm(before):.3g}"), ls="--")
    handles.append(ax.plot([], [], ls=":", color="#57606a", label=_("clip_norm = {c}").format(c=f"{clip_norm:g}"))[0])
    points = np.array([xy(v) for v in (*parts, total, after, before)] + [(0.0, 0.0)])
    span = max(float(np.abs(points).max()), clip_norm) * 1.15
    ax.set_xlim(min(points[:, 0].min(), -clip_norm) - 0.1 * span, max(points[:, 0].max(), clip_norm) + 0.1 * span)
    ax.set_ylim(min(points[:, 1].min(), -clip_norm) - 0.1 * span, max(points[:, 1].max(), clip_norm) + 0.1 * span)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
    cosine = float(before @ total / (np.linalg.norm(before) * np.linalg.norm(total)))
    ax.set_title(_("global-norm clipping at {c}: clipped before the sum, the step is {ratio}× as long as on\n"
                   "one device, at cosine {cosine} to its direction").format(
                       c=f"{clip_norm:g}", ratio=f"{np.linalg.norm(before) / np.linalg.norm(after):.3g}",
                       cosine=f"{cosine:.4f}"), fontsize=10)
    ax.set_xlabel(_("along the one-device gradient"))
    ax.set_ylabel(_("across it"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    return fig
