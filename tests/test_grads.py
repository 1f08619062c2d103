"""gradlab.reports.gradients: reports against an independent tape, statuses, clipping, bad input, no retrace."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl


@pytest.fixture(scope="module")
def engine():
    return gl.engines.mlp.MLPGradientEngine(width=16, batch_size=32, max_depth=40, seed=0)


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
    model = gl.models.mlp.build_mlp(5, width=16, activation=activation, initializer=initializer, seed=3)
    x, y = gl.models.mlp.make_data(32, 16, seed=1)
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
    model = gl.models.mlp.build_mlp(depth, width=16, activation=activation, initializer=initializer, seed=0)
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
    s = np.asarray(signal, np.float64)
    if s.size > 1 and np.all(np.isfinite(s)) and s[-1] > 0 and s[0] > 0:
        # the message says what the rule measured: the ratio, computed here, and the per-layer gain
        assert f"{s[0] / s[-1]:.2g}×" in message and f"{(s[0] / s[-1]) ** (1 / (s.size - 1)):.3g}×" in message
    elif not np.all(np.isfinite(s)):
        assert "NaN/inf" in message and "Clipping cannot repair NaN" in message
    elif s.size == 1:
        assert "One layer" in message
    else:
        assert "exactly 0" in message


def test_diagnose_thresholds_are_used():
    # three layers, gain 0.5 per layer, total 0.25: only the total rule with a raised threshold fires
    assert gl.diagnose([0.25, 0.5, 1.0])[0] == "healthy"
    assert gl.diagnose([0.25, 0.5, 1.0], vanish_below=0.3)[0] == "vanishing"
    assert gl.diagnose([50.0, 1.0], explode_above=10)[0] == "exploding"


def test_clear_cases_in_engine(engine):
    assert engine.report(30, "sigmoid", "glorot_uniform").status == "vanishing"
    assert engine.report(30, "relu", "he_normal").status == "healthy"
    assert engine.report(30, "tanh", "large_normal").status == "exploding"
    assert engine.report(40, "linear", "large_normal").status == "non-finite"
    zero = engine.report(5, "relu", "zeros")
    assert zero.status == "vanishing" and np.all(zero.signal_norms == 0)


@pytest.mark.parametrize("call,match", [
    (lambda: gl.models.mlp.build_mlp(0), "depth must be 1 to 200"),
    (lambda: gl.models.mlp.build_mlp(201), "depth must be 1 to 200"),
    (lambda: gl.models.mlp.build_mlp(3.5), "depth must be an int"),
    (lambda: gl.models.mlp.build_mlp(3, activation="relux"), "activation must be one of"),
    (lambda: gl.models.mlp.build_mlp(3, initializer="xavier"), "initializer must be one of .*glorot_uniform"),
    (lambda: gl.models.mlp.build_mlp(3, width=0), "width"),
    (lambda: gl.diagnose([]), "non-empty"),
    (lambda: gl.diagnose([[1.0]]), "1-D"),
    (lambda: gl.diagnose([1.0], vanish_below=10, explode_above=1), "vanish_below < explode_above"),
    (lambda: gl.diagnose([-1.0]), "negative"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("l2", 1.0)), "clip must be None or"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("norm", -1.0)), "threshold > 0"),
    (lambda: gl.clip_gradients([tf.ones(2)], ("norm", math.inf)), "finite threshold"),
    (lambda: gl.models.mlp.make_data(0), "batch_size"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gradient_report_rejects_bad_models_and_data():
    x, y = gl.models.mlp.make_data(8, 4)
    conv = keras.Sequential([keras.Input((4, 1)), keras.layers.Conv1D(2, 2), keras.layers.Flatten(),
                             keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="built from Dense layers.*found Conv1D.*inspect_training_step"):
        gl.gradient_report(conv, x, y)
    with pytest.raises(ValueError, match="at least one hidden Dense"):
        gl.gradient_report(keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]), x, y)
    with pytest.raises(ValueError, match="model must be a keras.Model"):
        gl.gradient_report("model", x, y)
    model = gl.models.mlp.build_mlp(2, width=4)
    model(x)  # built for 4 features
    with pytest.raises(ValueError, match=r"x has shape \(8, 3\), but the model expects \(batch, 4\)"):
        gl.gradient_report(model, tf.ones([8, 3]), y)
    with pytest.raises(ValueError, match=r"y has shape \(8,\) but the model's output has shape \(8, 1\)"):
        gl.gradient_report(model, x, tf.ones([8]))
    with pytest.raises(ValueError, match=r"x has shape \(8, 4, 1\)"):
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
    assert engine.tracing_count() - before == 0  # one trace per mode, made by the warm-up above


def test_engine_depth_is_prefix_of_build_mlp(engine):
    """Depth d uses exactly the first d cached kernels: the same weights as build_mlp(d)."""
    model = gl.models.mlp.build_mlp(4, width=16, activation="relu", initializer="he_normal", seed=0)
    for i, layer in enumerate(model.layers[:-1]):
        np.testing.assert_array_equal(layer.kernel.numpy(), engine.kernels("he_normal")[i].numpy())


def test_train_mlp_stops_on_nan_and_clipping_keeps_it_finite():
    x, _ = gl.models.mlp.make_data(64, 8, seed=0)
    y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)

    def model():
        return gl.models.mlp.build_mlp(8, width=16, activation="relu", initializer="he_normal", input_dim=8, seed=0)

    plain = gl.train.steps.train_mlp(model(), x, y, optimizer=keras.optimizers.SGD(0.5), steps=30, progress=False)
    assert plain.stopped_at is not None and not math.isfinite(plain.losses[-1])
    clipped = gl.train.steps.train_mlp(model(), x, y, optimizer=keras.optimizers.SGD(0.5), steps=30,
                           clip=("global_norm", 1.0), progress=False)
    assert clipped.stopped_at is None and len(clipped.losses) == 30
    assert all(math.isfinite(v) for v in clipped.losses)
    assert clipped.losses[-1] < clipped.losses[0]
    assert clipped.signal_matrix.shape == (30, 8)


def test_train_mlp_prints_progress(capsys):
    x, y = gl.models.mlp.make_data(16, 4)
    gl.train.steps.train_mlp(gl.models.mlp.build_mlp(2, width=4), x, y, optimizer=keras.optimizers.SGD(0.01), steps=10,
                             progress=True)
    out = capsys.readouterr().out  # one bar redrawn in place (issue 29): no losses, no timings
    assert out.split("\r")[-1].endswith("10/10\n") and out.count("\n") == 1 and "loss" not in out
    gl.train.steps.train_mlp(gl.models.mlp.build_mlp(2, width=4), x, y, optimizer=keras.optimizers.SGD(0.01), steps=2)
    assert capsys.readouterr().out == ""  # progress=None: on in a notebook only


def test_predicted_gain_matches_measurement(engine):
    for act, init in [("relu", "he_normal"), ("tanh", "glorot_uniform"), ("linear", "orthogonal")]:
        r = engine.report(20, act, init)
        predicted, measured = gl.engines.mlp.predicted_gain(r, engine, act, init)
        assert predicted == pytest.approx(measured, rel=0.1)
    r = engine.report(20, "sigmoid", "glorot_uniform")
    assert gl.engines.mlp.predicted_gain(r, engine, "sigmoid", "glorot_uniform")[0] < 0.3


def test_activation_curves_derivatives():
    z, curves = gl.models.mlp.activation_curves(["sigmoid", "relu"], z=[-1.0, 0.0, 2.0])
    s = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(curves["sigmoid"][1], s * (1 - s), rtol=1e-5)
    np.testing.assert_array_equal(curves["relu"][1], [0.0, 0.0, 1.0])


def test_report_str_is_rounded():
    r = gl.GradientReport(np.array([1.23456789, 2.0]), np.array([1.0, 2.0]), np.array([1.0, 2.0]),
                          np.array([0.5, 0.5]), 0.617, "healthy", "fine", 0.123456, None)
    text = str(r)
    assert "1.23," in text and "1.2345" not in text and "loss 0.123" in text


# ----------------------------------------------------------------------------- issue 11
def _embedding_grad():
    """An Embedding's IndexedSlices gradient with a duplicated row (token 2 appears twice)."""
    keras.utils.set_random_seed(0)
    emb = keras.layers.Embedding(5, 3)
    ids = tf.constant([[2, 2, 4]])
    emb(ids)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(emb(ids) * tf.constant([[[1e-3, -2e-3, 3e-3]] * 3]))
    return tape.gradient(loss, emb.embeddings), emb.embeddings


