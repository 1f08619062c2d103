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

__all__ = ["plot_histograms", "plot_run", "plot_run_losses"]


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
