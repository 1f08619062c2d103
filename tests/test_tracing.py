"""Chapter 03's training-loop pieces, the gradient-norm callback and the tracing lab."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl


def _model(seed: int = 0, width: int = 16):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(width, activation="relu", name="hidden"),
         keras.layers.Dense(1, name="out")]
    )


def _data(n: int = 64, seed: int = 0):
    x = tf.random.stateless_normal([n, 8], seed=[seed, 1])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    return x, y


def _flat(variables):
    return np.concatenate([np.ravel(v.numpy()) for v in variables])


# ----------------------------------------------------------------------------- tracing
def test_train_step_traces_once_for_many_batches():
    model = _model()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.01))
    for i in range(6):  # new tensors of the same shape and dtype every call
        step(*_data(seed=i))
    assert gl.tracing_count(step) == 1


def test_trace_counter_counts_traces_not_calls():
    tc = gl.TraceCounter(lambda x, a: x * a)
    x = tf.constant(2.0)
    for a in (0.1, 0.2, 0.3, 0.1):  # Python floats: one trace per new value
        tc(x, a)
    assert (tc.calls, tc.count, tc.tracing_count) == (4, 3, 3)
    for a in (0.4, 0.5):  # tensors: one more trace serves every value
        tc(x, tf.constant(a))
    assert tc.count == 4
    assert "python float 0.2" in tc.log[1]


def test_tracing_count_rejects_plain_function():
    with pytest.raises(ValueError, match="tf.function"):
        gl.tracing_count(lambda: None)


def test_error_summary_keeps_the_message_line():
    @tf.function
    def f(x):
        return tf.debugging.check_numerics(tf.math.log(x), "log blew up")

    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        f(tf.constant([-1.0]))
    assert gl.topics.tracing.error_summary(info.value) == "InvalidArgumentError: log blew up : Tensor had NaN values"


# ----------------------------------------------------------------------------- make_train_step
def test_clipping_bounds_the_global_norm_of_the_update():
    model = _model()
    before = _flat(model.trainable_variables)
    step = gl.make_train_step(model, keras.optimizers.SGD(1.0), clip=0.5)
    out = step(*_data())
    assert float(out["global_norm"]) > 0.5  # clipping had something to do
    update = before - _flat(model.trainable_variables)  # SGD(1.0): update = clipped gradient
    assert np.linalg.norm(update) == pytest.approx(0.5, rel=1e-4)
    assert float(out["clipped_norm"]) == pytest.approx(0.5, rel=1e-4)


def test_grad_norms_per_layer_combine_to_the_global_norm():
    model = _model()
    out = gl.make_train_step(model, keras.optimizers.SGD(0.0))(*_data())
    norms = {k: float(v) for k, v in out["grad_norms"].items()}
    assert list(norms) == ["hidden", "out"] == gl.train.steps.layer_names(model)
    assert np.hypot(*norms.values()) == pytest.approx(float(out["global_norm"]), rel=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_non_finite_gradient_is_detected_and_skipped(jit_compile):
    model = _model()
    before = _flat(model.trainable_variables)
    step = gl.make_train_step(model, keras.optimizers.SGD(0.1), jit_compile=jit_compile)
    x, y = _data()
    x_bad = tf.tensor_scatter_nd_update(x, [[0, 0]], [np.nan])
    out = step(x_bad, y)
    assert not bool(out["finite"]) and not bool(out["applied"])
    np.testing.assert_array_equal(_flat(model.trainable_variables), before)
    out = step(x, y)
    assert bool(out["finite"]) and bool(out["applied"])
    assert not np.array_equal(_flat(model.trainable_variables), before)


def test_without_the_check_nan_reaches_the_weights():
    model = _model()
    step = gl.make_train_step(model, keras.optimizers.SGD(0.1), check_finite=False)
    x, y = _data()
    step(tf.tensor_scatter_nd_update(x, [[0, 0]], [np.nan]), y)
    assert np.isnan(_flat(model.trainable_variables)).any()


def test_make_train_step_validates_its_input():
    unbuilt = keras.Sequential([keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="built"):
        gl.make_train_step(unbuilt, keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="clip must be"):
        gl.make_train_step(_model(), keras.optimizers.SGD(0.1), clip=-1.0)
    with pytest.raises(ValueError, match="optimizer"):
        gl.make_train_step(_model(), "sgd")


# ----------------------------------------------------------------------------- timing
def test_time_step_separates_first_call_from_steady_state():
    calls = []

    def fn(a):
        calls.append(a)
        return tf.constant(a)

    t = gl.time_step(fn, (1.0,), warmup=2, repeats=5, name="toy")
    assert len(calls) == 1 + 2 + 5 and t.times_s.shape == (5,)
    assert t.first_s > 0 and t.steady_s == pytest.approx(float(np.median(t.times_s)))
    table = gl.topics.tracing.format_timings([t, gl.topics.tracing.StepTiming("half", t.first_s, t.steady_s / 2, t.times_s)])
    assert "2x" in table.splitlines()[2]
    with pytest.raises(ValueError, match="repeats"):
        gl.time_step(fn, (1.0,), repeats=0)
    assert gl.plots.plot_step_times([t]).axes[0].get_yscale() == "log"


# ----------------------------------------------------------------------------- Keras fit
def _fit_model(clip=None):
    keras.utils.set_random_seed(0)
    model = gl.GradNormSequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu", name="hidden"),
         keras.layers.Dense(1, name="out")],
        clip=clip,
    )
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    return model


def test_train_step_override_trains_under_fit_and_logs_norms():
    model = _fit_model(clip=5.0)
    x, y = _data(128)
    hist = model.fit(x, y, epochs=6, batch_size=32, verbose=0).history
    assert hist["loss"][-1] < 0.5 * hist["loss"][0]
    assert {"grad_norm", "grad_norm/hidden", "grad_norm/out", "skipped_steps"} <= set(hist)
    assert hist["skipped_steps"] == [0.0] * 6


def test_train_step_override_skips_non_finite_batches():
    model = _fit_model()
    x, y = _data(64)
    x = tf.tensor_scatter_nd_update(x, [[0, 0]], [np.inf])  # poisons the first of two batches
    before = _flat(model.trainable_variables)
    hist = model.fit(x, y, epochs=1, batch_size=32, shuffle=False, verbose=0).history
    assert hist["skipped_steps"] == [1.0]
    after = _flat(model.trainable_variables)
    assert np.isfinite(after).all() and not np.array_equal(after, before)


def test_grad_norm_logger_reads_the_logs_one_entry_per_layer():
    model = _fit_model()
    logger = gl.GradNormLogger()
    model.fit(*_data(64), epochs=3, batch_size=32, verbose=0, callbacks=[logger])
    assert list(logger.history) == ["hidden", "out"]
    assert logger.steps == [1, 2, 3]
    assert all(len(v) == 3 and np.all(np.array(v) > 0) for v in logger.history.values())
    fig = gl.plots.plot_grad_norm_history(logger.history, steps=logger.steps)
    assert len(fig.axes[0].get_lines()) == 2


def test_grad_norm_logger_with_a_probe_batch_on_a_plain_model():
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    x, y = _data(64)
    logger = gl.GradNormLogger(probe=(x[:16], y[:16]), every="batch", every_n=2)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[logger])
    assert logger.steps == [2, 4, 6, 8]
    assert {k: len(v) for k, v in logger.history.items()} == {"hidden": 4, "out": 4}
    # the recorded norm is the probe batch's gradient at the weights of that moment
    with tf.GradientTape() as tape:
        loss = keras.losses.mean_squared_error(y[:16], model(x[:16]))
        loss = tf.reduce_mean(loss)
    g = tape.gradient(loss, model.layers[1].trainable_weights)
    assert logger.history["out"][-1] == pytest.approx(float(tf.linalg.global_norm(g)), rel=1e-4)


def test_grad_norm_logger_without_a_source_says_what_to_do():
    model = _model()
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="probe"):
        model.fit(*_data(32), epochs=1, verbose=0, callbacks=[gl.GradNormLogger()])
    with pytest.raises(ValueError, match="every"):
        gl.GradNormLogger(every="step")


def _probe_norms(model, x, y):
    """Independent tape: the compiled MSE's gradient norm per layer (None counts as 0)."""
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(tf.square(y - model(x, training=False)))
    out = {}
    for layer in model.layers:
        gs = [g for g in tape.gradient(loss, layer.trainable_weights) if g is not None] if layer.trainable_weights else []
        if layer.trainable_weights:
            out[layer.name] = float(tf.linalg.global_norm(gs)) if gs else 0.0
    return out