def test_clip_by_value_of_indexed_slices_bounds_the_dense_gradient():
    g, _ = _embedding_grad()
    assert isinstance(g, tf.IndexedSlices)
    dense = tf.convert_to_tensor(g).numpy()
    assert np.abs(dense).max() > 1e-3  # the duplicate row sums above the bound
    clipped = tf.convert_to_tensor(gl.clip_gradients([g], ("value", 1e-3))[0]).numpy()
    assert np.abs(clipped).max() <= 1e-3 + 1e-9
    np.testing.assert_allclose(clipped, np.clip(dense, -1e-3, 1e-3), rtol=1e-6)
    # tf.clip_by_value on the raw slices leaves the summed row above the bound
    raw = tf.convert_to_tensor(tf.IndexedSlices(tf.clip_by_value(g.values, -1e-3, 1e-3), g.indices,
                                                g.dense_shape)).numpy()
    assert np.abs(raw).max() > 1e-3


def test_norm_clipping_and_global_norm_of_indexed_slices_use_the_dense_gradient():
    g, _ = _embedding_grad()
    dense = tf.convert_to_tensor(g)
    true = float(np.linalg.norm(dense.numpy().astype(np.float64)))
    assert float(gl.core.global_norm([g])) == pytest.approx(true, rel=1e-6)
    assert gl.true_global_norm([g]) == pytest.approx(true, rel=1e-6)
    assert float(tf.linalg.global_norm([g])) != pytest.approx(true, rel=1e-3)  # tf's own: slices
    t = true / 2
    for mode in ("norm", "global_norm"):
        out = tf.convert_to_tensor(gl.clip_gradients([g], (mode, t))[0]).numpy()
        np.testing.assert_allclose(out, dense.numpy() * (t / true), rtol=1e-5)


