"""gl.inspect_training_step and gl.train_steps (chapter 04)."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.diagnostics import keras, tf


def _data(n: int = 32, features: int = 4, seed: int = 0):
    x = tf.random.stateless_normal([n, features], seed=[seed, 1])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    return x, y


def _small(seed: int = 0, name: str = "small"):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu", name="hidden"),
                             keras.layers.Dense(1, name="out")], name=name)


class HalfUsed(keras.layers.Layer):
    """Creates two weights and uses only one: ``scale`` gets a None gradient."""

    def build(self, input_shape):
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="shift")
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs):
        return inputs - self.shift


# ----------------------------------------------------------------------------- healthy
def test_healthy_model_has_no_problems_and_prints_a_table():
    x, y = _data()
    r = gl.inspect_training_step(_small(), x, y)
    assert r.ok and r.problems == ()
    assert r.status == "healthy"
    assert [layer.name for layer in r.layers] == ["hidden", "out"]
    assert r.none_gradients == () and r.first_nonfinite_layer is None
    assert np.isfinite(r.loss) and r.global_norm > 0
    text = str(r)
    assert "no problems found" in text and "hidden" in text and "signal" in text
    assert repr(r).startswith("StepReport(")


def test_report_does_not_change_the_weights():
    model = _small()
    before = [v.numpy().copy() for v in model.trainable_variables]
    gl.inspect_training_step(model, *_data())
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables, strict=True))


def test_report_text_is_stable_across_runs():
    x, y = _data()
    assert str(gl.inspect_training_step(_small(), x, y)) == str(gl.inspect_training_step(_small(), x, y))


def test_pretty_printer_uses_the_table():
    class P:
        def __init__(self):
            self.out = []

        def text(self, t):
            self.out.append(t)

    r = gl.inspect_training_step(_small(), *_data())
    p = P()
    r._repr_pretty_(p, cycle=False)
    assert p.out == [str(r)]


# ----------------------------------------------------------------------------- vanishing
def test_deep_sigmoid_vanishes_and_matches_gradient_report():
    model = gl.build_mlp(12, width=32, activation="sigmoid", initializer="glorot_uniform", input_dim=16)
    x, y = gl.make_data(batch_size=64, input_dim=16, seed=0)
    r = gl.inspect_training_step(model, x, y)
    assert r.status == "vanishing"
    assert "vanishing" in r.problem_kinds
    ref = gl.gradient_report(model, x, y)
    np.testing.assert_allclose(r.signal_norms, ref.signal_norms, rtol=1e-5)
    assert r.diagnosed_layers == tuple(f"hidden_{i}" for i in range(1, 13))
    vanishing = next(p for p in r.problems if p.kind == "vanishing")
    assert "hidden_1" in vanishing.finding and "relu" in vanishing.fix


def test_exploding_is_reported():
    model = gl.build_mlp(20, width=32, activation="tanh", initializer="large_normal", input_dim=16)
    x, y = gl.make_data(batch_size=64, input_dim=16, seed=0)
    r = gl.inspect_training_step(model, x, y)
    assert r.status == "exploding" and "exploding" in r.problem_kinds


# ----------------------------------------------------------------------------- non-finite
def test_nan_names_the_first_bad_layer():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((4,)),
        keras.layers.Dense(8, activation="relu", name="fine"),
        keras.layers.Dense(8, activation="exponential", name="boom",
                           kernel_initializer=keras.initializers.Constant(100.0)),
        keras.layers.Dense(8, name="after"),
        keras.layers.Dense(1, name="out"),
    ])
    r = gl.inspect_training_step(model, *_data())
    assert r.first_nonfinite_layer == "boom"
    assert [layer.output_finite for layer in r.layers] == [True, False, False, False]
    assert r.status == "non-finite"
    assert r.problem_kinds[0] == "non-finite-forward"
    assert "'boom'" in str(r.problems[0])
    assert "NaN/inf" in str(r)


def test_deep_linear_overflow_names_a_middle_layer():
    model = gl.build_mlp(60, activation="linear", initializer="large_normal")
    x, y = gl.make_data(batch_size=32, input_dim=64)
    r = gl.inspect_training_step(model, x, y)
    assert r.first_nonfinite_layer is not None and r.first_nonfinite_layer.startswith("hidden_")
    # independent forward pass, layer by layer: where does the output first stop being finite?
    h, expected, last_finite_std = tf.convert_to_tensor(x), None, None
    for layer in model.layers:
        h = layer(h)
        if not bool(tf.reduce_all(tf.math.is_finite(h))):
            expected = layer.name
            break
        last_finite_std = float(tf.math.reduce_std(tf.cast(h, tf.float64)))
    assert r.first_nonfinite_layer == expected
    assert 1 < int(expected.split("_")[1]) < 60  # a middle layer
    assert last_finite_std > 1e30  # it got there by growing, layer after layer


def test_nonfinite_gradient_with_finite_loss():
    w = np.array([[0.0], [0.0]], dtype=np.float32)

    class SqrtNorm(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(2, 1), initializer=keras.initializers.Constant(w), name="w")

        def call(self, inputs):
            return tf.sqrt(tf.reduce_sum(self.w**2)) + tf.matmul(inputs, self.w)

    model = keras.Sequential([keras.Input((2,)), SqrtNorm(name="sqrt_norm")], name="sq")
    x = tf.ones([4, 2])
    r = gl.inspect_training_step(model, x, tf.ones([4, 1]))
    assert np.isfinite(r.loss)
    assert r.nonfinite_gradients == ("sq/sqrt_norm/w",)
    assert "non-finite-gradient" in r.problem_kinds
    assert r.first_nonfinite_gradient_layer == "sqrt_norm"


def test_nonfinite_weights_are_reported():
    model = _small()
    model.layers[0].kernel.assign(tf.fill(model.layers[0].kernel.shape, np.nan))
    r = gl.inspect_training_step(model, *_data())
    assert r.nonfinite_weights == ("small/hidden/kernel",)
    assert r.problem_kinds[0] == "non-finite-weights"


# ----------------------------------------------------------------------------- None gradients
def test_none_gradient_names_the_variable():
    model = keras.Sequential([keras.Input((4,)), HalfUsed(name="half"),
                              keras.layers.Dense(1, name="out")], name="m")
    r = gl.inspect_training_step(model, *_data())
    assert r.none_gradients == ("m/half/scale",)
    assert "none-gradient" in r.problem_kinds
    problem = next(p for p in r.problems if p.kind == "none-gradient")
    assert "m/half/scale" in problem.finding and "chapter 02" in problem.fix
    half = r.layers[0]
    assert half.weight_grad is not None  # shift still has a gradient
    assert next(v for v in r.variables if v.path == "m/half/scale").grad_norm is None


def test_all_gradients_none_in_a_layer_prints_none():
    class Unused(keras.layers.Layer):
        def build(self, input_shape):
            self.k = self.add_weight(shape=(1,), initializer="ones", name="k")

        def call(self, inputs):
            return inputs

    model = keras.Sequential([keras.Input((4,)), Unused(name="unused"), keras.layers.Dense(1, name="out")],
                             name="u")
    r = gl.inspect_training_step(model, *_data())
    assert r.layers[0].weight_grad is None
    line = next(ln for ln in str(r).splitlines() if ln.strip().startswith("unused"))
    assert line.rstrip().endswith("None")


# ----------------------------------------------------------------------------- other models
def test_functional_model_gets_per_layer_rows():
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="tanh", name="a")(inp)
    out = keras.layers.Dense(1, name="b")(h)
    r = gl.inspect_training_step(keras.Model(inp, out), *_data())
    assert [layer.name for layer in r.layers] == ["a", "b"]
    assert r.status == "healthy"


def test_subclassed_model_gets_rows_from_its_own_call():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.d1 = keras.layers.Dense(8, name="d1")
            self.d2 = keras.layers.Dense(1, name="d2")

        def call(self, x):
            return self.d2(tf.nn.relu(self.d1(x)))

    model = Sub()
    x, y = _data()
    r = gl.inspect_training_step(model, x, y)
    assert [layer.name for layer in r.layers] == ["d1", "d2"]
    assert len(r.variables) == 4 and all(v.grad_norm is not None for v in r.variables)
    # independent tape: dLoss/d(output of d1), which has no activation
    with tf.GradientTape() as tape:
        z = tf.matmul(x, model.d1.kernel) + model.d1.bias
        tape.watch(z)
        loss = tf.reduce_mean(tf.square(y - model.d2(tf.nn.relu(z))))
    assert r.layers[0].signal == pytest.approx(float(tf.norm(tape.gradient(loss, z))), rel=1e-5)
    assert r.loss == pytest.approx(float(loss), rel=1e-6)


def test_custom_loss_fn():
    x, y = _data()
    r = gl.inspect_training_step(_small(), x, y, loss_fn=lambda t, p: tf.reduce_mean(tf.abs(t - p)))
    model = _small()
    expected = float(tf.reduce_mean(tf.abs(y - model(x))))
    assert r.loss == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- tracing
def test_tf_function_step_reports_tracing_count_and_retracing():
    model = _small()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.01))
    x, y = _data()
    r1 = gl.inspect_training_step(model, x, y, step_fn=step)
    r2 = gl.inspect_training_step(model, x, y, step_fn=step)
    assert (r1.tracing_count, r1.traced_this_call) == (1, True)
    assert (r2.tracing_count, r2.traced_this_call) == (1, False)
    assert "retracing" not in r2.problem_kinds
    assert r2.step_loss is not None and np.isfinite(r2.step_loss)
    assert "traced 1 time" in str(r2)
    r3 = gl.inspect_training_step(model, x[:16], y[:16], step_fn=step)
    assert (r3.tracing_count, r3.traced_this_call) == (2, True)
    assert "retracing" in r3.problem_kinds


def test_step_fn_runs_once_and_trains():
    model = _small()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.1))
    x, y = _data()
    r = gl.inspect_training_step(model, x, y, step_fn=step)
    assert gl.inspect_training_step(model, x, y).loss < r.loss


def test_trace_counter_and_plain_function_steps():
    model = _small()
    calls = []

    def plain(x, y):
        calls.append(1)
        return tf.constant(0.5)

    r = gl.inspect_training_step(model, *_data(), step_fn=plain)
    assert r.tracing_count is None and r.step_loss == 0.5 and len(calls) == 1
    counter = gl.TraceCounter(lambda x, y: tf.reduce_mean(x))
    r = gl.inspect_training_step(model, *_data(), step_fn=counter)
    assert r.tracing_count == 1 and r.traced_this_call


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model=None), "model must be a keras.Model"),
        (dict(x=None), "x must be"),
        (dict(y="labels"), "y must be"),
        (dict(loss_fn=3), "loss_fn must be None"),
        (dict(step_fn="step"), "step_fn must be None or a callable"),
        (dict(training="yes"), "training must be True or False"),
        (dict(vanish_below=0), "vanish_below must be a finite number > 0"),
        (dict(vanish_below=10.0, explode_above=1.0), "vanish_below < explode_above"),
        (dict(huge_above=float("nan")), "huge_above"),
    ],
)
def test_bad_input_raises_value_error(kwargs, match):
    x, y = _data()
    args = dict(model=_small(), x=x, y=y)
    args.update(kwargs)
    model, x, y = args.pop("model"), args.pop("x"), args.pop("y")
    with pytest.raises(ValueError, match=match):
        gl.inspect_training_step(model, x, y, **args)


def test_mismatched_shapes_raise():
    x, y = _data()
    with pytest.raises(ValueError, match="broadcast"):
        gl.inspect_training_step(_small(), x, tf.squeeze(y, 1))  # (32,) against (32, 1)
    with pytest.raises(ValueError, match="same number of examples"):
        gl.inspect_training_step(_small(), x, y[:10], loss_fn=lambda t, p: tf.reduce_mean(p))
    with pytest.raises(ValueError, match="must return a scalar"):
        gl.inspect_training_step(_small(), x, y, loss_fn=lambda t, p: tf.square(t - p))
    with pytest.raises(ValueError, match="x is a tuple of 2 arrays, but the model has a single input"):
        gl.inspect_training_step(_small(), (x, x), y)


def test_model_without_variables_raises():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Activation("relu")])
    with pytest.raises(ValueError, match="no trainable variables"):
        gl.inspect_training_step(model, *_data())


# ----------------------------------------------------------------------------- train_steps
def test_train_steps_trains_and_records():
    model = _small()
    run = gl.train_steps(model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=30)
    assert len(run.losses) == len(run.global_norms) == 30
    assert run.final_loss < run.losses[0] and run.stopped_at is None
    assert run.first_below(run.losses[0]) is not None and run.first_below(-1.0) is None
    assert "TrainingRun: 30 of 30 steps" in str(run)


def test_train_steps_stops_at_nonfinite_without_applying():
    model = gl.build_mlp(4, width=16, activation="relu", initializer="he_normal", input_dim=16)
    x, y = gl.make_data(batch_size=64, input_dim=16, seed=1)
    run = gl.train_steps(model, x, y, optimizer=keras.optimizers.SGD(50.0), steps=100)
    assert run.stopped_at is not None and run.stopped_at == len(run.losses) < 100
    assert not (np.isfinite(run.losses[-1]) and np.isfinite(run.global_norms[-1]))
    assert all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)
    assert "stopped at step" in str(run)


def test_train_steps_clipping_keeps_it_finite():
    model = gl.build_mlp(4, width=16, activation="relu", initializer="he_normal", input_dim=16)
    x, y = gl.make_data(batch_size=64, input_dim=16, seed=1)
    run = gl.train_steps(model, x, y, optimizer=keras.optimizers.SGD(0.5), steps=20, clip_global_norm=0.1)
    assert run.stopped_at is None and len(run.losses) == 20


def test_train_steps_lists_and_skips_none_gradients():
    model = keras.Sequential([keras.Input((4,)), HalfUsed(name="half"), keras.layers.Dense(1, name="out")],
                             name="t")
    scale_before = model.layers[0].scale.numpy().copy()
    run = gl.train_steps(model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5)
    assert run.none_gradients == ("t/half/scale",) and len(run.losses) == 5
    assert np.array_equal(scale_before, model.layers[0].scale.numpy())
    stopped = gl.train_steps(model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, stop_on_none=True)
    assert len(stopped.losses) == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(optimizer="sgd"), "optimizer must be"),
        (dict(steps=0), "steps must be"),
        (dict(steps=2.5), "steps must be"),
        (dict(clip_global_norm=-1.0), "clip_global_norm"),
        (dict(stop_on_nonfinite=1), "stop_on_nonfinite"),
    ],
)
def test_train_steps_bad_input(kwargs, match):
    args = dict(optimizer=keras.optimizers.SGD(0.1), steps=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        gl.train_steps(_small(), *_data(), **args)


# ----------------------------------------------------------------------------- wording of the report
def test_diagnosis_line_names_layers_like_the_table():
    model = gl.build_mlp(12, width=32, activation="sigmoid", initializer="glorot_uniform", input_dim=16)
    r = gl.inspect_training_step(model, *_data(features=16))
    assert r.status == "vanishing"
    assert "'hidden_1'" in r.message and f"'{r.diagnosed_layers[-1]}'" in r.message
    assert "layer 1 " not in r.message and "layer 12" not in r.message
    assert f"diagnosis: vanishing: {r.message}" in str(r)


def test_name_layers_leaves_other_text_alone():
    from gradlab.diagnostics import _name_layers

    msg = "2 of 3 layers have NaN/inf gradients (the first is layer 2): every layer's signal at layer 3"
    assert _name_layers(msg, ["a", "b", "c"]) == (
        "2 of 3 layers have NaN/inf gradients (the first is 'b'): every layer's signal at 'c'")
    assert _name_layers("layer 7", ["a"]) == "layer 7"  # out of range: unchanged


def test_gradient_column_says_it_includes_the_bias():
    r = gl.inspect_training_step(_small(), *_data())
    header = str(r).splitlines()[1]
    assert "grad (all weights)" in header and "grad norm" not in header


def _overflowing(seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((4,))] + [
        keras.layers.Dense(4 if i < 19 else 1, name=f"d{i}", kernel_initializer=keras.initializers.Constant(100.0))
        for i in range(20)]
    return keras.Sequential(layers, name="over")


def test_overflow_fix_of_an_untrained_model_blames_the_initializer():
    r = gl.inspect_training_step(_overflowing(), *_data())
    assert r.looks_untrained is True
    fix = next(p.fix for p in r.problems if p.kind == "non-finite-forward")
    assert "not been trained" in fix and "initializer" in fix and "learning rate" not in fix


def test_overflow_fix_after_training_blames_the_learning_rate():
    model = _overflowing()
    for layer in model.layers:
        layer.bias.assign(tf.fill(layer.bias.shape, 0.1))  # as a training step would leave them
    r = gl.inspect_training_step(model, *_data())
    assert r.looks_untrained is False
    fix = next(p.fix for p in r.problems if p.kind == "non-finite-forward")
    assert "learning rate" in fix and "not been trained" not in fix


def test_overflow_fix_without_biases_names_both_causes():
    keras.utils.set_random_seed(0)
    layers = [keras.Input((4,))] + [
        keras.layers.Dense(4 if i < 19 else 1, use_bias=False, kernel_initializer=keras.initializers.Constant(100.0))
        for i in range(20)]
    r = gl.inspect_training_step(keras.Sequential(layers), *_data())
    assert r.looks_untrained is None
    fix = next(p.fix for p in r.problems if p.kind == "non-finite-forward")
    assert "freshly built" in fix and "learning rate" in fix


def test_looks_untrained_is_measured_before_step_fn_trains():
    model = _small()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.1))
    x, y = _data()
    assert gl.inspect_training_step(model, x, y, step_fn=step).looks_untrained is True
    assert gl.inspect_training_step(model, x, y, step_fn=step).looks_untrained is False


def test_retracing_on_a_later_call_blames_the_new_shape():
    model = _small()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.01))
    x, y = _data()
    gl.inspect_training_step(model, x, y, step_fn=step)
    r = gl.inspect_training_step(model, x[:16], y[:16], step_fn=step)
    assert r.tracing_count_before == 1
    p = next(p for p in r.problems if p.kind == "retracing")
    assert "traced again during this call" in p.finding and "batch size" in p.finding
    assert "first call" not in p.finding and "variables" not in p.finding
    again = gl.inspect_training_step(model, x[:16], y[:16], step_fn=step)
    p = next(p for p in again.problems if p.kind == "retracing")
    assert "on earlier calls" in p.finding and "reused" in p.finding


def test_retracing_on_the_first_call_blames_variable_creation():
    made = []

    @tf.function
    def step(x, y):
        if not made:
            made.append(tf.Variable(1.0))
        return tf.reduce_mean(x) * made[0]

    r = gl.inspect_training_step(_small(), *_data(), step_fn=step)
    assert r.tracing_count_before == 0 and r.tracing_count == 2
    p = next(p for p in r.problems if p.kind == "retracing")
    assert "during its first call" in p.finding and "variables" in p.finding
    assert "build the model and the optimizer" in p.fix


# ----------------------------------------------------------------------------- causes (issue 14's module)
def test_none_gradient_problem_carries_the_cause_from_gradlab_causes():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), HalfUsed(name="half"), keras.layers.Dense(1, name="out")])
    x, y = _data()
    r = gl.inspect_training_step(model, x, y)
    variables = model.trainable_variables

    def loss_fn():
        return tf.reduce_mean(tf.square(y - model(x, training=True)))

    expected = gl.causes.explain_none_gradients(loss_fn, variables)
    problem = next(p for p in r.problems if p.kind == "none-gradient")
    assert "half/scale" in problem.finding
    for cause in expected.values():
        assert cause in problem.finding


def test_taps_are_removed_after_the_pass_even_on_error():
    model = _small()
    act = model.get_layer("hidden").activation
    x, y = _data()
    gl.inspect_training_step(model, x, y)
    with pytest.raises(ValueError, match="broadcast"):
        gl.inspect_training_step(model, x, tf.squeeze(y, 1))
    for layer in model.layers:
        assert "call" not in layer.__dict__
    assert model.get_layer("hidden").activation is act
