"""gl.per_example_gradients against an independent loop of eager tapes (one batch of one
example at a time, the loss written out here), for Dense, Conv, Embedding and recurrent
models, every method; weights, regularizers, the batch mean, and nothing of the model changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradlab.topics.per_example import METHODS, per_example_gradients, per_example_norms

B = 12


_SHARED: dict = {}


def shared(kind: str):
    """One model per kind for the whole module: gradlab traces its functions once per model, and
    tracing a recurrent model under pfor is the slow part of these tests."""
    if kind not in _SHARED:
        _SHARED[kind] = model_and_batch(kind)
    return _SHARED[kind]


def model_and_batch(kind: str):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if kind == "dense":
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"), keras.layers.Dense(2)])
        x, y = rng.normal(size=(B, 5)), rng.normal(size=(B, 2))
    elif kind == "conv":
        model = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3, activation="relu"),
                                  keras.layers.Flatten(), keras.layers.Dense(1)])
        x, y = rng.normal(size=(B, 6, 6, 2)), rng.normal(size=(B, 1))
    elif kind == "embedding":
        model = keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(9, 3),
                                  keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = rng.integers(0, 9, size=(B, 4)), rng.integers(0, 4, size=(B,))
    elif kind == "lstm":
        model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(1)])
        x, y = rng.normal(size=(B, 5, 3)), rng.normal(size=(B, 1))
    elif kind == "stacked":
        model = keras.Sequential([keras.Input((5, 3)), keras.layers.SimpleRNN(4, return_sequences=True),
                                  keras.layers.SimpleRNN(3), keras.layers.Dense(1)])
        model.compile(loss="mae")
        x, y = rng.normal(size=(B, 5, 3)), rng.normal(size=(B, 1))
    else:
        raise AssertionError(kind)
    return model, x, y


def example_loss(model, x1, y1, w1=None):
    """The loss of a batch of one, written out independently of gradlab."""
    pred = model(x1, training=False)
    if getattr(model, "loss", None) in (None, "mse"):
        data = tf.reduce_mean(tf.square(tf.cast(y1, tf.float32) - pred))
    elif model.loss == "mae":
        data = tf.reduce_mean(tf.abs(tf.cast(y1, tf.float32) - pred))
    else:
        data = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y1, pred, from_logits=True))
    if w1 is not None:
        data = data * w1
    return data + tf.add_n(model.losses) if model.losses else data


def loop_of_tapes(model, x, y, w=None):
    xs = tf.constant(x, tf.int32 if np.issubdtype(x.dtype, np.integer) else tf.float32)
    ys = tf.constant(y)
    rows = []
    for i in range(len(x)):
        with tf.GradientTape() as tape:
            loss = example_loss(model, xs[i:i + 1], ys[i:i + 1], None if w is None else float(w[i]))
        rows.append([tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, model.trainable_variables)])
    return [np.stack(c) for c in zip(*rows, strict=True)]


# Every method on the cheap models; on the others the default and one more (tracing a recurrent
# model under pfor is what makes this file slow).
CASES = ([(kind, method) for kind in ("dense", "embedding") for method in METHODS]
         + [("conv", "vectorized_map"), ("conv", "jacobian"), ("lstm", "auto"), ("lstm", "loop"),
            ("stacked", "jacobian"), ("stacked", "loop")])


@pytest.mark.parametrize("kind,method", CASES)
def test_equals_a_loop_of_tapes(kind, method):
    model, x, y = shared(kind)
    ref = loop_of_tapes(model, x, y)
    got = per_example_gradients(model, x, y, method=method)
    assert got.method == ("vectorized_map" if method == "auto" else method)
    assert len(got) == len(model.trainable_variables)
    for g, r, v in zip(got, ref, model.trainable_variables, strict=True):
        assert tuple(g.shape) == (B, *v.shape)
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-5)
    assert np.any(np.abs(ref[0]) > 1e-3)  # the comparison is not between zeros


class FailsUnderPfor(keras.layers.Layer):
    """Doubles its input, and raises while tf.vectorized_map traces it (pfor's loop body), as
    pfor itself does for models it cannot convert (chapter 10 shows a real one: stacked RNNs,
    which take tens of seconds to trace, too slow for a unit test)."""

    def call(self, x):
        if "loop_body" in tf.get_current_name_scope():
            raise TypeError("simulated: pfor cannot convert this layer")
        return 2.0 * x


def test_auto_falls_back_when_pfor_fails_and_a_forced_method_says_why():
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), FailsUnderPfor(),
                              keras.layers.Dense(1)])
    x, y = np.random.default_rng(7).normal(size=(5, 3)), np.random.default_rng(8).normal(size=(5, 1))
    got = per_example_gradients(model, x, y)
    assert got.method == "jacobian"  # the Jacobian runs the model on the whole batch, outside pfor
    ref = loop_of_tapes(model, x, y)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="method='vectorized_map' cannot convert this model with pfor"):
        per_example_gradients(model, x, y, method="vectorized_map")


def test_embedding_rows_are_dense_and_only_where_the_example_looked():
    model, x, y = shared("embedding")
    got = per_example_gradients(model, x, y)
    table = np.asarray(got[0])  # (B, vocabulary, dim), from IndexedSlices
    assert table.shape == (B, 9, 3)
    for i in range(B):
        touched = np.flatnonzero(np.any(table[i] != 0, axis=1))
        assert set(touched) <= set(x[i].tolist())
        assert set(touched) == set(x[i].tolist())  # each looked-up row gets a gradient (dense layer, softmax)


def test_duplicate_lookups_are_summed_per_example():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(5, 2),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
    x = np.array([[1, 1, 4], [2, 3, 2]])
    y = np.array([[0.5], [-1.0]])
    got = np.asarray(per_example_gradients(model, x, y)[0])
    ref = loop_of_tapes(model, x, y)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # example 0 looks up row 1 twice: its gradient is the sum of both positions' contributions
    kernel = model.layers[-1].kernel.numpy().reshape(3, 2)
    residual = 2 * (model(x[:1]).numpy()[0, 0] - y[0, 0])
    np.testing.assert_allclose(got[0, 1], residual * (kernel[0] + kernel[1]), rtol=1e-5)


@pytest.mark.parametrize("kind,method", [("dense", "auto"), ("stacked", "jacobian")])
def test_mean_of_per_example_gradients_is_the_batch_gradient(kind, method):
    model, x, y = shared(kind)
    got = per_example_gradients(model, x, y, method=method)
    xs, ys = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    with tf.GradientTape() as tape:
        pred = model(xs, training=False)
        err = ys - pred
        loss = tf.reduce_mean(tf.abs(err)) if kind == "stacked" else tf.reduce_mean(tf.square(err))
    batch = tape.gradient(loss, model.trainable_variables)
    for g, b in zip(got, batch, strict=True):
        np.testing.assert_allclose(np.mean(np.asarray(g), axis=0), b.numpy(), rtol=1e-4, atol=1e-6)


def test_sample_weight_follows_keras_compute_loss():
    model, x, y = model_and_batch("dense")
    model.add(keras.layers.Dense(2, kernel_regularizer=keras.regularizers.l2(0.1)))
    model.compile(loss="mse")
    w = np.linspace(0.0, 2.0, B).astype("float32")
    got = per_example_gradients(model, x, y, sample_weight=w)
    # per example: w_i * data term + the regularizer once
    ref = loop_of_tapes(model, x, y, w)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)
    # and their mean is the gradient of Keras's own weighted batch loss
    xs, ys = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=xs, y=ys, y_pred=model(xs, training=False), sample_weight=tf.constant(w),
                                  training=False)
    for g, b in zip(got, tape.gradient(loss, model.trainable_variables), strict=True):
        np.testing.assert_allclose(np.mean(np.asarray(g), axis=0), b.numpy(), rtol=1e-4, atol=1e-6)


def test_a_loss_function_returning_one_loss_per_example_is_accepted():
    model, x, y = shared("dense")
    got = per_example_gradients(model, x, y, loss=keras.losses.mean_absolute_error)  # returns shape (B,)
    xs, ys = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.abs(ys[5:6] - model(xs[5:6])))
    for g, r in zip(got, tape.gradient(loss, model.trainable_variables), strict=True):
        np.testing.assert_allclose(np.asarray(g)[5], r.numpy(), rtol=1e-5, atol=1e-6)


def test_loss_callable_is_used_per_example():
    model, x, y = shared("dense")

    def huber(y_true, y_pred):
        return tf.reduce_mean(keras.losses.huber(y_true, y_pred, delta=0.5))

    got = per_example_gradients(model, x, y, loss=huber)
    xs, ys = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    with tf.GradientTape() as tape:
        loss = huber(ys[3:4], model(xs[3:4]))
    for g, r in zip(got, tape.gradient(loss, model.trainable_variables), strict=True):
        np.testing.assert_allclose(np.asarray(g)[3], r.numpy(), rtol=1e-5, atol=1e-6)


def test_model_is_unchanged_and_batch_norm_statistics_stay():
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6), keras.layers.BatchNormalization(),
                              keras.layers.Dense(1)])
    x, y = np.random.default_rng(3).normal(size=(B, 4)), np.random.default_rng(4).normal(size=(B, 1))
    model.compile(loss="mse", optimizer="sgd")
    model.fit(x, y, epochs=1, verbose=0)  # moving statistics away from their initial values
    before = [v.numpy().copy() for v in model.variables]
    for method in METHODS[1:]:
        per_example_gradients(model, x, y, method=method)
    for a, v in zip(before, model.variables, strict=True):
        np.testing.assert_array_equal(a, v.numpy())
    with pytest.raises(ValueError, match="BatchNorm"):
        per_example_gradients(model, x, y, training=True)


def test_multi_output_compiled_loss_leaves_the_loss_trackers_alone():
    keras.utils.set_random_seed(5)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(5, activation="relu")(inputs)
    model = keras.Model(inputs, {"a": keras.layers.Dense(1, name="a")(hidden), "b": keras.layers.Dense(2, name="b")(hidden)})
    model.compile(loss={"a": "mse", "b": "mae"}, loss_weights={"a": 1.0, "b": 0.5}, optimizer="sgd")
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(6, 4)), {"a": rng.normal(size=(6, 1)), "b": rng.normal(size=(6, 2))}
    model.fit(x, y, epochs=1, verbose=0)  # the trackers hold values now
    before = [v.numpy().copy() for v in model.metrics_variables]
    got = per_example_gradients(model, x, y)
    for a, v in zip(before, model.metrics_variables, strict=True):
        np.testing.assert_array_equal(a, v.numpy())
    # example 4's gradient is that of Keras's own loss on a batch of one
    xs = tf.constant(x[4:5], tf.float32)
    ys = {k: tf.constant(v[4:5], tf.float32) for k, v in y.items()}
    with tf.GradientTape() as tape:
        pred = model(xs, training=False)
        loss = (tf.reduce_mean(tf.square(ys["a"] - pred["a"])) + 0.5 * tf.reduce_mean(tf.abs(ys["b"] - pred["b"])))
    for g, r in zip(got, tape.gradient(loss, model.trainable_variables), strict=True):
        np.testing.assert_allclose(np.asarray(g)[4], r.numpy(), rtol=1e-5, atol=1e-6)


def test_unconnected_variable_is_none_like_the_tape():
    class Unused(keras.Model):
        def __init__(self):
            super().__init__()
            self.used = keras.layers.Dense(1)
            self.unused = keras.layers.Dense(1)

        def build(self, input_shape):
            self.used.build(input_shape)
            self.unused.build(input_shape)

        def call(self, x):
            return self.used(x)

    model = Unused()
    model.build((None, 3))
    got = per_example_gradients(model, np.ones((2, 3)), np.zeros((2, 1)))
    assert [g is None for g in got] == [False, False, True, True]


def test_norms_are_float64_per_example():
    model, x, y = shared("conv")
    got = per_example_gradients(model, x, y)
    ref = np.sqrt(sum(np.sum(np.asarray(g, np.float64).reshape(B, -1) ** 2, axis=1) for g in got))
    np.testing.assert_allclose(got.norms, ref, rtol=1e-12)
    np.testing.assert_allclose(per_example_norms(list(got)), ref, rtol=1e-12)
    assert got.losses.shape == (B,) and np.all(got.losses >= 0)


def test_bad_arguments_are_clear_value_errors():
    model, x, y = shared("dense")
    with pytest.raises(ValueError, match="method must be one of"):
        per_example_gradients(model, x, y, method="fast")
    with pytest.raises(ValueError, match="sample_weight must hold one weight per example"):
        per_example_gradients(model, x, y, sample_weight=np.ones(B + 1))
    with pytest.raises(ValueError, match="sample_weight holds NaN"):
        per_example_gradients(model, x, y, sample_weight=np.full(B, np.nan))
    with pytest.raises(ValueError, match="model must be a keras.Model"):
        per_example_gradients(lambda t: t, x, y)
    with pytest.raises(ValueError, match="x and y must hold the same number"):
        per_example_gradients(model, x, y[:3])
    with pytest.raises(ValueError, match="training must be True or False"):
        per_example_gradients(model, x, y, training="no")
    stateful = keras.Sequential([keras.Input((5, 2), batch_size=4), keras.layers.SimpleRNN(3, stateful=True),
                                 keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="stateful"):
        per_example_gradients(stateful, np.zeros((4, 5, 2)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="no gradient"):
        per_example_norms([None, None])


def test_dropout_in_training_mode_gets_a_mask_per_example():
    # pfor (vectorized_map) treats the dropout seed as the same for every example: one mask for all
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dropout(0.5),
                              keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)])
    model.compile(loss="mse")
    x, y = np.ones((8, 6), "float32"), np.zeros((8, 1), "float32")
    grads = per_example_gradients(model, x, y, training=True)
    assert grads.method == "jacobian"
    patterns = {tuple(np.asarray(g).ravel() != 0) for g in grads[0].numpy()}
    assert len(patterns) > 1, patterns  # 8 examples, 6 units at rate 0.5: one shared mask is what vmap gives
    with pytest.raises(ValueError, match="same dropout mask"):
        per_example_gradients(model, x, y, training=True, method="vectorized_map")
    assert per_example_gradients(model, x, y).method == "vectorized_map"  # inference mode: no masks


def test_a_masked_output_never_goes_through_the_jacobian():
    # Masking -> GRU(return_sequences): a per-step loss over padded sequences of unequal lengths.
    # The Jacobian's batched pass lost each example's mask (R1: losses 0.5908 instead of 0.7367)
    keras.utils.set_random_seed(0)
    lengths = np.array([5, 5, 4, 3, 2, 5, 1, 3])
    x = np.random.default_rng(0).normal(size=(8, 5, 3)).astype("float32")
    x[np.arange(5)[None, :] >= lengths[:, None]] = 0.0
    y = np.random.default_rng(1).normal(size=(8, 5, 1)).astype("float32")
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.Masking(0.0),
                              keras.layers.GRU(4, return_sequences=True), keras.layers.Dense(1)])
    model.compile(loss="mse")
    loop = per_example_gradients(model, x, y, method="loop")
    auto = per_example_gradients(model, x, y)
    assert auto.method != "jacobian"
    for i in range(8):  # the reference: each example alone through model.compute_loss and a tape
        with tf.GradientTape() as tape:
            xi, yi = x[i:i + 1], y[i:i + 1]
            loss = model.compute_loss(xi, yi, model(xi))
        ref = tape.gradient(loss, model.trainable_variables)
        for g_loop, g_auto, r in zip(loop, auto, ref, strict=True):
            np.testing.assert_allclose(g_loop[i].numpy(), r.numpy(), rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(g_auto[i].numpy(), r.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="carries a mask"):
        per_example_gradients(model, x, y, method="jacobian")


# ----------------------------------------------------------------------------- issue 29
class PenaltyInCall(keras.layers.Layer):
    """add_loss in call: a penalty on this layer's input, which differs from example to example."""

    def call(self, x):
        self.add_loss(0.5 * tf.reduce_mean(tf.square(x)))
        return x


class Counter(keras.layers.Layer):
    """A layer that updates a variable of its own in call (counts its calls)."""

    def build(self, input_shape):
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")

    def call(self, x):
        self.count.assign_add(1.0)
        return x


def penalized(kind: str):
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    if kind == "activity":
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(
            7, activation="tanh", activity_regularizer=keras.regularizers.l2(0.1)), keras.layers.Dense(2)])
    elif kind == "add_loss":
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"), PenaltyInCall(),
                                  keras.layers.Dense(2)])
    elif kind == "pfor_fails":
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(
            7, activation="tanh", activity_regularizer=keras.regularizers.l2(0.1)), FailsUnderPfor(),
            keras.layers.Dense(2)])
    else:  # a stacked RNN whose stream carries an activity regularizer (Keras's SimpleRNN ignores its own)
        model = keras.Sequential([keras.Input((5, 3)), keras.layers.SimpleRNN(4, return_sequences=True),
                                  keras.layers.SimpleRNN(3), keras.layers.Dense(
                                      6, activation="tanh", activity_regularizer=keras.regularizers.l2(0.3)),
                                  keras.layers.Dense(2)])
        return model, rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 2))
    return model, rng.normal(size=(6, 5)), rng.normal(size=(6, 2))


