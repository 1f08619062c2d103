"""Plots for chapter 03 (step-time bars, gradient-norm histories, the tracing lab's call times).

matplotlib only, no widgets. Figures come from :func:`gradlab.plots.gradients.new_figure`, so
they belong to no pyplot state; a notebook cell shows the returned figure once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from ..i18n import N_, _
from .live import LIVE_DPI, LivePlot, new_figure

__all__ = ["CallTimePlot", "plot_grad_norm_history", "plot_step_times"]

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


class CallTimePlot(LivePlot):
    """The tracing lab's figure: time of each call (ms, log scale), retracing calls in red.

    Built once; :meth:`update` changes the data of the two line artists in place (blitted:
    the x range grows in steps of 10 calls and the y range snaps to decades, so most calls
    reuse the cached background).
    """

    def __init__(self, max_calls: int = 40):
        self.max_calls = max_calls
        self.fig, self.ax = new_figure((5.2, 2.8), layout=None, dpi=LIVE_DPI)
        self.fig.subplots_adjust(left=0.14, right=0.97, bottom=0.18, top=0.88)
        (self.line,) = self.ax.plot([], [], "-o", color=STEADY_COLOR, ms=3, lw=1)
        (self.retraced,) = self.ax.plot([], [], "o", color=RETRACE_COLOR, ms=6)
        self.ax.set_yscale("log")
        self.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        self.ax.yaxis.set_minor_formatter(FuncFormatter(_two_five))
        self.ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        self.ax.set_xlabel(_("call"))
        self.ax.set_ylabel(_("ms (log scale)"))
        self.ax.legend([Line2D([], [], marker="o", ms=3, lw=1, color=STEADY_COLOR),
                        Line2D([], [], marker="o", ms=6, lw=0, color=RETRACE_COLOR)],
                       [_("call (cached graph)"), _("call that traced")], fontsize=7, loc="upper right")
        self.ax.set_title(_("time of each call"), fontsize=9)
        self.animate(self.line, self.retraced)

    def update(self, times_ms: Sequence[float], traced: Sequence[bool]) -> None:
        t = np.asarray(times_ms, dtype=float)[-self.max_calls:]
        r = np.asarray(traced, dtype=bool)[-self.max_calls:]
        start = max(0, len(times_ms) - self.max_calls)
        x = np.arange(start + 1, start + len(t) + 1)
        self.line.set_data(x, t)
        self.retraced.set_data(x[r], t[r])
        if len(t):
            self.ax.set_xlim(x[0] - 0.5, 10 * np.ceil(x[-1] / 10) + 0.5)
            lo, hi = max(t.min(), 1e-3) / 2, max(t.max(), 1e-3) * 3
            self.ax.set_ylim(10 ** np.floor(np.log10(lo)), 10 ** np.ceil(np.log10(hi)))
