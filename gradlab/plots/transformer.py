"""Plots of a Transformer's per-block gradients and of its first training steps (chapter 09).

matplotlib only, no widgets (the TransformerExplorer draws in the page, from plot specs:
:mod:`gradlab.plots.view`). The functions are one-shot figures for chapter cells: per-block norms under several conditions, training curves,
the Tuning Playbook's learning-rate sweep, the distribution of gradient norms with a clip
threshold, and a loss spike with the gradient norm around it.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import Formatter, LogFormatterSciNotation, LogLocator

from ..i18n import _
from .live import new_figure

__all__ = ["plot_block_norms", "plot_grad_norm_distribution", "plot_lr_sweep",
           "plot_spike", "plot_training_curves"]

WARMUP_COLOR, PLAIN_COLOR = "#0969da", "#bc4c00"


def _steps(curve) -> np.ndarray:
    return np.arange(1, curve.losses.size + 1)


class _ShortRangeFormatter(Formatter):
    """Labels the 2× and 5× ticks of a log axis only while it spans fewer than two decades.

    On a short range (0.3 to 3) a log axis has one decade tick, 10^0, and nothing else to read
    a value from; on a long one these labels would crowd the decades.
    """

    def __call__(self, x, pos=None) -> str:
        lo, hi = sorted(self.axis.get_view_interval())
        if not (x > 0 and lo > 0 and math.log10(hi / lo) < 2):
            return ""
        exponent = math.floor(math.log10(x) + 1e-9)
        coefficient = round(x / 10 ** exponent)
        return f"${coefficient}\\times10^{{{exponent}}}$" if exponent not in (0, 1, -1) else f"{x:g}"


def _plain_log(*axes) -> None:
    """Log axes with a label at every decade shown (up to 30), and at 2× and 5× on a short range."""
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                axis.set_major_locator(LogLocator(base=10, numticks=30))
                axis.set_major_formatter(LogFormatterSciNotation())
                axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0), numticks=30))
                axis.set_minor_formatter(_ShortRangeFormatter())


def _limits(values, pad: float = 1.15) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return (0.0, float(v.max()) * pad) if v.size else (0.0, 1.0)


def plot_block_norms(reports: dict, *, which: str = "block", title: str | None = None, figsize=(7.2, 3.4)):
    """One line per labelled :class:`~gradlab.reports.transformer.TransformerReport`: each block's gradient norm.

    ``which="block"``: the norm over all of the block's variables; ``"ffn"``: its second FFN
    kernel; ``"both"``: two panels. Log scale, block 1 nearest the input.
    """
    if which not in ("block", "ffn", "both"):
        raise ValueError(f"which must be 'block', 'ffn' or 'both'; got {which!r}")
    kinds = ("block", "ffn") if which == "both" else (which,)
    fig, axes = new_figure((figsize[0] * (1.6 if which == "both" else 1), figsize[1]), ncols=len(kinds))
    axes = np.atleast_1d(axes)
    for ax, kind in zip(axes, kinds, strict=True):
        for k, (label, report) in enumerate(reports.items()):
            values = report.layer_grad_norms if kind == "block" else report.ffn_grad_norms
            ax.plot(np.arange(1, values.size + 1), values, "o-", ms=3.5, color=f"C{k}", label=label)
        ax.set_yscale("log")
        ax.set_xlabel(_("block (1 = nearest the input)"))
        ax.set_ylabel(_("gradient norm (log scale)"))
        ax.set_title(_("all of each block's variables") if kind == "block" else _("second FFN kernel of each block"),
                     fontsize=9)
        ax.legend(fontsize=7.5)
        _plain_log(ax)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_training_curves(curves, *, clip_norm: float | None = None, title: str | None = None, figsize=(9.0, 3.2)):
    """Loss (left) and global gradient norm before clipping (right, log scale) per step, one line per curve."""
    fig, (loss_ax, norm_ax) = new_figure(figsize, ncols=2)
    for k, curve in enumerate(curves):
        loss_ax.plot(_steps(curve), curve.losses, lw=1.2, color=f"C{k}", label=curve.label)
        norm_ax.plot(_steps(curve), curve.grad_norms, lw=0.9, color=f"C{k}")
        bad = np.flatnonzero(~np.isfinite(curve.losses))
        if bad.size:
            loss_ax.axvline(bad[0] + 1, color=f"C{k}", ls=":", lw=1)
    if clip_norm is not None:
        norm_ax.axhline(clip_norm, color="0.3", ls=":", lw=1.2, label=_("clip threshold {value}").format(
            value=f"{clip_norm:.3g}"))
        norm_ax.legend(fontsize=7.5)
    loss_ax.set_xlabel(_("training step"))
    loss_ax.set_ylabel(_("loss"))
    loss_ax.legend(fontsize=7)
    norm_ax.set_yscale("log")
    norm_ax.set_xlabel(_("training step"))
    norm_ax.set_ylabel(_("global gradient norm (log scale)"))
    _plain_log(norm_ax)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_lr_sweep(sweeps: dict, *, title: str | None = None, figsize=(6.4, 3.4)):
    """The Tuning Playbook's learning-rate axis plot: final loss against the peak learning rate.

    ``sweeps`` maps a label (e.g. "without warmup") to ``{learning_rate: TrainingCurve}``. A
    run that diverged (non-finite, or ending above its first loss) is drawn as a cross on the
    top edge, where the Playbook calls a trial infeasible.
    """
    fig, ax = new_figure(figsize)
    top = 1.0
    for sweep in sweeps.values():
        for c in sweep.values():
            if np.isfinite(c.losses[0]):
                top = max(top, float(c.losses[0]) * 1.1)
    for k, (label, sweep) in enumerate(sweeps.items()):
        lrs = np.array(sorted(sweep))
        final = np.array([sweep[lr].final_loss for lr in lrs])
        bad = np.array([sweep[lr].diverged for lr in lrs])
        ax.plot(lrs, np.where(bad, np.nan, final), "o-", color=f"C{k}", label=label)
        if bad.any():
            ax.plot(lrs[bad], np.full(bad.sum(), top), "x", ms=9, mew=2, color=f"C{k}", clip_on=False)
    ax.set_xscale("log")
    ax.set_ylim(0, top)
    ax.set_xlabel(_("peak learning rate (log scale)"))
    ax.set_ylabel(_("loss at the end of the run"))
    ax.set_title(title or _("a cross on the top edge: the run diverged"), fontsize=9)
    ax.legend(fontsize=8)
    return fig


def plot_grad_norm_distribution(curve, *, clip_norm: float, figsize=(9.0, 3.2)):
    """The gradient norms of a run against the step (left) and as a histogram (right), with the threshold."""
    norms = np.asarray(curve.grad_norms, dtype=np.float64)
    norms = norms[np.isfinite(norms)]
    fig, (ax, hax) = new_figure(figsize, ncols=2, width_ratios=[1.6, 1])
    ax.plot(np.arange(1, norms.size + 1), norms, lw=0.9, color="#0969da")
    ax.axhline(clip_norm, color="#cf222e", ls=":", lw=1.4,
               label=_("clip threshold {value}").format(value=f"{clip_norm:.3g}"))
    ax.legend(fontsize=8, loc="upper right")
    ax.set_yscale("log")
    ax.set_xlabel(_("training step"))
    ax.set_ylabel(_("gradient norm before clipping (log scale)"))
    bins = np.geomspace(norms.min(), norms.max(), 30) if norms.min() > 0 else 30
    hax.hist(norms, bins=bins, color="#0969da", alpha=0.75)
    hax.set_xscale("log")
    hax.axvline(clip_norm, color="#cf222e", ls=":", lw=1.4)
    share = float(np.mean(norms > clip_norm)) if norms.size else 0.0
    hax.set_title(_("threshold {t}: {p}% of the steps above it").format(t=f"{clip_norm:.3g}",
                                                                       p=f"{100 * share:.0f}"), fontsize=9)
    hax.set_xlabel(_("gradient norm (log scale)"))
    hax.set_ylabel(_("number of steps"))
    _plain_log(ax, hax)
    return fig


def plot_spike(curve, *, at: int | None = None, window: int = 40, figsize=(7.2, 4.0)):
    """Loss (top) and gradient norm (bottom) around step ``at`` (default: the largest loss jump)."""
    losses = np.asarray(curve.losses, dtype=np.float64)
    if at is None:
        jumps = np.diff(losses)
        at = int(np.nanargmax(jumps)) + 2 if jumps.size else 1
    lo, hi = max(1, at - window), min(losses.size, at + window)
    steps = np.arange(lo, hi + 1)
    fig, (ax, nax) = new_figure(figsize, nrows=2, sharex=True)
    ax.plot(steps, losses[lo - 1:hi], lw=1.3, color="#0969da")
    nax.plot(steps, curve.grad_norms[lo - 1:hi], lw=1.1, color="#bc4c00")
    for a in (ax, nax):
        a.axvline(at, color="0.4", ls=":", lw=1)
    ax.set_ylabel(_("loss"))
    nax.set_ylabel(_("gradient norm"))
    nax.set_xlabel(_("training step"))
    ax.set_title(_("step {step}: the loss jumps").format(step=at), fontsize=9)
    return fig