def test_grad_norm_logger_probe_on_a_model_without_an_input():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, activation="relu", name="hidden"),
                              keras.layers.Dense(1, name="out")])  # built by fit, after on_train_begin
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    x, y = _data(32)
    logger = gl.GradNormLogger(probe=(x.numpy().astype(np.float64), y.numpy()))
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[logger])
    assert list(logger.history) == ["hidden", "out"]
    ref = _probe_norms(model, x, y)
    assert logger.history["hidden"][-1] == pytest.approx(ref["hidden"], rel=1e-4)


def test_grad_norm_logger_probe_with_a_stop_gradient_branch():
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,))
    frozen = keras.layers.Dense(4, name="frozen")(inp)
    live = keras.layers.Dense(4, name="live")(inp)
    # a Lambda layer: Keras 3.5 cannot apply keras.ops.stop_gradient to a symbolic input (make test-oldest)
    stopped = keras.layers.Lambda(keras.ops.stop_gradient, name="stop")(frozen)
    out = keras.layers.Dense(1, name="out")(keras.layers.Concatenate()([stopped, live]))
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    x, y = _data(32)
    logger = gl.GradNormLogger(probe=(x, y))
    model.fit(x, y, epochs=1, batch_size=16, verbose=0, callbacks=[logger])
    assert logger.history["frozen"] == [0.0]
    assert logger.history["live"][0] == pytest.approx(_probe_norms(model, x, y)["live"], rel=1e-4)


