"""Chapter 01's self-checks: the right answers pass, typical wrong answers get their hint.

Every wrong answer must come back as a failed CheckResult with specific feedback, never as
an exception. The expected answers are recomputed here from an independent source (the
float64 norms of gl.gradient_report on a real build_mlp model, tf.clip_by_global_norm).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.exercises import ch01
from tests._helpers import fails as _fails_with

tf = gl.session.quiet_import_tensorflow()


# ----------------------------------------------------------------------------- exercise 1
@pytest.fixture(scope="module")
def first_vanishing_depth():
    """The smallest depth whose verdict is vanishing, from gradient_report on real models."""
    x, y = gl.models.mlp.make_data(batch_size=128, input_dim=64, seed=0)
    for depth in range(2, 30):
        model = gl.models.mlp.build_mlp(depth, activation="relu", initializer="glorot_uniform")
        if gl.gradient_report(model, x, y).status == "vanishing":
            return depth
    raise AssertionError("relu + glorot_uniform never vanished below depth 30")


def test_ex1_right_answer_passes(first_vanishing_depth):
    assert first_vanishing_depth == 8  # measured: depth 7 ratio 0.113, depth 8 ratio 0.088
    result = ch01.check_vanishing_depth(first_vanishing_depth)
    assert result, str(result)
    assert "ratio 0.088" in result.feedback
    assert ch01.check_vanishing_depth(np.int64(first_vanishing_depth))
    assert ch01.check_vanishing_depth(float(first_vanishing_depth))


def test_ex1_wrong_answers_get_hints(first_vanishing_depth):
    _fails_with(ch01.check_vanishing_depth(first_vanishing_depth - 1), "'healthy'", "Go deeper")
    _fails_with(ch01.check_vanishing_depth(50), "shallower network already is")
    _fails_with(ch01.check_vanishing_depth(None), "got None")
    _fails_with(ch01.check_vanishing_depth("8"), "string '8'")
    _fails_with(ch01.check_vanishing_depth(True), "bool")
    _fails_with(ch01.check_vanishing_depth(8.5), "expected a depth")
    _fails_with(ch01.check_vanishing_depth([7, 8]), "one number")
    _fails_with(ch01.check_vanishing_depth(0), "outside 1..100")


# ----------------------------------------------------------------------------- exercise 2
def right_clip(grads, t):
    global_norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
    return [g * (t / tf.maximum(global_norm, t)) for g in grads]


def test_ex2_right_answers_pass():
    assert ch01.check_clip_by_global_norm(right_clip)
    # the same in NumPy, and with a Python if: any correct implementation passes
    def numpy_clip(grads, t):
        arrays = [np.asarray(g) for g in grads]
        norm = np.sqrt(sum(float(np.sum(a**2)) for a in arrays))
        return arrays if norm <= t else [a * t / norm for a in arrays]

    assert ch01.check_clip_by_global_norm(numpy_clip)


def test_ex2_test_gradients_have_the_stated_norm():
    norm = np.sqrt(sum(np.sum(np.square(g)) for g in ch01.CLIP_TEST_GRADS))
    assert norm == pytest.approx(np.sqrt(34))  # 5.83, between the thresholds 2 and 10


@pytest.mark.parametrize(
    "wrong, fragments",
    [
        (lambda grads, t: None, ["returned None"]),
        (lambda grads, t: tf.clip_by_global_norm(grads, t), ["calls tf.clip_by_global_norm", "by hand"]),
        (lambda grads, t: (right_clip(grads, t), tf.linalg.global_norm(grads)), ["pair (list, norm)", "only the list"]),
        (lambda grads, t: tf.concat([tf.reshape(g, [-1]) for g in right_clip(grads, t)], 0),
         ["one flat tensor of 6 values", "one tensor per gradient"]),
        (lambda grads, t: right_clip(grads, t)[0], ["one tensor of shape (2,)"]),
        (lambda grads, t: [tf.clip_by_norm(g, t) for g in grads], ["each tensor on its own"]),
        (lambda grads, t: grads, ["came back unchanged", "t=2"]),
        (lambda grads, t: [g * t / tf.linalg.global_norm(grads) for g in grads],
         ["scaled the gradients up", "t=10", "unchanged"]),
        (lambda grads, t: right_clip(grads, t)[:1], ["returned 1 items, expected 2"]),
        (lambda grads, t: [g * t / tf.reduce_sum([tf.reduce_sum(g * g) for g in grads]) for g in grads],
         ["multiplied every gradient by 0.05882", "square root"]),
        (lambda grads, t: [g * (t / 0) for g in grads], ["raised ZeroDivisionError"]),
        (lambda grads, t: "clipped", ["returned a str"]),
        ("not a function", ["expected a function"]),
    ],
)
def test_ex2_wrong_answers_get_hints(wrong, fragments):
    _fails_with(ch01.check_clip_by_global_norm(wrong), *fragments)


# ----------------------------------------------------------------------------- exercise 3
@pytest.fixture(scope="module")
def last_zero_layer():
    """The last exactly-zero signal layer at depth 100, from gradient_report's float64 norms."""
    x, y = gl.models.mlp.make_data(batch_size=128, input_dim=64, seed=0)
    model = gl.models.mlp.build_mlp(100, activation="sigmoid", initializer="glorot_uniform")
    sig = gl.gradient_report(model, x, y).signal_norms
    zeros = np.nonzero(sig == 0)[0]
    assert zeros.size and np.array_equal(zeros, np.arange(zeros.size))  # one block from layer 1
    return int(zeros.max()) + 1


