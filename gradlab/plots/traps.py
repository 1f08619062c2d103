"""The ``tf.where`` trap and its fix, as a picture (chapter 06).

matplotlib only, no widgets, no TensorFlow: the chapter computes the values and gradients
(in plain TensorFlow, visibly) and hands the arrays to :func:`plot_where_trap`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..i18n import _
from .gradients import new_figure

__all__ = ["plot_where_trap"]

_LINE = "#0550ae"
_NAN = "#cf222e"
_ZERO = "#1a7f37"


def plot_where_trap(x, value, gradients: Mapping[str, np.ndarray], *, value_label: str = "",
                    ylim: tuple[float, float] = (-0.5, 4.0), figsize=None):
    """One panel for the function's value, then one per way of writing it, with its gradient.

    ``x`` and ``value`` are 1-D arrays (the value is the same for every way of writing the
    function: that is the trap); ``gradients`` maps a label (the code that computed it, e.g.
    ``"tf.where(x > 0, x ** 0.5, 0)"``) to the gradient at every ``x``. Finite gradients are a
    line; NaN and inf points are red crosses on the bottom edge, counted in the panel title, so
    a finite loss with a NaN gradient shows at a glance. Returns the figure (chapter 06).
    """
    x = np.asarray(x, dtype=np.float64)
    value = np.asarray(value, dtype=np.float64)
    if x.ndim != 1 or value.shape != x.shape:
        raise ValueError(f"x and value must be 1-D arrays of the same length; got shapes {x.shape} and {value.shape}")
    if not gradients:
        raise ValueError("gradients must map at least one label to an array")
    grads = {label: np.asarray(g, dtype=np.float64) for label, g in gradients.items()}
    for label, g in grads.items():
        if g.shape != x.shape:
            raise ValueError(f"gradient {label!r} has shape {g.shape}, expected {x.shape} (one value per x)")
    n = len(grads) + 1
    fig, axes = new_figure(figsize or (3.1 * n, 3.0), ncols=n, sharex=True)
    ax = axes[0]
    ax.plot(x, value, color="#444444", lw=2)
    ax.set_title(_("value (finite everywhere)"), fontsize=10)
    ax.set_xlabel("x")
    ax.set_ylabel(value_label or _("value"))
    ax.grid(alpha=0.3)
    low = ylim[0] + 0.06 * (ylim[1] - ylim[0])
    for ax, (label, g) in zip(axes[1:], grads.items(), strict=True):
        bad = ~np.isfinite(g)
        shown = np.where(bad, np.nan, np.clip(g, ylim[0], ylim[1]))
        handles = [ax.plot(x, shown, color=_LINE, lw=2, label=_("gradient"))[0]]
        if bad.any():
            handles.append(ax.plot(x[bad], np.full(int(bad.sum()), low), "x", color=_NAN, ms=5, mew=1.5,
                                   label=_("NaN or inf"))[0])
            title = _("{label}\nNaN at {bad} of {n} points").format(label=label, bad=int(bad.sum()), n=x.size)
        else:
            title = _("{label}\nfinite everywhere").format(label=label)
        ax.set_title(title, fontsize=9, color=_NAN if bad.any() else _ZERO)
        ax.set_ylim(*ylim)
        ax.set_xlabel("x")
        ax.grid(alpha=0.3)
        ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
    axes[1].set_ylabel(_("dLoss/dx"))
    return fig
