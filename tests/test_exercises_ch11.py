"""Chapter 11's self-checks: each accepts a right answer and rejects the typical wrong ones with
feedback that names the mistake. References are written out here (NumPy float64)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradlab.exercises import ch11
from gradlab.plots.training import plot_histograms, plot_run, plot_run_losses


# ----------------------------------------------------------------------------- exercise 1
def _ratio64(before, after):
    num = sum(np.sum((np.float64(a) - np.float64(b)) ** 2) for a, b in zip(after, before, strict=True))
    return float(np.sqrt(num) / np.sqrt(sum(np.sum(np.float64(b) ** 2) for b in before)))


def test_update_ratio_right_and_wrong():
    assert ch11.check_update_ratio(lambda b, a: _ratio64([t.numpy() for t in b], [t.numpy() for t in a]))
    kernel_only = ch11.check_update_ratio(lambda b, a: float(tf.norm(a[0] - b[0]) / tf.norm(b[0])))
    assert not kernel_only and "bias" in kernel_only.feedback
    n64 = lambda ts: np.sqrt(sum(np.sum(np.float64(t.numpy()) ** 2) for t in ts))  # noqa: E731
    d64 = lambda b, a: [np.float64(x.numpy()) - np.float64(y.numpy()) for x, y in zip(a, b, strict=True)]  # noqa: E731
    by_after = ch11.check_update_ratio(lambda b, a: float(np.sqrt(sum(np.sum(d ** 2) for d in d64(b, a))) / n64(a)))
    assert not by_after and "after the step" in by_after.feedback
    squared = ch11.check_update_ratio(lambda b, a: float(sum(np.sum(d ** 2) for d in d64(b, a)) / n64(b) ** 2))
    assert not squared and "square root" in squared.feedback
    per_tensor = ch11.check_update_ratio(lambda b, a: float(np.mean(
        [np.linalg.norm(d) / np.linalg.norm(np.float64(y.numpy())) for d, y in zip(d64(b, a), b, strict=True)])))
    assert not per_tensor and "per tensor" in per_tensor.feedback
    no_division = ch11.check_update_ratio(lambda b, a: float(np.sqrt(sum(np.sum(d ** 2) for d in d64(b, a)))))
    assert not no_division and "divide" in no_division.feedback
    # the right formula in float32: right for ordinary weights, 0/0 for weights near 1e-22
    in_float32 = ch11.check_update_ratio(
        lambda b, a: float(tf.sqrt(sum(tf.reduce_sum(tf.square(x - y)) for x, y in zip(a, b, strict=True)))
                           / tf.sqrt(sum(tf.reduce_sum(tf.square(y)) for y in b))))
    assert not in_float32 and "float64" in in_float32.feedback
    assert not ch11.check_update_ratio(lambda b, a: None)
    assert not ch11.check_update_ratio(None)
    raised = ch11.check_update_ratio(lambda b, a: 1 / 0)
    assert not raised and "ZeroDivisionError" in raised.feedback


def test_update_ratio_reference_is_the_closed_form():
    before, after = [np.array([3.0, 4.0])], [np.array([3.0, 4.5])]
    assert ch11.update_ratio_reference(before, after) == pytest.approx(0.5 / 5.0)


# ----------------------------------------------------------------------------- exercise 2
def test_dead_fraction_right_and_wrong():
    assert ch11.check_dead_fraction(lambda z: float(np.mean(np.all(z.numpy() <= 0, axis=0))))
    strict = ch11.check_dead_fraction(lambda z: float(np.mean(np.all(z.numpy() < 0, axis=0))))
    assert not strict and "exactly 0" in strict.feedback
    values = ch11.check_dead_fraction(lambda z: float(np.mean(z.numpy() <= 0)))
    assert not values and "every example" in values.feedback
    assert not ch11.check_dead_fraction(lambda z: float(np.mean(z.numpy() < 0)))
    assert not ch11.check_dead_fraction(lambda z: None)
    alive = ch11.check_dead_fraction(lambda z: 1 - float(np.mean(np.all(z.numpy() <= 0, axis=0))))
    assert not alive and "alive" in alive.feedback
    axis1 = ch11.check_dead_fraction(lambda z: float(np.mean(np.all(z.numpy() <= 0, axis=1))))
    assert not axis1 and "axis 1" in axis1.feedback
    some = ch11.check_dead_fraction(lambda z: float(np.mean(np.any(z.numpy() <= 0, axis=0))))
    assert not some and "(any)" in some.feedback
    mean = ch11.check_dead_fraction(lambda z: float(np.mean(np.mean(z.numpy(), axis=0) <= 0)))
    assert not mean and "on average" in mean.feedback


def test_dead_fraction_mistakes_are_told_apart_on_the_checks_batch():
    z = ch11._dead_batch()
    values = [round(v, 6) for v, _text in ch11._dead_mistakes(z)]
    values.remove(round(float(np.mean(z < 0)), 6))  # shares its words with the fraction of values <= 0
    assert len(set(values)) == len(values) and round(ch11.dead_fraction_reference(z), 6) not in values


# ----------------------------------------------------------------------------- exercise 3
def test_rescue_right_and_wrong():
    right = ch11.check_rescue({"learning_rate": 0.3, "clip": ("value", 0.01)})
    assert right, right.feedback
    norm = ch11.check_rescue({"learning_rate": 0.3, "clip": 1.0})
    assert not norm and "0.17" in norm.feedback
    diverges = ch11.check_rescue({"learning_rate": 0.3, "clip": None})
    assert not diverges and "diverges" in diverges.feedback
    small = ch11.check_rescue({"learning_rate": 0.03})
    assert not small and "0.1" in small.feedback
    text = ch11.check_rescue({"learning_rate": "0.3", "clip": 1.0})
    assert not text and "a number" in text.feedback
    assert not ch11.check_rescue({"learning_rate": 0.3, "depth": 3})
    assert not ch11.check_rescue([0.3, 1.0])
    bad = ch11.check_rescue({"learning_rate": 0.3, "clip": ("sideways", 1.0)})
    assert not bad and "clip" in bad.feedback


# ----------------------------------------------------------------------------- the plots
def test_plots_draw_a_report_and_refuse_a_step_outside_it():
    from gradlab.engines.training import training_run

    r = training_run(depth=3, activation="relu", initializer="he_normal", learning_rate=0.03, steps=20)
    assert r.diverged_at is None
    fig = plot_run(r)
    assert len(fig.axes) == 4 and fig.axes[2].get_yscale() == "log"
    assert len(fig.axes[1].lines) == r.depth  # one gradient-norm line per layer
    assert len(plot_run_losses([r], ["a"]).axes[0].lines) >= 1
    fig = plot_histograms(r, 1, layers=[0, 1])
    assert len(fig.axes[0].lines) == 2
    with pytest.raises(ValueError, match="step"):
        plot_histograms(r, r.steps_taken + 1)