def test_ex3_right_answer_passes(last_zero_layer):
    assert last_zero_layer == 43  # measured on TF 2.21 CPU
    result = ch01.check_last_zero_layer(last_zero_layer)
    assert result, str(result)
    assert ch01.check_last_zero_layer(np.int64(last_zero_layer))
    assert ch01.check_last_zero_layer(tf.constant(last_zero_layer))


def test_ex3_wrong_answers_get_hints(last_zero_layer):
    _fails_with(ch01.check_last_zero_layer(last_zero_layer - 1), "0-based")
    _fails_with(ch01.check_last_zero_layer(100 - last_zero_layer + 1), "output side")
    _fails_with(ch01.check_last_zero_layer(1), "so is a later one")
    _fails_with(ch01.check_last_zero_layer(last_zero_layer + 5), "not exactly 0")
    _fails_with(ch01.check_last_zero_layer(101), "does not exist")
    _fails_with(ch01.check_last_zero_layer(np.arange(last_zero_layer)), "one number", "add 1")
    _fails_with(ch01.check_last_zero_layer(None), "got None")
    _fails_with(ch01.check_last_zero_layer("43"), "string '43'")


# ----------------------------------------------------------------------------- newcomer review regressions
def test_ex1_a_zero_d_array_is_a_right_answer_written_differently(first_vanishing_depth):
    assert ch01.check_vanishing_depth(np.array(first_vanishing_depth))
    assert ch01.check_vanishing_depth(np.array(float(first_vanishing_depth)))


def test_ex3_one_value_in_an_array_is_not_called_several_values():
    _fails_with(ch01.check_last_zero_layer(np.array([43])), "holding one value (43)", "int(a[0])")
    _fails_with(ch01.check_last_zero_layer([43]), "holding one value")
    r = ch01.check_last_zero_layer(np.arange(5))
    _fails_with(r, "of 5 values", "np.nonzero")


def _right_clip(grads, t):
    norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
    return [g * (t / tf.maximum(norm, t)) for g in grads]


def test_ex2_a_generator_of_the_right_tensors_passes():
    assert ch01.check_clip_by_global_norm(lambda grads, t: (g for g in _right_clip(grads, t)))


