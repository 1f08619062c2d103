"""Issue 29, the expert's third pass: findings with their figures before and after the fix.

* check_gradient: a NaN/inf from the tape (tf.norm at 0) passed as "ok" (NaN compares False
  with every bound); sin at 1e6 was called a kink and sin at [1e6, 3e7] wrong, because the step
  ε^(1/3)·|x| (8 and 256) is far larger than sin's own scale.
* dead units: a smooth activation far below 0 (bias -100) passes exactly 0 gradient in float32,
  yet the finder skipped elu/gelu/selu/silu/softplus; relu6 stuck above 6 was not counted; a
  Lambda(tf.nn.relu) layer was not seen.
* advice: gelu with He initialization vanishing at depth 50 got no option to try.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab.reports import units
from gradlab.topics.gradcheck import check_gradient

X = tf.random.stateless_normal([64, 8], [1, 1])
Y = tf.random.stateless_normal([64, 1], [1, 2])


# ----------------------------------------------------------------------------- check_gradient
def test_a_nan_gradient_is_wrong_not_ok():
    r = check_gradient(tf.linalg.norm, tf.constant([0.0, 0.0], tf.float64))
    assert np.isnan(r.theoretical[0]).all()  # the tape's own answer at 0: 0/0
    assert r.verdict == "wrong" and not r.ok and r.wrong_entries == 2
    assert any("NaN/inf" in n for n in r.notes)


def test_f_not_finite_within_a_step_is_not_verified():
    r = check_gradient(tf.sqrt, tf.constant([0.0, 1.0], tf.float64))
    assert not r.ok and r.verdict == "wrong"


@pytest.mark.parametrize("xs", [[1e6], [1e6, 3e7], [1e5]])
def test_large_inputs_of_a_fast_function_are_verified(xs):
    r = check_gradient(tf.sin, tf.constant(xs, tf.float64))
    assert r.verdict == "ok" and r.max_rel_error < 1e-8
    np.testing.assert_allclose(np.diag(r.numerical[0]), np.cos(xs), rtol=1e-8)


def test_a_kink_at_a_large_input_is_still_a_kink():
    r = check_gradient(lambda x: tf.nn.relu(x - 1e6), tf.constant([1e6], tf.float64))
    assert r.verdict == "kink"


def test_a_wrong_gradient_at_a_large_input_is_still_wrong():
    @tf.custom_gradient
    def bad(x):
        return tf.sin(x), lambda dy: dy * tf.cos(x) * 1.01
    r = check_gradient(bad, tf.constant([1e6, 3e7], tf.float64))
    assert r.verdict == "wrong" and r.wrong_entries == 2


def test_an_explicit_delta_is_kept():
    r = check_gradient(tf.sin, tf.constant([1e6], tf.float64), delta=1e-3)
    assert float(r.steps[0].ravel()[0]) == 1e-3


# ----------------------------------------------------------------------------- dead units
def _dense(activation, bias, width=32):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(width, activation,
                             bias_initializer=keras.initializers.Constant(bias)), keras.layers.Dense(1)])


def _kernel_gradient(model):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(X) - Y))
    return tape.gradient(loss, model.layers[0].kernel).numpy()


@pytest.mark.parametrize("activation", ["elu", "selu", "gelu", "silu", "softplus"])
def test_smooth_units_far_below_zero_are_dead(activation):
    model = _dense(activation, -100.0)
    assert not np.any(_kernel_gradient(model))  # the independent view: float32 rounds the derivative to 0
    report = gl.inspect_training_step(model, X, Y)
    assert report.status == "dead-units" and "dead-units" in report.problem_kinds
    p = next(p for p in report.problems if p.kind == "dead-units")
    assert "32 of 32" in p.finding and "ELU" not in p.fix


@pytest.mark.parametrize("activation", ["elu", "selu", "gelu", "silu", "softplus"])
def test_smooth_units_at_minus_10_still_learn(activation):
    model = _dense(activation, -10.0)
    assert np.count_nonzero(_kernel_gradient(model)) == 8 * 32
    assert "dead-units" not in gl.inspect_training_step(model, X, Y).problem_kinds


def test_relu6_units_stuck_above_6_are_dead():
    model = _dense("relu6", 100.0)
    assert not np.any(_kernel_gradient(model))
    report = gl.inspect_training_step(model, X, Y)
    assert report.status == "dead-units"


def test_a_lambda_relu_layer_is_seen():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, bias_initializer=keras.initializers.Constant(-10)),
                              keras.layers.Lambda(tf.nn.relu), keras.layers.Dense(1)])
    assert not np.any(_kernel_gradient(model))
    assert gl.inspect_training_step(model, X, Y).status == "dead-units"


@pytest.mark.parametrize("activation", ["gelu", "elu", "selu"])
def test_fresh_smooth_deep_nets_raise_no_alarm(activation):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(32, activation, kernel_initializer="he_normal")
                                                   for _i in range(8)], keras.layers.Dense(1)])
    from gradlab import core
    with tf.GradientTape() as tape, core.tap_layers(model, tape) as taps:
        model(X, training=True)
    found = units.dead_fractions(taps.calls)
    assert len(found) == 8 and all(d.dead == 0 for d in found) and not units.dead_layers(found)


# ----------------------------------------------------------------------------- advice
@pytest.mark.parametrize("initializer", ["he_normal", "he_uniform"])
def test_gelu_with_he_vanishing_gets_relu_which_keeps_the_signal(initializer):
    from gradlab.engines.mlp import MLPGradientEngine
    from gradlab.reports.advice import gradient_advice
    engine = MLPGradientEngine(max_depth=50)
    report = engine.report(50, "gelu", initializer)
    assert report.status == "vanishing"
    settings = dict(depth=50, activation="gelu", initializer=initializer, clip_mode="off", width=64)
    advice = gradient_advice(report, settings)
    assert [(s.control, s.value, s.claim) for s in advice.suggestions] == [("activation", "relu", "critical")]
    after = engine.report(50, "relu", initializer)
    assert after.status == "healthy" and abs(np.log(after.gain)) < abs(np.log(report.gain))
