"""Chapter 05 self-checks: right answers pass however they are written (eagerly or in
``tf.function``, as a tensor or a NumPy number), the typical wrong answers of a learner fail
with feedback that names the cause, and no answer makes a check raise.

Exercise 3 is judged on the gradients the step hands to ``apply_gradients``; the reference is
the tape + ``scale_loss`` step, and the wrong answers below differ from it by factors the check
must tell apart (1/S for no scaling, S for scaling twice, 32768/S for a hand-written factor).
"""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.exercises import ch05
from tests._helpers import fails as _fails

tf = gl.session.quiet_import_tensorflow()


# ----------------------------------------------------------------------------- exercise 1
@pytest.mark.parametrize("answer", [{"norm": "layer"}, {"norm": "LayerNorm"}, {"norm": "batch_norm"},
                                    {"norm": "BatchNormalization"}, {"norm": "layer", "residual": True}])
def test_ex1_right_answers_in_any_spelling(answer):
    assert ch05.check_deep_fix(answer)


@pytest.mark.parametrize(("answer", "needle"), [
    ({}, "changes nothing"),
    ({"norm": "none"}, "every block adds its own branch"),
    ({"norm": None}, "every block adds its own branch"),
    ({"initializer": "glorot_uniform"}, "exploding"),
    ({"residual": False}, "keep the skip connection"),
    ({"depth": 20}, "keep the skip connection"),
    ({"norm": "group"}, "is not one of"),
    ({"norm": 3}, "must be a name"),
    ({"learning_rate": 0.1}, "unknown key"),
    (None, "assign a dict"),
    ([("norm", "layer")], "write it as a dict"),
])
def test_ex1_wrong_answers_are_feedback(answer, needle):
    _fails(ch05.check_deep_fix(answer), needle)


def test_ex1_non_finite_feedback_is_about_the_residual_stack_not_generic_advice():
    feedback = ch05.check_deep_fix({"norm": "none"}).feedback
    assert "normalization" in feedback.lower()
    assert "weight scale or learning rate" not in feedback  # the generic verdict advice of a plain stack


# ----------------------------------------------------------------------------- exercise 2
@pytest.mark.parametrize("answer", [2**10, 1024.0, np.float32(1024), np.int64(1024), np.array(1024),
                                    tf.constant(1024), tf.constant(1024.0), tf.Variable(1024.0)])
def test_ex2_right_answer_in_any_number_form(answer):
    assert ch05.check_loss_scale(answer)


@pytest.mark.parametrize(("answer", "needle"), [
    (1, "still exactly 0"),
    (2**9, "still exactly 0"),
    (2**11, "smaller power of two"),
    (2**24, "overflows"),
    (1000, "not a power of two"),
    (0.5, ">= 1"),
    (float("nan"), "finite"),
    (float("inf"), "finite"),
    ("1024", "string"),
    (True, "bool"),
    (None, "None"),
    (np.array([1024]), "holding one value"),
    ([512, 1024], "of 2 values"),
])
def test_ex2_wrong_answers_are_feedback(answer, needle):
    _fails(ch05.check_loss_scale(answer), needle)


# ----------------------------------------------------------------------------- exercise 3
def _mse(model, x, y):
    return tf.reduce_mean(tf.square(model(x, training=True) - y))


