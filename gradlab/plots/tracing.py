"""Plots for chapter 03 (step-time bars, gradient-norm histories, the tracing lab's call times).

matplotlib only, no widgets. Figures come from :func:`gradlab.plots.gradients.new_figure`, so
they belong to no pyplot state; a notebook cell shows the returned figure once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from ..i18n import N_, _
from .live import new_figure

__all__ = ["RETRACE_COLOR", "STEADY_COLOR", "plot_grad_norm_history", "plot_step_times"]

FIRST_COLOR = "#bc4c00"
STEADY_COLOR = "#0969da"
RETRACE_COLOR = "#cf222e"


def plot_step_times(timings: Sequence, *, title: str | None = None):
    """Grouped bars of first-call and steady-state step times (ms, log scale) per mode (chapter 03).

    ``timings`` is a list of :class:`~gradlab.topics.tracing.StepTiming` (from ``gl.time_step``).
    Each bar is labelled with its value, so the figure reads without the table.
    """
    timings = list(timings)
    if not timings or not all(hasattr(t, "first_s") and hasattr(t, "steady_s") for t in timings):
        raise ValueError("timings must be a non-empty list of StepTiming (from gl.time_step)")
    fig, ax = new_figure((7.0, 3.4))
    idx = np.arange(len(timings))
    w = 0.38
    first = np.array([t.first_ms for t in timings])
    steady = np.array([t.steady_ms for t in timings])
    bars1 = ax.bar(idx - w / 2, first, w, color=FIRST_COLOR, label=_("first call (traces/compiles)"))
    bars2 = ax.bar(idx + w / 2, steady, w, color=STEADY_COLOR, label=_("steady-state step (median)"))
    for bars in (bars1, bars2):
        for b in bars:
            ax.annotate(f"{b.get_height():.3g}", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xticks(idx, [t.name for t in timings])
    ax.set_ylabel(_("time per call (ms, log scale)"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(min(first.min(), steady.min()) / 2, max(first.max(), steady.max()) * 4)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or _("One training step: first call vs steady state"))
    return fig


def plot_grad_norm_history(history: Mapping[str, Sequence[float]], steps: Sequence[int] | None = None,
                           *, xlabel: str = N_("epoch"), ax=None, title: str | None = None):
    """Per-layer gradient norms over training, one line per layer, log scale (chapter 03).

    ``xlabel`` is shown through the translation (the default ``"epoch"`` reads 轮次 in Chinese).

    ``history`` maps a layer name to its norms (e.g. ``GradNormLogger.history``). Non-positive
    or non-finite values cannot sit on a log axis; they are left out of the line.
    """
    if not isinstance(history, Mapping) or not history:
        raise ValueError("history must be a non-empty dict {layer name: [norms]}")
    lengths = {len(v) for v in history.values()}
    if len(lengths) != 1:
        raise ValueError(f"every layer's history must have the same length; got lengths {sorted(lengths)}")
    n = lengths.pop()
    x = np.arange(1, n + 1) if steps is None else np.asarray(steps)
    if len(x) != n:
        raise ValueError(f"steps has {len(x)} entries but the history has {n}")
    if ax is None:
        fig, ax = new_figure((7.0, 3.4))
    else:
        fig = ax.figure
    for name, values in history.items():
        v = np.asarray(values, dtype=float)
        v = np.where(np.isfinite(v) & (v > 0), v, np.nan)
        ax.plot(x, v, marker="o", ms=3, lw=1.5, label=name)
    ax.set_yscale("log")
    short = FuncFormatter(lambda v, _pos: f"{v:.3g}")
    ax.yaxis.set_major_formatter(short)
    # plain numbers; label the minor ticks only when the data spans little more than a decade
    data = np.concatenate([np.asarray(v, dtype=float) for v in history.values()])
    data = data[np.isfinite(data) & (data > 0)]
    few_decades = data.size and np.log10(data.max() / data.min()) <= 1.3
    ax.yaxis.set_minor_formatter(short if few_decades else NullFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(_(xlabel))
    ax.set_ylabel(_("gradient norm ‖∂L/∂W‖ (log scale)"))
    ax.legend(fontsize=8, ncol=2 if len(history) > 4 else 1)
    ax.set_title(title or _("Per-layer gradient norms during training"))
    return fig


def _two_five(v: float, _pos=None) -> str:
    """Label a log axis' minor ticks at 2 and 5 times a power of ten, as plain numbers."""
    if not v > 0:
        return ""
    lead = v / 10 ** np.floor(np.log10(v))
    return f"{v:g}" if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""
