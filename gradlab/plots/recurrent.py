"""Plots of gradients through time (chapter 07).

matplotlib only, no widgets. :func:`time_plots` is the TimeExplorer's plot spec (its page draws
it); :func:`plot_time_report` draws the same spec for a chapter cell (:mod:`gradlab.plots.view`);
:func:`plot_time_norms` and :func:`plot_cliff` are chapter figures of their own.
"""

from __future__ import annotations

import numpy as np

from ..i18n import N_, _
from ..reports.verdict import status_word
from .live import new_figure
from .view import COLORS, STATUS_COLORS, decade_limits, line_plot, view_figure

__all__ = ["plot_cliff", "plot_time_norms", "plot_time_report", "time_plots"]


#: The legend's words for each series (the page's and the picture's).
LABELS = {
    "band": N_("healthy band for step 1"),
    "norms": N_("‖dLoss/dx_t‖ per time step"),
    "zeros": N_("exactly 0 (underflow)"),
    "weight": N_("weight gradient"),
    "clipped": N_("weight gradient after clipping"),
}


def _short(name: str) -> str:
    """A tick label for a weight: ``lstm/lstm_cell/recurrent_kernel`` → ``recurrent``."""
    parts = name.split("/")
    last = parts[-1].replace("readout ", "out ").replace("recurrent_kernel", "recurrent")
    if any(p.startswith(("readout", "dense")) for p in parts[:-1]):
        last = f"out {last}"
    return last


def time_plots(report) -> list[dict]:
    """Per-time-step gradient norms (left, with the healthy band for step 1 and exact zeros on the
    bottom edge) and each weight gradient's norm, after clipping too when a clip is set (right)."""
    s = np.asarray(report.time_step_norms, dtype=np.float64)
    n = s.size
    x = np.arange(1, n + 1)
    pos = s[np.isfinite(s) & (s > 0)]
    lo, hi = (pos.min() / 4, pos.max() * 4) if pos.size else (1e-12, 1.0)
    band = None
    if np.isfinite(s[-1]) and s[-1] > 0:
        band = {"lo": float(s[-1]) * 1e-3, "hi": float(s[-1]) * 1e3, "label": _(LABELS["band"]), "color": COLORS["band"]}
        lo, hi = min(lo, band["lo"] / 2), max(hi, band["hi"] * 2)
    title = _("{status}: step 1 / step {steps} = {ratio}").format(
        status=status_word(report.status), steps=n, ratio=f"{report.ratio:.3g}")
    left = line_plot(x=x, series=[{"label": _(LABELS["norms"]), "y": s, "color": COLORS["signal"], "width": 1.6,
                                   "marker": "dot"}],
                     xlabel=_("time step (1 = earliest input)"), ylabel=_("‖dLoss / d x_t‖ (log scale)"), title=title,
                     title_color=STATUS_COLORS.get(report.status), xlim=(0.5, n + 0.5),
                     ylim=decade_limits([max(lo, 1e-45), hi]), band=band,
                     markers=[{"x": x[s == 0], "at": "bottom", "label": _(LABELS["zeros"]), "color": COLORS["zeros"]}],
                     flex=3)
    w, c = np.asarray(report.weight_norms, dtype=np.float64), np.asarray(report.clipped_weight_norms, dtype=np.float64)
    xi = np.arange(w.size)
    series = [{"label": _(LABELS["weight"]), "y": w, "color": COLORS["weight"], "line": False, "marker": "open"}]
    if report.clip is not None:
        series.append({"label": _(LABELS["clipped"]), "y": c, "color": COLORS["clipped"], "line": False, "marker": "dot"})
    right = line_plot(x=xi, series=series, xlabel="", ylabel="", title=_("weight gradients (log scale)"),
                      xlim=(-0.6, w.size - 0.4),
                      ylim=decade_limits(np.concatenate([w, c]) if report.clip is not None else w, min_step=3),
                      xticks={int(k): _short(nm) for k, nm in zip(xi, report.weight_names, strict=True)}, flex=1.25,
                      height=300)
    return [left, right]


def plot_time_report(report, *, title: str | None = None):
    """A static plot of one :class:`~gradlab.reports.time.TimeReport` (chapter 07)."""
    plots = time_plots(report)
    if title is not None:
        plots[0]["title"] = title
    return view_figure({"plots": plots})


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
