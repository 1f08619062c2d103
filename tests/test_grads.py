"""gradlab.grads: reports against an independent tape, statuses, clipping, bad input, no retrace."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl


@pytest.fixture(scope="module")
def engine():
    return gl.MLPGradientEngine(width=16, batch_size=32, max_depth=40, seed=0)


def independent_norms(model, x, y):
    """Signal and kernel-gradient norms computed separately: a persistent tape, one gradient call each."""
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    zs = []
    with tf.GradientTape(persistent=True) as tape:
        h = x
        for layer in dense[:-1]:
            z = h @ layer.kernel + layer.bias
            tape.watch(z)
            zs.append(z)
            h = layer.activation(z)
        out = h @ dense[-1].kernel + dense[-1].bias
        loss = tf.reduce_mean((out - y) ** 2)
    sig = [float(tf.norm(tape.gradient(loss, z))) for z in zs]
    ker = [float(tf.norm(tape.gradient(loss, layer.kernel))) for layer in dense[:-1]]
    del tape
    return np.array(sig), np.array(ker), float(loss)


@pytest.mark.parametrize("activation,initializer", [("sigmoid", "glorot_uniform"), ("relu", "he_normal"),
                                                    ("tanh", "lecun_normal")])
def test_gradient_report_matches_independent_tape(activation, initializer):
    model = gl.build_mlp(5, width=16, activation=activation, initializer=initializer, seed=3)
    x, y = gl.make_data(32, 16, seed=1)
    r = gl.gradient_report(model, x, y)
    sig, ker, loss = independent_norms(model, x, y)
    np.testing.assert_allclose(r.signal_norms, sig, rtol=1e-5)
    np.testing.assert_allclose(r.weight_norms, ker, rtol=1e-5)
    assert r.loss == pytest.approx(loss, rel=1e-6)
    # and the model's own forward pass gives the same loss
    assert float(tf.reduce_mean((model(x) - y) ** 2)) == pytest.approx(loss, rel=1e-5)
    assert r.depth == 5 and r.activation_stds.shape == (5,)
    assert r.ratio == pytest.approx(sig[0] / sig[-1], rel=1e-5)


@pytest.mark.parametrize("activation,initializer", [("sigmoid", "glorot_uniform"), ("relu", "he_uniform"),
                                                    ("linear", "orthogonal"), ("selu", "lecun_normal")])
@pytest.mark.parametrize("clip", [None, ("value", 0.01), ("norm", 0.05), ("global_norm", 0.1)])
def test_engine_agrees_with_keras_model(engine, activation, initializer, clip):
    depth = 7
    fast = engine.report(depth, activation, initializer, clip)
    model = gl.build_mlp(depth, width=16, activation=activation, initializer=initializer, seed=0)
    slow = gl.gradient_report(model, engine.x, engine.y, clip=clip)
    np.testing.assert_allclose(fast.signal_norms, slow.signal_norms, rtol=2e-4)
    np.testing.assert_allclose(fast.weight_norms, slow.weight_norms, rtol=2e-4)
    np.testing.assert_allclose(fast.clipped_weight_norms, slow.clipped_weight_norms, rtol=2e-4)
    np.testing.assert_allclose(fast.activation_stds, slow.activation_stds, rtol=2e-4)
    assert fast.status == slow.status


def test_clip_bounds(engine):
    r = engine.report(10, "tanh", "large_normal", ("norm", 0.5))
    assert r.weight_norms.max() > 0.5
    assert np.all(r.clipped_weight_norms <= 0.5 * (1 + 1e-5))
    r = engine.report(10, "tanh", "large_normal", ("global_norm", 0.5))
    assert np.sqrt(np.sum(r.clipped_weight_norms**2)) <= 0.5 * (1 + 1e-5)
    # global clipping keeps the ratios between layers
    np.testing.assert_allclose(r.clipped_weight_norms / r.clipped_weight_norms[0],
                               r.weight_norms / r.weight_norms[0], rtol=1e-4)
    r = engine.report(10, "tanh", "large_normal", ("value", 1e-3))
    assert np.all(r.clipped_weight_norms <= 1e-3 * 16 * (1 + 1e-5))  # ≤ t·sqrt(16·16)


def test_clip_gradients_is_exactly_tf():
    grads = [tf.constant([3.0, -4.0]), tf.constant([[0.5, 12.0]])]
    for mode, ref in [("value", [tf.clip_by_value(g, -1.0, 1.0) for g in grads]),
                      ("norm", [tf.clip_by_norm(g, 1.0) for g in grads]),
                      ("global_norm", tf.clip_by_global_norm(grads, 1.0)[0])]:
        out = gl.clip_gradients(grads, (mode, 1.0))
        for a, b in zip(out, ref, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert gl.clip_gradients(grads, None)[0] is grads[0]


@pytest.mark.parametrize("signal,status", [
    ([1.0, 1.0, 1.0], "healthy"),
    ([1e-5, 1e-2, 1.0], "vanishing"),
    ([0.0, 1e-3, 1.0], "vanishing"),
    ([0.0, 0.0, 0.0], "vanishing"),
    ([1e4, 1.0, 1e-1], "exploding"),
    ([np.nan, 1.0, 1.0], "non-finite"),
    ([1.0, np.inf, 1.0], "non-finite"),
    ([2.0], "healthy"),
])
def test_diagnose_statuses(signal, status):
    got, message = gl.diagnose(signal)
    assert got == status
    assert isinstance(message, str) and len(message) > 20


def test_diagnose_thresholds_are_used():
    assert gl.diagnose([1e-2, 1.0])[0] == "healthy"
    assert gl.diagnose([1e-2, 1.0], vanish_below=0.1)[0] == "vanishing"
    assert gl.diagnose([50.0, 1.0], explode_above=10)[0] == "exploding"


def test_clear_cases_in_engine(engine):
    assert engine.report(30, "sigmoid", "glorot_uniform").status == "vanishing"
    assert engine.report(30, "relu", "he_normal").status == "healthy"
    assert engine.report(30, "tanh", "large_normal").status == "exploding"
    assert engine.report(40, "linear", "large_normal").status == "non-finite"
    zero = engine.report(5, "relu", "zeros")
    assert zero.status == "vanishing" and np.all(zero.signal_norms == 0)


@pytest.mark.parametrize("call,match", [
    (lambda: gl.build_mlp(0), "depth must be 1 to 200"),
    (lambda: gl.build_mlp(201), "depth must be 1 to 200"),
    (lambda: gl.build_mlp(3.5), "depth must be an int"),
    (lambda: gl.build_mlp(3, activation="relux"), "activation must be one of"),
    (lambda: gl.build_mlp(3, initializer="xavier"), "initializer must be one of .*glorot_uniform"),
    (lambda: gl.build_mlp(3, width=0), "width"),
    (lambda: gl.diagnose([]), "non-empty"),
    (lambda: gl.diagnose([[1.0]]), "1-D"),
    (lambda: gl.diagnose([1.0], vanish_below=10, explode_above=1), "vanish_below < explode_above"),
    (lambda: gl.diagnose([-1.0]), "negative"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("l2", 1.0)), "clip must be None or"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("norm", -1.0)), "threshold > 0"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("norm", math.inf)), "finite threshold"),
    (lambda: gl.make_data(0), "batch_size"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gradient_report_rejects_bad_models_and_data():
    x, y = gl.make_data(8, 4)
    conv = keras.Sequential([keras.Input((4, 1)), keras.layers.Conv1D(2, 2), keras.layers.Flatten(),
                             keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="stack of Dense layers; found Conv1D"):
        gl.gradient_report(conv, x, y)
    with pytest.raises(ValueError, match="at least one hidden Dense"):
        gl.gradient_report(keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]), x, y)
    with pytest.raises(ValueError, match="model must be a keras.Model"):
        gl.gradient_report("model", x, y)
    model = gl.build_mlp(2, width=4)
    with pytest.raises(ValueError, match="x has 3 features but the first Dense layer expects 4"):
        gl.gradient_report(model, tf.ones([8, 3]), y)
    with pytest.raises(ValueError, match=r"y must have shape \(8, 1\)"):
        gl.gradient_report(model, x, tf.ones([8]))
    with pytest.raises(ValueError, match="x must be 2-D"):
        gl.gradient_report(model, tf.ones([8, 4, 1]), y)


def test_learner_built_model_works():
    """gradient_report accepts a model the learner built by hand, with an output activation."""
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"),
                              keras.layers.Dropout(0.1), keras.layers.Dense(3, activation="relu"),
                              keras.layers.Dense(2, activation="sigmoid")])
    x = tf.random.stateless_normal([10, 5], seed=[1, 2])
    y = tf.random.stateless_uniform([10, 2], seed=[1, 3])
    r = gl.gradient_report(model, x, y)
    assert r.signal_norms.shape == (2,) and np.all(r.signal_norms > 0)


def test_engine_does_not_retrace_on_depth_or_clip(engine):
    engine.report(5, "sigmoid", "glorot_uniform", ("norm", 1.0))
    engine.report(6, "sigmoid", "glorot_uniform", ("value", 2.0))
    before = engine.tracing_count()
    for i in range(20):
        engine.report(1 + (i * 7) % 40, "sigmoid", "glorot_uniform",
                      (("norm", "value", "global_norm")[i % 3], 10 ** (i / 10 - 1)))
    assert engine.tracing_count() - before <= 1


def test_engine_depth_is_prefix_of_build_mlp(engine):
    """Depth d uses exactly the first d cached kernels: the same weights as build_mlp(d)."""
    model = gl.build_mlp(4, width=16, activation="relu", initializer="he_normal", seed=0)
    for i, layer in enumerate(model.layers[:-1]):
        np.testing.assert_array_equal(layer.kernel.numpy(), engine.kernels("he_normal")[i].numpy())


def test_train_mlp_stops_on_nan_and_clipping_keeps_it_finite():
    x, _ = gl.make_data(64, 8, seed=0)
    y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)

    def model():
        return gl.build_mlp(8, width=16, activation="relu", initializer="he_normal", input_dim=8, seed=0)

    plain = gl.train_mlp(model(), x, y, optimizer=keras.optimizers.SGD(0.5), steps=30, progress=False)
    assert plain.stopped_at is not None and not math.isfinite(plain.losses[-1])
    clipped = gl.train_mlp(model(), x, y, optimizer=keras.optimizers.SGD(0.5), steps=30,
                           clip=("global_norm", 1.0), progress=False)
    assert clipped.stopped_at is None and len(clipped.losses) == 30
    assert all(math.isfinite(v) for v in clipped.losses)
    assert clipped.losses[-1] < clipped.losses[0]
    assert clipped.signal_matrix.shape == (30, 8)


def test_train_mlp_prints_progress(capsys):
    x, y = gl.make_data(16, 4)
    gl.train_mlp(gl.build_mlp(2, width=4), x, y, optimizer=keras.optimizers.SGD(0.01), steps=10)
    out = capsys.readouterr().out
    assert "step   10/10" in out and out.count("\n") == 5


def test_predicted_gain_matches_measurement(engine):
    for act, init in [("relu", "he_normal"), ("tanh", "glorot_uniform"), ("linear", "orthogonal")]:
        r = engine.report(20, act, init)
        predicted, measured = gl.predicted_gain(r, engine, act, init)
        assert predicted == pytest.approx(measured, rel=0.1)
    r = engine.report(20, "sigmoid", "glorot_uniform")
    assert gl.predicted_gain(r, engine, "sigmoid", "glorot_uniform")[0] < 0.3


def test_activation_curves_derivatives():
    z, curves = gl.activation_curves(["sigmoid", "relu"], z=[-1.0, 0.0, 2.0])
    s = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(curves["sigmoid"][1], s * (1 - s), rtol=1e-5)
    np.testing.assert_array_equal(curves["relu"][1], [0.0, 0.0, 1.0])


def test_report_str_is_rounded():
    r = gl.GradientReport(np.array([1.23456789, 2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0]),
                          np.array([0.5, 0.5]), 0.617, "healthy", "fine", 0.123456, None)
    text = str(r)
    assert "1.23," in text and "1.2345" not in text and "loss 0.123" in text
