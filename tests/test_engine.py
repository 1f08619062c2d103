"""The explorer's engine in chapter 05's modes, against Keras models and the issue's numbers.

References are independent of the engine's scan-with-probes: Keras models from
``gl.models.mlp.build_mlp`` (functional for residual/norm), differentiated with an eager tape
(``gl.gradient_report`` for the per-layer signal; a plain tape over the kernels for the
weight gradients, also under Keras's mixed-precision policies).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab.engines import presets
from gradlab.engines.mlp import _act_np, predicted_signal

FLOAT32_MODES = [(r, n) for r in (False, True) for n in ("none", "batch", "layer")]


def keras_weight_norms(model, x, y, *, loss_scale=1.0):
    """Float64 norms of dLoss/dKernel of every hidden Dense layer, by an eager tape over Keras."""
    kernels = [layer.kernel for layer in model.layers
               if isinstance(layer, keras.layers.Dense) and layer.name.startswith("hidden_")]
    with tf.GradientTape() as tape:
        out = tf.cast(model(x, training=True), tf.float32)
        loss = tf.reduce_mean(tf.square(out - y)) * loss_scale
    grads = tape.gradient(loss, kernels)
    return np.array([gl.true_norm(g) for g in grads]) / loss_scale, float(loss) / loss_scale


@pytest.mark.parametrize("residual,norm", FLOAT32_MODES)
def test_engine_matches_keras_tape_weight_gradients(engine, residual, norm):
    depth = 12
    model = gl.models.mlp.build_mlp(depth, activation="tanh", initializer="glorot_uniform",
                         residual=residual, norm=None if norm == "none" else norm)
    ref, loss = keras_weight_norms(model, engine.x, engine.y)
    fast = engine.report(depth, "tanh", "glorot_uniform", residual=residual, norm=norm)
    np.testing.assert_allclose(fast.weight_norms, ref, rtol=2e-3)
    assert fast.loss == pytest.approx(loss, rel=1e-4)


@pytest.mark.parametrize("residual,norm", FLOAT32_MODES)
def test_engine_agrees_with_gradient_report(engine, residual, norm):
    """The contract with gradient_report: same weights, same per-layer numbers, in every mode."""
    depth = 10
    model = gl.models.mlp.build_mlp(depth, activation="sigmoid", initializer="glorot_uniform",
                         residual=residual, norm=None if norm == "none" else norm)
    slow = gl.gradient_report(model, engine.x, engine.y)
    fast = engine.report(depth, "sigmoid", "glorot_uniform", residual=residual, norm=norm)
    np.testing.assert_allclose(fast.signal_norms, slow.signal_norms, rtol=2e-3)
    np.testing.assert_allclose(fast.weight_norms, slow.weight_norms, rtol=2e-3)
    np.testing.assert_allclose(fast.activation_stds, slow.activation_stds, rtol=2e-3)
    assert fast.status == slow.status


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("loss_scale", [1.0, 2.0**15])
def test_mixed_precision_matches_keras_policy(engine, dtype, loss_scale):
    """Engine vs a Keras model built under mixed_float16/mixed_bfloat16, loss scaled as LossScaleOptimizer."""
    keras.mixed_precision.set_global_policy(f"mixed_{dtype}")
    try:
        model = gl.models.mlp.build_mlp(14, activation="sigmoid", initializer="glorot_uniform")
        assert model.layers[0].compute_dtype == dtype and model.layers[-1].compute_dtype == "float32"
        ref, _ = keras_weight_norms(model, engine.x, engine.y, loss_scale=loss_scale)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    fast = engine.report(14, "sigmoid", "glorot_uniform", dtype=dtype, loss_scale=loss_scale)
    np.testing.assert_array_equal(fast.weight_norms == 0, ref == 0)  # the same exact zeros
    nz = ref > 0
    np.testing.assert_allclose(fast.weight_norms[nz], ref[nz], rtol=0.05)


def test_float16_underflow_is_real_and_loss_scaling_fixes_it(engine):
    plain = engine.report(14, "sigmoid", "glorot_uniform", dtype="float16")
    zeros = np.flatnonzero(plain.signal_norms == 0) + 1
    np.testing.assert_array_equal(zeros, np.arange(1, 6))  # layers 1-5 are exactly 0
    assert "float16" in plain.message and "float32" not in plain.message
    f32 = engine.report(14, "sigmoid", "glorot_uniform")
    rms = f32.signal_norms / math.sqrt(128 * 64)  # the typical element of dL/dz
    assert np.all(rms[:5] < 2.0**-24)  # below float16's smallest subnormal: rounds to 0
    scaled = engine.report(14, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=2.0**15)
    assert np.all(scaled.signal_norms > 0)
    np.testing.assert_allclose(scaled.signal_norms, f32.signal_norms, rtol=0.05)
    assert np.all(engine.report(16, "sigmoid", "glorot_uniform", dtype="float16",
                                loss_scale=2.0**15).signal_norms > 0)
    assert engine.report(17, "sigmoid", "glorot_uniform", dtype="float16",
                         loss_scale=2.0**15).signal_norms[0] == 0
    assert np.all(engine.report(14, "sigmoid", "glorot_uniform", dtype="bfloat16").signal_norms > 0)
    # too large a scale overflows float16 (what dynamic loss scaling detects)
    assert engine.report(14, "sigmoid", "glorot_uniform", dtype="float16",
                         loss_scale=2.0**24).status == "non-finite"


def test_issue_numbers(engine):
    plain = engine.report(50, "sigmoid", "glorot_uniform")
    assert plain.ratio < 1e-30 and plain.status == "vanishing"
    res = engine.report(50, "sigmoid", "glorot_uniform", residual=True)
    assert 1 < res.ratio < 30 and res.status == "healthy"
    blowup = engine.report(100, "relu", "he_normal", residual=True)
    assert blowup.status == "non-finite"  # the forward pass overflows: variance grows every block
    ln = engine.report(100, "relu", "he_normal", residual=True, norm="layer")
    assert 20 < ln.ratio < 300 and np.all(np.isfinite(ln.signal_norms))
    bn = engine.report(50, "sigmoid", "glorot_uniform", norm="batch")
    assert 0.3 < bn.ratio < 3 and bn.status == "healthy"


def test_no_retrace_in_any_mode(engine):
    # every value of every mode axis at least once (all 18 combinations would take 20 s)
    modes = [dict(residual=False, norm="none", dtype="float32"),
             dict(residual=True, norm="batch", dtype="float16"),
             dict(residual=False, norm="layer", dtype="bfloat16"),
             dict(residual=True, norm="none", dtype="float32")]
    for m in modes:  # warm-up: one trace per mode
        engine.report(3, "tanh", "he_normal", **m)
    before = engine.tracing_count()
    for i, m in enumerate(modes):
        for depth in (1, 7, 40, 100):
            engine.report(depth, "tanh", "he_normal", ("global_norm", 10.0 ** (i % 5 - 2)),
                          loss_scale=2.0 ** (i % 16), **m)
    assert engine.tracing_count() - before == 0


def test_numpy_activations_match_keras():
    z = np.linspace(-7, 7, 56)  # not 0: the kinks' one-sided derivatives differ
    for name in gl.models.mlp.ACTIVATIONS:
        act = keras.activations.get(name)
        zt = tf.constant(z, tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(zt)
            f = act(zt)
        f_np, d_np = _act_np(name, z)
        np.testing.assert_allclose(f_np, f.numpy(), rtol=1e-6, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(d_np, tape.gradient(f, zt).numpy(), rtol=1e-6, atol=1e-9,
                                   err_msg=name)


@pytest.mark.parametrize("act,init,depth,decades", [
    ("sigmoid", "glorot_uniform", 50, 1.0),  # ratio ~1e-31: theory within a decade
    ("relu", "glorot_uniform", 30, 0.5),
    ("tanh", "orthogonal", 100, 0.3),
    ("linear", "orthogonal", 100, 0.05),
    ("selu", "lecun_normal", 100, 0.5),
])
def test_theory_curve_follows_measurement(engine, act, init, depth, decades):
    r = engine.report(depth, act, init)
    p = r.predicted_signal
    assert p is not None and p.shape == (depth,) and p[-1] == r.signal_norms[-1]
    assert abs(math.log10(p[0] / r.signal_norms[0])) < decades


def test_theory_gain_formula(engine):
    """Without residual or norm the predicted per-layer factor is sqrt(n Var W E[f'(z)^2])."""
    r = engine.report(6, "relu", "he_normal")
    p = predicted_signal(engine, r, "relu", "he_normal")
    var_w = engine.kernel_variances("he_normal")[:6]
    np.testing.assert_allclose(p[:-1] / p[1:], np.sqrt(64 * var_w[1:] * 0.5), rtol=1e-6)


def test_theory_is_none_where_not_implemented(engine):
    assert engine.report(14, "sigmoid", "glorot_uniform", dtype="float16").predicted_signal is None
    assert engine.report(14, "sigmoid", "glorot_uniform", dtype="bfloat16").predicted_signal is None
    assert engine.report(10, "relu", "zeros").predicted_signal is None  # nothing to anchor to
    res = engine.report(50, "sigmoid", "glorot_uniform", residual=True, norm="layer")
    assert res.predicted_signal is not None and np.all(res.predicted_signal > 0)


def test_presets_reproduce_the_papers(engine):
    assert len(presets.PRESETS) >= 6
    results = {k: presets.run_preset(k, engine)[1] for k in presets.PRESETS}
    got = {k: r.measured for k, r in results.items()}
    # the verdict tells close agreement (a ratio within 2x) from the same order of magnitude (within 10x)
    for key, r in results.items():
        if r.preset.quantity != "ratio":
            continue
        factor = max(r.measured / r.preset.paper_value, r.preset.paper_value / r.measured)
        verdict = gl.reports.advice.compare_with_paper(r).verdict
        if factor < 1.05:
            assert verdict == "agrees", (key, verdict)
        elif factor <= 2:
            assert verdict == f"agrees closely (×{factor:.2g})", (key, verdict)
        else:
            assert verdict.startswith(f"same order of magnitude (×{factor:.2g})") == (factor <= 10), (key, verdict)
    assert "closely" in gl.reports.advice.compare_with_paper(results["he2015_xavier"]).verdict
    assert "same order of magnitude" in gl.reports.advice.compare_with_paper(results["he2016_residual"]).verdict
    assert got["he2015_xavier"] == pytest.approx(2.0**-14.5, rel=0.6)
    assert 0.3 < got["he2015_he"] < 3
    assert got["glorot2010_standard"] < 0.6 < got["glorot2010_normalized"]
    assert got["saxe2014"] == pytest.approx(1.0, abs=1e-3)
    assert 0.95 < got["pennington2017"] < 1.0
    assert got["klambauer2017"] == pytest.approx(1.0, abs=0.1)
    assert got["he2016_residual"] > 1
    assert got["micikevicius2018_fp16"] >= 1 and got["micikevicius2018_scaled"] == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(norm="group"), "norm must be one of"),
    (dict(dtype="float64"), "dtype must be one of"),
    (dict(loss_scale=0), "loss_scale must be"),
    (dict(loss_scale=float("inf")), "loss_scale must be"),
    (dict(residual="yes"), "residual must be"),
])
def test_bad_mode_arguments(engine, kwargs, match):
    with pytest.raises(ValueError, match=match):
        engine.report(3, **kwargs)


