"""Plots of per-layer gradient norms, activations and clipping (chapters 00, 01, 04, 05).

matplotlib only, no widgets. :class:`ReportPlot` builds its figure once and updates the
artists' data in place, blitted (:class:`gradlab.plots.live.LivePlot`), which is what the live
explorer needs; :func:`plot_report` is the one-shot version for a chapter cell. Both draw the
same picture: the legend sits below the axes and lists only the series that are drawn.
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.patches import Rectangle

from ..i18n import N_, _, join_list
from ..reports.verdict import status_word
from .live import (
    LIVE_DPI,
    LivePlot,
    encode_png,
    figure_png,
    legend_below,
    legend_handle,
    new_figure,
)

__all__ = [
    "ReportPlot",
    "status_word",
    "STATUS_COLORS",
    "encode_png",
    "figure_png",
    "new_figure",
    "plot_activations",
    "plot_clipping_2d",
    "plot_losses",
    "place_band",
    "plot_signal_history",
    "plot_report",
]


def place_band(band, last: float, lo: float, hi: float, *, below: float = 1e-3,
               above: float = 1e3) -> tuple[float, float]:
    """Put the healthy ``band`` (a Rectangle) at ``[last·below, last·above]``; return the y-limits.

    The band is hidden when ``last`` is 0 or not finite; otherwise ``(lo, hi)`` is widened so
    that the whole band shows. Shared by the explorer plots of chapters 01, 05 and 07.
    """
    if not (np.isfinite(last) and last > 0):
        band.set_visible(False)
        return lo, hi
    b_lo, b_hi = last * below, last * above
    band.set_y(b_lo)
    band.set_height(b_hi - b_lo)
    band.set_visible(True)
    return min(lo, b_lo / 2), max(hi, b_hi * 2)


STATUS_COLORS = {
    "healthy": "#1a7f37",
    "vanishing": "#0550ae",
    "exploding": "#cf222e",
    "non-finite": "#8250df",
}

def _show(fig):
    """Return ``fig`` for display in a notebook cell (inline backend shows it once)."""
    return fig


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def decade_label(x: float, pos=None) -> str:
    """A decade tick as plain text, ``10⁻³⁰``: the same look as matplotlib's ``$10^{-30}$``
    without a mathtext parse per new label, which made a drag's first backgrounds 1.5-2×
    slower (issue 29). Values between decades get no label."""
    if not (np.isfinite(x) and x > 0):
        return ""
    k = math.log10(x)
    return "10" + str(round(k)).translate(_SUPERSCRIPT) if abs(k - round(k)) < 1e-9 else ""


def decade_limits(values, *, floor: float = 1e-300, min_step: int = 1) -> tuple[float, float]:
    """Whole-decade y-limits around the positive finite ``values`` (5 or 10 decades per step
    for a wide range, at least ``min_step``), so a live plot's axis, and its cached
    background, change rarely."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = (v.min(), v.max()) if v.size else (1e-12, 1.0)
    llo, lhi = np.log10(max(lo, floor)), np.log10(max(hi, floor))
    step = max(min_step, 1 if lhi - llo < 8 else 5 if lhi - llo < 30 else 10)
    lo = 10.0 ** max(np.floor(llo / step) * step, -300)
    hi = 10.0 ** min(np.ceil(lhi / step) * step, 300)
    return (lo, hi) if hi > lo else (lo, lo * 10)


