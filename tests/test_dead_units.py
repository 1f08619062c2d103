"""Dead ReLU units (issue 29): the finder (gradlab.reports.units) and the inspector's rule.

Every count is checked against NumPy on the layer's own output, computed here from the
weights; a network with a dead layer is never called healthy, and fresh networks (He-ReLU
MLPs, a Conv-BN-ReLU CNN in the style of keras.applications, BatchNorm + ReLU) raise no alarm.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab import core
from gradlab.reports import units

X = tf.random.stateless_normal([64, 8], [1, 1])
Y = tf.random.stateless_normal([64, 1], [1, 2])


def _mlp(dead=0, activation="relu", hidden=1, width=32, seed=0):
    """He-initialized MLP; the first ``dead`` units of the first hidden layer get bias -10."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(width, activation=activation,
                                                                     kernel_initializer="he_normal")
                                                  for _i in range(hidden)], keras.layers.Dense(1)])
    if dead:
        b = np.zeros(width, np.float32)
        b[:dead] = -10.0
        model.layers[0].bias.assign(b)
    return model


def _numpy_dead(model, x):
    """Units of the first Dense layer whose relu output is 0 at every example, from the weights."""
    k, b = (v.numpy().astype(np.float64) for v in model.layers[0].weights)
    out = np.maximum(np.asarray(x, np.float64) @ k + b, 0)
    return int(np.sum(~(out > 0).any(axis=0))), int(np.sum((out > 0).all(axis=0)))


def _found(model, x):
    with tf.GradientTape() as tape, core.tap_layers(model, tape) as taps:
        model(x, training=True)
    return units.dead_fractions(taps.calls)


def test_a_single_dead_layer_is_not_healthy():
    model = _mlp(dead=32)
    report = gl.inspect_training_step(model, X, Y)
    # the independent view: every unit is 0 on the batch, so the hidden kernel gets exactly 0
    assert _numpy_dead(model, X) == (32, 0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(X) - Y))
    assert not np.any(tape.gradient(loss, model.layers[0].kernel).numpy())
    assert report.status == "dead-units" and report.status != "healthy"
    assert "dead-units" in report.problem_kinds and not report.ok
    p = next(p for p in report.problems if p.kind == "dead-units")
    assert "32 of 32" in p.finding and "dead as a whole" in p.finding
    for fix in ("LeakyReLU", "ELU", "he_normal", "learning rate", "not negative"):
        assert fix in p.fix
    assert "no depth" not in str(report)  # the old "one hidden layer" all-clear is gone


def test_24_of_32_dead_units_are_a_problem():
    model = _mlp(dead=24)
    dead, always = _numpy_dead(model, X)
    assert dead == 24
    found = _found(model, X)[0]
    assert (found.dead, found.units, found.always_active, found.values) == (24, 32, always, 64)
    report = gl.inspect_training_step(model, X, Y)
    assert report.status == "dead-units" and "dead-units" in report.problem_kinds
    assert "24 of 32" in str(report)


def test_relu6_units_die_too():
    found = _found(_mlp(dead=32, activation="relu6"), X)
    assert [(d.activation, d.dead) for d in found] == [("relu6", 32)]


@pytest.mark.parametrize("activation", ["leaky_relu", "elu", "gelu"])
def test_leaky_and_smooth_activations_are_never_dead(activation):
    model = _mlp(dead=32, activation=activation)  # the same bias -10 that kills a relu layer
    found = _found(model, X)
    # leaky_relu is never counted; elu and gelu are judged by their derivative, which -10 leaves non-zero
    # (at -100 float32 rounds it to 0: tests/test_expert3.py)
    assert found == () if activation == "leaky_relu" else [(d.dead, d.symmetric) for d in found] == [(0, False)]
    report = gl.inspect_training_step(model, X, Y)
    assert "dead-units" not in report.problem_kinds and report.status != "dead-units"


