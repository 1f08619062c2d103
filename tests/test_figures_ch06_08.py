"""The two figures of chapters 06 and 08: what they draw matches the numbers they are given.

The expected lengths are computed here independently (NumPy, float64) from the same inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.plots.replicas import plot_clip_placement
from gradlab.plots.traps import plot_where_trap


def test_where_trap_marks_every_nan_and_only_those():
    x = np.linspace(-1.0, 1.0, 21)
    value = np.where(x > 0, np.sqrt(np.abs(x)), 0.0)
    naive = np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1.0)), np.nan)  # NaN on x <= 0: 11 points
    fixed = np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1.0)), 0.0)
    fig = plot_where_trap(x, value, {"single where": naive, "double where": fixed})
    titles = [ax.get_title() for ax in fig.axes]
    assert "NaN at 11 of 21 points" in titles[1]
    assert "finite everywhere" in titles[2]
    crosses = [line for line in fig.axes[1].lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and len(crosses[0].get_xdata()) == int(np.sum(x <= 0))
    assert not [line for line in fig.axes[2].lines if line.get_marker() == "x"]  # nothing drawn that is not there
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["gradient"]


def test_where_trap_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="gradient 'g' has shape"):
        plot_where_trap(np.zeros(3), np.zeros(3), {"g": np.zeros(4)})
    with pytest.raises(ValueError, match="at least one"):
        plot_where_trap(np.zeros(3), np.zeros(3), {})


def test_clip_placement_draws_true_lengths_and_the_right_ratio():
    rng = np.random.default_rng(0)
    replicas = [[rng.normal(size=(3, 2)), rng.normal(size=2)], [3 * rng.normal(size=(3, 2)), 3 * rng.normal(size=2)]]
    flat = [np.concatenate([np.ravel(a) for a in r]) for r in replicas]
    c = 0.5
    total = flat[0] + flat[1]
    before = sum(v * min(1.0, c / np.linalg.norm(v)) for v in flat)
    after = total * min(1.0, c / np.linalg.norm(total))
    placement = gl.train.distribute.clip_placement(replicas, c)
    assert placement.ratio == pytest.approx(np.linalg.norm(before) / np.linalg.norm(after), rel=1e-12)
    fig = plot_clip_placement(placement)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"sum = one device: norm {np.linalg.norm(total):.3g}" in labels
    assert f"clip before the all-reduce: norm {np.linalg.norm(before):.3g}" in labels
    assert f"clip after the all-reduce: norm {np.linalg.norm(after):.3g}" in labels
    assert f"{np.linalg.norm(before) / np.linalg.norm(after):.3g}×" in ax.get_title()
    # the arrows are drawn in the plane of the two replica gradients: their drawn lengths are the true norms
    tips = sorted(np.hypot(*a.xy) for a in ax.texts)
    want = sorted(np.linalg.norm(v) for v in (*flat, total, after, before))
    np.testing.assert_allclose(tips, want, rtol=1e-9)


def test_clip_placement_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least 2 replicas"):
        gl.train.distribute.clip_placement([[np.ones(2)]], 1.0)
    with pytest.raises(ValueError, match="clip must be None or a number > 0"):
        gl.train.distribute.clip_placement([[np.ones(2)], [np.ones(2)]], 0.0)
    with pytest.raises(ValueError, match="placement must be"):
        plot_clip_placement([[np.ones(2)], [np.ones(2)]])