class ReportPlot(LivePlot):
    """A log-scale per-layer plot of a :class:`~gradlab.reports.gradients.GradientReport`, updated in place.

    Draws the back-propagated signal, the weight-gradient norms (after clipping too, when a
    clip is set), optionally the forward activation std, the theory curve (``report.
    predicted_signal``, dashed, where the report has one) and a shaded healthy band for the
    *signal*: the range of layer-1 signals that :func:`~gradlab.reports.gradients.diagnose` calls healthy
    (1e-3 to 1e3 times the last layer's). Exact zeros (underflow) are drawn as red triangles
    just inside the bottom edge, NaN/inf as purple triangles just inside the top edge (clear
    of the title), instead of silently disappearing from a log axis. With a loss scale the
    plotted gradients are the unscaled ones, and the plot says so. The legend, below the
    axes, lists only what is drawn.

    ``live=True`` (the explorer) keeps the default size fixed; the y range snaps to whole
    decades and the x range to steps of 5 layers (past 10), so most changes, a depth drag
    included, reuse a cached background (:meth:`render_png`).
    """

    LABELS = {
        "band": N_("healthy band for the layer-1 signal"),
        "signal": N_("signal dL/dz (back-propagated)"),
        "theory": N_("signal predicted by variance propagation"),
        "weight": N_("weight gradient dL/dW"),
        "clipped": N_("dL/dW after clipping"),
        "forward": N_("forward activation std"),
        "zeros": N_("signal exactly 0 (underflow)"),
        "nonfinite": N_("NaN / inf"),
    }

    def __init__(self, report=None, *, show_forward: bool = True, figsize=None,
                 legend: bool = True, live: bool = False, vanish_below: float = 1e-3,
                 explode_above: float = 1e3):
        self.vanish_below, self.explode_above = vanish_below, explode_above
        self.live = live
        self.legend = legend
        self.fig, self.ax = new_figure(figsize or (6.9, 4.3), layout=None, dpi=LIVE_DPI if live else None)
        self.fig.subplots_adjust(left=0.1, right=0.98, bottom=0.33 if legend else 0.13, top=0.91)
        ax = self.ax
        ax.set_yscale("log")
        ax.set_xlabel(_("hidden layer (1 = input side)"))
        ax.set_ylabel(_("L2 norm (log scale)"))
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        self.band = Rectangle((0, 1e-3), 1, 1e6 - 1e-3, transform=ax.get_yaxis_transform(),
                              color="#2da44e", alpha=0.12, lw=0)
        ax.add_patch(self.band)
        (self.signal,) = ax.plot([], [], "o-", ms=3, lw=1.8, color="#0969da")
        (self.theory,) = ax.plot([], [], "--", lw=1.6, color="#0969da", alpha=0.75)
        (self.weight,) = ax.plot([], [], "s--", ms=2.5, lw=1.2, color="#bc4c00")
        (self.clipped,) = ax.plot([], [], "-", lw=2.2, color="#1a7f37", alpha=0.8)
        (self.forward,) = ax.plot([], [], ":", lw=1.4, color="#6e7781")
        # markers in axes coordinates: just inside the bottom / top edge, whatever the y range
        xmark = ax.get_xaxis_transform()
        (self.zeros,) = ax.plot([], [], "v", ms=7, color="#cf222e", transform=xmark, clip_on=False)
        (self.nonfinite,) = ax.plot([], [], "^", ms=7, color="#8250df", transform=xmark,
                                    clip_on=False)
        self._series = {"band": self.band, "signal": self.signal, "theory": self.theory,
                        "weight": self.weight, "clipped": self.clipped, "forward": self.forward,
                        "zeros": self.zeros, "nonfinite": self.nonfinite}
        self.show_forward = show_forward
        self.title = ax.set_title("", fontsize=10, loc="left")
        self.note = ax.text(0.99, 0.02, "", transform=ax.transAxes, ha="right", va="bottom",
                            fontsize=8, color="#57606a")
        ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(numticks=8))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(decade_label))
        self.drawn: tuple[str, ...] = ()
        # the note (loss scale) changes rarely: it belongs to the cached background (static_key)
        self.animate(self.band, self.theory, self.forward, self.weight, self.clipped, self.signal,
                     self.zeros, self.nonfinite, self.title)
        if report is not None:
            self.update(report)

    def update(self, report, *, show_forward: bool | None = None, title: str | None = None):
        """Replace the plotted data with ``report``'s; the figure and its artists are reused."""
        if show_forward is not None:
            self.show_forward = show_forward
        n = report.depth
        x = np.arange(1, n + 1)
        series = [report.signal_norms, report.weight_norms]
        self.signal.set_data(x, report.signal_norms)
        self.weight.set_data(x, report.weight_norms)
        theory = getattr(report, "predicted_signal", None)
        if theory is not None:
            self.theory.set_data(x, theory)
            series.append(theory)
        else:
            self.theory.set_data([], [])
        if report.clip is not None:
            self.clipped.set_data(x, report.clipped_weight_norms)
            series.append(report.clipped_weight_norms)
        else:
            self.clipped.set_data([], [])
        if self.show_forward:
            self.forward.set_data(x, report.activation_stds)
            series.append(report.activation_stds)
        else:
            self.forward.set_data([], [])
        allv = np.concatenate(series)
        finite_pos = allv[np.isfinite(allv) & (allv > 0)]
        lo, hi = (finite_pos.min() / 4, finite_pos.max() * 4) if finite_pos.size else (1e-12, 1.0)
        lo, hi = place_band(self.band, report.signal_norms[-1], lo, hi, below=self.vanish_below,
                            above=self.explode_above)
        # a live plot's x axis grows in steps of 5 layers past 10: dragging the depth reuses
        # the cached background until the next step (a full draw costs 5-10x a blitted one)
        xmax = n if (not self.live or n <= 10) else 5 * math.ceil(n / 5)
        exact = ((0.5, xmax + 0.5), decade_limits([lo, hi]))
        limits = self._draft_limits(*exact) if self.draft else exact
        self.drafted = limits != exact
        self.ax.set_xlim(*limits[0])
        self.ax.set_ylim(*limits[1])
        sig = report.signal_norms
        zero_x = x[sig == 0]
        bad_x = x[~np.isfinite(sig)]
        self.zeros.set_data(zero_x, np.full(zero_x.size, 0.03))
        self.nonfinite.set_data(bad_x, np.full(bad_x.size, 0.97))
        self.title.set_text(title if title is not None else _(
            "{status}: layer 1 / layer {depth} = {ratio}").format(
                status=status_word(report.status), depth=n, ratio=f"{report.ratio:.3g}"))
        self.title.set_color(STATUS_COLORS.get(report.status, "black"))
        scale = float(getattr(report, "loss_scale", 1.0))
        self.note.set_text("" if scale == 1 else _(
            "gradients shown unscaled (divided by the loss scale {scale})").format(
                scale=loss_scale_text(scale)))
        if not self._set_legend():
            self.drafted = True  # a draft keeps the legend it has; the exact picture updates it
        return self

    #: While the page drags a control (:attr:`LivePlot.draft`), the x axis grows in steps of
    #: this many layers, and the y axis past what the data needs by a quarter of its decades
    #: (at least 4); neither shrinks, and the legend stays as it was. A drag over depths 50-100
    #: draws 2 backgrounds, not 15 (each costs about three blitted pictures).
    DRAFT_X_STEP = 50

    def _draft_limits(self, xlim, ylim):
        """The limits of a draft: the current ones where they hold the data, else wider ones."""
        (_x0, x1), (y0, y1) = self.ax.get_xlim(), self.ax.get_ylim()
        if x1 < xlim[1]:
            x1 = self.DRAFT_X_STEP * math.ceil((xlim[1] - 0.5) / self.DRAFT_X_STEP) + 0.5
        margin = 10.0 ** max(4, math.ceil(math.log10(ylim[1] / ylim[0]) / 4))
        if y0 > ylim[0]:
            y0 = max(ylim[0] / margin, 1e-300)
        if y1 < ylim[1]:
            y1 = min(ylim[1] * margin, 1e300)
        return (xlim[0], x1), (y0, y1)

    def _set_legend(self) -> bool:
        """Show the legend of the series drawn; ``False`` when a draft kept the one it had."""
        drawn = tuple(name for name, artist in self._series.items() if _has_data(artist))
        if drawn == self.drawn:
            return True
        if self.draft and self.drawn and self.legend:
            return False
        self.drawn = drawn
        if not self.legend:
            return True
        legend_below(self.fig, [legend_handle(self._series[name]) for name in drawn],
                     [_(self.LABELS[name]) for name in drawn], axis_px=46)
        return True

    def static_key(self) -> tuple:
        return (self.drawn, self.note.get_text())

    def legend_labels(self) -> list[str]:
        """The labels the legend shows, in order (only the series that are drawn)."""
        return [t.get_text() for leg in self.fig.legends for t in leg.get_texts()]


