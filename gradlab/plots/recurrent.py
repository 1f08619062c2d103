"""Plots of gradients through time (chapter 07).

matplotlib only, no widgets. :class:`TimePlot` builds its figure once and updates the
artists' data in place, blitted (:class:`gradlab.plots.live.LivePlot`: what the TimeExplorer
needs); :func:`plot_time_report`, :func:`plot_time_norms` and :func:`plot_cliff` are one-shot
versions for chapter cells.
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
from matplotlib.patches import Rectangle

from ..i18n import N_, _
from ..reports.verdict import status_word
from .gradients import STATUS_COLORS, decade_limits, place_band
from .live import LIVE_DPI, LivePlot, legend_below, legend_handle, new_figure

__all__ = ["TimePlot", "plot_cliff", "plot_time_norms", "plot_time_report"]


class TimePlot(LivePlot):
    """Per-time-step gradient norms on a log scale (left) and the weight-gradient norms (right).

    Left: ``time_step_norms`` against the step (1 = earliest), the healthy band (the range of
    step-1 norms that :func:`gradlab.reports.gradients.diagnose` calls healthy: 1e-3 to 1e3 times the last
    step's), and exact zeros (float32 underflow) as red triangles just inside the bottom edge.
    Right: the norm of each weight gradient, and after clipping (filled dots) when a clip is
    set. The legend, below the panels, lists only what is drawn; the status is the title.
    """

    BACKGROUNDS = 16

    LABELS = {
        "band": N_("healthy band for step 1"),
        "norms": N_("‖dLoss/dx_t‖ per time step"),
        "zeros": N_("exactly 0 (underflow)"),
        "weight": N_("weight gradient"),
        "clipped": N_("weight gradient after clipping"),
    }

    def __init__(self, report=None, *, figsize=(6.9, 3.9), legend: bool = True):
        self.fig, (self.ax, self.wax) = new_figure(figsize, ncols=2, layout=None, dpi=LIVE_DPI,
                                                   width_ratios=[3, 1.25])
        self.legend = legend
        self.fig.subplots_adjust(left=0.1, right=0.98, bottom=0.38 if legend else 0.25, top=0.9,
                                 wspace=0.32)
        ax, wax = self.ax, self.wax
        for a in (ax, wax):
            a.set_yscale("log")
            a.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel(_("time step (1 = earliest input)"))
        ax.set_ylabel(_("‖dLoss / d x_t‖ (log scale)"))
        wax.set_title(_("weight gradients (log scale)"), fontsize=9)
        self.band = Rectangle((0, 1e-3), 1, 1e6 - 1e-3, transform=ax.get_yaxis_transform(),
                              color="#2da44e", alpha=0.12, lw=0)
        ax.add_patch(self.band)
        (self.norms,) = ax.plot([], [], "o-", ms=2.5, lw=1.6, color="#0969da")
        (self.zeros,) = ax.plot([], [], "v", ms=6, color="#cf222e", clip_on=False,
                                transform=ax.get_xaxis_transform())
        (self.weight,) = wax.plot([], [], "s", ms=7, mfc="none", color="#bc4c00")
        (self.clipped,) = wax.plot([], [], "o", ms=5, color="#1a7f37")
        self._series = {"band": self.band, "norms": self.norms, "zeros": self.zeros,
                        "weight": self.weight, "clipped": self.clipped}
        self.title = ax.set_title("", fontsize=10, loc="left")
        self._names: tuple[str, ...] = ()
        self.drawn: tuple[str, ...] = ()
        self.animate(self.band, self.norms, self.zeros, self.weight, self.clipped, self.title)
        if report is not None:
            self.update(report)

    def update(self, report, *, title: str | None = None):
        """Replace the plotted data with ``report``'s (a :class:`gradlab.reports.time.TimeReport`)."""
        s = report.time_step_norms
        n = s.size
        x = np.arange(1, n + 1)
        self.norms.set_data(x, s)
        pos = s[np.isfinite(s) & (s > 0)]
        lo, hi = (pos.min() / 4, pos.max() * 4) if pos.size else (1e-12, 1.0)
        lo, hi = place_band(self.band, s[-1], lo, hi)
        self.ax.set_ylim(*decade_limits([max(lo, 1e-45), hi]))
        self.ax.set_xlim(0.5, n + 0.5 if n <= 20 else 10 * np.ceil(n / 10) + 0.5)
        zx = x[s == 0]
        self.zeros.set_data(zx, np.full(zx.size, 0.03))
        # weight gradients, one column per weight
        w, c = report.weight_norms, report.clipped_weight_norms
        xi = np.arange(w.size)
        self.weight.set_data(xi, w)
        if report.clip is not None:
            self.clipped.set_data(xi, c)
        else:
            self.clipped.set_data([], [])
        if report.weight_names != self._names:
            self._names = report.weight_names
            self.wax.set_xticks(xi, [_short(nm) for nm in report.weight_names], rotation=60, fontsize=7)
            self.wax.set_xlim(-0.6, w.size - 0.4)
        wv = np.concatenate([w, c]) if report.clip is not None else np.asarray(w)
        self.wax.set_ylim(*decade_limits(wv, min_step=3))  # coarse: a threshold drag keeps the view
        self.title.set_color(STATUS_COLORS.get(report.status, "black"))
        self.title.set_text(title if title is not None else _(
            "{status}: step 1 / step {steps} = {ratio}").format(
                status=status_word(report.status), steps=n, ratio=f"{report.ratio:.3g}"))
        self._set_legend()
        return self

    def _set_legend(self) -> None:
        drawn = tuple(name for name, a in self._series.items()
                      if (a.get_visible() if isinstance(a, Rectangle) else len(a.get_xdata()) > 0))
        if drawn == self.drawn:
            return
        self.drawn = drawn
        if self.legend:
            legend_below(self.fig, [legend_handle(self._series[k]) for k in drawn],
                         [_(self.LABELS[k]) for k in drawn], axis_px=84)

    def static_key(self) -> tuple:
        return (self.drawn, self._names)

    def legend_labels(self) -> list[str]:
        """The labels the legend shows, in order (only the series that are drawn)."""
        return [t.get_text() for leg in self.fig.legends for t in leg.get_texts()]

    def legend_items(self) -> list[tuple[str, str, str]]:
        """``(label, color, marker)`` of each drawn series."""
        marks = {"band": "■", "norms": "━", "zeros": "▼", "weight": "□", "clipped": "●"}
        colors = {"band": "#2da44e", "norms": "#0969da", "zeros": "#cf222e", "weight": "#bc4c00",
                  "clipped": "#1a7f37"}
        return [(_(self.LABELS[k]), colors[k], marks[k]) for k in self.drawn]


def _short(name: str) -> str:
    """A tick label for a weight: ``lstm/lstm_cell/recurrent_kernel`` → ``recurrent``."""
    parts = name.split("/")
    last = parts[-1].replace("readout ", "out ").replace("recurrent_kernel", "recurrent")
    if any(p.startswith(("readout", "dense")) for p in parts[:-1]):
        last = f"out {last}"
    return last


def plot_time_report(report, *, title: str | None = None):
    """A static plot of one :class:`~gradlab.reports.time.TimeReport` (chapter 07)."""
    return TimePlot(report).update(report, title=title).fig


def plot_time_norms(curves: dict, *, title: str | None = None, figsize=(7.2, 3.4), ylabel=None):
    """Several per-time-step norm curves (``label -> norms``, earliest step first) on one log axis.

    Each curve is divided by its own last value, so all start at 1 on the right and the left
    end reads as the ratio step 1 / step T. Exact zeros are drawn as triangles on the bottom edge.
    """
    if not isinstance(curves, dict) or not curves:
        raise ValueError(f"curves must be a non-empty dict of label -> norms; got {type(curves).__name__}")
    fig, ax = new_figure(figsize)
    ax.set_yscale("log")
    floor = None
    scaled = {}
    for label, s in curves.items():
        s = np.asarray(s, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = s / s[-1]
        scaled[label] = r
        pos = r[np.isfinite(r) & (r > 0)]
        if pos.size:
            floor = pos.min() if floor is None else min(floor, pos.min())
    floor = (floor or 1e-12) / 10
    for label, r in scaled.items():
        x = np.arange(1, r.size + 1)
        (line,) = ax.plot(x, np.where(r > 0, r, np.nan), lw=1.5, label=label)
        z = x[r == 0]
        if z.size:
            ax.plot(z, np.full(z.size, floor), "v", ms=5, color=line.get_color(), clip_on=False)
    ax.axhspan(1e-3, 1e3, color="#2da44e", alpha=0.1, lw=0)
    ax.set_ylim(bottom=floor)
    ax.set_xlabel(_("time step (1 = earliest input)"))
    ax.set_ylabel(ylabel or "‖dLoss/dx_t‖ / ‖dLoss/dx_T‖")
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_cliff(w_grid, b_grid, loss, paths: dict | None = None, *, figsize=(7.6, 3.6)):
    """Pascanu's cliff: ``log10`` of the loss over ``(w, b)`` (left) and the loss along each path (right).

    ``paths`` maps a label to :func:`gradlab.topics.rnn_theory.descent_path`'s result. A path that
    jumps off the loss surface is drawn up to the panel's edge, where an arrow points the way
    it left and says at which iteration (its losses, right, show every iteration).
    """
    fig, (ax, lax) = new_figure(figsize, ncols=2, width_ratios=[1.3, 1])
    im = ax.pcolormesh(w_grid, b_grid, np.log10(np.asarray(loss) + 1e-12), shading="auto",
                       cmap="viridis")
    fig.colorbar(im, ax=ax, label=_("log10 loss"))
    ax.set_xlabel(_("w (recurrent weight)"))
    ax.set_ylabel(_("b (bias)"))
    x0, x1, y0, y1 = np.min(w_grid), np.max(w_grid), np.min(b_grid), np.max(b_grid)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    styles = [("#ffffff", "o-"), ("#ff8c00", "s-"), ("#cf222e", "^-")]
    for (label, path), (color, style) in zip((paths or {}).items(), styles, strict=False):
        p = np.asarray(path["points"], dtype=float)
        inside = (p[:, 0] >= x0) & (p[:, 0] <= x1) & (p[:, 1] >= y0) & (p[:, 1] <= y1)
        out = np.flatnonzero(~inside)
        stop = out[0] if out.size else len(p)
        ax.plot(p[:stop, 0], p[:stop, 1], style, ms=3, lw=1.2, color=color, label=label)
        if out.size and stop > 0:  # the step that leaves: an arrow from the last point inside
            a, b = p[stop - 1], p[stop]
            d = (b - a) / (np.linalg.norm(b - a) or 1.0)
            span = np.array([x1 - x0, y1 - y0])
            tip = a + d * 0.12 * np.linalg.norm(span)
            tip = np.clip(tip, [x0, y0], [x1, y1])
            ax.annotate("", xy=tip, xytext=a, arrowprops=dict(arrowstyle="->", color=color, lw=1.4))
            left = tip[0] < (x0 + x1) / 2
            ax.annotate(_("{label} leaves the panel\nat iteration {k}").format(label=label, k=int(stop)),
                        tip, textcoords="offset points", xytext=(4 if left else -4, -10), fontsize=7,
                        color=color, ha="left" if left else "right", va="top")
        lax.plot(np.arange(path["losses"].size), path["losses"], style, ms=3, color=color
                 if color != "#ffffff" else "#0969da", label=label)
    if paths:
        ax.legend(fontsize=7, loc="lower left")
        lax.set_yscale("log")
        lax.set_xlabel(_("gradient-descent iteration"))
        lax.set_ylabel(_("loss"))
        lax.legend(fontsize=7)
    return fig
