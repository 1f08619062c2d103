"""Chapter 10's self-checks: each accepts a right answer and rejects the typical wrong ones with
feedback that names the mistake. References are written out here (closed forms, NumPy float64)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradlab.exercises import ch10


# ----------------------------------------------------------------------------- exercise 1
def test_central_difference_right_and_wrong():
    assert ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x - h)) / (2 * h))
    forward = ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x)) / h)
    assert not forward and "forward difference" in forward.feedback
    no_two = ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x - h)) / h)
    assert not no_two and "2h" in no_two.feedback
    fixed_step = ch10.check_central_difference(lambda f, x, h: (f(x + 1e-3) - f(x - 1e-3)) / 2e-3)
    assert not fixed_step  # h = 0.1 gives 12.01 for x³ at 2, a fixed step gives 12.000001
    assert not ch10.check_central_difference(None)
    assert not ch10.check_central_difference(lambda f, x, h: None)
    raised = ch10.check_central_difference(lambda f, x, h: 1 / 0)
    assert not raised and "ZeroDivisionError" in raised.feedback


def test_central_difference_names_float32_the_exact_slope_and_a_string():
    # the right formula in float32: rounding (eps/h ~ 1e-4 here), not a "rounded printout"
    in_float32 = ch10.check_central_difference(
        lambda f, x, h: (f(tf.constant(x + h)) - f(tf.constant(x - h))) / (2 * h))
    assert not in_float32 and "float32" in in_float32.feedback and "typed in" not in in_float32.feedback
    assert ch10.check_central_difference(  # the same in float64 passes
        lambda f, x, h: (f(tf.constant(x + h, tf.float64)) - f(tf.constant(x - h, tf.float64))) / (2 * h))
    exact = ch10.check_central_difference(lambda f, x, h: 3 * x ** 2)
    assert not exact and "exact derivative" in exact.feedback and "typed in" not in exact.feedback
    text = ch10.check_central_difference(lambda f, x, h: "12")
    assert not text and "return a number" in text.feedback


# ----------------------------------------------------------------------------- exercise 2
def _cube(backward):
    @tf.custom_gradient
    def cube(x):
        return x ** 3, lambda dy: backward(x, dy)

    return cube


def test_cube_gradient_right_and_wrong():
    assert ch10.check_cube_gradient(_cube(lambda x, dy: 3.0 * x * x * dy))
    assert not ch10.check_cube_gradient(lambda x: x ** 3)  # right, but grad was not repaired: it is gone
    stub = ch10.check_cube_gradient(_cube(lambda x, dy: 3.0 * x * dy))
    assert not stub and "3x²" in stub.feedback
    wrong_forward = ch10.check_cube_gradient(lambda x: x ** 2)
    assert not wrong_forward and "forward pass must stay x³" in wrong_forward.feedback
    broken = ch10.check_cube_gradient(_cube(lambda x, dy: undefined_name))  # noqa: F821
    assert not broken and "NameError" in broken.feedback


# ----------------------------------------------------------------------------- exercise 3
def _norms(grads):
    n = grads[0].shape[0]
    return np.sqrt(sum(np.sum(np.asarray(g, np.float64).reshape(n, -1) ** 2, axis=1) for g in grads))


def test_clip_per_example_reference_is_what_dp_sgd_does():
    grads = ch10.per_example_batch()
    before = _norms(grads)
    assert before.max() > 1.0 > before.min()  # some examples are clipped, some are not
    clipped = ch10.clip_reference(grads, 1.0)
    after = _norms(clipped)
    np.testing.assert_allclose(after, np.minimum(before, 1.0), rtol=1e-12)
    # the direction of each example is kept
    for g, c in zip(grads, clipped, strict=True):
        ratio = np.asarray(c).reshape(4, -1) / np.asarray(g, np.float64).reshape(4, -1)
        np.testing.assert_allclose(ratio, np.repeat(np.minimum(1.0, 1.0 / before)[:, None], ratio.shape[1], 1),
                                   rtol=1e-6)


def test_clip_per_example_right_and_wrong():
    def right(grads, c):
        n = grads[0].shape[0]
        norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [n, -1]), 1) for g in grads]))
        scale = tf.minimum(1.0, c / norms)
        return [g * tf.reshape(scale, [n] + [1] * (g.shape.rank - 1)) for g in grads]

    assert ch10.check_clip_per_example(right)
    whole = ch10.check_clip_per_example(lambda grads, c: tf.clip_by_global_norm(grads, c)[0])
    assert not whole and "whole batch" in whole.feedback
    pair = ch10.check_clip_per_example(lambda grads, c: tf.clip_by_global_norm(grads, c))
    assert not pair and "whole batch" in pair.feedback
    per_variable = ch10.check_clip_per_example(
        lambda grads, c: [tf.stack([tf.clip_by_norm(g[i], c) for i in range(g.shape[0])]) for g in grads])
    assert not per_variable and "each variable" in per_variable.feedback
    stub = ch10.check_clip_per_example(lambda grads, c: grads)
    assert not stub and "nothing was clipped" in stub.feedback
    assert not ch10.check_clip_per_example(lambda grads, c: None)


# ----------------------------------------------------------------------------- exercise 4
def _penalty(norm_axis=1, square=True, watch=True, detach=False):
    def gradient_penalty(critic, x):
        with tf.GradientTape() as inner:
            if watch:
                inner.watch(x)
            d = critic(x)
        g = inner.gradient(d, x)
        if detach:
            g = tf.constant(g.numpy())
        norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=norm_axis) + 1e-12)
        return tf.reduce_mean(tf.square(norm - 1.0) if square else norm - 1.0)

    return gradient_penalty


def test_gradientpenalty_reference_against_a_closed_form():
    """For the critic tanh(x W1 + b1) W2 + b2 the input gradient is W1 diag(1 - h²) W2."""
    critic, x = ch10.critic_and_batch()
    w1, b1, w2, _b2 = (v.numpy().astype(np.float64) for v in critic.trainable_variables)
    h = np.tanh(x.numpy().astype(np.float64) @ w1 + b1)
    grads = ((1 - h ** 2) * w2[:, 0]) @ w1.T
    expected = np.mean((np.linalg.norm(grads, axis=1) - 1.0) ** 2)
    value, weight_grads = ch10.penalty_reference(critic, x)
    assert float(value) == pytest.approx(expected, rel=1e-5)
    assert weight_grads[3] is None and all(g is not None for g in weight_grads[:3])


def test_gradient_penalty_right_and_wrong():
    assert ch10.check_gradient_penalty(_penalty())
    whole = ch10.check_gradient_penalty(_penalty(norm_axis=None))
    assert not whole and "one norm per example" in whole.feedback
    no_square = ch10.check_gradient_penalty(_penalty(square=False))
    assert not no_square and "square" in no_square.feedback
    detached = ch10.check_gradient_penalty(_penalty(detach=True))
    assert not detached and "None" in detached.feedback
    unwatched = ch10.check_gradient_penalty(_penalty(watch=False))
    assert not unwatched
    assert not ch10.check_gradient_penalty(lambda critic, x: None)
    assert not ch10.check_gradient_penalty(lambda critic, x: "0.3")


# ----------------------------------------------------------------------------- exercise 5
def test_accumulate_right_and_wrong():
    def accumulate(model, x, y, k, divide=True):
        total = [tf.zeros_like(v) for v in model.trainable_variables]
        for xm, ym in zip(tf.split(x, k), tf.split(y, k), strict=True):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(ym - model(xm)))
            total = [t + g for t, g in zip(total, tape.gradient(loss, model.trainable_variables), strict=True)]
        return [t / k for t in total] if divide else total

    assert ch10.check_accumulate(accumulate)
    summed = ch10.check_accumulate(lambda m, x, y, k: accumulate(m, x, y, k, divide=False))
    assert not summed and "divide" in summed.feedback
    first_only = ch10.check_accumulate(lambda m, x, y, k: accumulate(m, x[:4], y[:4], 1))
    assert not first_only
    assert not ch10.check_accumulate(lambda m, x, y, k: None)


def test_checks_leave_the_global_seeds_alone():
    np.random.seed(123)
    undisturbed = np.random.rand()
    np.random.seed(123)
    ch10.check_gradient_penalty(lambda critic, x: None)
    ch10.check_accumulate(lambda model, x, y, k: None)
    assert np.random.rand() == undisturbed
    # the same models on every call: the checks do not depend on the learner's seeds either
    a, _ = ch10.critic_and_batch()
    np.random.seed(7)
    b, _ = ch10.critic_and_batch()
    assert all(np.array_equal(u.numpy(), v.numpy()) for u, v in zip(a.weights, b.weights, strict=True))


def test_clip_per_example_ignoring_clip_norm_fails():
    def fixed_bound(grads, clip_norm):
        return ch10.clip_reference(grads, 1.0)  # right for the default bound only

    assert ch10.check_clip_per_example(lambda g, c: ch10.clip_reference(g, c))
    r = ch10.check_clip_per_example(fixed_bound)
    assert not r and "right for clip_norm = 1, but with clip_norm = 3" in r.feedback
    twice = ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x - h)) / h)
    assert twice.feedback.count("Hint:") == 1


def test_gradient_penalty_names_a_missing_watch_and_a_numpy_penalty():
    def no_watch(critic, x):
        with tf.GradientTape() as inner:
            d = critic(x)
        g = inner.gradient(d, x)  # None: x was not watched
        return tf.reduce_mean(tf.square(tf.norm(g, axis=1) - 1.0))

    r = ch10.check_gradient_penalty(no_watch)
    assert not r and "inner.watch(x)" in r.feedback

    def in_numpy(critic, x):
        with tf.GradientTape() as inner:
            inner.watch(x)
            d = critic(x)
        g = inner.gradient(d, x).numpy().astype(np.float64)
        return float(np.mean((np.sqrt(np.sum(g ** 2, axis=1) + 1e-12) - 1.0) ** 2))

    r = ch10.check_gradient_penalty(in_numpy)
    assert not r and "not a tensor" in r.feedback


# ----------------------------------------------------------------------------- third review (issue 29)
def test_ex1_slash_2_times_h_is_named_as_precedence_not_a_mean():
    r = ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x - h)) / 2 * h)
    assert not r and "/ (2 * h)" in r.feedback and "left to right" in r.feedback, r.feedback
    assert "a mean where a sum" not in r.feedback


def _numpy_cube(x):
    return x.numpy() ** 3


def _constant_cube(x):
    return tf.constant(x.numpy() ** 3)


@pytest.mark.parametrize("cube", [_numpy_cube, _constant_cube])
def test_ex2_a_numpy_forward_pass_is_named_not_the_backward_pass(cube):
    r = ch10.check_cube_gradient(cube)
    assert not r and "left TensorFlow" in r.feedback and "forward pass" in r.feedback, r.feedback
    assert "says the backward pass is wrong" not in r.feedback


def test_ex4_lambda_multiplied_in_is_named_not_a_sum():
    r = ch10.check_gradient_penalty(lambda critic, x: 10.0 * ch10.penalty_reference(critic, x)[0])
    assert not r and "λ" in r.feedback and "10×" in r.feedback, r.feedback
    assert "sum" not in r.feedback


def test_ex4_a_sum_over_the_batch_is_still_named_a_sum():
    critic, x = ch10.critic_and_batch()
    r = ch10.check_gradient_penalty(lambda critic, x: int(x.shape[0]) * ch10.penalty_reference(critic, x)[0])
    assert not r and "a sum over the examples" in r.feedback, r.feedback


def test_ex4_the_chapters_penalty_and_grads_pair_is_named():
    r = ch10.check_gradient_penalty(ch10.penalty_reference)
    assert not r and "pair (penalty, gradients)" in r.feedback, r.feedback
    assert "None at" not in r.feedback


def _whole_batch(model, x, y, k):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    return tape.gradient(loss, model.trainable_variables)


def _micro_batches(model, x, y, k):
    total = None
    for xb, yb in zip(tf.split(x, k), tf.split(y, k), strict=True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(yb - model(xb)))
        g = tape.gradient(loss, model.trainable_variables)
        total = g if total is None else [a + b for a, b in zip(total, g, strict=True)]
    return [t / k for t in total]


def test_ex5_the_whole_batch_at_once_is_rejected():
    r = ch10.check_accumulate(_whole_batch)
    assert not r and "whole batch of 12 at once" in r.feedback, r.feedback


def test_ex5_micro_batches_pass_eagerly_and_in_tf_function():
    assert ch10.check_accumulate(_micro_batches)
    assert ch10.check_accumulate(tf.function(_micro_batches))
    assert not ch10.check_accumulate(tf.function(_whole_batch))


# ----------------------------------------------------------------------------- helper F's third set
def test_central_difference_names_an_ignored_f_a_fixed_h_and_the_backward_difference():
    ignores_f = ch10.check_central_difference(lambda f, x, h: ((x + h) ** 3 - (x - h) ** 3) / (2 * h))
    assert not ignores_f and "not of the f passed in" in ignores_f.feedback
    fixed = ch10.check_central_difference(lambda f, x, h: (f(x + 1e-3) - f(x - 1e-3)) / 2e-3)
    assert not fixed and "typed in" in fixed.feedback
    backward = ch10.check_central_difference(lambda f, x, h: (f(x) - f(x - h)) / h)
    assert not backward and "backward difference" in backward.feedback


def test_cube_gradient_with_a_numpy_backward_fails_inside_tf_function():
    numpy_backward = ch10.check_cube_gradient(_cube(lambda x, dy: 3.0 * x.numpy() ** 2 * dy.numpy()))
    assert not numpy_backward and "tf.function" in numpy_backward.feedback


def test_clip_per_example_always_rescaling_is_named():
    def rescale(grads, c):
        n = grads[0].shape[0]
        norms = tf.sqrt(tf.add_n([tf.reduce_sum(tf.reshape(g, [n, -1]) ** 2, axis=1) for g in grads]))
        return [g * tf.reshape(c / norms, [n] + [1] * (len(g.shape) - 1)) for g in grads]

    result = ch10.check_clip_per_example(rescale)
    assert not result and "only shortens" in result.feedback


def test_gradient_penalty_names_the_squared_norm():
    def squared(critic, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            d = critic(x)
        g = tape.gradient(d, x)
        return tf.reduce_mean(tf.square(tf.reduce_sum(tf.square(g), axis=1) - 1.0))

    result = ch10.check_gradient_penalty(squared)
    assert not result and "squared norm" in result.feedback


def _accumulate(split):
    def accumulate(model, x, y, k):
        xs, ys = split(x, y, k)
        total = None
        for xi, yi in zip(xs, ys, strict=False):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xi) - yi))
            g = tape.gradient(loss, model.trainable_variables)
            total = g if total is None else [a + b for a, b in zip(total, g, strict=False)]
        return [a / len(xs) for a in total]

    return accumulate


def test_accumulate_with_a_typed_in_k_or_per_micro_batch_lists_fails():
    assert ch10.check_accumulate(_accumulate(lambda x, y, k: (tf.split(x, k), tf.split(y, k))))
    typed = ch10.check_accumulate(_accumulate(lambda x, y, k: (tf.split(x, 3), tf.split(y, 3))))
    assert not typed and "k = 4" in typed.feedback

    def lists(model, x, y, k):
        out = []
        for xi, yi in zip(tf.split(x, k), tf.split(y, k), strict=False):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xi) - yi))
            out.append(tape.gradient(loss, model.trainable_variables))
        return out

    per_batch = ch10.check_accumulate(lists)
    assert not per_batch and "one per micro-batch" in per_batch.feedback


# ----------------------------------------------------------------------------- answers review, fresh variants
def _numpy_forward_cube(x):
    @tf.custom_gradient
    def cube(t):
        return tf.constant(np.asarray(t) ** 3), lambda dy: 3.0 * t * t * dy

    return cube(x)


def test_ex2_a_numpy_forward_inside_custom_gradient_names_the_forward_pass():
    r = ch10.check_cube_gradient(_numpy_forward_cube)
    assert not r and "the forward pass raises" in r.feedback, r.feedback
    assert "backward pass leaves" not in r.feedback


def test_ex2_dropping_the_custom_gradient_is_rejected():
    r = ch10.check_cube_gradient(lambda x: x ** 3)
    assert not r and "no longer a custom gradient" in r.feedback, r.feedback
    assert ch10.check_cube_gradient(_cube(lambda x, dy: 3.0 * x * x * dy))
    assert ch10.check_cube_gradient(tf.function(_cube(lambda x, dy: 3.0 * x * x * dy)))


def test_ex4_a_penalty_returned_with_the_input_gradient_is_named_a_pair():
    def with_input_gradient(critic, x):
        with tf.GradientTape() as inner:
            inner.watch(x)
            d = critic(x)
        g = inner.gradient(d, x)
        return tf.reduce_mean(tf.square(tf.norm(g, axis=1) - 1.0)), g

    r = ch10.check_gradient_penalty(with_input_gradient)
    assert not r and "pair (penalty, gradients)" in r.feedback, r.feedback
    assert "ragged" not in r.feedback


def _one_tape_for_all(model, x, y, k):
    with tf.GradientTape() as tape:
        pred = tf.concat([model(xb) for xb in tf.split(x, k)], axis=0)
        loss = tf.reduce_mean(tf.square(y - pred))
    return tape.gradient(loss, model.trainable_variables)


def test_ex5_micro_batch_forwards_under_one_tape_are_rejected():
    r = ch10.check_accumulate(_one_tape_for_all)
    assert not r and "tape.gradient ran 1 times for the 3" in r.feedback, r.feedback
    assert tf.GradientTape.gradient.__name__ == "gradient"  # the monitor put the method back


# ----------------------------------------------------------------------------- second pass (answers2)
def test_ch10_ex3_clip_by_value_is_named():
    r = ch10.check_clip_per_example(lambda grads, c: [tf.clip_by_value(g, -c, c) for g in grads])
    assert not r and "tf.clip_by_value" in r.feedback and "not on the norm" in r.feedback, r.feedback


def test_ch10_ex1_dividing_by_4h_gets_the_half_hint():
    r = ch10.check_central_difference(lambda f, x, h: (f(x + h) - f(x - h)) / (4 * h))
    assert not r and "half the expected value" in r.feedback and "not by 4h" in r.feedback, r.feedback


def test_ch10_ex2_a_grad_that_ignores_dy_is_named():
    @tf.custom_gradient
    def cube(x):
        return x**3, lambda dy: 3.0 * x**2  # the local derivative, without dy

    r = ch10.check_cube_gradient(cube)
    assert not r and "ignores dy" in r.feedback and "3x² · dy" in r.feedback, r.feedback

    @tf.custom_gradient
    def cube_3x(x):
        return x**3, lambda dy: 3.0 * x * dy  # uses dy: the other hint, not this one

    r = ch10.check_cube_gradient(cube_3x)
    assert not r and "ignores dy" not in r.feedback and "3x·dy" in r.feedback, r.feedback


# ----------------------------------------------------------------------------- issue 38
def _persistent_tape_for_all(model, x, y, k):
    """Every micro-batch under one persistent tape, read k times: right numbers, the whole batch's memory."""
    xs, ys = tf.split(x, k), tf.split(y, k)
    with tf.GradientTape(persistent=True) as tape:
        losses = [tf.reduce_mean(tf.square(yb - model(xb))) for xb, yb in zip(xs, ys, strict=True)]
    grads = [tape.gradient(loss, model.trainable_variables) for loss in losses]
    return [tf.add_n(list(g)) / k for g in zip(*grads, strict=True)]