def batch_penalty_variant(model, x, y):
    """What the Jacobian path computed before the fix: each example's data term plus the whole
    batch's penalty (its gradient is the same for every example)."""
    xs = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        model(xs, training=False)
        penalty = tf.add_n(model.losses)
    shared_grad = [np.zeros(v.shape) if g is None else g.numpy()
                   for g, v in zip(tape.gradient(penalty, model.trainable_variables), model.trainable_variables,
                                   strict=True)]
    rows = []
    for i in range(len(x)):
        with tf.GradientTape() as tape:
            data = tf.reduce_mean(tf.square(tf.constant(y[i:i + 1], tf.float32) - model(xs[i:i + 1])))
        rows.append([g.numpy() + s for g, s in zip(tape.gradient(data, model.trainable_variables), shared_grad,
                                                   strict=True)])
    return [np.stack(c) for c in zip(*rows, strict=True)]


@pytest.mark.parametrize("kind", ["activity", "add_loss", "stacked"])
def test_input_dependent_losses_are_each_examples_own(kind):
    model, x, y = penalized(kind)
    ref = loop_of_tapes(model, x, y)  # each example alone: model.losses holds its own penalty
    wrong = batch_penalty_variant(model, x, y)
    gap = max(float(np.max(np.abs(a - b))) for a, b in zip(ref, wrong, strict=True))
    assert gap > 1e-3, gap  # the batch's penalty is not each example's: the comparison can fail
    methods = ("loop",) if kind == "stacked" else ("auto", "loop", "vectorized_map")  # pfor fails on stacks
    for method in methods:
        got = per_example_gradients(model, x, y, method=method)
        assert got.method != "jacobian"
        for g, r in zip(got, ref, strict=True):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="model.losses depend on the input"):
        per_example_gradients(model, x, y, method="jacobian")