def _step(scale=lambda opt, loss: opt.scale_loss(loss), *, fix_grads=None, apply=None, ret="loss",
          loss_fn=_mse, outside=False):
    """A family of training steps: the right one by default, each keyword one typical mistake."""

    def step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(model, x, y)
            scaled = scale(optimizer, loss) if not outside else None
        if outside:
            scaled = scale(optimizer, loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        if fix_grads is not None:
            grads = fix_grads(optimizer, grads)
        (apply or (lambda opt, g, v: opt.apply_gradients(zip(g, v, strict=True))))(optimizer, grads, model.trainable_variables)
        return {"loss": loss, "scaled": scaled, "none": None}[ret]

    return step


def test_ex3_right_answers_eager_and_in_tf_function():
    assert ch05.check_scaled_step(_step())
    assert ch05.check_scaled_step(tf.function(_step()))
    assert ch05.check_scaled_step(_step(ret="none"))  # a step that returns nothing still trains right
    assert ch05.check_scaled_step(_step(apply=lambda opt, g, v: opt.apply(g, v)))
    assert ch05.check_scaled_step(_step(scale=lambda opt, loss: loss * opt.dynamic_scale))  # the current scale


@pytest.mark.parametrize(("step", "needle"), [
    (_step(scale=lambda opt, loss: loss), "underflowed"),
    (tf.function(_step(scale=lambda opt, loss: loss)), "underflowed"),
    (_step(outside=True), "after the `with` block"),
    (tf.function(_step(outside=True)), "after the `with` block"),
    (_step(scale=lambda opt, loss: opt.scale_loss(opt.scale_loss(loss))), "scaled twice"),
    (tf.function(_step(scale=lambda opt, loss: opt.scale_loss(opt.scale_loss(loss)))), "scaled twice"),
    (_step(scale=lambda opt, loss: loss * 32768.0), "fixed 32768"),
    (_step(loss_fn=lambda m, x, y: tf.reduce_mean(tf.square(tf.cast(m(x), tf.float16) - tf.cast(y, tf.float16)))),
     "float16"),
    (_step(ret="scaled"), "returns the scaled loss"),
    (_step(fix_grads=lambda opt, g: [t / opt.dynamic_scale for t in g]), "divides them again"),
    (_step(apply=lambda opt, g, v: opt.inner_optimizer.apply_gradients(zip(g, v, strict=True))), "inner_optimizer"),
    (_step(loss_fn=lambda m, x, y: tf.reduce_sum(tf.square(m(x) - y))), "128×"),
    (_step(apply=lambda opt, g, v: [opt.apply_gradients(zip(g, v, strict=True)) for _ in range(2)]), "2 times"),
    (_step(apply=lambda opt, g, v: None), "never called"),
    (_step(scale=lambda opt, loss: opt.get_scaled_loss(loss)), "Keras 2"),
    (lambda model, optimizer, x, y: 1 / 0, "ZeroDivisionError"),
    (None, "expected a function"),
])
def test_ex3_wrong_answers_name_their_cause(step, needle):
    _fails(ch05.check_scaled_step(step), needle)


# ----------------------------------------------------------------------------- third review (issue 29)
@pytest.mark.parametrize("answer, needle, absent", [
    (None, "got None: assign a dict", "NoneType"),
    ("layer", "{'norm': 'layer'}", "got str"),
    ([("norm", "layer")], "list of pairs", "got list"),
])
def test_ex1_answers_that_are_not_a_dict_say_how_to_write_one(answer, needle, absent):
    r = ch05.check_deep_fix(answer)
    assert not r and needle in r.feedback and absent not in r.feedback, r.feedback


def test_ex1_a_keras_layer_class_is_read_as_its_name():
    import keras

    assert ch05.check_deep_fix({"norm": keras.layers.LayerNormalization})
    assert ch05.check_deep_fix({"norm": keras.layers.LayerNormalization()})


def test_ex1_he_uniform_is_named_as_the_same_variance():
    r = ch05.check_deep_fix({"initializer": "he_uniform"})
    assert not r and "same variance as he_normal" in r.feedback, r.feedback


@pytest.mark.parametrize("fix", [{"initializer": "glorot_uniform"}, {"activation": "tanh"}])
def test_ex1_a_finite_but_exploding_stack_without_a_norm_names_the_missing_norm(fix):
    r = ch05.check_deep_fix(fix)
    assert not r and "exploding" in r.feedback and "Normalize the input of each block" in r.feedback, r.feedback


# ----------------------------------------------------------------------------- helper F's third set
def _step_with(scale_fn, reduce=None):
    reduce = reduce or tf.reduce_mean

    def train_step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = reduce(tf.square(tf.cast(model(x, training=True), tf.float32) - y))
            scaled = scale_fn(optimizer, loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
        return loss

    return train_step


def test_ch05_ex3_a_typed_in_current_scale_fails_and_dynamic_scale_passes():
    copied = ch05.check_scaled_step(_step_with(lambda opt, loss: loss * ch05.EX3_SCALE))
    assert not copied and "fixed number" in copied.feedback
    assert ch05.check_scaled_step(_step_with(lambda opt, loss: loss * opt.dynamic_scale))


def test_ch05_ex3_a_summed_loss_names_the_batch_size():
    result = ch05.check_scaled_step(_step_with(lambda opt, loss: opt.scale_loss(loss), tf.reduce_sum))
    assert not result and "batch size" in result.feedback


def test_ch05_ex2_the_exponent_is_named_and_ex1_accepts_residual_1():
    k = int(np.log2(ch05.smallest_loss_scale()))
    result = ch05.check_loss_scale(k)
    assert not result and "exponent" in result.feedback
    assert ch05.check_deep_fix({"norm": "layer", "residual": 1})


def test_ex1_zero_weights_are_named_as_no_signal_not_as_growth():
    r = ch05.check_deep_fix({"initializer": "zeros"})
    assert not r and "exactly 0" in r.feedback and "'zeros'" in r.feedback, r.feedback
    assert "slows the growth" not in r.feedback


# ----------------------------------------------------------------------------- second pass (answers2)
def test_ex3_a_float16_loss_scaled_is_named_even_when_the_float32_loss_is_returned():
    def train_step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))  # float32, returned
            half = tf.reduce_mean(tf.square(tf.cast(model(x, training=True), tf.float16) - tf.cast(y, tf.float16)))
            scaled = optimizer.scale_loss(half)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    r = ch05.check_scaled_step(train_step)
    _fails(r, "the loss is float16")
    assert "about the right size" not in r.feedback


# ----------------------------------------------------------------------------- issue 38
def _scaled_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        scaled_loss = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


@pytest.mark.parametrize("jit", [False, True])
def test_ex3_the_right_step_compiled_passes(jit):
    # XLA rounds float16 differently: layer 1's scaled gradient (~1e-6, float16 subnormals) differs by
    # up to 40% from the eager step's, so the check compares with the reference compiled the same way
    r = ch05.check_scaled_step(tf.function(_scaled_step, jit_compile=jit))
    assert r, r.feedback


def test_ex3_a_step_on_another_model_is_named_not_scale_loss_after_the_tape():
    other, *_ = ch05._ex3_setup()  # the chapter's global `model`

    def global_model(m, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(other(x, training=True) - y))
            scaled_loss = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled_loss, m.trainable_variables)
        optimizer.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        return loss

    r = ch05.check_scaled_step(global_model)
    assert not r and "never called the model passed in" in r.feedback and "after the `with`" not in r.feedback, r.feedback