def loss_scale_text(scale: float) -> str:
    """``2^15`` for a power of two, else the number (the explorer's dropdown reads the same)."""
    k = math.log2(scale) if scale > 0 else float("nan")
    return f"2^{k:g}" if k == int(k) else f"{scale:g}"


def _has_data(artist) -> bool:
    if isinstance(artist, Rectangle):
        return artist.get_visible()
    return len(artist.get_xdata()) > 0


def plot_report(report, *, show_forward: bool = True, title: str | None = None):
    """A static plot of one :class:`~gradlab.reports.gradients.GradientReport` (chapters 01, 05)."""
    return _show(ReportPlot(report, show_forward=show_forward).update(report, title=title).fig)


def plot_activations(z, curves, *, figsize=(8, 3.2)):
    """Activations (left) and their derivatives (right), from :func:`~gradlab.models.mlp.activation_curves`.

    A curve that runs on top of an earlier one over part of the range (relu and leaky_relu for
    z > 0, in both panels; relu' = 0 on the axis for z < 0) is drawn dashed over the earlier
    solid line, so both stay visible, and the legend says where they coincide (chapter 01).
    """
    fig, (a1, a2) = new_figure(figsize, ncols=2)
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []  # (name, f, f')
    for k, (name, (f, df)) in enumerate(curves.items()):
        f, df = np.asarray(f, dtype=float), np.asarray(df, dtype=float)
        shared = [other for other, g, _dg in drawn if np.mean(np.isclose(f, g, atol=1e-3)) > 0.2]
        style = dict(lw=1.8, ls=(0, (4, 2.5))) if shared else dict(lw=max(3.2 - 0.4 * k, 2.0))
        label = name if not shared else _("{name} (dashed: partly on top of {other})").format(
            name=name, other=join_list(shared))
        color = f"C{k}"
        a1.plot(z, f, label=label, color=color, zorder=3 + k, **style)
        a2.plot(z, df, label=label, color=color, zorder=3 + k, **style)
        drawn.append((name, f, df))
    a1.set_title("f(z)")
    a2.set_title(_("f'(z), computed with GradientTape"))
    a2.axhline(0.25, color="gray", ls=":", lw=1)
    a2.annotate(_("0.25 = max of sigmoid'"), (z[0], 0.27), fontsize=8, color="gray")
    for a in (a1, a2):
        a.set_xlabel("z")
    a1.legend(fontsize=8)
    return _show(fig)