def test_make_train_step_refuses_a_y_that_would_broadcast_and_takes_float64():
    model = _model()
    x, y = _data(32)
    step = gl.make_train_step(model, keras.optimizers.SGD(0.0))
    with pytest.raises(ValueError, match=r"y has shape \(32,\)"):
        step(x, tf.squeeze(y, 1))
    out = step(x.numpy().astype(np.float64), y.numpy().astype(np.float64))
    ref = float(tf.reduce_mean(tf.square(y - model(x))))
    assert float(out["loss"]) == pytest.approx(ref, rel=1e-6)
    traced = gl.tracing_count(step)
    step(x.numpy().astype(np.float64), y.numpy().astype(np.float64))
    step(x, y)
    assert gl.tracing_count(step) == traced == 1  # float64 NumPy is converted as fit converts it: no retrace


# ----------------------------------------------------------------------------- widget
def test_tracing_lab_float_mode_retraces_tensor_mode_does_not():
    lab = gl.TracingLab(value=0.1, mode="python float", plot=False)
    assert lab.traces == 1 and "traces: 1" in lab.status_text
    lab.value.value = 0.37
    lab.value.value = 0.52
    assert lab.traces == 3 and lab.last_retraced
    lab.value.value = 0.37  # a value seen before reuses its trace
    assert lab.traces == 3 and not lab.last_retraced
    lab.mode.value = "tensor"
    assert lab.traces == 1
    for v in (0.2, 0.6, 0.9):
        lab.value.value = v
    assert lab.traces == 1 and "tensor · value 0.9 → traces: 1" in lab.status_text
    lab.reset.click()
    assert lab.traces == 1 and lab.mode.value == "tensor"
    assert lab._repr_mimebundle_()["text/plain"] == "TracingLab(tensor · value 0.9 → traces: 1)"
    assert lab.view["status"]["text"] == lab.status_text and lab.kind == "TracingLab"


def test_tracing_lab_view_holds_every_call_and_marks_the_traces():
    lab = gl.TracingLab(value=0.1)
    lab.value.value = 0.3
    (plot,) = lab.view["plots"]
    calls, traced = plot["series"]
    assert len(calls["y"]) == 2 and calls["y"][1] == pytest.approx(lab.last_ms)
    assert [v != "nan" for v in traced["y"]] == [True, True]  # two new Python floats: two traces
    assert lab.view["report"]["traces"] == lab.traces == 2