def _one_tape_per_micro_batch(model, x, y, k):
    total = None
    for xb, yb in zip(tf.split(x, k), tf.split(y, k), strict=True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(yb - model(xb)))
        g = tape.gradient(loss, model.trainable_variables)
        total = g if total is None else [a + b for a, b in zip(total, g, strict=True)]
    return [a / k for a in total]


def test_ex5_one_persistent_tape_read_k_times_is_rejected_as_one_tape():
    r = ch10.check_accumulate(_persistent_tape_for_all)
    assert not r and "read 1 tape(s) for the 3 micro-batches" in r.feedback and "persistent" in r.feedback, r.feedback
    assert ch10.check_accumulate(_one_tape_per_micro_batch)  # a new tape per micro-batch passes
    assert ch10.check_accumulate(tf.function(_one_tape_per_micro_batch))  # also traced: tapes are told apart


def test_ex1_the_half_step_central_difference_is_named_not_asked_if_typed_in():
    r = ch10.check_central_difference(lambda f, x, h: (f(x + h / 2) - f(x - h / 2)) / h)
    assert not r and "(f(x + h/2) - f(x - h/2)) / h" in r.feedback and "typed in" not in r.feedback, r.feedback


def _stopped_penalty(critic, x):
    with tf.GradientTape() as inner:
        inner.watch(x)
        d = critic(tf.stop_gradient(x))
    g = inner.gradient(d, x)
    return tf.reduce_mean(tf.square(tf.norm(g, axis=1) - 1.0))


def test_ex4_stop_gradient_is_named_not_a_missing_watch():
    r = ch10.check_gradient_penalty(_stopped_penalty)
    assert not r and "tf.stop_gradient" in r.feedback and "only after inner.watch(x)" not in r.feedback, r.feedback
    assert tf.stop_gradient.__name__ == "stop_gradient"  # the monitor put it back
    assert tf.GradientTape.watch.__name__ == "watch"


def test_ex4_a_keras_shape_error_is_not_blamed_on_a_none_gradient():
    r = ch10.check_gradient_penalty(lambda critic, x: critic(tf.reshape(x, [3, 6])))
    assert not r and "incompatible" in r.feedback and "inner.watch" not in r.feedback, r.feedback