def test_build_mlp_default_is_unchanged_and_blocks_are_named():
    plain = gl.models.mlp.build_mlp(3, activation="tanh")
    assert isinstance(plain, keras.Sequential)
    assert [layer.name for layer in plain.layers] == ["hidden_1", "hidden_2", "hidden_3", "output"]
    res = gl.models.mlp.build_mlp(3, activation="tanh", residual=True, norm="layer")
    names = [layer.name for layer in res.layers]
    for i in (1, 2, 3):
        assert {f"hidden_{i}", f"norm_{i}", f"act_{i}", f"residual_{i}"} <= set(names)
    # the same seeds: the kernels agree with the plain model's
    for i in (1, 2, 3):
        np.testing.assert_array_equal(res.get_layer(f"hidden_{i}").kernel.numpy(),
                                      plain.get_layer(f"hidden_{i}").kernel.numpy())
    with pytest.raises(ValueError, match="input_dim == width"):
        gl.models.mlp.build_mlp(3, residual=True, input_dim=8)
    with pytest.raises(ValueError, match="norm must be one of"):
        gl.models.mlp.build_mlp(3, norm="group")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_engine_agrees_with_gradient_report_under_mixed_policy(engine, dtype):
    """gradient_report of a Keras model built under mixed_<dtype>: the same exact zeros and norms."""
    keras.mixed_precision.set_global_policy(f"mixed_{dtype}")
    try:
        model = gl.models.mlp.build_mlp(14, activation="sigmoid", initializer="glorot_uniform", norm="layer")
        slow = gl.gradient_report(model, engine.x, engine.y)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    fast = engine.report(14, "sigmoid", "glorot_uniform", norm="layer", dtype=dtype)
    np.testing.assert_array_equal(fast.signal_norms == 0, slow.signal_norms == 0)
    nz = slow.signal_norms > 0
    np.testing.assert_allclose(fast.signal_norms[nz], slow.signal_norms[nz], rtol=0.05)
