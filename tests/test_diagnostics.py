"""gl.inspect_training_step and gl.train_steps (chapter 04)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl


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


def test_the_same_model_inspected_twice_gives_the_same_report_because_it_was_restored():
    """Not two freshly seeded models (those agree without any restore): one model with BatchNorm,
    Dropout and a compiled two-output loss, whose state a training pass does move."""
    keras.utils.set_random_seed(3)
    inp = keras.Input((4,))
    h = keras.layers.Dropout(0.5)(keras.layers.BatchNormalization()(keras.layers.Dense(8)(inp)))
    model = keras.Model(inp, [keras.layers.Dense(1)(h), keras.layers.Dense(1)(h)])
    model.compile(optimizer="sgd", loss=["mse", "mae"])
    x, y = _data()
    y = [y, y]
    first = gl.inspect_training_step(model, x, y)
    state = [v.numpy() for v in model.variables + model.metrics_variables]
    assert str(gl.inspect_training_step(model, x, y)) == str(first)
    # without the restore the second report would differ: one plain training pass moves the state
    with tf.GradientTape():
        model.compute_loss(x=tf.constant(x), y=[tf.constant(t) for t in y], y_pred=model(x, training=True))
    moved = [v.numpy() for v in model.variables + model.metrics_variables]
    assert any(not np.array_equal(a, b) for a, b in zip(state, moved, strict=True))
    assert str(gl.inspect_training_step(model, x, y)) != str(first)


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
    model = gl.models.mlp.build_mlp(12, width=32, activation="sigmoid", initializer="glorot_uniform", input_dim=16)
    x, y = gl.models.mlp.make_data(batch_size=64, input_dim=16, seed=0)
    r = gl.inspect_training_step(model, x, y)
    assert r.status == "vanishing"
    assert "vanishing" in r.problem_kinds
    ref = gl.gradient_report(model, x, y)
    np.testing.assert_allclose(r.signal_norms, ref.signal_norms, rtol=1e-5)
    assert r.diagnosed_layers == tuple(f"hidden_{i}" for i in range(1, 13))
    vanishing = next(p for p in r.problems if p.kind == "vanishing")
    assert "hidden_1" in vanishing.finding and "relu" in vanishing.fix


def test_exploding_is_reported():
    model = gl.models.mlp.build_mlp(20, width=32, activation="tanh", initializer="large_normal", input_dim=16)
    x, y = gl.models.mlp.make_data(batch_size=64, input_dim=16, seed=0)
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
    model = gl.models.mlp.build_mlp(60, activation="linear", initializer="large_normal")
    x, y = gl.models.mlp.make_data(batch_size=32, input_dim=64)
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
    assert "m/half/scale" in problem.finding and "never read" in problem.finding
    assert "use the layer's output in call" in problem.fix  # a fix matched to the cause
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
    r = gl.inspect_training_step(_small(), x, y, loss=lambda t, p: tf.reduce_mean(tf.abs(t - p)))
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
        (dict(loss=3), "loss must be None"),
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
        gl.inspect_training_step(_small(), x, y[:10], loss=lambda t, p: tf.reduce_mean(p))
    with pytest.raises(ValueError, match="must return a scalar"):
        gl.inspect_training_step(_small(), x, y, loss=lambda t, p: tf.square(t - p))
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
    model = gl.models.mlp.build_mlp(4, width=16, activation="relu", initializer="he_normal", input_dim=16)
    x, y = gl.models.mlp.make_data(batch_size=64, input_dim=16, seed=1)
    run = gl.train_steps(model, x, y, optimizer=keras.optimizers.SGD(50.0), steps=100)
    assert run.stopped_at is not None and run.stopped_at == len(run.losses) < 100
    assert not (np.isfinite(run.losses[-1]) and np.isfinite(run.global_norms[-1]))
    assert all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)
    assert "stopped at step" in str(run)


def test_train_steps_clipping_keeps_it_finite():
    model = gl.models.mlp.build_mlp(4, width=16, activation="relu", initializer="he_normal", input_dim=16)
    x, y = gl.models.mlp.make_data(batch_size=64, input_dim=16, seed=1)
    run = gl.train_steps(model, x, y, optimizer=keras.optimizers.SGD(0.5), steps=20, clip=0.1)
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
        (dict(clip=-1.0), "clip must be"),
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
    model = gl.models.mlp.build_mlp(12, width=32, activation="sigmoid", initializer="glorot_uniform", input_dim=16)
    r = gl.inspect_training_step(model, *_data(features=16))
    assert r.status == "vanishing"
    assert "'hidden_1'" in r.message and f"'{r.diagnosed_layers[-1]}'" in r.message
    assert "layer 1 " not in r.message and "layer 12" not in r.message
    assert f"diagnosis: vanishing: {r.message}" in str(r)


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

    expected = gl.reports.causes.explain_none_gradients(loss_fn, variables)
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


# ----------------------------------------------------------------------------- review fixes (f1)
def _padded_gru(seed: int = 0):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((10,), dtype="int32")
    emb = keras.layers.Embedding(30, 4, mask_zero=True, name="emb")(tokens)
    h = keras.layers.GRU(4, name="gru")(emb)
    return keras.Model(tokens, keras.layers.Dense(3, activation="softmax", name="out")(h))


def _step_norms_reference(model, x, y, mask):
    """dLoss/d(embedding output) per time step, by an independent tape; masked entries left out."""
    emb, gru, out = model.get_layer("emb"), model.get_layer("gru"), model.get_layer("out")
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        e = emb(x)
        tape.watch(e)
        loss = loss_fn(y, out(gru(e, mask=tf.constant(mask))))
    g = tape.gradient(loss, e).numpy().astype(np.float64)
    per = np.square(g).sum(axis=2) * mask  # (batch, time)
    count = mask.sum(axis=0)
    keep = count > 0
    return np.sqrt(per.sum(axis=0)[keep] * (len(x) / count[keep])), g


def test_padded_steps_are_left_out_of_time_step_norms():
    rng = np.random.default_rng(0)
    x = rng.integers(1, 30, size=(8, 10))
    x[:, 6:] = 0  # post-padding: the last 4 steps are masked in every example
    x[:3, 5] = 0  # and step 5 in three of the examples
    y = rng.integers(0, 3, size=(8,))
    m = _padded_gru()
    m.compile(loss="sparse_categorical_crossentropy")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old code divided by the zero gradient of a padded step
        r = gl.inspect_training_step(m, x, y)
    ref, g = _step_norms_reference(m, x, y, x != 0)
    assert np.all(g[:, 6:] == 0)  # what the old report diagnosed: padding, not a vanishing gradient
    assert r.time_step_norms.shape == (6,)
    np.testing.assert_allclose(r.time_step_norms, ref, rtol=1e-4)
    assert r.time_step_norms.min() > 0
    assert "inf×" not in str(r) and "exploding" not in r.status


def _bn_dropout(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16), keras.layers.BatchNormalization(),
                             keras.layers.Dropout(0.5), keras.layers.Dense(1)])


def test_train_steps_moves_batchnorm_and_dropout_state_exactly_n_times():
    x = tf.random.stateless_normal([32, 6], seed=[3, 1])
    y = tf.random.stateless_normal([32, 1], seed=[3, 2])
    a, ref = _bn_dropout(), _bn_dropout()
    ref.set_weights(a.get_weights())
    gl.train_steps(a, x, y, optimizer=keras.optimizers.SGD(0.0), steps=2)
    first = ref(x, training=True)
    ref(x, training=True)  # two training-mode passes = two fit steps with a zero learning rate
    for va, vr in zip(a.variables, ref.variables, strict=True):  # moving stats and the dropout seed
        np.testing.assert_array_equal(va.numpy(), vr.numpy(), err_msg=va.path)
    # and the first recorded loss is that of the first step's dropout mask
    b = _bn_dropout()
    b.set_weights(a.get_weights())
    c = _bn_dropout()
    c.set_weights(b.get_weights())
    run = gl.train_steps(b, x, y, optimizer=keras.optimizers.SGD(0.0), steps=1)
    expected = float(tf.reduce_mean(tf.square(y - c(x, training=True))))
    assert run.losses[0] == pytest.approx(expected, rel=1e-5)
    del first


def test_check_trains_leaves_batchnorm_one_update_per_step():
    x = tf.random.stateless_normal([32, 6], seed=[4, 1])
    y = tf.random.stateless_normal([32, 1], seed=[4, 2])
    a, ref = _bn_dropout(), _bn_dropout()
    ref.set_weights(a.get_weights())
    gl.exercises.checks.check_trains("bn", a, x, y, optimizer=keras.optimizers.SGD(0.0), steps=3, below=1e9)
    for _ in range(3):
        ref(x, training=True)
    np.testing.assert_array_equal(a.layers[1].moving_mean.numpy(), ref.layers[1].moving_mean.numpy())


def _bn_stack(scales, seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((8,))]
    for s in scales:
        layers += [keras.layers.Dense(16, activation="relu",
                                      kernel_initializer=keras.initializers.RandomNormal(stddev=s)),
                   keras.layers.BatchNormalization()]
    return keras.Sequential([*layers, keras.layers.Dense(1)])


def test_normalized_network_gets_no_initializer_advice():
    x = tf.random.stateless_normal([64, 8], seed=[5, 1])
    y = tf.random.stateless_normal([64, 1], seed=[5, 2])
    r = gl.inspect_training_step(_bn_stack([1e-3, 1e-2, 1e-1, 1, 10]), x, y)
    # the numbers are real: the ratio of the signals is far above 1e3 ...
    s = r.signal_norms
    assert s[0] / s[-1] > 1e2 and r.verdict.rule in ("total", "per-layer")
    # ... but every Dense layer feeds a BatchNormalization, so it says nothing about the initializer:
    # the verdict's word is "uneven" (the change happens across the normalization layers), no signal problem
    assert r.verdict.status == "uneven" and "exploding" not in r.problem_kinds
    assert "uneven, not exploding" in r.verdict.message and "batch_normalization" in r.verdict.message
    assert "glorot" not in str(r) and "he_normal" not in str(r) and "smaller-variance" not in str(r)
    assert "initializer" not in str(r)
    assert r.verdict.cause == "normalization" and "not a sign of badly scaled weights" in r.verdict.message
    # the first kernel's gradient is large all the same (BatchNorm divides by its input's scale, 1e-3):
    # the large-gradient problem is listed, and the status follows it
    assert r.global_norm > 1e3 and r.problem_kinds == ("large-gradient",) and r.status == "exploding"


def test_batchnorm_finding_only_explains_a_present_finding():
    x = tf.random.stateless_normal([8, 8], seed=[6, 1])  # batch 8: 8 values per channel, "tiny"
    y = tf.random.stateless_normal([8, 1], seed=[6, 2])
    r = gl.inspect_training_step(_bn_stack([0.3, 0.3, 0.3]), x, y)
    assert r.status == "healthy"
    assert "batchnorm-statistics" not in r.problem_kinds


class OwnStep(keras.Model):
    """A subclassed model with its own train_step and no compiled loss."""

    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(1)

    def call(self, x):
        return self.d(x)

    def train_step(self, data):  # pragma: no cover - never run by these tests
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.abs(y - self(x, training=True)))
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        return {"loss": loss}


def test_custom_train_step_without_compiled_loss_says_it_measures_mse():
    x, y = _data()
    m = OwnStep()
    m(x[:1])
    r = gl.inspect_training_step(m, x, y)
    assert "default-loss" in r.problem_kinds
    assert "own train_step" in r.loss_description and "loss=" in r.loss_description
    # with loss_fn (or a plain model) nothing is said
    r2 = gl.inspect_training_step(m, x, y, loss=lambda t, p: tf.reduce_mean(tf.abs(t - p)))
    assert "default-loss" not in r2.problem_kinds
    assert "default-loss" not in gl.inspect_training_step(_small(), x, y).problem_kinds


def test_train_steps_refuses_an_optimizer_built_for_another_model():
    x, y = _data()
    opt = keras.optimizers.SGD(0.01)
    gl.train_steps(_small(0), x, y, optimizer=opt, steps=1)
    other = _small(1, name="other")
    before = [v.numpy().copy() for v in other.variables]
    with pytest.raises(ValueError, match="build a fresh optimizer for each model") as err:
        gl.train_steps(other, x, y, optimizer=opt, steps=1)
    assert "in user code" not in str(err.value) and "other/hidden/kernel" in str(err.value)
    for b, v in zip(before, other.variables, strict=True):
        np.testing.assert_array_equal(b, v.numpy())


@pytest.mark.parametrize("tool", ["inspect", "train_steps"])
def test_y_none_names_y(tool):
    x, _ = _data()
    with pytest.raises(ValueError, match=r"^y is None"):
        if tool == "inspect":
            gl.inspect_training_step(_small(), x, None)
        else:
            gl.train_steps(_small(), x, None, optimizer=keras.optimizers.SGD(), steps=1)


def _classifier():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    m.compile(loss="sparse_categorical_crossentropy")
    return m


def test_sparse_labels_out_of_range_and_one_hot_name_y():
    x, _ = _data(8)
    with pytest.raises(ValueError, match=r"y holds 2 labels outside the classes 0\.\.2") as err:
        gl.inspect_training_step(_classifier(), x, np.array([0, 1, 2, 3, 1, 2, 0, 3]))
    assert "CategoricalCrossentropy" not in str(err.value) or "integer labels" in str(err.value)
    with pytest.raises(ValueError, match=r"y has shape \(8, 3\) and looks one-hot.*CategoricalCrossentropy"):
        gl.train_steps(_classifier(), x, np.eye(3)[np.arange(8) % 3], optimizer=keras.optimizers.SGD(),
                       steps=1)
    # a loss_fn object is checked too, and valid labels pass
    with pytest.raises(ValueError, match="outside the classes"):
        gl.inspect_training_step(_classifier(), x, np.full(8, -1),
                                 loss=keras.losses.SparseCategoricalCrossentropy())
    r = gl.inspect_training_step(_classifier(), x, np.arange(8) % 3)
    assert np.isfinite(r.loss)


def test_a_custom_train_step_is_named_beside_the_loss_the_report_measured():
    """models helper: a train_step that adds a penalty trains on another loss than the compiled one;
    the report measures the compiled loss, so it says so (and how to inspect the other)."""
    import keras
    import numpy as np
    import tensorflow as tf

    import gradlab as gl

    class ExtraTrainStep(keras.Model):
        def __init__(self):
            super().__init__()
            self.d1, self.d2 = keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)

        def call(self, x):
            return self.d2(self.d1(x))

        def train_step(self, data):  # pragma: no cover - never run here
            raise AssertionError("not called")

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(6, 4)).astype("float32")
    y = np.random.default_rng(1).normal(size=(6, 1)).astype("float32")
    m = ExtraTrainStep()
    m.compile(optimizer="sgd", loss="mse")
    m(x)
    r = gl.inspect_training_step(m, x, y)
    assert r.custom_train_step and "train_step" in str(r) and "loss=" in str(r), str(r)
    assert abs(r.loss - float(tf.reduce_mean(tf.square(m(x) - y)))) < 1e-6   # it measured the compiled loss
    given = gl.inspect_training_step(m, x, y, loss=keras.losses.MeanSquaredError())
    assert not given.custom_train_step and "train_step" not in str(given)
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    plain.compile(optimizer="sgd", loss="mse")
    assert "train_step" not in str(gl.inspect_training_step(plain, x, y))


def test_a_zero_kernel_is_named_as_what_it_is_not_an_underflow():
    """A middle Dense layer with a zero kernel: the signal before it is exactly 0 though nothing came
    near 1e-38 (issue 38: it read "every element underflowed in float32" with relu/he advice)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(16, activation="tanh", kernel_initializer="zeros"),
                              keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    x = np.random.default_rng(0).random((32, 8)).astype("float32")
    y = np.random.default_rng(1).random((32, 1)).astype("float32")
    report = gl.inspect_training_step(model, x, y)
    assert report.layers[0].signal == 0.0 and min(s.signal for s in report.layers[1:]) > 1e-3  # nothing tiny
    text = report.verdict.finding + " ".join(p.finding for p in report.problems)
    assert "underflow" not in report.verdict.causes and "underflowed" not in text, text
    assert "zero weights" in text


