"""gradlab.plots.transformer: the chapter-09 figures draw the data they are given."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab  # noqa: F401
from gradlab.plots import transformer as P
from gradlab.reports.transformer import TransformerReport
from gradlab.train.warmup import TrainingCurve


def report(values, position="pre"):
    v = np.asarray(values, dtype=np.float64)
    return TransformerReport(position, v.size, 4.0, v, v / 2, np.ones(v.size + 1))


def curve(losses, norms, label="run", clip=None):
    losses = np.asarray(losses, dtype=np.float64)
    return TrainingCurve(label, losses, np.asarray(norms, dtype=np.float64), np.full(losses.size, 1e-3), clip)


def test_block_norms_draw_each_report():
    fig = P.plot_block_norms({"a": report([1.0, 0.5, 0.25]), "b": report([2.0, 2.0, 2.0], "post")}, which="both")
    left, right = fig.axes
    np.testing.assert_allclose(left.lines[0].get_ydata(), [1.0, 0.5, 0.25])
    np.testing.assert_allclose(right.lines[1].get_ydata(), [1.0, 1.0, 1.0])     # ffn = half the block norm
    assert left.get_yscale() == "log"
    with pytest.raises(ValueError, match="which"):
        P.plot_block_norms({"a": report([1.0])}, which="all")


def test_training_curves_and_clip_line():
    runs = [curve([4, 3, 2], [1, 2, 3], "x"), curve([4, 4, np.nan], [1, 1, np.nan], "y")]
    fig = P.plot_training_curves(runs, clip_norm=1.5)
    loss_ax, norm_ax = fig.axes
    np.testing.assert_allclose(loss_ax.lines[0].get_ydata(), [4, 3, 2])
    assert any(np.allclose(line.get_ydata(), 1.5) for line in norm_ax.lines)
    assert any(line.get_xdata()[0] == 3 for line in loss_ax.lines[2:])        # the NaN step is marked


def test_lr_sweep_marks_diverged_runs_on_the_top_edge():
    sweep = {"s": {1e-3: curve([4, 2], [1, 1]), 1e-2: curve([4, 5], [1, 9])}}
    fig = P.plot_lr_sweep(sweep)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    crosses = [line for line in ax.lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and crosses[0].get_xdata()[0] == 1e-2


def test_distribution_and_spike():
    norms = np.array([1.0, 1.1, 0.9, 5.0, 1.0, 1.2])
    fig = P.plot_grad_norm_distribution(curve(np.ones(6), norms), clip_norm=1.15)
    assert "33%" in fig.axes[1].get_title()                                  # 2 of 6 steps above 1.15
    spike = P.plot_spike(curve([3, 3, 6, 3, 3], [1, 1, 4, 1, 1]))
    assert "step 3" in spike.axes[0].get_title()


def _visible_labels(axis):
    lo, hi = sorted(axis.get_view_interval())
    ticks = [(t, lab) for t, lab in zip(axis.get_majorticklocs(), axis.get_ticklabels(), strict=True)] + \
            [(t, lab) for t, lab in zip(axis.get_minorticklocs(), axis.get_ticklabels(minor=True), strict=True)]
    return sorted((float(t), lab.get_text()) for t, lab in ticks if lo <= t <= hi and lab.get_text())


def test_a_short_log_range_labels_more_than_ten_to_the_zero():
    """Issue 29: a log axis spanning 0.45 to 1.9 showed one label, 10^0; now 0.5 and 10^0 (2× and 5× ticks)."""
    norms = np.exp(np.random.default_rng(0).normal(0.0, 0.3, 200))
    fig = P.plot_grad_norm_distribution(curve(np.ones(200), norms), clip_norm=1.5)
    fig.canvas.draw()
    labels = _visible_labels(fig.axes[0].yaxis)
    assert len(labels) >= 2 and (0.5, "0.5") in labels, labels


def test_every_decade_of_a_long_log_range_gets_a_label():
    norms = np.geomspace(1e-6, 1e2, 200)
    fig = P.plot_grad_norm_distribution(curve(np.ones(200), norms), clip_norm=1.0)
    fig.canvas.draw()
    labels = _visible_labels(fig.axes[0].yaxis)
    decades = {round(np.log10(t)) for t, _ in labels if np.isclose(np.log10(t), round(np.log10(t)))}
    assert set(range(-6, 3)) <= decades, labels
    assert all(np.isclose(np.log10(t), round(np.log10(t))) for t, _ in labels)  # no 2×/5× labels on 8 decades


def test_the_threshold_line_is_in_the_legend():
    fig = P.plot_grad_norm_distribution(curve(np.ones(50), np.linspace(0.5, 3.0, 50)), clip_norm=1.5)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["clip threshold 1.5"]