def test_auto_skips_the_jacobian_for_input_dependent_losses_where_pfor_fails():
    model, x, y = penalized("pfor_fails")
    got = per_example_gradients(model, x, y)
    assert got.method == "loop"  # vectorized_map fails under pfor, the Jacobian would mix the penalties
    for g, r in zip(got, loop_of_tapes(model, x, y), strict=True):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)


def test_a_weight_regularizer_alone_keeps_the_jacobian():
    model, x, y = model_and_batch("dense")
    model.add(keras.layers.Dense(2, kernel_regularizer=keras.regularizers.l2(0.1)))
    got = per_example_gradients(model, x, y, method="jacobian")  # the penalty does not depend on the input
    for g, r in zip(got, loop_of_tapes(model, x, y), strict=True):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("built", [True, False])
def test_a_counter_updated_in_call_is_restored(built):
    keras.utils.set_random_seed(4)
    layers = [keras.layers.Dense(4, activation="tanh"), Counter(), keras.layers.Dense(1)]
    model = keras.Sequential([keras.Input((3,)), *layers] if built else layers)
    x, y = np.random.default_rng(4).normal(size=(5, 3)), np.random.default_rng(5).normal(size=(5, 1))
    if built:
        model(x)  # the learner's own call: the counter is 1
    before = 1.0 if built else 0.0
    for method in METHODS:
        per_example_gradients(model, x, y, method=method)
        assert float(layers[1].count.numpy()) == before, method
    model(x)  # the counter still counts the learner's calls
    assert float(layers[1].count.numpy()) == before + 1


