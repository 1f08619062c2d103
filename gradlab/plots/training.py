"""Pictures of a training run's report (chapter 11): the loss, per-layer gradient norms, update
ratios with the usual guide, the dead or saturated fraction, and histograms at one step.

Matplotlib only; every function takes :class:`gradlab.reports.training.TrainingReport` objects
and returns a ``Figure`` that belongs to no pyplot state. Every label goes through ``_``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..i18n import _
from ..reports.training import GRAD_LOG_EDGES, RATIO_GUIDE, TrainingReport
from .view import COLORS, color_ramp, line_plot, log_limits

__all__ = ["frame_steps", "histogram_layers", "plot_histograms", "plot_run", "plot_run_losses", "training_plots"]


def _layer_colors(n: int):
    cmap = colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


def _steps(report: TrainingReport) -> np.ndarray:
    return np.arange(1, report.steps_taken + 1)


def plot_run(report: TrainingReport, title: str | None = None) -> Figure:
    """Four panels over the steps: loss, gradient norm per layer, update ratio per layer (the 1e-3
    guide dashed), dead/saturated fraction per layer. Layers go from dark (input side) to light."""
    fig = Figure(figsize=(12, 6.4), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True)
    steps = _steps(report)
    colors = _layer_colors(report.depth)
    ax = axes[0, 0]
    ax.plot(steps, report.loss, color="black")
    ax.set_yscale("log")
    ax.set_title(_("loss (before each step)"))
    with np.errstate(divide="ignore", invalid="ignore"):
        for key, ax, label in (("grad_norms", axes[0, 1], _("gradient norm per layer")),
                               ("update_ratios", axes[1, 0], _("update ratio ‖Δθ‖/‖θ‖ per layer"))):
            values = getattr(report, key)
            for layer in range(report.depth):
                v = values[:, layer]
                ax.plot(steps, np.where(v > 0, v, np.nan), color=colors[layer], lw=1)
            ax.set_yscale("log")
            ax.set_title(label)
    axes[1, 0].axhline(RATIO_GUIDE, color="red", ls="--", lw=1, label=_("guide ≈ 1e-3"))
    axes[1, 0].legend(loc="lower right", fontsize=8)
    ax = axes[1, 1]
    for layer in range(report.depth):
        if np.any(np.isfinite(report.dead_fraction[:, layer])):
            ax.plot(steps, report.dead_fraction[:, layer], color=colors[layer], lw=1)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(_("dead or saturated fraction per layer"))
    for ax in axes[1]:
        ax.set_xlabel(_("step"))
    if report.diverged_at is not None:
        for ax in axes.ravel():
            ax.axvline(report.diverged_at, color="red", lw=0.8, alpha=0.6)
    fig.suptitle(title or report.status_line[:110], fontsize=10)
    return fig


def plot_run_losses(reports: Sequence[TrainingReport], labels: Sequence[str], title: str = "") -> Figure:
    """The loss curves of several runs on one log axis (a diverged run ends with a cross)."""
    fig = Figure(figsize=(7.5, 3.6), layout="constrained")
    ax = fig.subplots()
    for r, label in zip(reports, labels, strict=True):
        line = ax.plot(_steps(r), r.loss, label=label)[0]
        if r.diverged_at is not None:
            finite = np.isfinite(r.loss)
            ax.plot(np.flatnonzero(finite)[-1] + 1, r.loss[finite][-1], "x", color=line.get_color(), ms=10)
    ax.set_yscale("log")
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("loss"))
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def plot_histograms(report: TrainingReport, step: int, layers: Sequence[int] | None = None) -> Figure:
    """At ``step`` (1-based): each chosen layer's output histogram and its gradient's ``log10 |g|`` histogram."""
    if not 1 <= step <= report.steps_taken:
        raise ValueError(f"step must be 1 to {report.steps_taken}; got {step}")
    layers = list(range(report.depth)) if layers is None else list(layers)
    colors = _layer_colors(report.depth)
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    centers = (GRAD_LOG_EDGES[:-1] + GRAD_LOG_EDGES[1:]) / 2
    for layer in layers:
        edges = report.act_edges[layer]
        mid = (edges[:-1] + edges[1:]) / 2
        a1.plot(mid, report.act_hist[step - 1, layer], color=colors[layer], lw=1, label=report.layer_names[layer])
        a2.plot(centers, report.grad_hist[step - 1, layer], color=colors[layer], lw=1)
    a1.set_title(_("layer outputs at step {step} (ends: everything beyond)").format(step=step))
    a2.set_title(_("log10 |gradient| at step {step}").format(step=step))
    a1.set_ylabel(_("count"))
    if len(layers) <= 6:
        a1.legend(fontsize=7)
    return fig


# --------------------------------------------------------------------------- the explorer's view
def histogram_layers(report: TrainingReport) -> list[int]:
    """The layers whose histograms the explorer shows: the first, the middle and the last one with
    an activation (all layers where none has one)."""
    with_act = [i for i, a in enumerate(report.activations) if a is not None] or list(range(report.depth))
    return sorted({with_act[0], with_act[(len(with_act) - 1) // 2], with_act[-1]})


def _per_layer(report: TrainingReport, values: np.ndarray, colors, *, labelled: set[int]) -> list[dict]:
    return [{"label": report.layer_names[i] if i in labelled else "", "y": values[:, i], "color": colors[i],
             "width": 1.2} for i in range(report.depth) if np.any(np.isfinite(values[:, i]))]


def frame_steps(report: TrainingReport, every: int = 1) -> list[int]:
    """The steps (1-based) the view holds histograms for: every ``every``-th one, the first and the last."""
    return sorted({1, *range(every, report.steps_taken + 1, every), report.steps_taken})


def training_plots(report: TrainingReport, every: int = 1) -> list[dict]:
    """The TrainingExplorer's plot specs (:mod:`gradlab.plots.view`): over the steps the loss,
    the gradient norm, the update ratio (with the guide) and the dead or saturated fraction per
    layer, each with a cursor at the step slider's value; at that step, the histograms of the
    layers of :func:`histogram_layers`. One frame per step of :func:`frame_steps` (the view's
    ``frames``; every step unless ``every`` thins them, as the book site does)."""
    taken = report.steps_taken
    steps = _steps(report).astype(np.float64)
    # a run coming in keeps its whole width; a finished one (or one that diverged) fills the axis
    xlim = (0.5, (report.steps if report.partial else taken) + 0.5)
    colors = color_ramp(report.depth)
    shown = histogram_layers(report)
    labelled = {0, report.depth - 1, *shown}
    cursor = COLORS["muted"]
    common = dict(x=steps, xlim=xlim, xlabel=_("step"), cursor=cursor, height=200)
    markers = []
    if report.diverged_at is not None:
        markers = [{"x": [report.diverged_at], "at": "top", "label": _("loss not finite"),
                    "color": COLORS["nonfinite"]}]
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = line_plot(series=[{"label": _("loss"), "y": report.loss, "color": COLORS["forward"], "width": 1.8}],
                         ylabel=_("loss"), title=_("loss (before each step)"), markers=markers,
                         ylim=log_limits(report.loss, pad=1.5), **common)
        norms = line_plot(series=_per_layer(report, report.grad_norms, colors, labelled=labelled),
                          ylabel="‖g‖", title=_("gradient norm per layer"), ylim=log_limits(report.grad_norms),
                          **common)
        guide = {"label": _("guide ≈ 1e-3"), "y": np.full(taken, RATIO_GUIDE), "color": COLORS["zeros"],
                 "dash": [6, 4], "width": 1.2}
        ratios = line_plot(series=[*_per_layer(report, report.update_ratios, colors, labelled=labelled), guide],
                           ylabel="‖Δθ‖/‖θ‖", title=_("update ratio ‖Δθ‖/‖θ‖ per layer"),
                           ylim=log_limits(np.concatenate([report.update_ratios.ravel(), [RATIO_GUIDE]])), **common)
    dead = line_plot(series=_per_layer(report, report.dead_fraction, colors, labelled=labelled), ylog=False,
                     ylabel=_("fraction"), title=_("dead or saturated fraction per layer"), ylim=(-0.03, 1.03),
                     **common)
    plots = [loss, norms, ratios, dead]
    at = [t - 1 for t in frame_steps(report, every)]
    step_titles = [str(t + 1) for t in at]
    acts = []
    for i in shown:
        edges = report.act_edges[i]
        acts.append({"label": report.layer_names[i], "x": (edges[:-1] + edges[1:]) / 2, "y": None,
                     "frames": [report.act_hist[t, i] for t in at], "color": colors[i], "width": 1.5})
    top = float(np.max(report.act_hist[:, shown])) if taken else 1.0
    xs = np.concatenate([a["x"] for a in acts])
    plots.append(line_plot(
        x=xs, series=acts, ylog=False, xlabel=_("layer output"), ylabel=_("count"), ylim=(0.0, 1.05 * top or 1.0),
        xlim=(float(xs.min()), float(xs.max())), height=200,
        titles=[_("layer outputs at step {step}").format(step=s) for s in step_titles]))
    centers = (GRAD_LOG_EDGES[:-1] + GRAD_LOG_EDGES[1:]) / 2
    grads = [{"label": report.layer_names[i], "y": None, "frames": [report.grad_hist[t, i] for t in at],
              "color": colors[i], "width": 1.5} for i in shown]
    top = float(np.max(report.grad_hist[:, shown])) if taken else 1.0
    zeros = [", ".join(str(int(report.grad_zeros[t, i])) for i in shown) for t in at]
    plots.append(line_plot(
        x=centers, series=grads, ylog=False, xlabel="log₁₀ |g|", ylabel=_("count"), ylim=(0.0, 1.05 * top or 1.0),
        xlim=(float(GRAD_LOG_EDGES[0]), float(GRAD_LOG_EDGES[-1])), height=200,
        titles=[_("log₁₀ |g| at step {step} (zeros: {zeros})").format(step=s, zeros=z)
                for s, z in zip(step_titles, zeros, strict=True)]))
    return plots
