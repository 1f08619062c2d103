"""gl.check_gradient: wrong custom gradients caught, right ones accepted, float32 without false
alarms, kinks explained, bad arguments refused. References: closed forms and
``tf.test.compute_gradient`` in float64 (an independent finite-difference implementation)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradlab.plots.gradcheck import (
    plot_example_norms,
    plot_memory,
    plot_method_times,
    plot_step_errors,
)
from gradlab.topics import gradcheck
from gradlab.topics.gradcheck import check_gradient, default_step


@tf.custom_gradient
def square_wrong(x):
    return x * x, lambda dy: dy * x  # the factor 2 is missing


@tf.custom_gradient
def square_right(x):
    return x * x, lambda dy: 2.0 * dy * x


X64 = tf.constant([0.3, -1.2, 2.5, 0.7], tf.float64)


def test_wrong_custom_gradient_is_caught_with_the_worst_entry():
    r = check_gradient(square_wrong, X64)
    assert not r.ok and r.verdict == "wrong" and not r
    assert r.wrong_entries == 4  # the four diagonal entries; the zeros off the diagonal agree
    # closed form: the tape gives x, the true derivative is 2x, so the error is |x| / max|2x| at most 0.5
    assert r.max_rel_error == pytest.approx(0.5, rel=1e-6)
    j = int(np.argmax(np.abs(X64.numpy())))
    assert r.worst.input == (j,) and r.worst.output == (j,)
    assert r.worst.theoretical == pytest.approx(X64.numpy()[j])
    assert r.worst.numerical == pytest.approx(2 * X64.numpy()[j], rel=1e-8)
    assert "failed" in r.message and "d f[2] / d x[2]" in r.message


def test_right_custom_gradient_passes_in_float64():
    r = check_gradient(square_right, X64)
    assert r.ok and r.verdict == "ok" and r.dtype == "float64" and not r.cast
    assert r.max_rel_error < 1e-6
    np.testing.assert_allclose(r.theoretical[0], np.diag(2 * X64.numpy()), rtol=0, atol=1e-15)
    np.testing.assert_allclose(r.numerical[0], np.diag(2 * X64.numpy()), rtol=1e-9, atol=1e-9)


def test_layout_and_values_agree_with_tf_test_compute_gradient():
    a = tf.constant(np.random.default_rng(0).normal(size=(2, 3)))
    b = tf.constant(np.random.default_rng(1).normal(size=(3, 2)))

    def f(a, b):
        return tf.sin(a @ b)

    theirs_t, theirs_n = tf.test.compute_gradient(f, [a, b], delta=1e-6)
    r = check_gradient(f, a, b, delta=1e-6)
    assert r.ok and len(r.theoretical) == 2
    for mine, ref in zip(r.theoretical, theirs_t, strict=True):
        assert mine.shape == ref.shape == (4, 6)
        np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-14)
    for mine, ref in zip(r.numerical, theirs_n, strict=True):
        np.testing.assert_allclose(mine, ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("case", ["cast up", "float32 constant inside", "keras layer", "cast inside"])
def test_correct_float32_functions_raise_no_false_alarm(case):
    x32 = tf.constant([0.3, -1.2, 2.5, 0.7], tf.float32)
    if case == "cast up":
        r = check_gradient(lambda t: tf.reduce_sum(tf.sin(t) ** 2), x32)
        assert r.cast and r.dtype == "float64" and r.max_rel_error < 1e-6
        assert "cast to float64" in r.message
    elif case == "float32 constant inside":  # refuses float64 inputs: checked in float32
        c = tf.constant(3.0)
        r = check_gradient(lambda t: tf.reduce_sum(tf.exp(t * c / 4.0)), x32)
        assert r.dtype == "float32" and not r.cast and "does not accept float64" in r.message
    elif case == "keras layer":
        keras.utils.set_random_seed(0)
        layer = keras.layers.Dense(3, activation="tanh")
        layer.build((None, 4))
        r = check_gradient(lambda t: layer(t), tf.reshape(x32, (1, 4)))
        assert r.dtype == "float32" and "returns float32" in r.message
    else:
        r = check_gradient(lambda t: tf.cast(tf.reduce_sum(tf.exp(tf.cast(t, tf.float32))), tf.float64),
                           tf.cast(x32, tf.float64))
        assert r.dtype == "float32" and "below float32's resolution" in r.message
    assert r.ok, r.message


def test_float32_wrong_gradient_is_still_caught():
    c = tf.constant(1.0)
    r = check_gradient(lambda t: square_wrong(t) * c, tf.constant([0.5, -2.0], tf.float32))
    assert r.dtype == "float32" and r.verdict == "wrong" and r.max_rel_error > 0.4


def test_float32_rounding_of_a_large_sum_is_not_a_false_alarm(monkeypatch):
    """A scalar sum over 400 float32 terms: its rounding (eps * |f| / h) exceeds the float32
    tolerance, so only the per-entry rounding estimate keeps the right gradient from failing."""
    x = tf.constant(np.random.default_rng(2).normal(size=400), tf.float32)
    one = tf.constant(1.0)

    def f(t):
        return tf.reduce_sum(tf.square(t) + 100.0 * one)

    r = check_gradient(f, x)
    assert r.dtype == "float32" and r.ok, r.message
    monkeypatch.setattr(gradcheck, "_ROUNDING_SAFETY", 0.0)
    monkeypatch.setattr(gradcheck, "_TRUNCATION_SAFETY", 0.0)
    assert not check_gradient(f, x).ok  # without it, the same right gradient would be called wrong


@pytest.mark.parametrize("fn,left,right,tape", [(tf.nn.relu, 0.0, 1.0, 0.0), (tf.abs, -1.0, 1.0, 0.0)])
def test_kink_is_explained_not_called_wrong(fn, left, right, tape):
    r = check_gradient(fn, tf.constant([-1.0, 0.0, 2.0], tf.float64))
    assert not r.ok and r.verdict == "kink" and r.wrong_entries == 0
    assert len(r.kinks) == 1
    k = r.kinks[0]
    assert k.input == (1,) and k.value == 0.0
    assert (k.left, k.right, k.theoretical) == pytest.approx((left, right, tape), abs=1e-9)
    assert "not differentiable" in r.message


def test_smooth_high_curvature_is_not_a_kink():
    r = check_gradient(lambda t: tf.exp(30.0 * t), tf.constant([0.3, 0.5], tf.float64))
    assert r.ok and not r.kinks


def test_no_path_from_the_input_is_wrong_and_says_none():
    r = check_gradient(lambda t: tf.constant(np.sin(t.numpy())), X64)  # a NumPy round trip
    assert r.verdict == "wrong"
    np.testing.assert_array_equal(r.theoretical[0], 0.0)
    np.testing.assert_allclose(np.diag(r.numerical[0]), np.cos(X64.numpy()), rtol=1e-8)
    assert "returned None" in r.message


def test_default_step_is_a_power_of_two_near_the_optimum():
    h = default_step([0.0, 1.0, 1000.0], "float64")
    assert np.all(np.log2(h) == np.round(np.log2(h)))
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(h, eps ** (1 / 3) * np.array([1, 1, 1000]), rtol=0.5)


@pytest.mark.parametrize("f", [None, 3.0, "tf.sin", [tf.sin]])
def test_non_callable_is_a_clear_value_error(f):
    with pytest.raises(ValueError, match="f must be a callable"):
        check_gradient(f, X64)


@pytest.mark.parametrize("x,match", [
    (tf.constant([1, 2]), "dtype int32"),
    (np.array([1, 2], dtype=np.int64), "dtype int64"),
    (3, "dtype int32"),
    (True, "floating-point"),
    ("1.0", "floating-point"),
    (None, "floating-point"),
    (np.zeros(0), "no elements"),
    (np.zeros(gradcheck.MAX_INPUT_ELEMENTS + 1), "at most"),
])
def test_bad_inputs_are_clear_value_errors(x, match):
    with pytest.raises(ValueError, match=match):
        check_gradient(tf.sin, x)


def test_no_inputs_is_a_value_error():
    with pytest.raises(ValueError, match="xs is empty"):
        check_gradient(tf.sin)


@pytest.mark.parametrize("delta", [0, -1e-3, float("nan"), float("inf"), True, "1e-3"])
def test_bad_delta_is_a_value_error(delta):
    with pytest.raises(ValueError, match="delta must be"):
        check_gradient(tf.sin, X64, delta=delta)


def test_delta_below_the_resolution_is_a_value_error():
    with pytest.raises(ValueError, match="below the resolution"):
        check_gradient(tf.sin, tf.constant([1.0], tf.float64), delta=1e-20)


def test_integer_output_is_a_value_error():
    with pytest.raises(ValueError, match="floating-point values"):
        check_gradient(lambda t: tf.cast(t, tf.int32), X64)


def test_chapter_10_plots_draw_the_data_and_refuse_bad_shapes():
    steps = np.logspace(-8, 0, 9)
    err = {"float64": steps ** 2, "float32": 1e-7 / steps}
    fig = plot_step_errors(steps, err, {"float64": 2.2e-16, "float32": 1.2e-7})
    lines = [ln for ln in fig.axes[0].lines if ln.get_label() in err]
    assert [ln.get_label() for ln in lines] == ["float64", "float32"]
    np.testing.assert_allclose(lines[0].get_ydata(), steps ** 2)
    with pytest.raises(ValueError, match="one error per step"):
        plot_step_errors(steps, {"float64": steps[:3]})
    with pytest.raises(ValueError, match="positive steps"):
        plot_step_errors([0.0, 1.0], {"x": [1.0, 2.0]})
    fig = plot_method_times([8, 32], {"loop": [0.01, 0.04], "vectorized_map": [0.002, 0.003]})
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [10.0, 40.0])  # milliseconds
    with pytest.raises(ValueError, match="one time per batch size"):
        plot_method_times([8, 32], {"loop": [0.01]})
    fig = plot_example_norms([0.5, 3.0, 1.0], 1.0)
    assert [p.get_height() for p in fig.axes[0].patches] == [0.5, 3.0, 1.0]
    assert "1 of 3" in fig.axes[0].get_title(loc="left")
    with pytest.raises(ValueError, match="one norm per example"):
        plot_example_norms([], 1.0)
    fig = plot_memory(["a", "b"], [10.0, 5.0], [0.1, 0.2])
    assert [p.get_height() for p in fig.axes[0].patches] == [10.0, 5.0]
    with pytest.raises(ValueError, match="one value per label"):
        plot_memory(["a", "b"], [1.0])


def test_a_passing_error_prints_as_a_decade_bound():
    # rounding-level digits change from CPU to CPU; their decade, rounded up, hardly does
    assert gradcheck.decade_bound(1.9e-11) == "1e-10" and gradcheck.decade_bound(1e-4) == "1e-04"
    assert gradcheck.decade_bound(3.1e-05) == "1e-04" and gradcheck.decade_bound(0.0) == "0"
    r = check_gradient(lambda t: t**3, tf.constant([1.0, 2.0], tf.float64))
    assert r.ok and r.max_rel_error < 1e-8, r.message
    assert f"at most {gradcheck.decade_bound(r.max_rel_error)}," in r.message
    assert f"{r.max_rel_error:.2g}" not in r.message


def test_progress_is_a_bar_over_the_input_elements(capsys):
    r = check_gradient(tf.sin, X64, progress=True)
    assert r.ok
    out = capsys.readouterr().out
    assert out.endswith("checking the gradient ▕████████████████████▏ 4/4\n"), out
    assert out.count("\r") == 1 + 4 + 1  # drawn at the start, after each of the 4 elements, at the close
    check_gradient(tf.sin, X64)  # progress=None: off outside a notebook
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="progress must be None"):
        check_gradient(tf.sin, X64, progress="yes")


# ----------------------------------------------------------------------------- issue 29
@pytest.mark.parametrize("where", ["eager", "tf.function"])
def test_a_random_function_is_called_random_not_a_kink(where):
    """Dropout in training mode draws a new mask per call: before the fix this was a "kink" with
    slopes of about +-1280 (float32 steps); evaluated twice at the same point, it differs."""
    keras.utils.set_random_seed(0)
    drop = keras.layers.Dropout(0.5)

    def fn(t):
        return drop(t, training=True)

    if where == "tf.function":
        fn = tf.function(fn)
    r = check_gradient(fn, tf.constant([0.3, -1.2, 2.5, 0.7, 1.1, -0.4]))
    assert r.verdict == "random" and not r.ok and not r.kinks and r.worst is None
    # a dropped element gives 0, a kept one 2x: two draws differ by a whole |2x| at some element
    assert r.repeat_difference > 0.1
    assert "not deterministic" in r.message and "training=False" in r.message and "kink" not in r.message
    assert np.all(np.isnan(r.numerical[0]))
    # the same layer in inference mode is deterministic and checks
    assert check_gradient(lambda t: drop(t, training=False), tf.constant([0.3, -1.2])).ok


def test_a_seeded_stateless_random_function_is_checked():
    def f(t):  # the same noise at every call: a deterministic function of t
        return t * tf.random.stateless_normal(tf.shape(t), seed=[1, 2], dtype=t.dtype)

    r = check_gradient(f, X64)
    assert r.ok and r.verdict == "ok" and r.repeat_difference == 0.0, r.message


@tf.custom_gradient
def square_float32_backward(x):
    """Forward in the input's dtype, backward written with float32 constants only."""
    return x * x, lambda dy: dy * tf.constant(2.0) * tf.cast(x, tf.float32)