# ----------------------------------------------------------------------------- review fixes (f1)
def test_grad_norm_logger_probe_scales_the_loss_under_mixed_precision():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = (rng.normal(size=(32, 1)) * 1e-4).astype("float32")
    init = keras.initializers.RandomNormal(stddev=3e-4, seed=1)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh", kernel_initializer=init),
                              keras.layers.Dense(16, activation="tanh", kernel_initializer=init),
                              keras.layers.Dense(1, dtype="float32")])
        m.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        logger = gl.GradNormLogger(probe=(x, y))
        m.fit(x, y, epochs=1, batch_size=32, verbose=0, callbacks=[logger])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    ref = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                            keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)])
    ref.set_weights(m.get_weights())
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - ref(x)))
    g = tape.gradient(loss, ref.trainable_variables)
    first = float(np.sqrt(sum(np.sum(np.square(t.numpy().astype(np.float64))) for t in g[:2])))
    assert 1e-8 < first < 1e-5  # below float16's smallest number without the loss scale
    assert logger.history[m.layers[0].name][0] == pytest.approx(first, rel=2e-2)


def _classifier():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax", name="out")])
    m.compile(loss="sparse_categorical_crossentropy")
    return m


def _short_value_error(excinfo):
    text = str(excinfo.value)
    assert "in user code" not in text and "File " not in text and len(text) < 500, text
    return text


class HalfUsedLayer(keras.layers.Layer):
    """Creates two weights and uses only one: ``scale`` gets a None gradient."""

    def build(self, input_shape):
        self.shift = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="shift")
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs):
        return inputs - self.shift


def test_make_train_step_errors_are_short_and_raised_before_tracing():
    x, y = _data(8)
    onehot = np.eye(3)[np.arange(8) % 3]
    step = gl.make_train_step(_classifier(), keras.optimizers.SGD())
    with pytest.raises(ValueError, match="one-hot") as err:
        step(x, onehot)
    assert "CategoricalCrossentropy" in _short_value_error(err)
    assert step.experimental_get_tracing_count() == 0  # refused before the tf.function traced

    step = gl.make_train_step(_model(), keras.optimizers.SGD(), loss=lambda t, p: tf.square(t - p))
    with pytest.raises(ValueError, match="loss= must return a scalar") as err:
        step(x, y)
    _short_value_error(err)

    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), HalfUsedLayer(name="half"), keras.layers.Dense(1)])
    step = gl.make_train_step(m, keras.optimizers.SGD())
    with pytest.raises(ValueError, match="half/scale.*None") as err:
        step(x, y)
    _short_value_error(err)
    assert step.experimental_get_tracing_count() == 0

    opt = keras.optimizers.SGD()
    gl.make_train_step(_model(0), opt)(x, y)
    with pytest.raises(ValueError, match="build a fresh optimizer for each model") as err:
        gl.make_train_step(_model(1, width=4), opt)
    _short_value_error(err)


def test_make_train_step_eager_check_leaves_batchnorm_alone():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.BatchNormalization(),
                          keras.layers.Dense(1)])
    ref = keras.models.clone_model(m)
    ref.set_weights(m.get_weights())
    x, y = _data(16)
    gl.make_train_step(m, keras.optimizers.SGD(0.0))(x, y)
    ref(x, training=True)  # exactly one training-mode pass
    np.testing.assert_array_equal(m.layers[1].moving_mean.numpy(), ref.layers[1].moving_mean.numpy())


def test_y_none_names_y_in_make_train_step_and_the_logger():
    x, _ = _data(8)
    with pytest.raises(ValueError, match=r"^y is None"):
        gl.make_train_step(_model(), keras.optimizers.SGD())(x, None)
    m = _model()
    m.compile(optimizer=keras.optimizers.SGD(), loss="mse")
    x, y = _data(8)
    with pytest.raises(ValueError, match=r"^y is None"):
        m.fit(x, y, epochs=1, verbose=0, callbacks=[gl.GradNormLogger(probe=(x, None))])


def test_logger_probe_errors_are_short():
    x, _ = _data(8)
    m = _classifier()
    m.compile(optimizer=keras.optimizers.SGD(), loss="sparse_categorical_crossentropy")
    labels = np.arange(8) % 3
    with pytest.raises(ValueError, match="one-hot") as err:
        m.fit(x, labels, epochs=1, verbose=0, callbacks=[gl.GradNormLogger(probe=(x, np.eye(3)[labels]))])
    _short_value_error(err)


class OwnStepModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(1, name="d")

    def call(self, x):
        return self.d(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.abs(y - self(x, training=True)))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