def test_progress_is_a_bar_over_the_examples(capsys):
    model, x, y = shared("dense")
    per_example_gradients(model, x, y, method="loop", progress=True)
    out = capsys.readouterr().out
    assert out.endswith(f"per-example gradients ▕████████████████████▏ {B}/{B} loop\n"), out
    assert out.count("\r") == 1 + B + 1  # the start, each example, the close
    per_example_gradients(model, x, y, progress=True)
    assert capsys.readouterr().out.endswith(f"▏ {B}/{B} vectorized_map\n")
    per_example_gradients(model, x, y)
    assert capsys.readouterr().out == ""  # None: off outside a notebook
    with pytest.raises(ValueError, match="progress must be None"):
        per_example_gradients(model, x, y, progress=1)


def test_loss_fn_spelling_names_loss():
    model, x, y = shared("dense")
    with pytest.raises(TypeError, match="takes loss= instead of loss_fn="):
        per_example_gradients(model, x, y, loss_fn=keras.losses.mean_squared_error)


_ONEDNN_SCRIPT = """
import numpy as np, tensorflow as tf, keras  # TensorFlow first: oneDNN's graph rewrites stay on
import gradlab as gl
x = np.random.default_rng(0).normal(size=(4, 5, 4)).astype("float32")
y = np.random.default_rng(1).normal(size=(4, 1)).astype("float32")
inp = keras.Input((5, 4))
h = keras.layers.MultiHeadAttention(2, 2)(inp, inp)
model = keras.Model(inp, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h)))
auto = gl.per_example_gradients(model, x, y, progress=False)
loop = gl.per_example_gradients(model, x, y, method="loop", progress=False)
print(auto.method, max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(auto, loop)))
try:
    gl.per_example_gradients(model, x, y, method="vectorized_map", progress=False)
except ValueError as err:
    print("refused:", err)
"""


def test_auto_survives_einsum_layers_when_tensorflow_came_first_with_onednn_rewrites():
    """TF 2.21 with oneDNN's graph rewrites on (TensorFlow imported before gradlab, without
    TF_ENABLE_ONEDNN_OPTS=0) kills the process (``munmap_chunk(): invalid pointer``) when pfor
    vectorizes an EinsumDense, as in every MultiHeadAttention, on an AVX-512 CPU (measured on TF 2.21;
    oneDNN capped at AVX2, as gradlab sets it, survives): "auto" must not pick vectorized_map there."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", _ONEDNN_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-800:]
    method, diff = run.stdout.splitlines()[0].split()
    assert method == "jacobian" and float(diff) < 1e-5
    assert "refused: method='vectorized_map' on a model with EinsumDense layers" in run.stdout