def test_relu_layer_with_a_negative_slope_is_not_counted():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, bias_initializer=keras.initializers.Constant(-10)),
                              keras.layers.ReLU(negative_slope=0.1), keras.layers.Dense(16),
                              keras.layers.ReLU(), keras.layers.Dense(1)])
    found = _found(model, X)
    assert [d.activation for d in found] == ["ReLU"]  # only the plain ReLU


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("hidden", [4, 8])
def test_fresh_he_relu_mlp_raises_no_alarm(seed, hidden):
    model = _mlp(hidden=hidden, width=64, seed=seed)
    x = tf.random.stateless_normal([32, 8], [seed, 3])
    report = gl.inspect_training_step(model, x, Y[:32])
    assert "dead-units" not in report.problem_kinds and report.status != "dead-units"


def test_chance_deaths_deep_in_a_fresh_net_are_matched_by_always_active_units():
    """Deep in a fresh He-ReLU net many units are off for the whole batch by chance, as many as are on."""
    model = _mlp(hidden=8, width=32, seed=0)
    found = _found(model, tf.random.uniform([32, 8], seed=0))
    assert max(d.fraction for d in found) >= 0.25           # the raw fraction alone would be alarming
    assert max(d.excess for d in found) < units.DEAD_FRACTION  # beyond chance it is not
    assert not units.dead_layers(found)


def _small_cnn(seed=0):
    """A keras.applications-style CNN: Conv-BN-ReLU and Conv-BN-ReLU6 blocks, a ReLU conv, pooling, a Dense head."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((16, 16, 3))
    h = inp
    for filters in (16, 32):
        h = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        h = keras.layers.BatchNormalization()(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        h = keras.layers.BatchNormalization()(h)
        h = keras.layers.ReLU(max_value=6.0)(h)
        h = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
        h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Dense(32, activation="relu")(h)
    return keras.Model(inp, keras.layers.Dense(10)(h))


@pytest.mark.parametrize("seed", range(2))
def test_small_cnn_raises_no_alarm(seed):
    model = _small_cnn(seed)
    x = tf.random.stateless_uniform([32, 16, 16, 3], [seed, 4])
    y = tf.random.stateless_uniform([32], [seed, 5], maxval=10, dtype=tf.int32)
    report = gl.inspect_training_step(model, x, y, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert "dead-units" not in report.problem_kinds and report.status != "dead-units"


def test_conv_units_are_channels():
    """A conv unit is a channel: dead when 0 at every example and every position (checked in NumPy)."""
    keras.utils.set_random_seed(0)
    conv = keras.layers.Conv2D(8, 3, activation="relu")
    model = keras.Sequential([keras.Input((6, 6, 2)), conv, keras.layers.Flatten(), keras.layers.Dense(1)])
    bias = np.zeros(8, np.float32)
    bias[:5] = -10.0
    model(tf.zeros([1, 6, 6, 2]))
    conv.bias.assign(bias)
    x = tf.random.stateless_normal([16, 6, 6, 2], [2, 1])
    out = conv(x).numpy()
    found = _found(model, x)[0]
    assert found.units == 8 and found.values == 16 * 4 * 4
    assert found.dead == int(np.sum(~(out > 0).any(axis=(0, 1, 2)))) == 5
    report = gl.inspect_training_step(model, x, tf.zeros([16, 1]))
    assert report.status == "dead-units"


def test_batchnorm_before_relu_keeps_the_units_alive():
    """BatchNorm (training mode) removes the -10 shift, so the same bias kills nothing."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, bias_initializer=keras.initializers.Constant(-10)),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.Dense(32), keras.layers.BatchNormalization(),
                              keras.layers.Activation("relu"), keras.layers.Dense(1)])
    report = gl.inspect_training_step(model, X, Y)
    assert "dead-units" not in report.problem_kinds and report.status != "dead-units"
    assert all(d.dead == 0 for d in _found(model, X))


def test_a_batch_of_one_is_not_judged():
    found = _found(_mlp(dead=32), X[:1])
    assert found[0].dead == 32 and not found[0].judged and not units.dead_layers(found)


def test_a_dead_layer_deeper_in_is_named_worst_first():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu", name="alive"),
                              keras.layers.Dense(32, activation="relu", name="dead",
                                                 bias_initializer=keras.initializers.Constant(-10)),
                              keras.layers.Dense(1)])
    report = gl.inspect_training_step(model, X, Y)
    assert report.status != "healthy" and "dead-units" in report.problem_kinds
    p = next(p for p in report.problems if p.kind == "dead-units")
    assert "'dead'" in p.finding and "'alive'" not in p.finding
