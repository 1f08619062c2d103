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
