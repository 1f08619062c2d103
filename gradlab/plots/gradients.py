"""Plots of per-layer gradient norms, activations and clipping (chapters 00, 01, 04, 05).

matplotlib only, no widgets. :func:`report_plot` is the plot spec of one gradient report: the
GradientExplorer's page draws it, and :func:`plot_report` draws the same spec for a chapter
cell (:mod:`gradlab.plots.view`): one picture, whichever place shows it. The legend sits below
the axes and lists only the series that are drawn.
"""

from __future__ import annotations

import math

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.patches import Rectangle

from ..i18n import N_, _, join_list
from ..reports.verdict import status_word
from .live import new_figure
from .view import COLORS, STATUS_COLORS, decade_limits, line_plot, view_figure

__all__ = ["LABELS", "loss_scale_text", "plot_activations", "plot_clipping_2d", "plot_losses", "plot_report",
           "plot_signal_history", "report_plot"]


#: The legend's words for each series (the page's and the picture's).
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


def report_plot(report, *, show_forward: bool = True, title: str | None = None, vanish_below: float = 1e-3,
                explode_above: float = 1e3) -> dict:
    """The plot spec of one :class:`~gradlab.reports.gradients.GradientReport` (chapters 01, 05).

    The back-propagated signal, the weight-gradient norms (and after clipping, when a clip is
    set), the theory curve where the report has one, optionally the forward activation std, and
    the healthy band for the *signal*: the layer-1 signals that the verdict calls healthy (1e-3
    to 1e3 times the last layer's). Exact zeros are marked on the bottom edge, NaN/inf on the top
    edge, instead of silently disappearing from a log axis.
    """
    n = report.depth
    x = np.arange(1, n + 1)
    sig = np.asarray(report.signal_norms, dtype=np.float64)
    series = [{"label": _(LABELS["signal"]), "y": sig, "color": COLORS["signal"], "width": 2, "marker": "dot"}]
    theory = getattr(report, "predicted_signal", None)
    if theory is not None:
        series.append({"label": _(LABELS["theory"]), "y": theory, "color": COLORS["signal"], "width": 1.5,
                       "dash": [6, 4]})
    series.append({"label": _(LABELS["weight"]), "y": report.weight_norms, "color": COLORS["weight"], "width": 1.2,
                   "dash": [4, 3]})
    if report.clip is not None:
        series.append({"label": _(LABELS["clipped"]), "y": report.clipped_weight_norms, "color": COLORS["clipped"],
                       "width": 2.2})
    if show_forward:
        series.append({"label": _(LABELS["forward"]), "y": report.activation_stds, "color": COLORS["forward"],
                       "width": 1.4, "dash": [2, 3]})
    values = np.concatenate([np.asarray(s["y"], dtype=np.float64) for s in series])
    fin = values[np.isfinite(values) & (values > 0)]
    lo, hi = (fin.min() / 4, fin.max() * 4) if fin.size else (1e-12, 1.0)
    band = None
    last = float(sig[-1])
    if math.isfinite(last) and last > 0:
        band = {"lo": last * vanish_below, "hi": last * explode_above, "label": _(LABELS["band"]),
                "color": COLORS["band"]}
        lo, hi = min(lo, band["lo"] / 2), max(hi, band["hi"] * 2)
    markers = [{"x": x[sig == 0], "at": "bottom", "label": _(LABELS["zeros"]), "color": COLORS["zeros"]},
               {"x": x[~np.isfinite(sig)], "at": "top", "label": _(LABELS["nonfinite"]), "color": COLORS["nonfinite"]}]
    if title is None:
        title = _("{status}: layer 1 / layer {depth} = {ratio}").format(
            status=status_word(report.status), depth=n, ratio=f"{report.ratio:.3g}")
    return line_plot(x=x, series=series, xlabel=_("hidden layer (1 = input side)"),
                     ylabel=_("L2 norm (log scale)"), title=title, title_color=STATUS_COLORS.get(report.status),
                     xlim=(0.5, n + 0.5), ylim=decade_limits([lo, hi]), band=band, markers=markers)


def loss_scale_text(scale: float) -> str:
    """``2^15`` for a power of two, else the number (the explorer's dropdown reads the same)."""
    k = math.log2(scale) if scale > 0 else float("nan")
    return f"2^{k:g}" if k == int(k) else f"{scale:g}"


def plot_report(report, *, show_forward: bool = True, title: str | None = None):
    """A static plot of one :class:`~gradlab.reports.gradients.GradientReport` (chapters 01, 04, 05):
    the explorer's own picture (:func:`report_plot`, drawn by :func:`gradlab.plots.view.view_figure`)."""
    return view_figure({"plots": [report_plot(report, show_forward=show_forward, title=title)]})


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
    return fig


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
    return fig


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
    return fig


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
    return fig
