"""Chapter 02 and 03 self-checks: the right answers pass, typical wrong answers get feedback, never an exception."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab.exercises import ch02, ch03
from tests._helpers import fails as _fails


def _f(x):
    return tf.tanh(tf.linalg.matvec(tf.constant([[1.0, -2.0, 0.5], [0.3, 0.8, -1.0]]), x))


X3 = tf.constant([0.5, -0.2, 1.0])


# ----------------------------------------------------------------------------- chapter 02
def _softmax_reference():
    z = np.array(ch02.SOFTMAX_Z, dtype=np.float64)
    s = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    return np.diag(s) - np.outer(s, s)


def test_ch02_softmax_right_and_typical_slips():
    assert ch02.check_softmax_jacobian(_softmax_reference())
    _fails(ch02.check_softmax_jacobian(None), "tape.watch(z)")
    _fails(ch02.check_softmax_jacobian(np.zeros(4)), "tape.gradient")  # gradient of a sum of 1
    _fails(ch02.check_softmax_jacobian(np.eye(4)), "values differ")
    _fails(ch02.check_softmax_jacobian("J"), "str")


def test_ch02_loop_jacobian_right_the_sources_nones_and_the_gradient():
    assert ch02.check_loop_jacobian(np.diag([2.0, 4.0, 6.0]))
    # a list of rows (not stacked) is a right answer too
    assert ch02.check_loop_jacobian([tf.constant([2.0, 0, 0]), tf.constant([0, 4.0, 0]), tf.constant([0, 0, 6.0])])
    _fails(ch02.check_loop_jacobian([None, None, None]), "holds None at position 0, 1, 2", "with block")
    _fails(ch02.check_loop_jacobian([tf.constant([2.0, 0, 0]), None, None]), "position 1, 2")
    _fails(ch02.check_loop_jacobian(tf.constant([2.0, 4.0, 6.0])), "sum of y")
    _fails(ch02.check_loop_jacobian(np.diag([1.0, 2.0, 3.0])), "values differ")


def test_ch02_jacobian_row_tells_which_slip():
    j = gl.topics.jacobians.jacobian(_f, X3)
    assert ch02.check_jacobian_row(j[1], _f, X3)
    _fails(ch02.check_jacobian_row(j[0], _f, X3), "row 0", "start at 0")
    _fails(ch02.check_jacobian_row(j.sum(axis=0), _f, X3), "sum of all rows")
    _fails(ch02.check_jacobian_row(np.array([0.0, 1.0]), _f, X3), "output's shape")
    _fails(ch02.check_jacobian_row(None, _f, X3), "None")


def _layer_norm(x):
    mean, var = tf.nn.moments(x, axes=[1], keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-3)


def test_ch02_batch_jacobian_safe_is_measured_not_hardcoded():
    assert ch02.check_batch_jacobian_safe(True, _layer_norm)
    assert ch02.check_batch_jacobian_safe(np.bool_(True), _layer_norm)
    _fails(ch02.check_batch_jacobian_safe(False, _layer_norm), "not quite")
    center = lambda x: x - tf.reduce_mean(x, axis=0)  # noqa: E731 - couples the examples
    assert ch02.check_batch_jacobian_safe(False, center)
    _fails(ch02.check_batch_jacobian_safe(True, center), "not quite")
    _fails(ch02.check_batch_jacobian_safe("True", _layer_norm), "string")
    _fails(ch02.check_batch_jacobian_safe(None, _layer_norm), "no answer")
    _fails(ch02.check_batch_jacobian_safe(1, _layer_norm), "True or False")


# ----------------------------------------------------------------------------- chapter 03
def test_ch03_sweep():
    good = gl.TraceCounter(lambda x, s: s * tf.reduce_mean(x))
    bad = gl.TraceCounter(lambda x, s: s * tf.reduce_mean(x))
    for s in [0.1, 0.2, 0.3, 0.4, 0.5]:
        good(tf.ones([3]), tf.constant(s))
        bad(tf.ones([3]), s)
    assert ch03.check_sweep(good)
    _fails(ch03.check_sweep(bad), "5 traces for 5 calls")
    _fails(ch03.check_sweep(None), "TraceCounter")


def test_ch03_prediction_is_three_and_strings_are_read_as_numbers():
    count, log = ch03.count_prediction_traces()
    assert count == 3 and len(log) == 3  # measured: [2], [3] and the Python 1
    for right in (3, 3.0, np.int64(3), tf.constant(3)):
        assert ch03.check_prediction(right), right
    as_string = ch03.check_prediction("3")
    assert as_string and "string '3'" in as_string.feedback
    assert "not what TensorFlow did" not in str(as_string)
    _fails(ch03.check_prediction("4"), "you predicted 4", "fewer")
    _fails(ch03.check_prediction(2), "more")
    _fails(ch03.check_prediction("three"), "as a number")
    _fails(ch03.check_prediction(True), "bool")
    _fails(ch03.check_prediction(3.5), "whole number")
    _fails(ch03.check_prediction(None), "no prediction")


def _step(opt, clip=None):
    return lambda m: gl.make_train_step(m, opt(), clip=clip)


def test_ch03_clipped_step_tells_the_fix_from_coincidences():
    assert ch03.check_clipped_step(_step(lambda: keras.optimizers.SGD(0.05), 1.0))
    # lr × clip = 0.05 as well: the big step matches, the unclipped small one does not
    _fails(ch03.check_clipped_step(_step(lambda: keras.optimizers.SGD(0.1), 0.5)), "coincidence", "0.1")
    _fails(ch03.check_clipped_step(_step(lambda: keras.optimizers.SGD(0.05))), "nothing was clipped")
    _fails(ch03.check_clipped_step(_step(lambda: keras.optimizers.SGD(0.05), 5.0)), "global norm of 5")
    # momentum: the first step equals plain SGD's, the second does not
    _fails(ch03.check_clipped_step(_step(lambda: keras.optimizers.SGD(0.05, momentum=0.9), 1.0)), "momentum")
    _fails(ch03.check_clipped_step(lambda m: None), "returned None")
    _fails(ch03.check_clipped_step(lambda m: 42), "not a step function")

    def raises(m):
        raise KeyError("boom")

    _fails(ch03.check_clipped_step(raises), "KeyError")
    other = keras.Sequential([keras.Input((20,)), keras.layers.Dense(1)])
    _fails(ch03.check_clipped_step(lambda m: gl.make_train_step(other, keras.optimizers.SGD(0.05), clip=1.0)),
           "did not move")


def test_ch03_sgd_clipped_moves_the_weights_by_lr_times_clip():
    # what check_clipped_step relies on, measured on an independent model: raw norm > clip
    # gives a step of exactly lr × clip, raw norm < clip a step of lr × raw
    keras.utils.set_random_seed(1)
    x, y = ch03.regression_data(64, seed=7)
    for scale, expect in ((1.0, lambda raw: 0.05 * 1.0), (None, lambda raw: 0.05 * raw)):
        model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
        target = y if scale else model(x) + 0.01 * (y - model(x))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(target - model(x)))
        raw = float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_variables)))
        assert (raw > 1.0) == bool(scale)
        before = [v.numpy().copy() for v in model.trainable_variables]
        gl.make_train_step(model, keras.optimizers.SGD(0.05), clip=1.0)(x, target)
        moved = np.sqrt(sum(np.sum((v.numpy() - b) ** 2)
                            for v, b in zip(model.trainable_variables, before, strict=True)))
        assert abs(moved - expect(raw)) < 1e-3 * expect(raw)


# ----------------------------------------------------------------------------- newcomer review regressions
def _layer_norm_fn(x):
    mean, var = tf.nn.moments(x, axes=[1], keepdims=True)
    return (x - mean) / tf.sqrt(var + 1e-3)


def test_ch02_ex3_a_ragged_list_is_feedback_not_an_exception():
    _fails(ch02.check_jacobian_row([1.0, [2.0]], _f, X3), "ragged")


def test_ch02_ex4_a_scalar_bool_tensor_is_a_right_answer():
    assert ch02.check_batch_jacobian_safe(tf.constant(True), _layer_norm_fn)
    assert ch02.check_batch_jacobian_safe(np.array(True), _layer_norm_fn)
    _fails(ch02.check_batch_jacobian_safe(tf.constant(False), _layer_norm_fn), "not quite")


def test_ch03_ex1_the_same_float_five_times_is_not_a_sweep():
    def noisy_step(x, scale):
        return scale * tf.reduce_mean(x)

    sweep = gl.TraceCounter(noisy_step)
    for _ in range(5):
        sweep(tf.ones([3]), 0.1)  # one trace, but nothing is swept
    _fails(ch03.check_sweep(sweep), "made for a Python value", "same number")


def test_ch03_ex1_one_tensor_value_five_times_is_not_a_sweep():
    def noisy_step(x, scale):
        return scale * tf.reduce_mean(x)

    sweep = gl.TraceCounter(noisy_step)
    for _ in [0.1, 0.2, 0.3, 0.4, 0.5]:
        sweep(tf.ones([3]), tf.constant(0.3))  # one trace for a tensor, but one value
    _fails(ch03.check_sweep(sweep), "scale = 0.3, 0.3, 0.3, 0.3, 0.3", "tf.constant(0.3)")
    swept = gl.TraceCounter(noisy_step)
    for scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
        swept(tf.ones([3]), np.float32(scale))  # a NumPy scalar is a tensor to tf.function
    assert ch03.check_sweep(swept), swept.values


def test_ch03_ex1_a_count_set_by_hand_is_caught():
    def noisy_step(x, scale):
        return scale * tf.reduce_mean(x)

    sweep = gl.TraceCounter(noisy_step)
    for scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
        sweep(tf.ones([3]), scale)
    sweep.count = 1
    _fails(ch03.check_sweep(sweep), "TensorFlow counted 5 traces")


def test_trace_counter_keeps_each_calls_small_values():
    counter = gl.TraceCounter(lambda x, a: x * a)
    counter(tf.constant([1.0, 2.0]), 0.5)
    counter(tf.zeros([20]), a=2)
    assert counter.values == [((1.0, 2.0), 0.5), (None, 2)]


def test_ch03_ex3_not_a_function_and_a_shared_optimizer_are_feedback():
    _fails(ch03.check_clipped_step(None), "expected your function make_clipped_step, got NoneType")
    shared = keras.optimizers.SGD(0.05)
    r = ch03.check_clipped_step(lambda m: gl.make_train_step(m, shared, clip=1.0))
    _fails(r, "optimizer")
    assert "Traceback" not in r.feedback and len(r.feedback) < 900


# ----------------------------------------------------------------------------- second pass (answers2)
def _softmax_parts():
    z = np.array(ch02.SOFTMAX_Z, dtype=np.float64)
    s = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    return s


def test_ch02_ex1_each_half_and_log_softmax_are_named():
    s = _softmax_parts()
    _fails(ch02.check_softmax_jacobian(np.diag(s)), "only the first term")
    _fails(ch02.check_softmax_jacobian(-np.outer(s, s)), "only the second term")
    z = tf.constant(ch02.SOFTMAX_Z)
    with tf.GradientTape() as tape:
        tape.watch(z)
        out = tf.nn.log_softmax(z)
    _fails(ch02.check_softmax_jacobian(tape.jacobian(out, z)), "tf.nn.log_softmax")


def _row(weights):
    with tf.GradientTape() as tape:
        tape.watch(X3)
        y = _f(X3)
    return tape.gradient(y, X3, output_gradients=tf.constant(weights))


def test_ch02_ex3_a_weight_of_two_is_named_not_read_as_a_batch_sum():
    r = ch02.check_jacobian_row(_row([0.0, 2.0]), _f, X3)
    _fails(r, "another number than 1", "exactly 1 at position 1")
    assert "batch size" not in r.feedback
    # the weight row without tanh's derivative is a multiple too, but not this slip
    r = ch02.check_jacobian_row(tf.constant([0.3, 0.8, -1.0]), _f, X3)
    _fails(r, "values differ")
    assert "another number than 1" not in r.feedback


@pytest.mark.parametrize("value, words", [
    (5, ["one trace per call"]), (4, ["A repeat was counted as new"]),
    (2, ["A new signature was missed", "Python int"]), (0, ["at least 1"]),
])
def test_ch03_ex2_each_wrong_count_names_its_slip(value, words):
    _fails(ch03.check_prediction(value), *words)


@pytest.mark.parametrize("optimizer, words", [
    (lambda: keras.optimizers.SGD(0.05, clipnorm=1.0), ["each variable's gradient", "clipnorm="]),
    (lambda: keras.optimizers.SGD(0.05, clipvalue=1.0), ["each element clipped", "clipvalue="]),
    (lambda: keras.optimizers.SGD(), ["learning rate of 0.01, not 0.05", "SGD() alone"]),
])
def test_ch03_ex3_other_clips_and_the_default_rate_are_named(optimizer, words):
    clip = None if optimizer().clipnorm or optimizer().clipvalue else 1.0
    r = ch03.check_clipped_step(lambda m: gl.make_train_step(m, optimizer(), clip=clip))
    _fails(r, *words)
    assert "global norm of" not in r.feedback and "momentum or Adam" not in r.feedback


_SHARED_SGD = None


def _make_step_with_a_shared_optimizer(model):
    """One optimizer for every model the check builds: gl.make_train_step refuses the second."""
    global _SHARED_SGD
    if _SHARED_SGD is None:
        _SHARED_SGD = keras.optimizers.SGD(0.05)
    return gl.make_train_step(model, _SHARED_SGD, clip=1.0)


def test_ch03_ex3_a_shared_optimizer_is_named_with_the_exercises_rate():
    # issue 38: the branch never fired (make_train_step raises in the factory), and the core's message names SGD(0.01)
    r = ch03.check_clipped_step(_make_step_with_a_shared_optimizer)
    assert not r and "already belongs to another model" in r.feedback and "SGD(learning_rate=0.05)" in r.feedback, \
        r.feedback