def test_logger_refuses_to_guess_the_loss_of_a_custom_train_step():
    x, y = _data(16)
    m = OwnStepModel()
    m.compile(optimizer=keras.optimizers.SGD(0.01))
    with pytest.raises(ValueError, match="own train_step and no compiled loss"):
        m.fit(x, y, epochs=1, verbose=0, callbacks=[gl.GradNormLogger(probe=(x, y))])
    m2 = OwnStepModel()
    m2.compile(optimizer=keras.optimizers.SGD(0.01), loss="mae")
    logger = gl.GradNormLogger(probe=(x, y))
    m2.fit(x, y, epochs=1, verbose=0, callbacks=[logger])
    assert logger.history["d"][0] > 0


# ----------------------------------------------------------------------------- fit integration (issue 19)
def _seq(cls, seed=4):
    keras.utils.set_random_seed(seed)
    model = cls([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def test_grad_norm_sequential_epoch_loss_weights_a_smaller_last_batch_as_keras_does():
    """33 examples in batches of 16: the epoch loss is Keras's batch-size-weighted mean."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(33, 4)).astype("float32"), 3 * rng.normal(size=(33, 1)).astype("float32")
    ours = _seq(gl.GradNormSequential).fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history
    keras_ = _seq(keras.Sequential).fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False).history
    np.testing.assert_allclose(ours["loss"], keras_["loss"], rtol=1e-6)
    # and what an unweighted mean of the three batch losses would have given is different
    model = _seq(keras.Sequential)
    batch_losses = [model.train_on_batch(x[i:i + 16], y[i:i + 16]) for i in (0, 16, 32)]
    assert abs(np.mean(batch_losses) - keras_["loss"][0]) > 1e-3


def _two_outputs(seed=3):
    keras.utils.set_random_seed(seed)
    inp = keras.Input((4,))
    h = keras.layers.Dense(8, activation="relu")(inp)
    model = keras.Model(inp, [keras.layers.Dense(1, name="a")(h), keras.layers.Dense(1, name="b")(h)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=["mse", "mse"])
    return model


def test_grad_norm_logger_probe_does_not_change_what_fit_reports():
    """compute_loss updates the per-output loss trackers: the probe puts them back (was 0.894 vs 1.076)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4)).astype("float32")
    ya, yb = rng.normal(size=(64, 1)).astype("float32"), rng.normal(size=(64, 1)).astype("float32")
    plain = _two_outputs().fit(x, [ya, yb], batch_size=16, epochs=2, verbose=0, shuffle=False).history
    logger = gl.GradNormLogger(probe=(x[:16], [ya[:16], yb[:16]], np.linspace(0, 1, 16)), every="batch")
    model = _two_outputs()
    logged = model.fit(x, [ya, yb], batch_size=16, epochs=2, verbose=0, shuffle=False, callbacks=[logger]).history
    # Keras 3.4 reports only "loss" for two outputs; from 3.5 on also each output's loss
    assert set(logged) == set(plain) and {"loss"} <= set(plain) <= {"loss", "a_loss", "b_loss"}, plain.keys()
    for key in plain:
        np.testing.assert_allclose(logged[key], plain[key], rtol=1e-6, err_msg=key)
    assert logger.steps == list(range(1, 9))
    # the last probe against an independent tape of the weighted compiled loss, float64 norms
    with tf.GradientTape() as tape:
        pred = model(x[:16], training=False)
        loss = model.compute_loss(x=x[:16], y=[ya[:16], yb[:16]], y_pred=pred,
                                  sample_weight=tf.constant(np.linspace(0, 1, 16), tf.float32))
    grads = tape.gradient(loss, model.get_layer("a").trainable_weights)
    ref = float(np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2) for g in grads)))
    assert logger.history["a"][-1] == pytest.approx(ref, rel=1e-5)


def test_grad_norm_logger_puts_back_stateful_rnn_states():
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((3, 2), batch_size=4), keras.layers.GRU(3, stateful=True),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    x, y = np.ones((4, 3, 2), "float32"), np.zeros((4, 1), "float32")
    plain = keras.models.clone_model(model)
    plain.set_weights(model.get_weights())
    plain.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    want = plain.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False).history["loss"]
    got = model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False,
                    callbacks=[gl.GradNormLogger(probe=(2 * x, y), every="batch")]).history["loss"]
    np.testing.assert_allclose(got, want, rtol=1e-6)  # the probe's forward passes left the states alone