def plot_clipping_2d(g, clipped: dict, *, threshold: float, figsize=(4.6, 4.2)):
    """Arrows for one 2-D gradient and its clipped versions, with the norm-ball (chapter 01).

    Clipped vectors that coincide (``clip_by_norm`` and ``clip_by_global_norm`` of a single
    tensor) are drawn as one two-coloured arrow, the later one thinner on top of the earlier,
    and the legend says which ones are equal, so no arrow hides another.
    """
    fig, ax = new_figure(figsize)
    g = np.asarray(g, dtype=float)
    colors = {"original": "#6e7781", "value": "#cf222e", "norm": "#0969da", "global_norm": "#1a7f37"}
    ax.annotate("", xy=g, xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=colors["original"], lw=2))
    ax.plot([], [], color=colors["original"], label=_("original {g}").format(g=np.round(g, 2)))
    drawn: list[tuple[str, np.ndarray]] = []
    for mode, v in clipped.items():
        v = np.asarray(v, dtype=float)
        same = [m for m, w in drawn if np.allclose(v, w, rtol=1e-3, atol=1e-6)]
        # a repeat is drawn thinner on top of the arrow it coincides with: both colours show
        lw = 5.0 if not same else 2.0
        ax.annotate("", xy=v, xytext=(0, 0), zorder=3 + len(same),
                    arrowprops=dict(arrowstyle="->", color=colors.get(mode, "black"), lw=lw))
        label = (_("clip_by_{mode} {v} (= clip_by_{same})").format(mode=mode, v=np.round(v, 2), same=same[0])
                 if same else f"clip_by_{mode} {np.round(v, 2)}")
        ax.plot([], [], color=colors.get(mode, "black"), lw=lw, label=label)
        drawn.append((mode, v))
    t = np.linspace(0, 2 * np.pi, 200)
    ax.plot(threshold * np.cos(t), threshold * np.sin(t), color="#0969da", lw=0.8, ls=":")
    ax.add_patch(Rectangle((-threshold, -threshold), 2 * threshold, 2 * threshold, fill=False,
                           ec="#cf222e", lw=0.8, ls=":"))
    m = max(np.abs(g).max(), threshold) * 1.15
    ax.set_xlim(-m * 0.3, m)
    ax.set_ylim(-m * 0.3, m)
    ax.set_aspect("equal")
    ax.set_xlabel(_("component 1"))
    ax.set_ylabel(_("component 2"))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(_("threshold {threshold}: dotted box = value, dotted circle = norm").format(
        threshold=f"{threshold:g}"), fontsize=9)
    return _show(fig)


