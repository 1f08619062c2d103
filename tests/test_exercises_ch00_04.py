"""The self-checks of chapters 00 and 04: right answers pass, typical wrong answers get specific feedback."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.exercises import ch00, ch04
from gradlab.reports.diagnostics import keras, tf
from tests._helpers import fails as _fails

# ----------------------------------------------------------------------------- chapter 00, exercise 1
X = tf.constant(1.5)


def _tape_derivative(fn, watch=True):
    with tf.GradientTape() as tape:
        if watch:
            tape.watch(X)
        f = fn(X)
    return tape.gradient(f, X)


def test_ch00_expected_derivative_against_a_finite_difference():
    h = 1e-6
    f = lambda x: np.sin(x) * x**2  # noqa: E731
    assert ch00.expected_derivative() == pytest.approx((f(1.5 + h) - f(1.5 - h)) / (2 * h), rel=1e-7)


def test_ch00_ex1_right_answer_passes():
    assert ch00.check_derivative(_tape_derivative(lambda x: tf.sin(x) * x**2))
    assert ch00.check_derivative(3.151644)  # a plain number is fine too, with the digits a float32 prints


def test_ch00_ex1_unwatched_tensor_gives_none_and_the_hint():
    _fails(ch00.check_derivative(_tape_derivative(lambda x: tf.sin(x) * x**2, watch=False)),
           "got None", "tape.watch(x)", "NumPy round-trip")


@pytest.mark.parametrize("fn, words", [
    (lambda x: np.sin(x) * x**2, ["2x·sin(x)", "sin(x) reached the product as a constant", "tf.sin"]),
    (lambda x: tf.sin(x) * x.numpy() ** 2, ["cos(x)·x²", "x² reached the product as a constant"]),
])
def test_ch00_ex1_numpy_round_trips_are_named(fn, words):
    r = ch00.check_derivative(_tape_derivative(fn))
    _fails(r, "values differ", *words)
    # the hint names the cause: no guess about half precision next to it (issue 37)
    assert "half precision" not in r.feedback and "float16" not in r.feedback, r.feedback


def test_ch00_ex1_the_value_instead_of_the_slope():
    _fails(ch00.check_derivative(tf.sin(X) * X**2), "the value of the function, not its slope")


def test_ch00_ex1_strings_and_lists():
    assert ch00.check_derivative(f"{ch00.expected_derivative():.6f}")
    _fails(ch00.check_derivative("the slope"), "got a str")
    _fails(ch00.check_derivative([3.15, 3.15]), "shape (2,), expected ()")


# ----------------------------------------------------------------------------- chapter 00, exercise 2
@pytest.fixture(scope="module")
def small_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
    x = tf.random.stateless_normal([8, 4], seed=[0, 1])
    y = tf.random.stateless_normal([8, 1], seed=[0, 2])
    return model, x, y


def _grads(loss_of):
    def fn(model, x, y):
        with tf.GradientTape() as tape:
            loss = loss_of(model(x), y)
        return tape.gradient(loss, model.trainable_variables)

    return fn


def test_ch00_ex2_reference_matches_a_hand_computed_gradient(small_model):
    model, x, y = small_model
    ref = ch00.reference_gradients(model, x, y)
    # the output bias gradient of mean((p - y)^2) is 2 * mean(p - y)
    p = model(x)
    assert float(ref[3][0]) == pytest.approx(float(2 * tf.reduce_mean(p - y)), rel=1e-5)


def test_ch00_ex2_right_answer_passes(small_model):
    r = ch00.check_model_gradients(_grads(lambda p, y: tf.reduce_mean(tf.square(p - y))), *small_model)
    assert r and "all 4 arrays match" in r.feedback


def test_ch00_ex2_returning_the_loss_does_not_crash(small_model):
    _fails(ch00.check_model_gradients(lambda m, x, y: tf.reduce_mean(tf.square(m(x) - y)), *small_model),
           "got a single number", "a list of 4 arrays", "tape.gradient(loss, variables)")


def test_ch00_ex2_sum_instead_of_mean_names_the_batch_size(small_model):
    r = ch00.check_model_gradients(_grads(lambda p, y: tf.reduce_sum(tf.square(p - y))), *small_model)
    _fails(r, "item 0 (sequential", "8×", "the ratio is the batch size (8)", "tf.reduce_sum")


def test_ch00_ex2_other_wrong_answers(small_model):
    model = small_model[0]
    _fails(ch00.check_model_gradients(None, *small_model), "expected your function")
    _fails(ch00.check_model_gradients(lambda m, x, y: 1 / 0, *small_model), "raised ZeroDivisionError")
    _fails(ch00.check_model_gradients(lambda m, x, y: None, *small_model), "got None")
    first_two = lambda m, x, y: _grads(lambda p, t: tf.reduce_mean(tf.square(p - t)))(m, x, y)[:2]  # noqa: E731
    _fails(ch00.check_model_gradients(first_two, *small_model), "got 2 arrays, expected 4",
           "one gradient per trainable variable")
    wrong_sign = _grads(lambda p, y: -tf.reduce_mean(tf.square(p - y)))
    _fails(ch00.check_model_gradients(wrong_sign, *small_model), "sign is flipped")
    flat = lambda m, x, y: tf.concat([tf.reshape(g, [-1]) for g in _grads(  # noqa: E731
        lambda p, t: tf.reduce_mean(tf.square(p - t)))(m, x, y)], 0)
    _fails(ch00.check_model_gradients(flat, *small_model), "got one array of shape (19,)", "concatenated")
    assert model.trainable_variables  # the checks never change the model's variable list


def test_ch00_overshoot_claim():
    loss, slope, w_next = gl.topics.intro.slope_and_step(0.0, 1.5)
    assert slope == pytest.approx(-3.0) and w_next == pytest.approx(4.5)
    assert float(gl.topics.intro.toy_loss(w_next)) > loss  # the step lands higher than it started
    assert float(gl.topics.intro.toy_loss(gl.topics.intro.slope_and_step(0.0, 1.0)[2])) < loss


# ----------------------------------------------------------------------------- chapter 04
def test_ch04_capstone_data():
    x, y = ch04.capstone_data()
    assert x.shape == (256, 8) and y.shape == (256, 1)
    assert float(tf.reduce_mean(x)) == pytest.approx(3.0, abs=0.1)
    assert float(tf.math.reduce_std(x)) == pytest.approx(2.0, abs=0.1)


def test_ch04_step_advice_steps_too_short_with_a_clip():
    losses = np.linspace(0.4, 0.19, 200)
    norms = np.full(200, 5.0)
    norms[:3] = 0.5
    text = gl.exercises.checks.step_length_advice(losses, norms, optimizer=keras.optimizers.SGD(0.01), clip=1.0, below=0.1)
    assert "still falling" in text and "too short" in text, text
    assert "197 of 200 steps were clipped" in text and "0.01 × 1 = 0.01" in text, text
    assert "more steps" in text and "momentum" in text


def test_ch04_step_advice_steps_too_long():
    losses = np.where(np.arange(200) % 2 == 0, 0.3, 0.9)
    text = gl.exercises.checks.step_length_advice(losses, np.full(200, 5.0), optimizer=keras.optimizers.SGD(2.0), clip=1.0, below=0.1)
    assert "not settling" in text and "from 0.3 to 0.9" in text and "too long" in text, text
    assert "2 × 1 = 2" in text
    text = gl.exercises.checks.step_length_advice(losses, np.full(200, 5.0), optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                                 clip=None, below=0.1)
    assert "too long" in text and "clipped" not in text


class _Standardize(keras.layers.Layer):
    def __init__(self, use_scale=True, **kw):
        super().__init__(**kw)
        self.use_scale = use_scale

    def build(self, input_shape):
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="shift")
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs):
        return (inputs - self.shift) * self.scale if self.use_scale else inputs - self.shift


def _capstone_model(use_scale=True, layer=True):
    layers = [keras.Input((8,))] + ([_Standardize(use_scale, name="standardize")] if layer else [])
    for i in range(8):
        layers.append(keras.layers.Dense(32, activation="relu", kernel_initializer=keras.initializers.HeNormal(seed=i)))
    layers.append(keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
    return keras.Sequential(layers, name="t")


def test_ch04_check_capstone_passes_a_repaired_setup_with_adam():
    r = ch04.check_capstone(_capstone_model, lambda: keras.optimizers.Adam(0.01))
    assert r, r.feedback


def test_ch04_check_capstone_sgd_001_with_a_clip_is_as_specific_as_without():
    with_clip = ch04.check_capstone(_capstone_model, lambda: keras.optimizers.SGD(0.01), clip=1.0)
    _fails(with_clip, "not below 0.1", "still falling", "too short", "steps were clipped", "0.01 × 1 = 0.01")
    assert "Look for vanishing gradients" not in with_clip.feedback  # the old, vague advice
    assert hasattr(with_clip.details, "losses")


def test_ch04_check_capstone_wrong_inputs_are_feedback():
    _fails(ch04.check_capstone(_capstone_model(), lambda: keras.optimizers.SGD(0.1)), "pass it without calling it")
    _fails(ch04.check_capstone(_capstone_model, lambda: 1 / 0), "raised ZeroDivisionError")
    _fails(ch04.check_capstone(_capstone_model, lambda: keras.optimizers.SGD(0.1), clip=-1), "number > 0")
    _fails(ch04.check_capstone(lambda: _capstone_model(use_scale=False), lambda: keras.optimizers.SGD(0.01), 1.0),
           "no gradient (None)", "standardize/scale")
    _fails(ch04.check_capstone(lambda: _capstone_model(layer=False), lambda: keras.optimizers.Adam(0.01)),
           "no trainable variable 'standardize/shift'", "not a fix")


def test_ch04_capstone_names_a_renamed_standardize_layer():
    def renamed():
        layers = [keras.Input((8,)), _Standardize(name="std")]
        layers += [keras.layers.Dense(32, activation="relu", kernel_initializer=keras.initializers.HeNormal(seed=i))
                   for i in range(8)]
        return keras.Sequential(layers + [keras.layers.Dense(1)], name="t")

    r = ch04.check_capstone(renamed, lambda: keras.optimizers.Adam(0.01))
    _fails(r, "under another layer name", "keep the layer's name 'standardize'")
    assert "not a fix" not in r.feedback


# ----------------------------------------------------------------------------- plot_losses (chapter 04's view)
def test_plot_losses_target_line_and_linear_view():
    broken = [3.0, 10.0, 1e20, np.inf]
    fixed = [4.0, 1.0, 0.05, 0.01]
    fig = gl.plots.plot_losses({"broken": broken, "fixed": fixed}, target=0.1, linear=True)
    log_ax, lin_ax = fig.axes
    assert log_ax.get_yscale() == "log" and lin_ax.get_yscale() == "linear"
    assert lin_ax.get_ylim() == pytest.approx((0.0, 1.1 * 4.0))
    for ax in (log_ax, lin_ax):
        targets = [ln for ln in ax.get_lines() if ln.get_label() == "target 0.1"]
        assert len(targets) == 1 and np.allclose(targets[0].get_ydata(), 0.1)
    texts = [t.get_text() for t in lin_ax.texts]
    assert "broken: off the panel from step 2" in texts
    assert any("inf from step 4" in t.get_text() for t in log_ax.texts)


def test_plot_losses_default_is_one_log_panel():
    fig = gl.plots.plot_losses({"a": [1.0, 0.5]})
    assert len(fig.axes) == 1 and fig.axes[0].get_yscale() == "log"
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("target")]
    with pytest.raises(ValueError, match="target must be a finite number"):
        gl.plots.plot_losses({"a": [1.0]}, target=float("nan"))


# ----------------------------------------------------------------------------- newcomer review regressions
def test_ch00_ex1_a_rounded_copy_shows_the_digits_that_differ():
    # 3.152 is the printout of 3.15164 to 4 digits: the feedback must not say "got 3.152, expected 3.152"
    r = ch00.check_derivative(3.152)
    _fails(r, "got 3.152, expected 3.1516", "rounded")


def test_ch00_ex1_a_bool_is_named_as_a_bool():
    _fails(ch00.check_derivative(True), "got the bool True")


def test_ch00_ex2_a_numpy_loss_gets_a_hint_not_a_bare_attribute_error(small_model):
    def numpy_loss(model, x, y):
        with tf.GradientTape() as tape:
            loss = np.mean((model(x).numpy() - y.numpy()) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    _fails(ch00.check_model_gradients(numpy_loss, *small_model), "raised AttributeError", "NumPy value",
           "tf.reduce_mean")


def test_ch00_ex2_broadcast_target_gets_its_hint(small_model):
    wrong = _grads(lambda p, y: tf.reduce_mean(tf.square(p - tf.reshape(y, [-1]))))
    _fails(ch00.check_model_gradients(wrong, *small_model), "broadcast to (8, 8)")


def test_ch00_ex2_grads_and_vars_pairs_are_named(small_model):
    def pairs(model, x, y):
        return list(zip(_grads(lambda p, t: tf.reduce_mean(tf.square(p - t)))(model, x, y),
                        model.trainable_variables, strict=True))

    _fails(ch00.check_model_gradients(pairs, *small_model), "(gradient, variable) pairs", "only the gradients")


def test_ch00_ex2_a_function_that_applies_a_step_is_caught_and_the_model_restored():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
    x = tf.random.stateless_normal([8, 4], seed=[0, 1])
    y = tf.random.stateless_normal([8, 1], seed=[0, 2])
    before = [v.numpy().copy() for v in model.trainable_variables]

    def stepping(m, xb, yb):
        g = _grads(lambda p, t: tf.reduce_mean(tf.square(p - t)))(m, xb, yb)
        keras.optimizers.SGD(0.1).apply_gradients(zip(g, m.trainable_variables, strict=True))
        return g

    _fails(ch00.check_model_gradients(stepping, model, x, y), "changed the model's weights")
    assert all(np.array_equal(v.numpy(), b) for v, b in zip(model.trainable_variables, before, strict=True))


class _DeadScale(_Standardize):
    def call(self, inputs):
        return (inputs - self.shift) + 0.0 * self.scale  # scale gets a gradient of exact zeros


def test_ch04_capstone_accepts_a_numpy_clip_and_rejects_a_string():
    r = ch04.check_capstone(_capstone_model, lambda: keras.optimizers.Adam(0.01), np.float32(1.0))
    assert r, r.feedback
    _fails(ch04.check_capstone(_capstone_model, lambda: keras.optimizers.Adam(0.01), "1.0"), "without quotes")


def test_ch04_capstone_a_scale_multiplied_by_zero_is_not_a_repair():
    def model():
        layers = [keras.Input((8,)), _DeadScale(name="standardize")]
        for i in range(8):
            layers.append(keras.layers.Dense(32, activation="relu",
                                             kernel_initializer=keras.initializers.HeNormal(seed=i)))
        layers.append(keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
        return keras.Sequential(layers, name="dead")

    _fails(ch04.check_capstone(model, lambda: keras.optimizers.Adam(0.01)), "standardize/scale never changed",
           "gradient is exactly 0")


# ----------------------------------------------------------------------------- helper F's third set
def test_ch00_ex1_near_misses_are_not_the_tape_value():
    """A forward difference, a typed-in 3.1514 (as a number or a string) fail; float32 and float64 tapes pass."""
    from gradlab.exercises import ch00

    def tape_value(dtype):
        x = tf.constant(1.5, dtype)
        with tf.GradientTape() as tape:
            tape.watch(x)
            f = tf.sin(x) * x**2
        return tape.gradient(f, x)

    assert ch00.check_derivative(tape_value(tf.float32)) and ch00.check_derivative(tape_value(tf.float64))
    x, h = 1.5, 1e-3
    for wrong in ((np.sin(x + h) * (x + h) ** 2 - np.sin(x) * x**2) / h, 3.1514, "3.1514"):
        result = ch00.check_derivative(wrong)
        assert not result and "finite-difference" in result.feedback, result


def test_ch00_ex2_half_mse_names_the_factor():
    from gradlab.exercises import ch00

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)])
    xb = tf.random.stateless_normal([8, 4], seed=[0, 1])
    yb = tf.random.stateless_normal([8, 1], seed=[0, 2])

    def half(model, x, y):
        with tf.GradientTape() as tape:
            loss = 0.5 * tf.reduce_mean(tf.square(model(x) - y))
        return tape.gradient(loss, model.trainable_variables)

    result = ch00.check_model_gradients(half, model, xb, yb)
    assert not result and "factor 0.5" in result.feedback


def test_ch03_ex1_a_repeated_python_int_is_not_a_sweep():
    from gradlab.exercises import ch03

    def noisy_step(x, scale):
        return scale * tf.reduce_mean(x)

    sweep = gl.TraceCounter(noisy_step)
    for _scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
        sweep(tf.ones([3]), 1)  # the same Python int: one trace, and no sweep
    result = ch03.check_sweep(sweep)
    assert not result and "Python value" in result.feedback
    ok = gl.TraceCounter(noisy_step)
    for scale in [0.1, 0.2, 0.3, 0.4, 0.5]:
        ok(tf.ones([3]), np.float32(scale))  # NumPy scalars are converted to tensors: one trace, a real sweep
    assert ch03.check_sweep(ok)


# ----------------------------------------------------------------------------- second pass (answers2)
@pytest.mark.parametrize("loss_of, words", [
    (lambda p, y: tf.reduce_mean(tf.abs(p - y)), ["mean absolute error", "tf.square"]),
    (lambda p, y: keras.losses.MeanAbsoluteError()(y, p), ["mean absolute error"]),
    (lambda p, y: tf.sqrt(tf.reduce_mean(tf.square(p - y))), ["root of the mean squared error", "RMSE"]),
    (lambda p, y: tf.reduce_mean(p - y), ["without the square"]),
])
def test_ch00_ex2_other_losses_are_named(small_model, loss_of, words):
    _fails(ch00.check_model_gradients(_grads(loss_of), *small_model), *words)


def test_ch00_ex1_a_coincidental_ratio_of_one_number_is_not_read_as_a_mean():
    x = 1.5  # the second derivative of sin(x)·x² is 0.05554× the slope: near 1/18 only by chance
    second = float(-np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x))
    r = ch00.check_derivative(second)
    _fails(r, "values differ")
    assert "1/18" not in r.feedback and "a mean where a sum" not in r.feedback
    _fails(ch00.check_derivative(ch00.expected_derivative() / 4), "(1/4)")  # an exact factor is still named


def _advice(losses):
    from gradlab.exercises.training import step_length_advice
    return step_length_advice(losses, np.full(len(losses), 0.5), optimizer=keras.optimizers.Adam(0.01), clip=None,
                              below=0.1)


def test_ch04_a_loss_flat_from_the_start_is_a_vanishing_signal_not_too_long_steps():
    text = _advice(np.r_[np.linspace(0.9, 0.735, 20), np.full(180, 0.735)])
    assert "stopped changing" in text and "It never got lower" in text and "initializer" in text
    assert "too long" not in text and "too short" not in text


def test_ch04_a_loss_stuck_above_its_best_asks_for_a_lower_rate():
    text = _advice(np.r_[np.linspace(30.0, 4.36, 20), np.full(180, 21.5)])
    assert "It was lower before (best 4.36)" in text and "lower learning rate" in text
    assert "too long for this problem" not in text  # a flat loss is not one that keeps jumping
    jumping = _advice(np.r_[np.linspace(3.0, 1.0, 100), np.tile([1.2, 2.48], 50)])
    assert "not settling" in jumping and "stopped changing" not in jumping


@pytest.mark.slow
def test_ch04_capstone_sigmoid_small_weights_with_adam_names_the_signal():
    def make():
        layers = [keras.Input((8,)), _Standardize(name="standardize")]
        layers += [keras.layers.Dense(32, activation="sigmoid", name=f"hidden_{i + 1}",
                                      kernel_initializer=keras.initializers.RandomNormal(stddev=0.01, seed=i))
                   for i in range(8)]
        layers.append(keras.layers.Dense(1, name="output", kernel_initializer=keras.initializers.GlorotUniform(seed=100)))
        return keras.Sequential(layers, name="mine")
    r = ch04.check_capstone(make, lambda: keras.optimizers.Adam(0.01))
    _fails(r, "stopped changing", "It never got lower")
    assert "too long" not in r.feedback
