"""Chapter 10's pictures: the finite-difference error against the step, per-example methods
against the batch size, per-example gradient norms against a clipping bound, and peak memory.

matplotlib only; each function returns a ``Figure`` that belongs to no pyplot state.
"""

from __future__ import annotations

import numpy as np

from ..i18n import _
from .live import new_figure

__all__ = ["plot_example_norms", "plot_memory", "plot_method_times", "plot_step_errors"]

_COLORS = ("#0969da", "#bc4c00", "#1a7f37", "#8250df", "#cf222e")


def plot_step_errors(steps, errors: dict, eps: dict | None = None, *, figsize=(6.6, 3.6)):
    """The error of a central difference against its step ``h``, one line per label (dtype).

    ``errors[label]`` holds one absolute error per step. With ``eps[label]`` (the machine
    epsilon) the optimum ``h = ε^(1/3)`` is marked and the two slopes are drawn: truncation
    ``∝ h²`` on the right, rounding ``∝ ε/h`` on the left.
    """
    steps = np.asarray(steps, dtype=np.float64)
    if steps.ndim != 1 or steps.size < 2 or np.any(steps <= 0):
        raise ValueError(f"steps must be a 1-D array of at least two positive steps; got shape {steps.shape}")
    fig, ax = new_figure(figsize)
    for color, (label, err) in zip(_COLORS, errors.items(), strict=False):
        err = np.asarray(err, dtype=np.float64)
        if err.shape != steps.shape:
            raise ValueError(f"errors[{label!r}] must hold one error per step ({steps.size}); got shape {err.shape}")
        shown = np.where(err > 0, err, np.nan)  # an exact 0 has no place on a log axis
        ax.plot(steps, shown, "o-", ms=3, lw=1.2, color=color, label=label)
        if eps and label in eps:
            e = float(eps[label])
            best = e ** (1 / 3)
            ax.axvline(best, color=color, lw=0.8, ls=":")
            ax.plot(steps, e / steps, color=color, lw=0.8, ls="--", alpha=0.6)
            ax.text(best, np.nanmax(shown), " " + _("ε^(1/3) = {h}").format(h=f"{best:.1g}"), color=color,
                    fontsize=8, va="top")
    ref = np.nanmedian([np.nanmin(np.where(np.asarray(e) > 0, e, np.nan)) for e in errors.values()])
    top = steps[steps > steps.max() / 1e4]
    ax.plot(top, ref * 10 * (top / top[0]) ** 2, color="#6e7781", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("step h"))
    ax.set_ylabel(_("|central difference − exact derivative|"))
    ax.set_title(_("Rounding (∝ ε/h, dashed, left) against truncation (∝ h², grey, right)"), fontsize=10, loc="left")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def plot_method_times(batch_sizes, times: dict, *, figsize=(6.0, 3.4)):
    """Seconds per call of each per-example method (``times[method]``, one per batch size)."""
    sizes = np.asarray(batch_sizes, dtype=np.float64)
    fig, ax = new_figure(figsize)
    for color, (method, values) in zip(_COLORS, times.items(), strict=False):
        values = np.asarray(values, dtype=np.float64)
        if values.shape != sizes.shape:
            raise ValueError(f"times[{method!r}] must hold one time per batch size; got shape {values.shape}")
        ax.plot(sizes, values * 1e3, "o-", ms=4, color=color, label=method)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(_("batch size B"))
    ax.set_ylabel(_("milliseconds per call"))
    ax.set_title(_("Per-example gradients: time against the batch size"), fontsize=10, loc="left")
    ax.legend(fontsize=8)
    return fig


def plot_example_norms(norms, clip: float, *, figsize=(6.6, 3.0)):
    """Each example's gradient norm as a bar, the clipping bound ``clip`` as a line."""
    norms = np.asarray(norms, dtype=np.float64)
    if norms.ndim != 1 or norms.size == 0:
        raise ValueError(f"norms must be a 1-D array with one norm per example; got shape {norms.shape}")
    fig, ax = new_figure(figsize)
    over = norms > clip
    ax.bar(np.arange(norms.size), norms, color=np.where(over, "#cf222e", "#0969da"))
    ax.axhline(clip, color="#1a7f37", lw=1.2, ls="--", label=_("clipping bound C = {c}").format(c=f"{clip:.3g}"))
    ax.set_yscale("log")
    ax.set_xlabel(_("example"))
    ax.set_ylabel(_("gradient norm (float64)"))
    ax.set_title(_("{n} of {total} examples above the bound are scaled down to it").format(
        n=int(over.sum()), total=norms.size), fontsize=10, loc="left")
    ax.legend(fontsize=8)
    return fig


def plot_memory(labels, peak_mib, seconds=None, *, figsize=(6.6, 3.2)):
    """Peak memory per configuration as bars (with the time of each above its bar, if given)."""
    labels = list(labels)
    peak = np.asarray(peak_mib, dtype=np.float64)
    if peak.shape != (len(labels),):
        raise ValueError(f"peak_mib must hold one value per label ({len(labels)}); got shape {peak.shape}")
    fig, ax = new_figure(figsize)
    bars = ax.bar(np.arange(len(labels)), peak, color=_COLORS[0])
    if seconds is not None:
        for bar, s in zip(bars, np.asarray(seconds, dtype=np.float64), strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{s * 1e3:.0f} ms", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(np.arange(len(labels)), labels, fontsize=8)
    ax.set_ylabel(_("peak memory (MiB)"))
    ax.set_title(_("Peak memory of one training step (TensorFlow's allocator statistics)"), fontsize=10, loc="left")
    return fig