@pytest.mark.parametrize("mode", gl.core.CLIP_MODES)
def test_clip_gradients_passes_none_through(mode):
    g = tf.constant([3.0, -4.0])
    out = gl.clip_gradients([None, g], (mode, 1.0))
    assert out[0] is None
    ref = {"value": tf.clip_by_value(g, -1.0, 1.0), "norm": tf.clip_by_norm(g, 1.0),
           "global_norm": tf.clip_by_global_norm([g], 1.0)[0][0]}[mode]
    np.testing.assert_array_equal(out[1].numpy(), ref.numpy())


def test_diagnose_with_a_none_is_a_clear_error_not_an_overflow():
    with pytest.raises(ValueError, match="None"):
        gl.diagnose([0.5, None, 0.2])


def test_train_mlp_refuses_a_y_that_would_broadcast():
    x, y = gl.models.mlp.make_data(16, 4)
    model = gl.models.mlp.build_mlp(2, width=4, input_dim=4)
    with pytest.raises(ValueError, match=r"y has shape \(16,\).*Reshape y"):
        gl.train.steps.train_mlp(model, x, tf.squeeze(y, 1), optimizer=keras.optimizers.SGD(0.1), steps=2, progress=False)


def test_train_mlp_is_a_view_of_train_steps():
    x, y = gl.models.mlp.make_data(16, 4)
    a, b = gl.models.mlp.build_mlp(3, width=4, input_dim=4), gl.models.mlp.build_mlp(3, width=4, input_dim=4)
    hist = gl.train.steps.train_mlp(a, x, y, optimizer=keras.optimizers.SGD(0.1), steps=3, progress=False)
    run = gl.train_steps(b, x, y, optimizer=keras.optimizers.SGD(0.1), steps=3)
    np.testing.assert_allclose(hist.losses, run.losses, rtol=1e-5)
    np.testing.assert_allclose(hist.global_norms, run.global_norms, rtol=1e-4)
    assert hist.signal_matrix.shape == (3, 3)
    # step 1's signals equal gradient_report's on the untrained twin
    c = gl.models.mlp.build_mlp(3, width=4, input_dim=4)
    np.testing.assert_allclose(hist.signal_norms[0], gl.gradient_report(c, x, y).signal_norms, rtol=1e-5)


