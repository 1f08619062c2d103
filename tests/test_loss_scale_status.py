"""A mixed_float16 model whose only trouble is loss-scale overflow reads as that (issue 38, last finding).

At Keras's initial loss scale (2**15) a fresh mixed_float16 model with a large loss (targets of
size 100 here: dLoss/dy_pred * 32768 is far above float16's 65504) gets inf/NaN scaled
gradients. A LossScaleOptimizer skips that step and halves its scale; nothing is wrong with the
model. The report used to read "non-finite" with "lower the weight scale or the learning rate"
and showed NaN in the columns it says are the unscaled gradients. Now the status follows that
problem, and the gradients are those of the scale the optimizer settles on, checked here
against plain GradientTape loops written without gradlab. A real NaN still reads non-finite.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab import core
from gradlab.i18n import get_language, set_language
from gradlab.reports.verdict import status_word

rng = np.random.default_rng(0)
X = rng.normal(size=(32, 8)).astype("float32")
Y_UNIT = rng.normal(size=(32, 1)).astype("float32")
Y_LARGE = (100.0 * rng.normal(size=(32, 1))).astype("float32")
INITIAL = 2.0 ** 15  # Keras 3's LossScaleOptimizer initial_scale


def _mixed(depth=3, activation="relu", seed=0, initializer="glorot_uniform", compiled=True):
    """A fresh model built under mixed_float16 (output layer in float32); the policy is put back."""
    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential(
            [keras.Input((8,))]
            + [keras.layers.Dense(16, activation=activation, kernel_initializer=initializer) for _ in range(depth)]
            + [keras.layers.Dense(1, dtype="float32")])
        if compiled:
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model


def _tape_grads(model, x, y, scale):
    """Plain tape: the MSE scaled by ``scale`` inside the tape, gradients unscaled in float64."""
    with tf.GradientTape() as tape:
        pred = tf.cast(model(x, training=True), tf.float32)
        loss = tf.reduce_mean(tf.square(y - pred)) * scale
    return [tf.cast(g, tf.float64).numpy() / scale for g in tape.gradient(loss, model.trainable_variables)]


def _first_finite_halving(model, x, y, scale):
    """What a LossScaleOptimizer does on this batch, step after skipped step: halve until finite."""
    while scale >= 1:
        grads = _tape_grads(model, x, y, scale)
        if all(np.isfinite(g).all() for g in grads):
            return scale, grads
        scale /= 2
    return None, None


def _float32_grads(model, x, y):
    """The float32 gradients of the unscaled loss, from a float32 copy of the same weights."""
    keras.utils.set_random_seed(0)
    twin = keras.Sequential([keras.Input((8,))] + [keras.layers.Dense(layer.units, activation=layer.activation)
                                                   for layer in model.layers])
    twin.set_weights(model.get_weights())
    return _tape_grads(twin, x, y, 1.0)


def _norm(a) -> float:
    return float(np.sqrt(np.sum(np.square(a))))


def test_the_initial_scale_overflows_only_for_the_large_loss():
    model = _mixed()
    assert not all(np.isfinite(g).all() for g in _tape_grads(model, X, Y_LARGE, INITIAL))
    assert all(np.isfinite(g).all() for g in _tape_grads(model, X, Y_UNIT, INITIAL))
    report = gl.inspect_training_step(model, X, Y_UNIT)
    assert report.loss_scale == INITIAL and report.settled_loss_scale is None
    assert "loss-scale-overflow" not in report.problem_kinds and report.status != "loss-scale-overflow"


def test_overflow_alone_reads_as_the_overflow_not_non_finite():
    model = _mixed()
    settled, want = _first_finite_halving(model, X, Y_LARGE, INITIAL)
    assert settled is not None and settled < INITIAL  # measured: 2048 on TF 2.21 / Keras 3, 4 skipped steps
    report = gl.inspect_training_step(model, X, Y_LARGE)

    assert report.status == "loss-scale-overflow"
    assert report.problem_kinds == ("loss-scale-overflow",)
    halvings = round(np.log2(INITIAL / settled))
    for text in (report.message, report.problems[0].finding):
        assert "32768" in text and f"settles on the loss scale {settled:g}" in text
        assert f"skips {halvings} steps" in text
        assert "weight scale" not in text and "NaN" not in text
    assert "lower the weight scale" not in str(report)
    assert report.loss_scale == INITIAL and report.settled_loss_scale == settled
    assert f"loss scale 32768 overflows float16; the gradients above are unscaled from the loss scale {settled:g}" \
        in str(report)


def test_the_reported_gradients_are_the_unscaled_ones_at_the_settled_scale():
    model = _mixed()
    _settled, at_settled = _first_finite_halving(model, X, Y_LARGE, INITIAL)
    exact = _float32_grads(model, X, Y_LARGE)
    report = gl.inspect_training_step(model, X, Y_LARGE)

    assert all(v.grad_finite and np.isfinite(v.grad_norm) for v in report.variables)
    assert all(np.isfinite(layer.signal) and np.isfinite(layer.weight_grad) for layer in report.layers)
    assert "nan" not in str(report).lower().split("problems")[0]
    got = [v.grad_norm for v in report.variables]
    np.testing.assert_allclose(got, [_norm(g) for g in at_settled], rtol=1e-3)  # the same float16 pass
    np.testing.assert_allclose(got, [_norm(g) for g in exact], rtol=2e-2)       # float16 rounding only
    assert report.global_norm == pytest.approx(np.sqrt(sum(np.sum(g * g) for g in exact)), rel=2e-2)


def test_overflow_changes_nothing_in_the_model():
    model = _mixed()
    model.optimizer.build(model.trainable_variables)
    weights = [v.numpy().copy() for v in model.variables]
    slots = [v.numpy().copy() for v in model.optimizer.variables]
    report = gl.inspect_training_step(model, X, Y_LARGE)
    assert report.status == "loss-scale-overflow"
    assert all(np.array_equal(w, v.numpy()) for w, v in zip(weights, model.variables, strict=True))
    assert all(np.array_equal(s, v.numpy()) for s, v in zip(slots, model.optimizer.variables, strict=True))
    assert float(model.optimizer.dynamic_scale.numpy()) == INITIAL
    assert keras.mixed_precision.global_policy().name == "float32"


def test_an_uncompiled_model_gets_the_scale_compile_would_add():
    report = gl.inspect_training_step(_mixed(compiled=False), X, Y_LARGE)
    assert report.status == "loss-scale-overflow" and report.loss_scale == INITIAL


def test_the_status_reads_in_chinese():
    before = get_language()
    set_language("zh")
    try:
        model = _mixed()
        settled, _grads = _first_finite_halving(model, X, Y_LARGE, INITIAL)
        report = gl.inspect_training_step(model, X, Y_LARGE)
        assert status_word(report.status) == "损失缩放上溢"
        assert "损失缩放上溢" in report.summary() and "非有限值" not in str(report)
        halvings = round(np.log2(INITIAL / settled))
        assert f"跳过 {halvings} 个训练步后停在损失缩放因子 {settled:g}" in report.message
    finally:
        set_language(before)


def test_a_real_problem_at_the_settled_scale_names_the_status():
    # 12 sigmoid layers: the signal vanishes whatever the scale; the overflow is listed, first
    model = _mixed(depth=12, activation="sigmoid")
    report = gl.inspect_training_step(model, X, 30 * Y_LARGE)
    assert report.settled_loss_scale is not None
    assert report.problem_kinds[0] == "loss-scale-overflow" and "vanishing" in report.problem_kinds
    assert report.status == "vanishing"


# ----------------------------------------------------------------------------- real non-finite stays non-finite
def test_a_nan_gradient_with_a_finite_loss_stays_non_finite():
    def sqrt_loss(y_true, y_pred):  # d sqrt(u)/du at u = 0 is inf, at every scale
        return tf.reduce_mean(tf.sqrt(tf.square(y_true - tf.cast(y_pred, tf.float32)) * 0.0))

    report = gl.inspect_training_step(_mixed(), X, Y_LARGE, loss=sqrt_loss)
    assert report.status == "non-finite" and "non-finite-gradient" in report.problem_kinds
    assert "loss-scale-overflow" not in report.problem_kinds and report.settled_loss_scale is None


def test_float16_gradients_that_overflow_without_any_scale_stay_non_finite():
    x = X.copy()
    x[3] = 1e4  # one huge example: its float16 backward overflows even at scale 1
    model = _mixed()
    assert np.isfinite(model(x).numpy()).all()
    assert _first_finite_halving(model, x, Y_LARGE, INITIAL) == (None, None)
    report = gl.inspect_training_step(model, x, Y_LARGE)
    assert report.status == "non-finite" and "loss-scale-overflow" not in report.problem_kinds


def test_a_float16_forward_overflow_stays_non_finite():
    model = _mixed(initializer=keras.initializers.RandomNormal(stddev=30.0))
    report = gl.inspect_training_step(model, X, Y_LARGE)
    assert report.status == "non-finite" and "non-finite-forward" in report.problem_kinds
    assert report.settled_loss_scale is None


def test_nan_in_the_data_is_a_data_problem_not_an_overflow():
    x = X.copy()
    x[0, 0] = np.nan
    report = gl.inspect_training_step(_mixed(), x, Y_LARGE)
    assert report.problem_kinds == ("non-finite-data",) and report.settled_loss_scale is None


# ----------------------------------------------------------------------------- the core's halving
def test_settle_loss_scale_halves_like_the_optimizer_and_stops_at_one():
    calls = []

    def gradients_at(s):  # finite once the scaled gradient 100 * s fits in float16
        calls.append(s)
        return [tf.constant([np.inf if 100 * s > 65504 else 1.0])]

    scale, grads, halvings = core.settle_loss_scale(gradients_at, INITIAL)
    assert (scale, halvings) == (512.0, 6) and np.isfinite(grads[0].numpy()).all()
    calls.clear()
    assert core.settle_loss_scale(lambda s: calls.append(s) or [tf.constant([np.nan])], INITIAL) is None
    assert calls == [1.0]  # a NaN at the smallest scale: one try, no search
    assert core.settle_loss_scale(gradients_at, 1.0) is None