def test_ex2_a_list_of_none_is_not_about_tapes():
    r = ch01.check_clip_by_global_norm(lambda grads, t: [None for _ in grads])
    _fails_with(r, "item 0 of your list is None")
    assert "tape" not in r.feedback


def test_ex2_wrong_values_feedback_has_no_double_full_stop():
    no_sqrt = lambda grads, t: [g * t / tf.maximum(tf.add_n([tf.reduce_sum(tf.square(h)) for h in grads]), t)  # noqa: E731
                                for g in grads]
    r = ch01.check_clip_by_global_norm(no_sqrt)
    _fails_with(r, "square root")
    assert ".." not in r.feedback


# ----------------------------------------------------------------------------- third review (issue 29)
def _forbidden_by_name(grads, t):
    return tf.clip_by_global_norm(grads, t)[0]


def _forbidden_hidden(grads, t):
    clip = getattr(tf, "clip_by_" + "global_norm")  # not in the source: the call monitor sees it
    return clip(grads, t)[0]


@pytest.mark.parametrize("fn", [_forbidden_by_name, _forbidden_hidden])
def test_ex2_calling_tf_clip_by_global_norm_is_rejected(fn):
    _fails_with(ch01.check_clip_by_global_norm(fn), "calls tf.clip_by_global_norm", "by hand")


def test_ex2_the_monitor_puts_tf_clip_by_global_norm_back():
    original = tf.clip_by_global_norm
    ch01.check_clip_by_global_norm(_forbidden_hidden)
    assert tf.clip_by_global_norm is original


def test_ex2_a_norm_fixed_from_the_shown_gradients_is_rejected():
    shown = float(np.sqrt(sum(np.sum(np.square(g)) for g in ch01.CLIP_TEST_GRADS)))
    r = ch01.check_clip_by_global_norm(lambda grads, t: [g * min(1.0, t / shown) for g in grads])
    _fails_with(r, "another gradient set", "5.831", "global norm of CLIP_TEST_GRADS")


def test_ex2_a_rounded_norm_is_called_rounded_not_float32():
    r = ch01.check_clip_by_global_norm(lambda grads, t: [g * min(1.0, t / 5.83) for g in grads])
    _fails_with(r, "t / 5.83", "5.830952", "rounded or typed-in")
    assert "float32" not in r.feedback and "1×" not in r.feedback


def test_ex1_an_array_of_depths_gets_exercise_1s_hint_not_exercise_3s():
    r = ch01.check_vanishing_depth(np.arange(20, 60))
    _fails_with(r, "smallest", "min(depths)")
    assert "layer number" not in r.feedback and "np.nonzero" not in r.feedback


# ----------------------------------------------------------------------------- helper F's third set
_EARLY_REFERENCE = tf.clip_by_global_norm  # taken before the check could watch it


def _early_alias(grads, t):
    return _EARLY_REFERENCE(grads, t)[0]


def test_clip_a_reference_taken_early_is_still_forbidden():
    result = ch01.check_clip_by_global_norm(_early_alias)
    assert not result and "by hand" in result.feedback


def test_clip_by_value_is_named():
    result = ch01.check_clip_by_global_norm(lambda grads, t: [tf.clip_by_value(g, -t, t) for g in grads])
    assert not result and "tf.clip_by_value" in result.feedback


def test_ch01_ex2_a_clip_computed_in_float16_names_half_precision_not_a_factor():
    def clip16(grads, t):
        g16 = [tf.cast(g, tf.float16) for g in grads]
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in g16]))
        scale = tf.minimum(tf.constant(1.0, tf.float16), tf.cast(t, tf.float16) / norm)
        return [tf.cast(g * scale, tf.float32) for g in g16]

    r = ch01.check_clip_by_global_norm(clip16)
    assert not r and "half precision" in r.feedback and "float16" in r.feedback, r.feedback
    assert "×" not in r.feedback and "rounding in float32 explains" not in r.feedback, r.feedback