def test_gradient_report_on_a_residual_block_model_from_its_own_call():
    """Blocks Dense -> LayerNormalization -> Activation -> Add, as gl.models.mlp.build_mlp(residual=True) makes."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,))
    h = inp
    for i in range(1, 3):
        z = keras.layers.Dense(4, name=f"hidden_{i}")(h)
        a = keras.layers.Activation("tanh", name=f"act_{i}")(keras.layers.LayerNormalization(name=f"norm_{i}")(z))
        h = keras.layers.Add(name=f"residual_{i}")([h, a])
    model = keras.Model(inp, keras.layers.Dense(1, name="output")(h))
    x, y = gl.models.mlp.make_data(16, 4)
    rep = gl.gradient_report(model, x, y)
    d1, d2 = model.get_layer("hidden_1"), model.get_layer("hidden_2")
    n1, n2, out = model.get_layer("norm_1"), model.get_layer("norm_2"), model.get_layer("output")
    with tf.GradientTape() as tape:
        z1 = tf.matmul(x, d1.kernel) + d1.bias
        tape.watch(z1)
        h1 = x + tf.tanh(n1(z1))
        z2 = tf.matmul(h1, d2.kernel) + d2.bias
        tape.watch(z2)
        h2 = h1 + tf.tanh(n2(z2))
        loss = tf.reduce_mean(tf.square(y - out(h2)))
    g1, g2 = tape.gradient(loss, [z1, z2])
    assert rep.loss == pytest.approx(float(loss), rel=1e-6)
    np.testing.assert_allclose(rep.signal_norms, [float(tf.norm(g1)), float(tf.norm(g2))], rtol=1e-5)
    np.testing.assert_allclose(rep.activation_stds, [float(tf.math.reduce_std(h1)), float(tf.math.reduce_std(h2))],
                               rtol=1e-5)


def test_true_norm_of_none_names_the_argument():
    with pytest.raises(ValueError, match=r"^t is None"):
        gl.true_norm(None)
    assert gl.true_norm(tf.constant([3.0, 4.0])) == 5.0


def test_gradient_report_and_check_trains_need_y():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                          keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    x = tf.random.stateless_normal([8, 4], seed=[1, 2])
    with pytest.raises(ValueError, match=r"^y is None"):
        gl.gradient_report(m, x, None)
    result = gl.exercises.checks.check_trains("c", m, x, None, optimizer=keras.optimizers.SGD(), steps=1, below=1.0)
    assert not result.ok and "y is None" in str(result)


def test_gradient_report_reads_a_dense_model_behind_an_adapted_normalization():
    """A preprocessing layer with only non-trainable weights is part of the input (issue 29, matrix 3)."""
    import keras
    import numpy as np

    import gradlab as gl

    keras.utils.set_random_seed(1)
    x = np.random.default_rng(0).normal(3.0, 2.0, (32, 4)).astype("float32")
    y = x[:, :1] * 0.5
    norm = keras.layers.Normalization()
    norm.adapt(x)
    model = keras.Sequential([keras.Input((4,)), norm, keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    r = gl.gradient_report(model, x, y)
    plain = keras.Sequential([keras.Input((4,)), *[keras.layers.Dense.from_config(layer.get_config())
                                                   for layer in model.layers[1:]]])
    plain.set_weights(model.get_weights()[3:])  # Normalization holds mean, variance, count
    r2 = gl.gradient_report(plain, norm(x), y)
    np.testing.assert_allclose(r.weight_norms, r2.weight_norms, rtol=1e-5)
    conv = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3), keras.layers.Flatten(),
                             keras.layers.Dense(4), keras.layers.Dense(1)])
    import pytest
    with pytest.raises(ValueError, match="found Conv2D"):
        gl.dense_layers(conv) if hasattr(gl, "dense_layers") else gl.reports.gradients.dense_layers(conv)
