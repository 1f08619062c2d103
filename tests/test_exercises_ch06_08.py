"""Chapters 06, 07 and 08 self-checks: right answers pass (however they are written), typical wrong
answers, including ones that are right only by coincidence, fail with specific feedback, and no
answer makes a check raise."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import gradlab as gl
from gradlab.exercises import ch06, ch07, ch08
from tests._helpers import fails as _fails

tf = gl.session.quiet_import_tensorflow()


def _raises(*_):
    raise RuntimeError("oops")


# ----------------------------------------------------------------------------- chapter 06
@tf.custom_gradient
def _round_ste(t):
    return tf.round(t), lambda dy: dy


def test_ch06_ex1_right_answers_pass():
    assert ch06.check_round_ste(_round_ste)
    assert ch06.check_round_ste(lambda t: t + tf.stop_gradient(tf.round(t) - t))


@pytest.mark.parametrize(("fn", "needle"), [
    (_raises, "raised RuntimeError: oops"),  # used to say "returned None"
    (None, "expected a function"),
    (lambda t: "round", "returned a str"),
    (lambda t: np.round(t.numpy()), "not a tensor"),
    (lambda t: [round(float(v)) for v in t], "not a tensor"),
    (lambda t: tf.round(t), "gradient is None"),
])
def test_ch06_ex1_wrong_answers_are_feedback(fn, needle):
    _fails(ch06.check_round_ste(fn), needle)


def test_ch06_ex1_also_right_inside_tf_function():
    assert ch06.check_round_ste(tf.function(_round_ste))


@tf.custom_gradient
def _round_numpy_forward(t):
    return tf.constant(np.round(t.numpy())), lambda dy: dy  # right eagerly, fails in a graph (fit)


@tf.custom_gradient
def _round_float_gradient(t):
    return tf.round(t), lambda dy: 1.0  # a Python float as the gradient


@tf.custom_gradient
def _round_ones(t):
    return tf.round(t), lambda dy: tf.ones_like(dy)


@tf.custom_gradient
def _round_clipped(t):
    return tf.round(t), lambda dy: dy * tf.cast(tf.abs(t) <= 1.0, dy.dtype)


@pytest.mark.parametrize(("fn", "needle"), [
    (_round_numpy_forward, "fails inside tf.function"),
    (_round_float_gradient, "not a number"),  # used to raise AttributeError inside the check
    (_round_ones, "returned a constant"),
    (_round_clipped, "clipped straight-through"),
])
def test_ch06_ex1_plausible_wrong_gradients_are_named(fn, needle):
    _fails(ch06.check_round_ste(fn), needle)


def test_ch06_ex1_a_grad_returning_two_values_is_feedback():
    @tf.custom_gradient
    def two(t):
        return tf.round(t), lambda dy: (dy, None)

    _fails(ch06.check_round_ste(two), "backward pass raised ValueError", "one tensor")


class TwoHeadsModel(keras.Model):
    def __init__(self, combine):
        super().__init__()
        self.combine = combine
        self.body = keras.layers.Dense(8, activation="relu", name="body")
        self.head = keras.layers.Dense(1, name="head")
        self.aux = keras.layers.Dense(1, name="aux")

    def call(self, inputs):
        h = self.body(inputs)
        return self.combine(self.head(h), self.aux(h))


X6 = tf.random.stateless_normal([32, 4], seed=[1, 2])


def test_ch06_ex2_right_answer_passes():
    assert ch06.check_uses_every_layer(TwoHeadsModel(lambda a, b: a + b), X6)


@pytest.mark.parametrize(("combine", "needle"), [
    (lambda a, b: a + 0.0 * b, "all zeros"),  # every variable has a gradient, aux's is 0
    (lambda a, b: tf.concat([a, b], -1), "side by side"),  # shape (32, 2): named as a concatenation
    (lambda a, b: a + tf.stop_gradient(b), "no gradient for"),
    (lambda a, b: a, "no gradient for"),
])
def test_ch06_ex2_coincidences_fail(combine, needle):
    _fails(ch06.check_uses_every_layer(TwoHeadsModel(combine), X6), needle)


def test_ch06_ex3_right_answers_pass_and_truthiness_fails():
    assert ch06.check_drop_none(lambda g, v: [(a, b) for a, b in zip(g, v, strict=True) if a is not None])
    assert ch06.check_drop_none(lambda g, v: ((a, b) for a, b in zip(g, v, strict=True) if a is not None))
    # `if a` drops a gradient of 0.0 too: right by coincidence when no gradient is zero
    _fails(ch06.check_drop_none(lambda g, v: [(a, b) for a, b in zip(g, v, strict=True) if a]),
           "whose gradient is 0.0", "is not None")


def test_ch06_ex3_an_answer_that_edits_its_input_in_place_passes():
    def in_place(grads, variables):
        for i in reversed(range(len(grads))):
            if grads[i] is None:
                del grads[i]
                del variables[i]
        return list(zip(grads, variables, strict=True))

    assert ch06.check_drop_none(in_place)
    assert ch06.check_drop_none(lambda g, v: zip(*zip(*[(a, b) for a, b in zip(g, v, strict=True) if a is not None], strict=True), strict=True))


def test_ch06_ex3_wrong_answers_are_feedback():
    _fails(ch06.check_drop_none(_raises), "raised RuntimeError")  # used to say "returned None"
    _fails(ch06.check_drop_none(lambda g, v: [(b, a) for a, b in zip(g, v, strict=True) if a is not None]),
           "(variable, gradient)")
    _fails(ch06.check_drop_none(lambda g, v: [a for a in g if a is not None]), "pairs")


def test_ch06_ex4_numbers_in_any_form():
    assert ch06.check_dense_bytes(tf.constant(50_000 * 64 * 4), np.array(4 * 64 * 4))
    assert ch06.check_dense_bytes(12_800_000.0, np.int64(1024))
    _fails(ch06.check_dense_bytes(50_000 * 64, 4 * 64), "number of floats")


def test_ch06_ex5_function_problems_are_named():
    _fails(ch06.check_safe_log(None), "expected a function")
    _fails(ch06.check_safe_log(lambda t: None), "returned None")
    _fails(ch06.check_safe_log(lambda t: tf.where(t > 0, tf.math.log(t), 0.0)), "NaN/inf")


def test_ch06_ex5_right_in_any_form_and_cut_gradients_named():
    assert ch06.check_safe_log(lambda t: tf.where(t > 0, tf.math.log(tf.where(t > 0, t, 1.0)), 0.0))
    assert ch06.check_safe_log(tf.function(lambda t: tf.where(t > 0, tf.math.log(tf.maximum(t, 1e-30)), 0.0)))
    stopped = lambda t: tf.where(t > 0, tf.math.log(tf.stop_gradient(tf.where(t > 0, t, 1.0))), 0.0)  # noqa: E731
    _fails(ch06.check_safe_log(stopped), "stop_gradient")
    through_numpy = lambda t: tf.where(t > 0, tf.constant(np.log(np.abs(t.numpy()) + 1e-30)), 0.0)  # noqa: E731
    _fails(ch06.check_safe_log(through_numpy), ".numpy()")


def _bce(y, z):
    return tf.reduce_mean(tf.math.softplus(z) - y * z)


def test_ch06_ex6_right_answers_pass():
    assert ch06.check_bce_from_logits(_bce)
    assert ch06.check_bce_from_logits(tf.function(_bce))
    assert ch06.check_bce_from_logits(
        lambda y, z: tf.reduce_mean(y * tf.math.softplus(-z) + (1 - y) * tf.math.softplus(z)))
    assert ch06.check_bce_from_logits(
        lambda y, z: tf.reduce_mean(keras.losses.binary_crossentropy(y[:, None], z[:, None], from_logits=True)))
    assert ch06.check_bce_from_logits(
        lambda y, z: tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z)))


@pytest.mark.parametrize(("fn", "needle"), [
    (lambda y, z: tf.math.softplus(z) - y * z, "shape (6,)"),  # used to raise TypeError
    (lambda y, z: tf.reduce_sum(tf.math.softplus(z) - y * z), "6× too large"),
    (lambda z, y: tf.reduce_mean(tf.math.softplus(z) - y * z), "swapped"),
    (lambda y, z: float(_bce(y, z)), "not a tensor"),
    (lambda y, z: None, "returned None"),
    (_raises, "raised RuntimeError"),
    # swapped softplus signs: finite, plausible, wrong; the old check blamed clipping
    (lambda y, z: tf.reduce_mean(y * tf.math.softplus(z) + (1 - y) * tf.math.softplus(-z)), "signs inside softplus"),
    (lambda y, z: tf.reduce_mean(tf.math.softplus(-z) - y * z), "signs inside softplus"),
    # a stop_gradient: the loss is right, the gradient is cut
    (lambda y, z: tf.reduce_mean(tf.math.softplus(tf.stop_gradient(z)) - y * z), "stop_gradient"),
    (lambda y, z: tf.stop_gradient(_bce(y, z)), "gradient is None"),
])
def test_ch06_ex6_wrong_answers_are_feedback(fn, needle):
    _fails(ch06.check_bce_from_logits(fn), needle)


def test_ch06_ex6_clipped_probabilities_get_their_hint():
    def clipped(y, z):
        p = tf.clip_by_value(tf.sigmoid(z), 1e-7, 1 - 1e-7)
        return tf.reduce_mean(-y * tf.math.log(p) - (1 - y) * tf.math.log(1 - p))

    _fails(ch06.check_bce_from_logits(clipped), "clipped")


# ----------------------------------------------------------------------------- chapter 07
def _step_norms(model, x, y, dtype=tf.float64, watch=True):
    with tf.GradientTape() as tape:
        if watch:
            tape.watch(x)
        loss = tf.reduce_mean(tf.square(model(x) - y))
    dx = tape.gradient(loss, x)
    if dx is None:
        return None
    return tf.reduce_sum(tf.square(tf.cast(dx, dtype)), axis=[0, 2])


def test_ch07_ex1_right_and_typical_wrong_answers():
    assert ch07.check_step_norms(lambda m, x, y: tf.sqrt(_step_norms(m, x, y)))
    _fails(ch07.check_step_norms(lambda m, x, y: _step_norms(m, x, y, watch=False)), "tape.watch(x)")
    assert ch07.check_step_norms(tf.function(lambda m, x, y: tf.sqrt(_step_norms(m, x, y))))
    assert ch07.check_step_norms(lambda m, x, y: tf.sqrt(_step_norms(m, x, y)).numpy().tolist())


def test_ch07_ex1_a_forgotten_watch_is_named_not_a_raw_error():
    def no_watch(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        dx = tf.cast(tape.gradient(loss, x), tf.float64)  # None: raises inside tf.cast
        return tf.sqrt(tf.reduce_sum(tf.square(dx), axis=[0, 2]))

    _fails(ch07.check_step_norms(no_watch), "tape.watch(x)")
    _fails(ch07.check_step_norms(tf.function(no_watch)), "tape.watch(x)")
    _fails(ch07.check_step_norms(_step_norms), "squared norms")
    _fails(ch07.check_step_norms(lambda m, x, y: tf.sqrt(_step_norms(m, x, y, tf.float32))), "float64")


def _clipped_step(model, optimizer, x, y, *, reduce=tf.reduce_mean, always=False, own_optimizer=False):
    with tf.GradientTape() as tape:
        loss = reduce(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_weights)
    norm = tf.linalg.global_norm(grads)
    if always:
        grads = [g / norm for g in grads]
    elif not own_optimizer:
        grads, _ = tf.clip_by_global_norm(grads, ch07.CLIP_THRESHOLD)
    if own_optimizer:
        optimizer = keras.optimizers.SGD(0.1, global_clipnorm=ch07.CLIP_THRESHOLD)
    optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))


def test_ch07_ex3_right_answer_passes():
    r = ch07.check_clipped_step(_clipped_step)
    assert r and "passes unclipped" in r.feedback, r


@pytest.mark.parametrize(("kw", "needle"), [
    ({"reduce": tf.reduce_sum}, "below the threshold"),  # clipping hides the factor 16 on the big batch
    ({"always": True}, "below the threshold"),  # rescaled to norm 1 even when shorter
    ({"own_optimizer": True}, "took 0 steps"),  # weights right, the optimizer passed in unused
])
def test_ch07_ex3_right_by_coincidence_fails(kw, needle):
    _fails(ch07.check_clipped_step(lambda m, o, x, y: _clipped_step(m, o, x, y, **kw)), needle)


def test_ch07_ex3_right_inside_tf_function():
    assert ch07.check_clipped_step(tf.function(_clipped_step))


@pytest.mark.parametrize("option", ["global_clipnorm", "clipnorm"])
def test_ch07_ex3_the_optimizers_own_clipping_is_not_the_task(option):
    def own(model, optimizer, x, y):
        setattr(optimizer, option, ch07.CLIP_THRESHOLD)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights,
                                      strict=True))

    _fails(ch07.check_clipped_step(own), f"optimizer's own {option}")


def test_ch07_ex3_always_rescaling_and_a_summed_loss_are_told_apart():
    # on the batch whose gradient norm is 0.4 both take a step of norm 1: the feedback names both causes
    for kw in ({"always": True}, {"reduce": tf.reduce_sum}):
        _fails(ch07.check_clipped_step(lambda m, o, x, y, kw=kw: _clipped_step(m, o, x, y, **kw)),
               "always rescaled", "a sum, not the mean")


def test_ch07_ex3_the_unpacked_pair_gets_a_hint():
    def pair(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tf.clip_by_global_norm(tape.gradient(loss, model.trainable_weights), 1.0)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))  # noqa: B905 - the learner's bug

    _fails(ch07.check_clipped_step(pair), "Unpack it")


# ----------------------------------------------------------------------------- chapter 08
def test_ch08_ex1_right_answers_in_any_form():
    assert ch08.check_replica_loss(lambda loss, n: tf.reduce_sum(loss) / n)
    assert ch08.check_replica_loss(lambda loss, n: tf.nn.compute_average_loss(loss, global_batch_size=n))
    assert ch08.check_replica_loss(lambda loss, n: tf.reshape(tf.reduce_sum(loss) / n, [1]))
    assert ch08.check_replica_loss(tf.function(lambda loss, n: tf.reduce_sum(loss) / n))
    assert ch08.check_replica_loss(lambda loss, n: tf.reduce_sum(loss) / tf.cast(n, tf.float32))


def test_ch08_ex1_wrong_answers_are_feedback():
    _fails(ch08.check_replica_loss(_raises), "raised RuntimeError")  # used to say "got None"
    _fails(ch08.check_replica_loss(lambda loss, n: loss / n), "shape (4,)")
    _fails(ch08.check_replica_loss(lambda loss, n: tf.reduce_mean(loss)), "not by the global batch")
    # right numbers, but outside TensorFlow: the replica would compute no gradient
    _fails(ch08.check_replica_loss(lambda loss, n: float(np.sum(loss.numpy())) / n), "not a tensor", "tape")
    _fails(ch08.check_replica_loss(lambda loss, n: np.sum(loss.numpy()) / n), "not a tensor")
    _fails(ch08.check_replica_loss(lambda loss, n: tf.constant(float(tf.reduce_sum(loss)) / n)), "not connected")
    _fails(ch08.check_replica_loss(lambda loss, n: tf.stop_gradient(tf.reduce_sum(loss) / n)), "not connected")
    _fails(ch08.check_replica_loss(lambda loss, n: None), "returned None")
    _fails(ch08.check_replica_loss(None), "expected a function")


def _sum_then_clip(replica_grads, c):
    return tf.clip_by_global_norm([tf.add_n(list(p)) for p in zip(*replica_grads, strict=True)], c)[0]


def test_ch08_ex2_right_answer_passes():
    assert ch08.check_clip_summed(_sum_then_clip)
    assert ch08.check_clip_summed(tf.function(_sum_then_clip))
    assert ch08.check_clip_summed(lambda g, c: [t.numpy() for t in _sum_then_clip(g, c)])
    assert ch08.check_clip_summed(lambda g, c: tuple(_sum_then_clip(g, c)))


@pytest.mark.parametrize(("fn", "needle"), [
    # the mean's norm (2.56) is over 1.0 like the sum's (5.12): at clip 1.0 this is right by coincidence
    (lambda g, c: tf.clip_by_global_norm([tf.add_n(list(p)) / 2 for p in zip(*g, strict=True)], c)[0],
     "clipped the mean"),
    (lambda g, c: [tf.add_n(list(p)) for p in zip(*g, strict=True)], "unclipped"),
    (lambda g, c: [tf.clip_by_norm(tf.add_n(list(p)), c) for p in zip(*g, strict=True)], "each tensor"),
    (lambda g, c: [tf.clip_by_global_norm(r, c)[0] for r in g], "one list per replica"),
    (lambda g, c: None, "returned None"),
    (_raises, "raised RuntimeError"),
    # always rescaled to the threshold: right at 1.0 and 4.0 (the sum's norm is 5.12), wrong at 8.0
    (lambda g, c: [t * (c / tf.linalg.global_norm([tf.add_n(list(p)) for p in zip(*g, strict=True)]))
                   for t in [tf.add_n(list(p)) for p in zip(*g, strict=True)]], "only shortens"),
    (lambda g, c: [tf.add_n(list(p)) / 2 for p in zip(*g, strict=True)], "mean over the replicas"),
])
def test_ch08_ex2_wrong_answers_are_feedback(fn, needle):
    _fails(ch08.check_clip_summed(fn), needle)


# ----------------------------------------------------------------------------- third review (issue 29)
def test_ch07_ex2_a_report_or_the_list_of_healthy_lengths_is_named():
    engine = ch07._engine()
    report = engine.report(ch07.HEALTHY_CELL, 5, ch07.HEALTHY_INITIALIZER, ch07.HEALTHY_SCALE)
    r = ch07.check_longest_healthy(report)
    assert not r and "got a TimeReport" in r.feedback and "number of steps itself" in r.feedback, r.feedback
    r = ch07.check_longest_healthy(np.arange(2, 10))
    assert not r and "max(...)" in r.feedback, r.feedback


def _summed(r):
    return [a + b for a, b in zip(*r, strict=True)]


@pytest.mark.parametrize("wrong, needle", [
    (lambda r, c: [2 * g for g in tf.clip_by_global_norm(_summed(r), c)[0]], "times 2, the number of replicas"),
    (lambda r, c: [tf.clip_by_value(g, -c, c) for g in _summed(r)], "tf.clip_by_value"),
    (lambda r, c: tf.clip_by_global_norm(list(r[0]), c)[0], "replica 0's gradients"),
    (lambda r, c: [-g for g in tf.clip_by_global_norm(_summed(r), c)[0]], "wrong sign"),
    (lambda r, c: tf.clip_by_global_norm(r, c)[0], "add them variable by variable first"),
])
def test_ch08_ex2_typical_wrong_answers_name_their_cause(wrong, needle):
    r = ch08.check_clip_summed(wrong)
    assert not r and needle in r.feedback, r.feedback
    assert "a sum is taken where a mean was wanted" not in r.feedback


def _third_review_step(clip=lambda g: tf.clip_by_global_norm(g, 1.0)[0], times=1, sign=1.0):
    def step(model, opt, x, y):
        for _ in range(times):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = clip(tape.gradient(loss, model.trainable_weights))
            opt.apply_gradients(zip([sign * g for g in grads], model.trainable_weights, strict=True))
    return step


@pytest.mark.parametrize("step, needle", [
    (_third_review_step(lambda g: tf.clip_by_global_norm(g, 0.5)[0]), "0.5× as long as the clipped one"),
    (_third_review_step(sign=-1.0), "goes the wrong way"),
    (_third_review_step(times=2), "took 2 steps in one call"),
])
def test_ch07_ex3_a_step_of_the_wrong_length_sign_or_count_is_named(step, needle):
    r = ch07.check_clipped_step(step)
    assert not r and needle in r.feedback, r.feedback
    assert "match neither" not in r.feedback


def test_ch07_ex3_the_right_step_passes():
    assert ch07.check_clipped_step(_third_review_step())


class _ThirdReviewHeads(keras.Model):
    """TwoHeads of chapter 06 with the output written by ``combine(self, h)``."""

    def __init__(self, combine):
        super().__init__()
        self.combine = combine
        self.body = keras.layers.Dense(8, activation="relu", name="body")
        self.head = keras.layers.Dense(1, name="head")
        self.aux = keras.layers.Dense(1, name="aux")

    def build(self, input_shape):
        self.body.build(input_shape)
        self.head.build((None, 8))
        self.aux.build((None, 8))

    def call(self, inputs):
        return self.combine(self, self.body(inputs))


@pytest.mark.parametrize("combine, needle", [
    (lambda m, h: m.head(h) * m.aux(h), "their product"),
    (lambda m, h: m.head(h) - m.aux(h), "their difference"),
    (lambda m, h: (m.head(h) + m.aux(h)) / 2, "the mean of head(h) and aux(h)"),
    (lambda m, h: tf.concat([m.head(h), m.aux(h)], -1), "side by side"),
    (lambda m, h: (m.head(h), m.aux(h)), "tuple of 2 outputs"),
    (lambda m, h: m.head(h) + tf.stop_gradient(m.aux(h)), "tf.stop_gradient"),
])
def test_ch06_ex2_typical_wrong_outputs_name_their_cause(combine, needle):
    model = _ThirdReviewHeads(combine)
    model.build((None, 4))
    r = ch06.check_uses_every_layer(model, tf.random.stateless_normal([16, 4], seed=[1, 2]))
    assert not r and needle in r.feedback, r.feedback


def test_ch06_ex2_the_sum_passes_and_the_class_is_named():
    model = _ThirdReviewHeads(lambda m, h: m.head(h) + m.aux(h))
    model.build((None, 4))
    x = tf.random.stateless_normal([16, 4], seed=[1, 2])
    assert ch06.check_uses_every_layer(model, x)
    r = ch06.check_uses_every_layer(_ThirdReviewHeads, x)
    assert not r and "the class _ThirdReviewHeads itself" in r.feedback, r.feedback


# ----------------------------------------------------------------------------- helper F's third set
@pytest.mark.parametrize(("dense", "slices", "needle"), [
    (1024, 50_000 * 64 * 4, "swapped"),
    (12.8, 1024, "megabytes"),
    (12.8e6 / 2**20, 1024, "mebibytes"),
    (50_000 * 64 * 8, 4 * 64 * 8, "float64"),
    (50_000 * 64 * 32, 4 * 64 * 32, "bits"),
    (50_000 * 64 * 4, 64 * 4, "one row"),
])
def test_ch06_ex4_units_and_swaps_are_named(dense, slices, needle):
    _fails(ch06.check_dense_bytes(dense, slices), needle)


def test_ch06_ex6_keras_without_from_logits_and_half_the_loss_are_named():
    _fails(ch06.check_bce_from_logits(lambda y, z: keras.losses.binary_crossentropy(y, z)), "from_logits=True")
    _fails(ch06.check_bce_from_logits(lambda y, z: tf.reduce_mean(tf.math.softplus(z) - y * z) / 2), "half")
    assert ch06.check_bce_from_logits(lambda y, z: keras.losses.binary_crossentropy(y, z, from_logits=True))


def test_ch07_ex3_clip_by_value_that_changes_nothing_says_so():
    def by_value(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip([tf.clip_by_value(g, -1.0, 1.0) for g in grads], model.trainable_variables, strict=False))

    _fails(ch07.check_clipped_step(by_value), "unclipped", "tf.clip_by_value")


def test_ch08_ex1_a_typed_in_global_batch_fails():
    _fails(ch08.check_replica_loss(lambda p, g: tf.reduce_sum(p) / 8), "typed in")
    assert ch08.check_replica_loss(lambda p, g: tf.nn.compute_average_loss(p, global_batch_size=g))


def test_ch08_ex2_an_answer_for_exactly_two_replicas_fails():
    def two_only(replica_grads, clip_norm):
        summed = [a + b for a, b in zip(replica_grads[0], replica_grads[1], strict=False)]
        return tf.clip_by_global_norm(summed, clip_norm)[0]

    _fails(ch08.check_clip_summed(two_only), "3")
    assert ch08.check_clip_summed(
        lambda rg, c: tf.clip_by_global_norm([tf.add_n(list(p)) for p in zip(*rg, strict=False)], c)[0])


def test_ch06_ex2_aux_through_numpy_names_leaving_tensorflow():
    model = TwoHeadsModel(lambda a, b: a + tf.constant(np.asarray(b)))
    _fails(ch06.check_uses_every_layer(model, X6), "no gradient for", "leaves TensorFlow on the way")


# ----------------------------------------------------------------------------- second pass (answers2)
def test_ch06_ex1_a_zero_gradient_is_named_as_zeros_not_as_ones():
    @tf.custom_gradient
    def round_zero(t):
        return tf.round(t), lambda dy: tf.zeros_like(dy)

    r = ch06.check_round_ste(round_zero)
    _fails(r, "returned zeros", "Return dy itself")
    assert "ones, 1.0" not in r.feedback


def test_ch06_ex6_exp_overflow_is_told_from_a_log_of_zero():
    r = ch06.check_bce_from_logits(lambda y, z: tf.reduce_mean(tf.math.log(1.0 + tf.exp(z)) - y * z))
    _fails(r, "exp(z) overflows", "softplus")
    assert "sigmoid followed by a log" not in r.feedback
    naive = lambda y, z: tf.reduce_mean(-y * tf.math.log(tf.sigmoid(z)) - (1 - y) * tf.math.log(1 - tf.sigmoid(z)))  # noqa: E731
    _fails(ch06.check_bce_from_logits(naive), "a sigmoid followed by a log")


def test_ch06_ex6_clipped_logits_are_named():
    r = ch06.check_bce_from_logits(
        lambda y, z: tf.reduce_mean(tf.math.softplus(tf.clip_by_value(z, -20.0, 20.0)) - y * tf.clip_by_value(z, -20.0, 20.0)))
    _fails(r, "smaller than the true loss", "the logits clipped")


def test_ch07_ex1_a_norm_over_the_batch_only_is_named():
    def over_batch(model, x, y):
        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_mean(tf.square(model(x) - y))
        dx = tf.cast(tape.gradient(loss, x), tf.float64)
        return tf.sqrt(tf.reduce_sum(tf.square(dx), axis=[0]))

    r = ch07.check_step_norms(over_batch)
    _fails(r, "shape (60, 8)", "axis=[0, 2]")
    assert "jacobian" not in r.feedback


def test_ch07_ex2_the_first_vanishing_length_is_named():
    best = next(t for t in range(2, 60) if ch07.check_longest_healthy(t))  # the check's own passing answer
    _fails(ch07.check_longest_healthy(best + 1), "the first length whose verdict is", "one step fewer")
    _fails(ch07.check_longest_healthy(best + 2), "already", "try fewer")


def test_ch08_ex1_a_mean_divided_again_is_named_as_divided_twice():
    r = ch08.check_replica_loss(lambda loss, n: tf.reduce_mean(loss) / n)
    _fails(r, "divided twice")
    assert "a mean where a sum" not in r.feedback


def test_ch08_ex1_a_typed_in_replica_count_is_named():
    r = ch08.check_replica_loss(lambda loss, n: tf.reduce_mean(loss) / 2)  # right on 2 replicas only
    _fails(r, "right with 2 replicas, wrong with 4", "typed in")
    assert "a sum is taken where a mean" not in r.feedback


def test_ch07_ex3_clipping_only_the_grus_gradients_is_named_not_the_loss():
    # issue 38: the readout's gradients left out of the global norm were blamed on the loss
    def only_gru(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_weights)
        n = len(model.layers[-1].trainable_weights)
        clipped, _norm = tf.clip_by_global_norm(grads[:-n], 1.0)
        optimizer.apply_gradients(zip(list(clipped) + grads[-n:], model.trainable_weights, strict=True))

    r = ch07.check_clipped_step(only_gru)
    assert not r and "only the recurrent layer's" in r.feedback and "loss" not in r.feedback.split(":")[0], r.feedback


def test_clipped_step_checks_share_one_experiment():
    # issue 38: ch03's and ch07's clipped-step checks scale the residual with the same helper
    import inspect

    from gradlab.exercises import ch03, clipping

    for module in (ch03, ch07):
        assert "targets_with_gradient_norm" in inspect.getsource(module)
    model = ch07.build_rnn("gru", 16, 8, seed=5)
    x, y = ch07.exercise_data(steps=20)
    y_small, raw = clipping.targets_with_gradient_norm(lambda: ch07.build_rnn("gru", 16, 8, seed=5), x, y, 0.4)
    assert raw > 1.0  # the exercise batch's norm is above the threshold
    assert abs(clipping.raw_gradient_norm(model, x, y_small) - 0.4) < 1e-4  # computed anew: the scaled residual