@tf.custom_gradient
def square_float32_backward_wrong(x):
    return x * x, lambda dy: dy * tf.constant(3.0) * tf.cast(x, tf.float32)


def test_a_backward_pass_refusing_float64_falls_back_to_float32():
    x32 = tf.constant([0.5, -1.0, 2.0], tf.float32)
    with pytest.raises(tf.errors.InvalidArgumentError):  # what the tape alone does with the cast-up input
        with tf.GradientTape() as tape:
            x64 = tf.cast(x32, tf.float64)
            tape.watch(x64)
            y = square_float32_backward(x64)
        tape.gradient(y, x64)
    r = check_gradient(square_float32_backward, x32)
    assert r.ok and r.dtype == "float32" and not r.cast, r.message
    assert "backward pass does not accept float64" in r.message and "cast to float64" not in r.message
    np.testing.assert_allclose(np.diag(r.theoretical[0]), 2 * x32.numpy(), rtol=1e-6)
    bad = check_gradient(square_float32_backward_wrong, x32)  # the fallback still catches a wrong gradient
    assert bad.verdict == "wrong" and bad.dtype == "float32"
    # |3x - 2x| / max(|3x|, |2x|) over the entries: 2 / 6 at x = 2
    assert bad.max_rel_error == pytest.approx(1 / 3, rel=1e-3)
    with pytest.raises(ValueError, match="backward pass must accept the dtype of its inputs"):
        check_gradient(square_float32_backward, tf.cast(x32, tf.float64))  # float64 given: no fallback