def plot_losses(histories: dict, *, ylabel: str = N_("loss"), logy: bool = True, figsize=None,
                target: float | None = None, linear: bool = False, linear_top: float | None = None):
    """One line per named loss history; non-finite steps marked with a cross (chapters 01, 04).

    ``target`` draws a dashed horizontal line at that loss (the goal of an exercise).
    ``linear=True`` adds a second panel with a linear y axis, cut at ``linear_top`` (default:
    1.1 times the largest first loss), so a run that settles near 0 is not flattened by one that
    explodes; a run that leaves the panel is marked where it does. By default one panel, with a
    logarithmic y axis when ``logy``, as chapter 01 uses it.
    """
    if target is not None and not (isinstance(target, (int, float, np.floating)) and np.isfinite(target)):
        raise ValueError(f"target must be a finite number or None; got {target!r}")
    fig, axes = new_figure(figsize or ((10, 3.4) if linear else (7, 3.2)), ncols=2 if linear else 1)
    axes = list(axes) if linear else [axes]
    firsts = []
    longest = max((np.size(h) for h in histories.values()), default=1)
    for name, hist in histories.items():
        h = np.asarray(hist, dtype=float)
        steps = np.arange(1, h.size + 1)
        finite = np.isfinite(h)
        if finite.any():
            firsts.append(float(h[finite][0]))
        for k, ax in enumerate(axes):
            (line,) = ax.plot(steps, np.where(finite, h, np.nan), label=name,
                              color=f"C{list(histories).index(name)}")
            bad = ~finite
            if bad.any() and k == 0:
                first = int(np.argmax(bad))
                y = h[finite].max() if finite.any() else 1.0
                ax.plot([steps[first]], [y], "x", ms=10, mew=2, color=line.get_color())
                kind = "NaN" if np.isnan(h[first]) else "inf"
                right = steps[first] > 0.6 * longest  # keep the label inside the axes
                ax.annotate(_("{name}: {kind} from step {step}").format(name=name, kind=kind, step=steps[first]),
                            (steps[first], y),
                            textcoords="offset points", xytext=(-8 if right else 5, -12), fontsize=8,
                            color=line.get_color(), ha="right" if right else "left")
    if linear:
        top = float(linear_top) if linear_top is not None else 1.1 * max(firsts, default=1.0)
        ax = axes[1]
        ax.set_ylim(0, top)
        for name, hist in histories.items():
            h = np.asarray(hist, dtype=float)
            above = np.flatnonzero(~(h <= top))  # NaN and inf count as off the panel
            if above.size and above[0] > 0:
                color = f"C{list(histories).index(name)}"
                ax.annotate(_("{name}: off the panel from step {step}").format(name=name, step=above[0] + 1),
                            (above[0] + 1, top),
                            textcoords="offset points", xytext=(5, -12), fontsize=8, color=color)
        ax.set_title(_("linear axis"), fontsize=9)
    for k, ax in enumerate(axes):
        if target is not None:
            ax.axhline(target, color="0.3", ls="--", lw=1, label=_("target {target}").format(target=f"{target:g}"))
        if logy and k == 0:
            ax.set_yscale("log")
            if linear:
                ax.set_title(_("logarithmic axis"), fontsize=9)
        if target is not None:  # the target line sits inside the panel, clear of the x axis
            lo, hi = ax.get_ylim()
            if logy and k == 0 and target > 0:
                decades = np.log10(hi) - np.log10(min(lo, target))
                ax.set_ylim(min(lo, target / 10 ** max(0.5, 0.06 * decades)), hi)
            elif lo >= target - 0.02 * (hi - lo):
                ax.set_ylim(target - 0.06 * (hi - min(lo, target)), hi)
        ax.set_xlabel(_("step"))
        label = _(ylabel)  # the default "loss" (and any other catalog message) in the current language
        ax.set_ylabel(_("{label} (log scale)").format(label=label) if logy and k == 0 else label)
        ax.legend(fontsize=8)
    return _show(fig)


def plot_signal_history(history, *, figsize=(7.2, 3.2)):
    """Heatmap of log10 per-layer signal norms over training steps (chapter 01).

    ``history`` is a :class:`~gradlab.reports.gradients.TrainingHistory`. Exact zeros and NaN are shown in
    grey, so a layer that stops receiving any gradient is visible at a glance.
    """
    m = history.signal_matrix.T  # layers x steps
    with np.errstate(divide="ignore", invalid="ignore"):
        logm = np.where((m > 0) & np.isfinite(m), np.log10(m), np.nan)
    fig, ax = new_figure(figsize)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#bbbbbb")
    im = ax.imshow(logm, aspect="auto", origin="lower", cmap=cmap, interpolation="nearest",
                   extent=(0.5, m.shape[1] + 0.5, 0.5, m.shape[0] + 0.5))
    fig.colorbar(im, ax=ax, label=_("log10 signal norm (grey: exactly 0 or NaN)"))
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel(_("training step"))
    ax.set_ylabel(_("hidden layer (1 = input side)"))
    ax.grid(False)
    return _show(fig)
