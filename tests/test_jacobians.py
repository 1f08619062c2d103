"""Chapter 02's Jacobian helpers against analytic Jacobians, and the JacobianViewer headless."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl

X3 = np.array([1.0, -2.0, 0.5], dtype=np.float32)
W = np.array([[0.5, -1.0, 0.2], [0.3, 0.8, -0.4]], dtype=np.float32)  # 2 × 3


def softmax_analytic(x):
    s = np.exp(x - x.max())
    s = s / s.sum()
    return np.diag(s) - np.outer(s, s)


# ----------------------------------------------------------------------------- analytic Jacobians
@pytest.mark.parametrize("method", ["loop", "jacobian", "jacobian_no_pfor"])
def test_square_is_diag_2x(method):
    f = lambda x: x**2  # noqa: E731
    j = {
        "loop": lambda: gl.topics.jacobians.jacobian_loop(f, X3),
        "jacobian": lambda: gl.topics.jacobians.jacobian(f, X3),
        "jacobian_no_pfor": lambda: gl.topics.jacobians.jacobian(f, X3, experimental_use_pfor=False),
    }[method]()
    np.testing.assert_allclose(j, np.diag(2 * X3), rtol=1e-6)


def test_loop_works_on_a_variable_like_the_source():
    x = tf.Variable([1.0, 2.0, 3.0])
    np.testing.assert_allclose(gl.topics.jacobians.jacobian_loop(lambda v: v**2, x), np.diag([2.0, 4.0, 6.0]))


def test_softmax_jacobian_and_rows_sum_to_zero():
    x = np.array([0.3, -1.2, 2.0, 0.0], dtype=np.float32)
    j = gl.topics.jacobians.jacobian(tf.nn.softmax, x)
    np.testing.assert_allclose(j, softmax_analytic(x), atol=1e-6)
    np.testing.assert_allclose(j.sum(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(gl.topics.jacobians.jacobian_loop(tf.nn.softmax, x), j, atol=1e-6)


def test_matvec_tanh_jacobian():
    f = lambda x: tf.tanh(tf.linalg.matvec(W, x))  # noqa: E731
    expected = np.diag(1 - np.tanh(W @ X3) ** 2) @ W
    np.testing.assert_allclose(gl.topics.jacobians.jacobian(f, X3), expected, rtol=1e-5, atol=1e-6)
    assert gl.topics.jacobians.jacobian(f, X3).shape == (2, 3)


def test_dense_layer_jacobian_is_block_diagonal_and_batch_jacobian_matches_blocks():
    layer = tf.keras.layers.Dense(2, activation="tanh", kernel_initializer=tf.constant_initializer(W.T),
                                  bias_initializer=tf.constant_initializer([0.1, -0.2]))
    x = np.array([[1.0, 0.0, -1.0], [0.5, 0.5, 0.5], [-2.0, 1.0, 0.0]], dtype=np.float32)
    full = gl.topics.jacobians.jacobian(layer, x)
    assert full.shape == (3, 2, 3, 3)
    z = x @ W.T + np.array([0.1, -0.2])
    for b in range(3):
        expected = (1 - np.tanh(z[b]) ** 2)[:, None] * W  # diag(1 - tanh²(z_b)) W
        np.testing.assert_allclose(full[b, :, b, :], expected, rtol=1e-5, atol=1e-6)
    assert gl.topics.jacobians.cross_example_max(full) == 0.0
    bj = gl.topics.jacobians.batch_jacobian(layer, x)
    np.testing.assert_allclose(bj, gl.topics.jacobians.diagonal_blocks(full), atol=1e-6)


def test_batch_jacobian_is_silently_wrong_when_examples_are_coupled():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = lambda x: x - tf.reduce_mean(x, axis=0)  # noqa: E731  (centering couples the batch)
    full = gl.topics.jacobians.jacobian(f, x)
    true_blocks = gl.topics.jacobians.diagonal_blocks(full)
    np.testing.assert_allclose(true_blocks[0], 0.75 * np.eye(3), atol=1e-6)  # 1 - 1/B
    assert gl.topics.jacobians.cross_example_max(full) == pytest.approx(0.25)
    bj = gl.topics.jacobians.batch_jacobian(f, x)
    assert bj.shape == true_blocks.shape  # right shape ...
    np.testing.assert_allclose(bj, 0.0, atol=1e-6)  # ... wrong values: the column sums, all 0
    assert np.abs(bj - true_blocks).max() == pytest.approx(0.75)


# ----------------------------------------------------------------------------- products
def test_vjp_is_jt_v_and_jvp_is_j_v():
    f = lambda x: tf.tanh(tf.linalg.matvec(W, x))  # noqa: E731
    j = gl.topics.jacobians.jacobian(f, X3)
    v_out = np.array([1.0, -2.0], dtype=np.float32)
    v_in = np.array([0.5, 1.0, -1.0], dtype=np.float32)
    np.testing.assert_allclose(gl.topics.jacobians.vjp(f, X3, v_out), j.T @ v_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gl.topics.jacobians.jvp(f, X3, v_in), j @ v_in, rtol=1e-5, atol=1e-6)
    assert gl.topics.jacobians.vjp(f, X3, v_out).shape == X3.shape
    assert gl.topics.jacobians.jvp(f, X3, v_in).shape == (2,)


def test_hessian_and_hvp_of_a_quadratic():
    a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.0, -1.0, 4.0]], dtype=np.float32)
    b = np.array([1.0, 0.0, -1.0], dtype=np.float32)
    f = lambda x: 0.5 * tf.tensordot(x, tf.linalg.matvec(a, x), 1) + tf.tensordot(b, x, 1)  # noqa: E731
    np.testing.assert_allclose(gl.topics.jacobians.hessian(f, X3), a, rtol=1e-6)
    v = np.array([1.0, 2.0, -1.0], dtype=np.float32)
    for method in gl.topics.jacobians.HVP_METHODS:
        np.testing.assert_allclose(gl.topics.jacobians.hvp(f, X3, v, method=method), a @ v, rtol=1e-6)


def test_forward_and_reverse_mode_jacobians_agree():
    fwd, rev = gl.topics.jacobians.forward_reverse_jacobians(5, 3)
    assert fwd.shape == rev.shape == (5, 3)
    np.testing.assert_allclose(fwd, rev, rtol=1e-5, atol=1e-6)


def test_time_forward_reverse_shapes():
    t = gl.topics.jacobian_timing.time_forward_reverse((2, 8), fixed=2, repeats=1)
    assert list(t.sizes) == [2, 8]
    for sweep in (t.wide_inputs, t.wide_outputs):
        assert set(sweep) == {"forward", "reverse"}
        assert all(np.all(np.asarray(v) > 0) for v in sweep.values())


# ----------------------------------------------------------------------------- shape table
def test_shape_table_is_measured():
    rows = {(r.target, r.source): r for r in gl.topics.jacobians.shape_table()}
    r = rows[((4,), (3,))]
    assert (r.gradient, r.jacobian) == ("(3,)", "(4, 3)")
    assert r.batch_jacobian.startswith("error")
    r = rows[((2, 4), (2, 3))]
    assert (r.gradient, r.jacobian, r.batch_jacobian) == ("(2, 3)", "(2, 4, 2, 3)", "(2, 4, 3)")
    assert all(row.gradient == str(row.source) for row in rows.values())  # always x's shape
    text = gl.topics.jacobians.format_shape_table(gl.topics.jacobians.shape_table())
    assert text.splitlines()[0].split() == ["target", "y", "source", "x", "gradient", "jacobian", "batch_jacobian"]


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gl.topics.jacobians.jacobian(lambda x: x, tf.constant([1, 2, 3])), "floating point"),
        (lambda: gl.topics.jacobians.jacobian("not a function", X3), "callable"),
        (lambda: gl.topics.jacobians.jacobian(lambda x: x, "abc"), "float tensor"),
        (lambda: gl.topics.jacobians.jacobian(lambda x: tf.constant([1.0, 2.0]), X3), "None"),
        (lambda: gl.topics.jacobians.batch_jacobian(lambda x: x, X3), "batch axis"),
        (lambda: gl.topics.jacobians.batch_jacobian(lambda x: tf.reduce_sum(x, axis=0), np.ones((4, 3), np.float32)), "keep the batch axis"),
        (lambda: gl.topics.jacobians.vjp(lambda x: x**2, X3, [1.0, 2.0]), r"v must have shape \(3,\)"),
        (lambda: gl.topics.jacobians.jvp(lambda x: x**2, X3, np.ones(4, np.float32)), r"v must have shape \(3,\)"),
        (lambda: gl.topics.jacobians.hessian(lambda x: x**2, X3), "scalar"),
        (lambda: gl.topics.jacobians.hvp(lambda x: tf.reduce_sum(x), X3, X3, method="magic"), "method must be one of"),
        (lambda: gl.topics.jacobians.diagonal_blocks(np.zeros((2, 3, 4, 5))), "both batch axes"),
        (lambda: gl.topics.jacobian_timing.JacobianBench().run("cube", 4), "function must be one of"),
        (lambda: gl.topics.jacobian_timing.JacobianBench().run("softmax", 0), "n must be"),
        (lambda: gl.topics.jacobian_timing.time_forward_reverse(()), "at least one size"),
        (lambda: gl.JacobianViewer(size=1000), "size must be"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- bench and viewer
def test_bench_methods_agree_for_every_function():
    bench = gl.topics.jacobian_timing.JacobianBench()
    for name in gl.topics.jacobians.JACOBIAN_FUNCTIONS:
        run = bench.run(name, 5, repeats=1)
        assert run.max_disagreement < 1e-5, name
        assert set(run.times) == set(gl.topics.jacobians.JACOBIAN_METHODS)


def test_viewer_updates_jacobian_status_and_plot_without_retracing():
    v = gl.JacobianViewer(function="softmax", size=8)
    assert v.jacobian.shape == (8, 8)
    assert v.status_text.startswith("softmax · n=8 → jacobian shape (8, 8) · jacobian ")
    assert "batch_jacobian" in v.status_text and " ms · loop " in v.status_text
    heat = v.view["plots"][0]
    traces = v.tracing_count()
    for n in (3, 17, 30):
        v.size.value = n
        assert v.jacobian.shape == (n, n)
        assert f"n={n} → jacobian shape ({n}, {n})" in v.status_text
    assert v.tracing_count() == traces  # new sizes reuse the compiled functions
    assert v.view["plots"][0] != heat
    assert (v.view["plots"][0]["rows"], v.view["plots"][0]["cols"]) == (30, 30)
    np.testing.assert_allclose(np.reshape(v.view["plots"][0]["z"], (30, 30)), v.jacobian, rtol=1e-12)
    x, _ = gl.topics.jacobians.JACOBIAN_FUNCTIONS["softmax"].inputs(30)
    np.testing.assert_allclose(v.jacobian, softmax_analytic(x.numpy()), atol=1e-6)
    v.function.value = "dense_batch"
    assert v.jacobian.shape == (4, 3, 4, 30)
    assert "jacobian shape (4, 3, 4, 30)" in v.status_text
    after_switch = v.tracing_count()
    assert after_switch == traces + 2  # the new function traced once per compiled method
    v.size.value = 5
    assert v.jacobian.shape == (4, 3, 4, 5)
    assert v.tracing_count() == after_switch  # never per size
    assert "dense_batch" in v.view["status"]["text"]


def test_viewer_mimebundle_has_png_and_timing_free_text():
    v = gl.JacobianViewer(function="square", size=4)
    data = v._repr_mimebundle_()
    assert base64.b64decode(data["image/png"])[:4] == b"\x89PNG"
    assert data["text/plain"] == "JacobianViewer(square · n=4 → jacobian shape (4, 4))"
    assert "ms" not in data["text/plain"]
    assert [c["name"] for c in v.spec] == ["function", "size"] and v.kind == "JacobianViewer"


# ----------------------------------------------------------------------------- pfor, HVP timing, block plots
def _upscale(v):
    return tf.reshape(tf.image.resize(tf.reshape(v, [1, 2, 2, 1]), [3, 3]), [-1])


def test_pfor_falls_back_silently_and_pfor_fallbacks_names_the_op():
    v = tf.constant([0.5, 1.0, 2.0, 1.5])
    logger = tf.get_logger()
    before = (logger.level, list(logger.handlers), logger.propagate)
    j, messages = gl.topics.jacobians.pfor_fallbacks(_upscale, v)
    assert (logger.level, list(logger.handlers), logger.propagate) == before  # restored
    # the fallback is right: compare with the row-by-row loop, an independent path
    np.testing.assert_allclose(j, gl.topics.jacobians.jacobian_loop(_upscale, v), atol=1e-6)
    assert len(messages) == 1 and "ResizeBilinearGrad" in messages[0]
    _, none = gl.topics.jacobians.pfor_fallbacks(lambda x: tf.tanh(2.0 * x), v)
    assert none == []


def test_non_persistent_jacobian_without_pfor_fails_eagerly_but_works_in_a_tf_function():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x**2
    with pytest.raises(RuntimeError, match="persistent=True"):
        tape.jacobian(y, x, experimental_use_pfor=False)

    @tf.function
    def loop(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = x**2
        return tape.jacobian(y, x, experimental_use_pfor=False)

    np.testing.assert_allclose(loop(x).numpy(), np.diag([2.0, 4.0, 6.0]))


def test_parallel_iterations_gives_the_same_jacobian():
    x = tf.constant(X3)
    f = lambda v: tf.tanh(tf.linalg.matvec(W, v))  # noqa: E731
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_allclose(tape.jacobian(y, x, parallel_iterations=2).numpy(),
                               np.diag(1 - np.tanh(W @ X3) ** 2) @ W, rtol=1e-5, atol=1e-6)


def test_time_pfor_vs_loop_and_gradient_vs_hvp_report_positive_times():
    t = gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=(4, 8), repeats=1)
    assert t.sizes.tolist() == [4, 8]
    for d in (t.graph, t.eager):
        assert set(d) == {"pfor", "while_loop"} and all(np.all(v > 0) for v in d.values())
    np.testing.assert_allclose(t.speedups()["graph"], t.graph["while_loop"] / t.graph["pfor"])
    h = gl.topics.jacobian_timing.time_gradient_vs_hvp(n=8, batch=4, repeats=2)
    assert h.n_params == 64 and h.relative()["gradient"] == 1.0
    assert all(s > 0 for s in h.seconds.values())
    with pytest.raises(ValueError, match="sizes"):
        gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=())


def test_block_diagonal_matrix_places_blocks_where_the_full_jacobian_has_them():
    xc = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])
    full = gl.topics.jacobians.jacobian(lambda x: x - tf.reduce_mean(x, axis=0), xc)
    m = gl.plots.block_diagonal_matrix(gl.topics.jacobians.diagonal_blocks(full))
    flat = full.reshape(12, 12)
    on = ~np.isnan(m)
    assert on.sum() == 4 * 9  # four 3 × 3 blocks, nothing else
    np.testing.assert_allclose(m[on], flat[on])
    np.testing.assert_allclose(np.diag(m), 0.75)
    fig = gl.plots.plot_block_diagonals(full, {"batch_jacobian": gl.topics.jacobians.batch_jacobian(
        lambda x: x - tf.reduce_mean(x, axis=0), xc)})
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert len(texts) == 36 and set(texts) == {"0"}  # the all-zero panel is labelled, not blank
    with pytest.raises(ValueError, match="blocks"):
        gl.plots.plot_block_diagonals(full, {"wrong": np.zeros((4, 3, 4))})
    with pytest.raises(ValueError, match="blocks"):
        gl.plots.block_diagonal_matrix(np.zeros((4, 3)))