@pytest.mark.parametrize("error,tol,printed", [(0.02, 3e-2, "3e-02"), (2e-4, 1e-3, "1e-03"), (3.1e-5, 1e-3, "1e-04"),
                                               (1.9e-11, 1e-6, "1e-10")])
def test_a_passing_error_never_prints_above_the_tolerance_it_met(error, tol, printed):
    r = gradcheck.GradientCheck(True, "ok", error, (), (), None, (), "float16", False, tol,
                                (np.array([0.01]),), 0, ())
    assert r.printed_error == printed
    assert float(r.printed_error) <= tol and float(r.printed_error) >= error
    assert f"at most {printed}, relative" in r.message and f"(tolerance {tol:.0e};" in r.message


def test_float16_input_check_prints_its_bound_within_the_tolerance():
    r = check_gradient(lambda t: tf.reduce_sum(t * t * tf.constant(1.0, tf.float16)), tf.constant([0.5, 1.5], tf.float16))
    assert r.dtype == "float16" and r.ok, r.message
    assert float(r.printed_error) <= r.tolerance and f"at most {r.printed_error}," in r.message


# ----------------------------------------------------------------------------- low precision inside (diag 3)
def _mixed_model(policy, last_dtype="float32"):
    """A tanh MLP built under ``policy``; its last layer in ``last_dtype`` (float32: what the Keras
    mixed-precision guide recommends, so f returns float32 while it computes in float16)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                                  keras.layers.Dense(2, dtype=last_dtype)])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model


X23 = np.random.default_rng(0).normal(size=(2, 3))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("last", ["float32", None])
def test_low_precision_inside_is_named_not_wrong(policy, last):
    model = _mixed_model(policy, last)
    low = policy.removeprefix("mixed_")
    for x in (tf.constant(X23, tf.float32), tf.constant(X23, tf.float64)):
        r = check_gradient(lambda t, model=model: model(t), x, progress=False)
        assert r.verdict in ("ok", "kink") and r.verdict != "wrong", r.message
        assert r.dtype == low and r.low_precision == low and r.tolerance == gradcheck.TOLERANCES[low]
        assert f"computes in {low} inside" in r.message and "float64_copy" in r.message
        assert 'set_global_policy("float32")' in r.message and "custom gradient" not in r.message


def test_the_float32_copy_of_a_mixed_model_checks_tightly():
    """The advice works: the same weights under the policy "float32" pass in float32/float64 with no note."""
    mixed = _mixed_model("mixed_float16")
    plain = _mixed_model("float32")
    plain.set_weights(mixed.get_weights())
    r = check_gradient(lambda t: plain(t), tf.constant(X23, tf.float32), progress=False)
    assert r.ok and r.dtype == "float32" and r.low_precision == "" and r.max_rel_error < 1e-3
    # the reference: the closed form of the float32 copy's Jacobian in float64, from its weights
    (k1, b1, k2, b2) = (np.asarray(w, np.float64) for w in plain.get_weights())
    x = X23.astype(np.float32).astype(np.float64)
    d = 1 - np.tanh(x @ k1 + b1) ** 2
    for n in range(2):
        jac = np.einsum("ij,jo->io", k1 * d[n], k2)  # d out[n, o] / d x[n, i]
        assert np.allclose(r.theoretical[0].reshape(2, 2, 2, 3)[n, :, n, :], jac.T, atol=1e-5)


def test_a_float32_function_has_no_low_precision_note():
    r = check_gradient(lambda t: tf.sin(tf.cast(t, tf.float32)), tf.constant([0.3, 1.1], tf.float64), progress=False)
    assert r.ok and r.dtype == "float32" and r.low_precision == "" and "float16" not in r.message


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_a_float32_only_backward_pass_with_low_precision_inputs_falls_back_to_float32(dtype):
    x = tf.constant([0.5, -1.0, 2.0], dtype)
    with pytest.raises(tf.errors.InvalidArgumentError):  # the tape in the inputs' own dtype refuses too
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = square_float32_backward(x)
        tape.gradient(y, x)
    r = check_gradient(square_float32_backward, x, progress=False)
    assert r.ok and r.dtype == "float32", r.message
    assert "backward pass does not accept float64" in r.message
    np.testing.assert_allclose(np.diag(r.theoretical[0]), 2 * x.numpy().astype(np.float64), rtol=1e-6)
    bad = check_gradient(square_float32_backward_wrong, x, progress=False)
    assert bad.verdict == "wrong" and bad.dtype == "float32"


# ----------------------------------------------------------------------------- per-entry judgement (issue 38)
@tf.custom_gradient
def _big_and_square_wrong(a):
    """f = [1e7 a0, a1²] whose backward pass gives a1 for d f1/d a1 instead of 2 a1."""
    return tf.stack([1e7 * a[0], a[1] ** 2]), lambda dy: tf.stack([1e7 * dy[0], a[1] * dy[1]])


@tf.custom_gradient
def _wide_float32_wrong(a):
    """f = [2000 a0, a1] whose backward pass drops d f1/d a1 (a 100% error 2000× below the largest entry)."""
    return tf.stack([2000.0 * a[0], a[1]]), lambda dy: tf.stack([2000.0 * dy[0], 0.0 * dy[1]])


@tf.custom_gradient
def _half_last_unit(y):
    return tf.identity(y), lambda dy: dy * tf.constant([1.0, 1.0, 1.0, 0.5])


def test_a_wrong_entry_small_next_to_the_largest_fails_in_float64():
    r = check_gradient(_big_and_square_wrong, tf.constant([1.0, 1.5], tf.float64))
    assert r.verdict == "wrong" and r.wrong_entries == 1, r.message
    # the tape gives a1 = 1.5 where the derivative is 2 a1 = 3: an error of half its own entry
    assert r.worst.output == (1,) and r.worst.input == (1,)
    assert r.worst.theoretical == pytest.approx(1.5) and r.worst.numerical == pytest.approx(3.0, rel=1e-8)
    assert r.max_rel_error == pytest.approx(0.5, rel=1e-6)
    assert "d f[1] / d x[1]" in r.message


def test_a_wrong_entry_2000x_below_the_largest_fails_in_float32():
    r = check_gradient(_wide_float32_wrong, tf.constant([1.0, 1.5], tf.float32) * tf.constant(1.0))
    assert r.verdict == "wrong" and r.worst.input == (1,) and r.worst.output == (1,), r.message
    assert r.max_rel_error == pytest.approx(1.0, rel=1e-3)  # the tape gives 0 where f's slope is 1


def test_a_keras_dense_unit_with_half_its_gradient_and_tiny_weights_fails():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(4)
    layer.build((None, 5))
    kernel = layer.kernel.numpy()
    kernel[:, -1] *= 1e-4  # the last unit's weights: 1e-4 of the others
    layer.kernel.assign(kernel)
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 5)), tf.float32)
    r = check_gradient(lambda t: _half_last_unit(layer(t)), x)
    assert r.dtype == "float32" and r.verdict == "wrong", r.message
    assert r.wrong_entries == 15  # the last unit of 3 examples, 5 inputs each
    assert r.worst.output[-1] == 3 and r.worst.numerical == pytest.approx(2 * r.worst.theoretical, rel=1e-2)


@pytest.mark.parametrize("case", ["exp float64", "exp float32", "dense softmax float32", "dense softmax float64"])
def test_right_functions_with_a_wide_range_still_pass(case):
    if case.startswith("exp"):
        dtype = tf.float64 if case.endswith("64") else tf.float32
        x = tf.constant(np.linspace(-20.0, 20.0, 9), dtype)  # entries from 2e-9 to 5e8
        r = check_gradient(lambda t: tf.exp(t), x)
    else:
        keras.utils.set_random_seed(1)
        dtype = "float64" if case.endswith("64") else "float32"
        model = keras.Sequential([keras.Input((6,), dtype=dtype), keras.layers.Dense(8, activation="tanh", dtype=dtype),
                                  keras.layers.Dense(5, activation="softmax", dtype=dtype)])
        x = tf.constant(3.0 * np.random.default_rng(1).normal(size=(2, 6)), dtype)
        r = check_gradient(lambda t: model(t), x)
        assert r.dtype == dtype
    assert r.ok, r.message


def test_a_large_value_absorbing_a_change_in_float64_is_not_called_float32():
    r = check_gradient(lambda v: 1e8 + 1e-3 * v, tf.constant([1.0, 2.0], tf.float64))
    assert r.dtype == "float64" and r.tolerance == 1e-6, r.message
    assert "computes in float32 inside" not in r.message and "absorbs the change" in r.message
