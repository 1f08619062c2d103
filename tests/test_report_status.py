"""The inspector's status follows its first problem that has a word (issues: diag 1 and 2).

A report whose problems say "the gradients explode" (a large global norm) or "a whole layer is
dead" must not show another word ("uneven", "vanishing") above them; a report with no such
problem keeps the verdict's word (a fresh Transformer stays "uneven", with its reason).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab.models.transformer import build_transformer, markov_tokens
from gradlab.reports.verdict import status_word

X = tf.random.stateless_normal([64, 8], [3, 1])
Y = tf.random.stateless_normal([64, 1], [3, 2])
XENT = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _scaled_transformer(position: str, factor: float, depth: int = 6):
    model = build_transformer(depth, norm_position=position)
    model.compile(optimizer="adam", loss=XENT)
    for v in model.trainable_variables:
        if v.path.endswith("kernel"):
            v.assign(v * factor)
    return model


def _global_norm(model, x, y) -> float:
    """The independent view: plain GradientTape, norm in float64."""
    with tf.GradientTape() as tape:
        loss = XENT(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    return float(np.sqrt(sum(np.sum(np.square(tf.convert_to_tensor(g).numpy().astype(np.float64))) for g in grads if g is not None)))


@pytest.mark.parametrize("position", ["pre", "post"])
def test_an_exploding_transformer_reads_exploding(position):
    model = _scaled_transformer(position, 30.0, depth=2)
    x, y = markov_tokens(8, 32, 64)
    norm = _global_norm(model, x, y)
    assert norm > 1e3                      # every kernel 30x: the gradients really are huge
    report = gl.inspect_training_step(model, x, y)
    assert "large-gradient" in report.problem_kinds
    assert report.status == "exploding" and status_word(report.status) == "exploding"
    assert "uneven" not in report.message and f"{report.global_norm:.3g}" in report.message
    assert report.global_norm == pytest.approx(norm, rel=1e-3)
    assert "status exploding" in report.summary()


@pytest.mark.parametrize("position", ["pre", "post"])
@pytest.mark.parametrize("depth", [2, 6])
def test_a_fresh_transformer_still_does_not_alarm(position, depth):
    model = _scaled_transformer(position, 1.0, depth=depth)
    x, y = markov_tokens(8, 32, 64, seed=3)
    assert _global_norm(model, x, y) < 1e3
    report = gl.inspect_training_step(model, x, y)
    assert report.status == "uneven" and report.problems == ()
    assert "uneven, not exploding" in report.message


def _mlp(depth: int, width: int = 32, activation: str = "relu", initializer: str = "he_normal", seed: int = 0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(width, activation=activation,
                                                                     kernel_initializer=initializer)
                                                  for _i in range(depth)], keras.layers.Dense(1)])


@pytest.mark.parametrize("depth,which", [(2, 0), (2, 1), (3, 0), (3, 2), (5, 2)])
def test_a_whole_dead_layer_reads_dead_units_not_vanishing(depth, which):
    model = _mlp(depth)
    model.layers[which].bias.assign(tf.fill([32], -100.0))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(X) - Y))
    grads = tape.gradient(loss, [layer.kernel for layer in model.layers[:-1]])
    assert not any(np.any(g.numpy()) for g in grads)  # the independent view: every hidden kernel gets exactly 0
    report = gl.inspect_training_step(model, X, Y)
    assert report.problem_kinds[0] == "dead-units"
    assert report.status == "dead-units" and status_word(report.status) == "dead units"
    assert "32 of 32" in report.message and "dead as a whole" in report.message


def test_24_of_32_dead_in_one_layer_is_not_healthy():
    model = _mlp(3, seed=4)
    b = np.zeros(32, np.float32)
    b[:24] = -100.0
    model.layers[1].bias.assign(b)
    report = gl.inspect_training_step(model, X, Y)
    assert report.status == "dead-units" and "dead-units" in report.problem_kinds


@pytest.mark.parametrize("activation,initializer", [("relu", "he_normal"), ("tanh", "glorot_uniform")])
@pytest.mark.parametrize("seed,width", [(0, 16), (1, 32), (2, 64), (3, 128)])
def test_fresh_nets_raise_no_dead_units_alarm(activation, initializer, seed, width):
    report = gl.inspect_training_step(_mlp(4, width, activation, initializer, seed), X, Y)
    assert "dead-units" not in report.problem_kinds and report.status != "dead-units"


def test_a_large_global_norm_alone_reads_exploding():
    """A healthy ratio with a huge global norm (targets of 1e4): the large-gradient problem decides."""
    model = _mlp(3, seed=5)
    y = Y * 1e4
    report = gl.inspect_training_step(model, X, y)
    assert report.verdict.status == "healthy" and report.global_norm > 1e3
    assert report.problem_kinds == ("large-gradient",) and report.status == "exploding"



def test_dead_units_behind_an_untrained_batchnorm_point_at_its_statistics_first():
    """Three Dense → BatchNorm → ReLU blocks, the middle Dense with bias -20: with its initial moving
    statistics (training=False) that BatchNorm normalizes nothing and every ReLU unit after it stays
    below 0; with the batch's statistics (training=True) the same units fire. The dead-units advice
    then names the statistics first."""
    keras.utils.set_random_seed(0)
    layers = [keras.Input((8,))]
    for i in range(3):
        layers += [keras.layers.Dense(16, bias_initializer=keras.initializers.Constant(-20.0 if i == 1 else 0.0)),
                   keras.layers.BatchNormalization(), keras.layers.ReLU()]
    model = keras.Sequential([*layers, keras.layers.Dense(1)])
    h = model.layers[2](model.layers[1](model.layers[0](X), training=False))
    pre = model.layers[4](model.layers[3](h), training=False)
    assert float(tf.reduce_max(pre)) < 0                  # the independent view: every unit below 0
    assert float(tf.reduce_max(model.layers[4](model.layers[3](h), training=True))) > 0
    r = gl.inspect_training_step(model, X, Y, training=False)
    kinds = [p.kind for p in r.problems]
    assert kinds[0] == "batchnorm-statistics" and "dead-units" in kinds, kinds
    dead = r.problems[kinds.index("dead-units")]
    assert "BatchNormalization statistics" in dead.fix and "LeakyReLU" in dead.fix, dead.fix
    assert "dead-units" not in [p.kind for p in gl.inspect_training_step(model, X, Y, training=True).problems]