def test_most_units_dead_is_a_problem_whatever_the_always_active_count():
    from gradlab.reports.units import DeadUnits

    # 20 of 32 never active next to 12 always active: excess (20 - 12) / 32 = 0.25, which read "healthy"
    layer = DeadUnits("dense", "relu", dead=20, units=32, always_active=12, values=32)
    assert layer.is_problem
    chance = DeadUnits("dense", "relu", dead=14, units=32, always_active=14, values=32)  # a fresh net's level
    assert not chance.is_problem


def test_fresh_he_networks_of_width_32_to_128_raise_no_dead_unit_alarm():
    for width in (32, 128):
        for seed in range(3):
            keras.utils.set_random_seed(seed)
            model = keras.Sequential([keras.Input((16,))] + [
                keras.layers.Dense(width, activation="relu", kernel_initializer="he_normal") for _ in range(8)]
                + [keras.layers.Dense(1)])
            x = np.random.default_rng(seed).normal(size=(32, 16)).astype("float32")
            report = gl.inspect_training_step(model, x, np.zeros((32, 1), "float32"))
            assert not any(p.kind == "dead-units" for p in report.problems), (width, seed, report)


def test_relu6_stuck_at_6_is_described_as_stuck_at_6():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)),
                              keras.layers.Dense(16, activation="relu6", bias_initializer=keras.initializers.Constant(50.0)),
                              keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    x = np.random.default_rng(0).normal(size=(32, 8)).astype("float32")
    report = gl.inspect_training_step(model, x, np.zeros((32, 1), "float32"))
    dead = [p for p in report.problems if p.kind == "dead-units"]
    assert dead and "stuck at the cap" in dead[0].finding, report
    assert "exactly 0 for every example" not in dead[0].finding
