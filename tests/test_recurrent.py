"""Gradients through time (chapter 07): BPTT, the Keras report, the fast engine, the TimeExplorer."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import gradlab as gl
from gradlab.models import rnn as rnn_models
from gradlab.reports import time as time_reports
from gradlab.topics import rnn_theory as T

tf = gl.session.quiet_import_tensorflow()


@pytest.fixture(scope="module")
def engine():
    return gl.engines.rnn.TimeGradientEngine(units=16, input_dim=4, batch_size=8, max_steps=60)


@pytest.fixture(scope="module")
def ex():
    return gl.TimeExplorer(cell="simple_rnn", steps=50)


# ----------------------------------------------------------------------------- BPTT by hand
def _tiny(seed=0, steps=7, scale=0.8):
    rng = np.random.default_rng(seed)
    w_rec = rng.normal(size=(5, 5)) * scale / np.sqrt(5)
    w_in = rng.normal(size=(3, 5))
    w_out = rng.normal(size=(5, 1))
    x = rng.normal(size=(4, steps, 3))
    y = rng.normal(size=(4, 1))
    return w_rec, w_in, w_out, x, y


def test_bptt_reference_matches_finite_differences():
    w_rec, w_in, w_out, x, y = _tiny()
    ref = T.bptt_reference(w_rec, w_in, w_out, x, y)
    eps = 1e-6
    for (b, t, f) in [(0, 0, 0), (2, 3, 1), (3, 6, 2)]:
        xp, xm = x.copy(), x.copy()
        xp[b, t, f] += eps
        xm[b, t, f] -= eps
        fd = (T.bptt_reference(w_rec, w_in, w_out, xp, y)["loss"]
              - T.bptt_reference(w_rec, w_in, w_out, xm, y)["loss"]) / (2 * eps)
        assert ref["dx"][b, t, f] == pytest.approx(fd, rel=1e-5, abs=1e-10)
    i, j = 1, 2
    wp, wm = w_rec.copy(), w_rec.copy()
    wp[i, j] += eps
    wm[i, j] -= eps
    fd = (T.bptt_reference(wp, w_in, w_out, x, y)["loss"] - T.bptt_reference(wm, w_in, w_out, x, y)["loss"]) / (2 * eps)
    assert ref["d_w_rec"][i, j] == pytest.approx(fd, rel=1e-5)


def test_tape_on_tiny_rnn_equals_bptt_reference():
    w_rec, w_in, w_out, x, y = (tf.constant(a, tf.float64) for a in _tiny(seed=1))
    with tf.GradientTape() as tape:
        tape.watch([x, w_rec])
        h = tf.zeros([4, 5], tf.float64)
        for t in range(x.shape[1]):
            h = tf.tanh(h @ w_rec + x[:, t] @ w_in)
        loss = tf.reduce_mean(tf.square(h @ w_out - y))
    dx, dw = tape.gradient(loss, [x, w_rec])
    ref = T.bptt_reference(w_rec, w_in, w_out, x, y)
    np.testing.assert_allclose(dx.numpy(), ref["dx"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dw.numpy(), ref["d_w_rec"], rtol=1e-10, atol=1e-14)


def test_keras_simple_rnn_time_report_equals_bptt_reference():
    """The Keras SimpleRNN (bias 0 at init) is the tiny RNN with a readout bias of 0."""
    model = rnn_models.build_rnn("simple_rnn", 8, 3, seed=2)
    k, r, b, ok, ob = model.get_weights()
    assert not b.any() and not ob.any()
    x, y = rnn_models.make_sequence_data(5, 30, 3, seed=4)
    rep = time_reports.time_report(model, x, y)
    ref = T.bptt_reference(r, k, ok, x, y)
    assert rep.steps == 30
    np.testing.assert_allclose(rep.time_step_norms, ref["time_step_norms"], rtol=2e-4)
    assert rep.loss == pytest.approx(ref["loss"], rel=1e-5)


def test_pascanu_bound_caps_the_gain_and_forces_vanishing_below_one():
    w_rec, w_in, w_out, x, y = _tiny(seed=3, steps=40)
    q = np.linalg.qr(np.random.default_rng(5).normal(size=(5, 5)))[0]
    for s in (0.5, 0.8, 1.0, 1.5, 2.5):
        bound = T.pascanu_bound(s * q)
        assert bound["sigma_max"] == pytest.approx(s, rel=1e-9)
        for scale in (0.01, 1.0):
            n = T.bptt_reference(s * q, w_in, w_out, scale * x, y)["state_norms"]
            # each step back multiplies dLoss/dh by at most sigma_max
            assert np.all(n[:-1] <= n[1:] * s * (1 + 1e-9))
    small = T.bptt_reference(0.5 * q, w_in, w_out, 0.01 * x, y)["time_step_norms"]
    assert gl.diagnose(small)[0] == "vanishing"
    with pytest.raises(ValueError, match="square"):
        T.pascanu_bound(np.ones((2, 3)))


# ----------------------------------------------------------------------------- data
def test_adding_problem():
    x, y = T.adding_problem(500, 40, seed=3)
    assert x.shape == (500, 40, 2) and y.shape == (500, 1)
    marks = x[..., 1].numpy()
    assert np.all(marks.sum(axis=1) == 2)
    assert np.all(marks[:, :20].sum(axis=1) == 1)  # one mark in each half
    np.testing.assert_allclose(y.numpy()[:, 0], (x[..., 0] * x[..., 1]).numpy().sum(axis=1), rtol=1e-6)
    x2, _ = T.adding_problem(500, 40, seed=3)
    np.testing.assert_array_equal(x.numpy(), x2.numpy())
    baseline = float(np.mean((y.numpy() - 1.0) ** 2))
    assert baseline == pytest.approx(1 / 6, abs=0.03)


def test_sequence_data_prefix_is_stable():
    x50, y50 = rnn_models.make_sequence_data(4, 50, 3, seed=1)
    x20, y20 = rnn_models.make_sequence_data(4, 20, 3, seed=1)
    np.testing.assert_array_equal(x50.numpy()[:, :20], x20.numpy())
    np.testing.assert_array_equal(y50.numpy(), y20.numpy())


# ----------------------------------------------------------------------------- the engine
@pytest.mark.parametrize("cell", list(rnn_models.CELLS))
@pytest.mark.parametrize("init", ["orthogonal", "identity", "normal_2", "large_normal"])
def test_engine_matches_keras_layers(engine, cell, init):
    steps, scale, clip = 23, 0.7, ("global_norm", 0.05)
    rep = engine.report(cell, steps, init, scale, clip)
    model = rnn_models.build_rnn(cell, 16, 4, recurrent_initializer=init, seed=0)
    ref = time_reports.time_report(model, engine.x[:, :steps] * scale, engine.y, clip=clip)
    np.testing.assert_allclose(rep.time_step_norms, ref.time_step_norms, rtol=1e-4)
    np.testing.assert_allclose(rep.weight_norms, ref.weight_norms, rtol=1e-4)
    np.testing.assert_allclose(rep.clipped_weight_norms, ref.clipped_weight_norms, rtol=1e-4)
    assert rep.status == ref.status and rep.loss == pytest.approx(ref.loss, rel=1e-5)


def test_engine_clip_modes_follow_tf_ops(engine):
    k, r, b, ok, ob = engine.weights("gru", "orthogonal")
    model = rnn_models.build_rnn("gru", 16, 4, seed=0)
    x, y = engine.x[:, :15], engine.y
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_weights)
    for mode in gl.core.CLIP_MODES:
        clipped = gl.clip_gradients(grads, (mode, 0.03))
        expected = [np.linalg.norm(g.numpy().astype(np.float64)) for g in clipped]
        rep = engine.report("gru", 15, clip=(mode, 0.03))
        np.testing.assert_allclose(rep.clipped_weight_norms, expected, rtol=1e-4)


def test_ratio_falls_with_sequence_length_and_steps_sets_the_length(engine):
    ratios = []
    for steps in (5, 10, 20, 40, 60):
        rep = engine.report("simple_rnn", steps)
        assert rep.steps == steps and rep.time_step_norms.size == steps
        ratios.append(rep.ratio)
    assert all(a > b for a, b in zip(ratios[:-1], ratios[1:], strict=True))
    assert ratios[-1] < 1e-6 and engine.report("simple_rnn", 5).status == "healthy"


def test_input_scale_saturates(engine):
    small = engine.report("simple_rnn", 50, "orthogonal", 0.01)
    large = engine.report("simple_rnn", 50, "orthogonal", 3.0)
    assert small.status == "healthy" and large.status == "vanishing"
    assert large.ratio < small.ratio * 1e-6


def test_no_retrace_per_control_change(engine):
    for cell in rnn_models.CELLS:
        engine.report(cell, 10)
    before = engine.tracing_count()
    for i, cell in enumerate(list(rnn_models.CELLS) * 3):
        engine.report(cell, 5 + 6 * i, list(rnn_models.RECURRENT_INITIALIZERS)[i % 5], 10 ** (i % 3 - 1),
                      (gl.core.CLIP_MODES[i % 3], 0.1 * (i + 1)) if i % 2 else None)
    assert engine.tracing_count() - before == 0


def test_bad_input_raises_value_error(engine):
    with pytest.raises(ValueError, match="cell must be one of"):
        engine.report("transformer", 10)
    with pytest.raises(ValueError, match="steps must be 1 to 60; got 61"):
        engine.report("lstm", 61)
    with pytest.raises(ValueError, match="input_scale"):
        engine.report("lstm", 10, input_scale=0)
    with pytest.raises(ValueError, match="recurrent_initializer"):
        engine.report("lstm", 10, "zeros")
    with pytest.raises(ValueError, match=r"x has shape \(3, 2\), but the model expects \(batch, None, 2\)"):
        time_reports.time_report(rnn_models.build_rnn("lstm", 4, 2), np.zeros((3, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"y has shape \(3,\) but the model's output has shape \(3, 1\)"):
        time_reports.time_report(rnn_models.build_rnn("lstm", 4, 2), np.zeros((3, 5, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="sample_weight must hold one weight per example"):
        time_reports.time_report(rnn_models.build_rnn("lstm", 4, 2), np.zeros((3, 5, 2)), np.zeros((3, 1)), sample_weight=[1.0, 2.0])
    with pytest.raises(ValueError, match="steps"):
        gl.TimeExplorer(steps=201)


# ----------------------------------------------------------------------------- training, cliff
def test_train_rnn_lowers_the_loss_reproducibly():
    x, y = T.adding_problem(256, 10, seed=1)
    runs = []
    for _ in range(2):
        model = rnn_models.build_rnn("gru", 8, 2, seed=1)
        runs.append(T.train_rnn(model, x, y, train_steps=60, batch_size=32, learning_rate=0.02))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0][-10:].mean() < 0.5 * runs[0][:5].mean()


def test_cliff_has_a_wall_and_clipping_bounds_the_step():
    b = np.linspace(-4.6, -4.4, 2001)
    loss = T.cliff_loss(np.full_like(b, 8.0), b)
    jump = np.max(np.abs(np.diff(loss)))
    assert jump > 10  # a jump of ~19.5 between neighbours 1e-4 apart
    plain = T.descent_path(6.25, -3.9, learning_rate=0.05, iterations=30)
    clipped = T.descent_path(6.25, -3.9, learning_rate=0.05, iterations=30, clip=1.0)
    assert plain["grad_norms"].max() > 1e3
    steps = np.linalg.norm(np.diff(clipped["points"], axis=0), axis=1)
    assert steps.max() <= 0.05 * 1.0 + 1e-12
    assert clipped["losses"][-1] < clipped["losses"][0] < plain["losses"][-1]
    # the tape's gradient against a finite difference of cliff_loss, away from the wall
    eps = 1e-6
    one = T.descent_path(5.0, -2.0, learning_rate=1.0, iterations=1)
    g = one["points"][0] - one["points"][1]  # lr 1: the step is the gradient
    fd = (T.cliff_loss(5.0 + eps, -2.0) - T.cliff_loss(5.0 - eps, -2.0)) / (2 * eps)
    assert g[0] == pytest.approx(float(fd), rel=1e-5)


# ----------------------------------------------------------------------------- the explorer
def test_explorer_controls(ex):
    # the page's form controls are named after the Python controls, in order
    assert [c["name"] for c in ex.spec] == ["cell", "steps", "recurrent_initializer", "input_scale", "clip_mode",
                                            "clip_norm"]
    assert ex.kind == "TimeExplorer" and ex.axis == "steps"
    assert (ex.steps.min, ex.steps.max) == (5, 200)
    assert list(ex.cell.options) == ["simple_rnn", "gru", "lstm"]
    assert {"orthogonal", "glorot_uniform", "normal_0.5", "normal_2", "identity"} == {
        v for _, v in ex.recurrent_initializer.options}
    assert list(ex.clip_mode.options) == ["off", "value", "norm", "global_norm"]


def test_explorer_report_is_current_and_plot_follows(ex):
    ex.set(cell="simple_rnn", steps=50, recurrent_initializer="orthogonal", input_scale=1.0,
           clip_mode="off")
    ex.steps.value = 120
    r = ex.report
    assert r.steps == 120 and r.status == "vanishing"
    left = ex.view["plots"][0]
    np.testing.assert_array_equal(left["series"][0]["y"], r.time_step_norms)
    assert left["x"] == list(range(1, 121))
    ex.input_scale.value = 0.01
    assert ex.report.status == "healthy"
    assert ex.status_text.startswith("simple_rnn · 120 steps · orthogonal · input ×0.01 · clip off → healthy")
    view = ex.view
    ex.cell.value = "lstm"
    assert ex.report.steps == 120 and ex.view["plots"] != view["plots"]
    ex.clip_mode.value = "norm"
    ex.clip_norm.value = 1e-3
    assert ex.report.clip == ("norm", pytest.approx(1e-3))
    np.testing.assert_allclose(ex.report.clipped_weight_norms, np.minimum(ex.report.weight_norms, 1e-3), rtol=1e-6)
    assert "clip norm ≤ 0.001" in ex.status_text and not ex.clip_norm.disabled
    ex.clip_mode.value = "off"
    assert ex.clip_norm.disabled and ex.report.clip is None


def test_explorer_does_not_retrace(ex):
    for cell in rnn_models.CELLS:
        ex.cell.value = cell
    before = ex.engine.tracing_count()
    for steps in range(5, 201, 15):
        ex.steps.value = steps
    ex.input_scale.value = 2.0
    ex.recurrent_initializer.value = "identity"
    ex.clip_mode.value = "value"
    ex.clip_norm.value = 0.5
    ex.cell.value = "gru"
    assert ex.engine.tracing_count() - before == 0


def test_explorer_snapshot_and_static_bundle(ex):
    ex.set(cell="gru", steps=30, clip_mode="off", input_scale=1.0)
    snap = ex.snapshot()
    assert snap.png[:8] == b"\x89PNG\r\n\x1a\n"
    assert repr(ex) == f"TimeExplorer({snap.text})" and "gru · 30 steps" in snap.text
    bundle = ex._repr_mimebundle_()
    assert "image/png" in bundle and bundle["text/plain"] == repr(ex)
    with pytest.raises(ValueError, match="unknown control"):
        ex.set(depth=3)


# ----------------------------------------------------------------------------- exercises
def _norms(dtype):
    def step_norms(model, x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_mean(tf.square(model(x) - y))
        dx = tf.cast(tape.gradient(loss, x), dtype)
        return tf.sqrt(tf.reduce_sum(tf.square(dx), axis=[0, 2]))
    return step_norms


def test_ch07_step_norms_check():
    from gradlab.exercises import ch07

    assert ch07.check_step_norms(_norms(tf.float64))
    r = ch07.check_step_norms(_norms(tf.float32))
    assert not r and "float64" in r.feedback
    r = ch07.check_step_norms(lambda m, x, y: _norms(tf.float64)(m, x, y)[::-1])
    assert not r and "reversed" in r.feedback
    r = ch07.check_step_norms(lambda m, x, y: tf.norm(tf.cast(_dx(m, x, y), tf.float64), axis=2))
    assert not r and "(16, 60)" in r.feedback
    assert not ch07.check_step_norms(None)


def _dx(model, x, y):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape.gradient(loss, x)


def test_ch07_longest_healthy_check():
    from gradlab.exercises import ch07

    eng = gl.engines.rnn.TimeGradientEngine()
    truth = max(s for s in range(2, 40) if eng.report("lstm", s).status == "healthy")
    assert eng.report("lstm", truth + 1).status == "vanishing"
    assert ch07.check_longest_healthy(truth)
    assert "try more" in ch07.check_longest_healthy(truth - 2).feedback
    assert "try fewer" in ch07.check_longest_healthy(truth + 3).feedback
    assert not ch07.check_longest_healthy("9") and not ch07.check_longest_healthy(None)


def test_ch07_clipped_step_check():
    from gradlab.exercises import ch07

    def step(clip):
        def fn(model, opt, x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = clip(tape.gradient(loss, model.trainable_weights))
            opt.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        return fn

    assert ch07.check_clipped_step(step(lambda g: tf.clip_by_global_norm(g, 1.0)[0]))
    r = ch07.check_clipped_step(step(lambda g: [tf.clip_by_norm(t, 1.0) for t in g]))
    assert not r and "on its own" in r.feedback
    r = ch07.check_clipped_step(step(lambda g: g))
    assert not r and "unclipped" in r.feedback
    assert "did not change" in ch07.check_clipped_step(lambda *a: None).feedback


def test_a_mask_that_never_reaches_the_rnn_leaves_no_step_out():
    # Conv1D drops the Masking layer's mask, so the GRU reads the zero padding as data: every step
    # then counts, with the plain tape's norm (R1's probe: the tool left steps out and rescaled them)
    keras.utils.set_random_seed(0)
    lengths = np.array([6, 5, 4, 3, 2, 6, 1, 3])
    x = np.random.default_rng(0).normal(size=(8, 6, 3)).astype("float32")
    x[np.arange(6)[None, :] >= lengths[:, None]] = 0.0
    y = np.random.default_rng(1).normal(size=(8, 1)).astype("float32")
    model = keras.Sequential([keras.Input((6, 3)), keras.layers.Masking(0.0),
                              keras.layers.Conv1D(4, 2, padding="causal"), keras.layers.GRU(4), keras.layers.Dense(1)])
    model.compile(loss="mse")
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        loss = tf.reduce_mean(tf.square(model(xt) - y))
    dx = tape.gradient(loss, xt).numpy().astype(np.float64)
    reference = np.sqrt((dx ** 2).sum(axis=(0, 2)))
    report = gl.time_report(model, x, y)
    np.testing.assert_allclose(report.time_step_norms, reference, rtol=1e-5)
    # straight on the Masking layer, the GRU gets the mask: its padded steps are left out as before
    direct = keras.Sequential([keras.Input((6, 3)), keras.layers.Masking(0.0), keras.layers.GRU(4),
                               keras.layers.Dense(1)])
    direct.compile(loss="mse")
    x_pad = x.copy()
    x_pad[:, 4:] = 0.0  # the last two steps are padding in every sequence
    assert gl.time_report(direct, x_pad, y).time_step_norms.size == 4


def test_ch07_longest_healthy_the_explorers_top_is_judged_not_refused():
    # issue 38: 200, the explorer's longest sequence, got "200 is outside 2..199"
    from gradlab.exercises import ch07

    top = gl.engines.rnn.TimeGradientEngine().max_steps
    r = ch07.check_longest_healthy(top)
    assert not r and "outside" not in r.feedback and "try fewer" in r.feedback, r.feedback
    assert f"outside 2..{top}" in ch07.check_longest_healthy(top + 1).feedback
