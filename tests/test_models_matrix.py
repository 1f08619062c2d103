"""Model kinds × tools × bad inputs (issue 11): every tool on models nobody here wrote.

Each case asserts the right number against an independent ``GradientTape``, or the right clear
``ValueError``, or that the model is unchanged (every variable, trainable or not, bit for bit).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl

RNG = np.random.default_rng(0)
X4 = RNG.normal(size=(16, 4))  # float64, NumPy's default
Y1 = X4.sum(axis=1, keepdims=True) + 0.1 * RNG.normal(size=(16, 1))
XSEQ = RNG.normal(size=(16, 6, 4))


# ----------------------------------------------------------------------------- model kinds
def sequential():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])


def shared_dense():
    keras.utils.set_random_seed(2)
    inp = keras.Input((4,))
    d = keras.layers.Dense(4, activation="tanh", name="shared")
    return keras.Model(inp, keras.layers.Dense(1, name="out")(d(d(inp))))


class Residual(keras.Model):
    def __init__(self):
        super().__init__(name="residual")
        self.a = keras.layers.Dense(4, activation="relu", name="a")
        self.b = keras.layers.Dense(1, name="b")

    def call(self, x):
        return self.b(self.a(x) + x)


def subclassed_residual():
    keras.utils.set_random_seed(3)
    return Residual()


def attention():
    keras.utils.set_random_seed(4)
    inp = keras.Input((6, 4))
    out, _scores = keras.layers.MultiHeadAttention(2, 4, name="mha")(inp, inp, return_attention_scores=True)
    return keras.Model(inp, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(out)))


def lstm_state():
    keras.utils.set_random_seed(5)
    inp = keras.Input((6, 4))
    _seq, h, _c = keras.layers.LSTM(5, return_state=True, name="lstm")(inp)
    return keras.Model(inp, keras.layers.Dense(1)(h))


def dict_output():
    keras.utils.set_random_seed(6)
    inp = keras.Input((4,))
    return keras.Model(inp, {"value": keras.layers.Dense(1)(keras.layers.Dense(8, activation="relu")(inp))})


def nested_backbone():
    keras.utils.set_random_seed(7)
    backbone = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                 keras.layers.Dense(8, activation="relu")], name="backbone")
    return keras.Sequential([keras.Input((4,)), backbone, keras.layers.Dense(1)])


def batchnorm_dropout():
    keras.utils.set_random_seed(8)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"), keras.layers.Dropout(0.5),
                             keras.layers.Dense(1)])


def embedding():
    keras.utils.set_random_seed(9)
    return keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(10, 3),
                             keras.layers.Flatten(), keras.layers.Dense(1)])


def regularized_mae():
    keras.utils.set_random_seed(10)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(8, activation="relu", kernel_regularizer=keras.regularizers.L2(0.1)),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mae")
    return model


KINDS = {
    "sequential": (sequential, X4, Y1),
    "shared Dense (applied twice)": (shared_dense, X4, Y1),
    "subclassed + skip": (subclassed_residual, X4, Y1),
    "MultiHeadAttention(scores)": (attention, XSEQ, Y1),
    "LSTM(return_state)": (lstm_state, XSEQ, Y1),
    "dict output": (dict_output, X4, {"value": Y1}),
    "nested backbone": (nested_backbone, X4, Y1),
    "BatchNorm + Dropout": (batchnorm_dropout, X4, Y1),
    "Embedding": (embedding, RNG.integers(0, 10, size=(16, 5)), Y1),
    "compiled mae + L2": (regularized_mae, X4, Y1),
}
DENSE_KINDS = {"sequential", "subclassed + skip", "nested backbone", "dict output", "compiled mae + L2"}


def _build(kind):
    make, x, y = KINDS[kind]
    model = make()
    model(tf.nest.map_structure(lambda a: tf.convert_to_tensor(a[:1]), x) if not isinstance(x, np.ndarray)
          else _cast_x(model, x[:1]))
    return model, x, y


def _cast_x(model, x):
    return tf.convert_to_tensor(x) if np.issubdtype(np.asarray(x).dtype, np.integer) else tf.constant(x, tf.float32)


def _y32(y):
    return tf.nest.map_structure(lambda a: tf.constant(a, tf.float32), y)


def reference(model, x, y, training=True):
    """Independent tape: the loss (compiled loss, else MSE; + model.losses) and its gradients."""
    x, y = _cast_x(model, x), _y32(y)
    with tf.GradientTape() as tape:
        pred = model(x, training=training)
        if getattr(model, "compiled", False):
            loss = model.compute_loss(x=x, y=y, y_pred=pred, training=training)
        else:
            pairs = zip(tf.nest.flatten(y), tf.nest.flatten(pred), strict=True)
            loss = tf.add_n([tf.reduce_mean(tf.square(t - tf.cast(p, tf.float32))) for t, p in pairs])
            loss += tf.add_n(model.losses) if model.losses else 0.0
    grads = tape.gradient(loss, model.trainable_variables)
    norm = np.sqrt(sum(float(tf.reduce_sum(tf.square(tf.cast(tf.convert_to_tensor(g), tf.float64))))
                       for g in grads if g is not None))
    return float(loss), grads, norm


def _state(model):
    return [v.numpy().copy() for v in model.variables]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))


# ----------------------------------------------------------------------------- inspect_training_step
@pytest.mark.parametrize("kind", list(KINDS))
def test_inspect_matches_an_independent_tape_and_leaves_the_model_unchanged(kind):
    model, x, y = _build(kind)
    before = _state(model)
    r = gl.inspect_training_step(model, x, y)  # float64 NumPy data, as fit accepts it
    assert _same(before, _state(model)), "inspection changed a variable"
    assert str(gl.inspect_training_step(model, x, y)) == str(r)  # the same report twice
    loss, _, norm = reference(model, x, y, training=True)  # same dropout seed: state was restored
    assert r.loss == pytest.approx(loss, rel=1e-5)
    assert r.global_norm == pytest.approx(norm, rel=1e-4)
    assert r.layers, "every kind gets per-layer rows from the model's own call"


def test_inspect_shared_layer_has_one_row_per_call():
    model, x, y = _build("shared Dense (applied twice)")
    r = gl.inspect_training_step(model, x, y)
    assert [row.name for row in r.layers] == ["shared", "shared (call 2)", "out"]
    # the second call's pre-activation signal against an independent tape
    d, out = model.get_layer("shared"), model.get_layer("out")
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        z2 = tf.matmul(d(xt), d.kernel) + d.bias
        tape.watch(z2)
        loss = tf.reduce_mean(tf.square(_y32(y) - out(tf.tanh(z2))))
    assert r.layers[1].signal == pytest.approx(float(tf.norm(tape.gradient(loss, z2))), rel=1e-5)


def test_inspect_nested_backbone_is_expanded_into_its_layers():
    model, x, y = _build("nested backbone")
    r = gl.inspect_training_step(model, x, y)
    assert [row.kind for row in r.layers] == ["Dense", "Dense", "Dense"]
    assert len(r.diagnosed_layers) == 2


def test_inspect_uses_the_compiled_loss_and_regularizers():
    model, x, y = _build("compiled mae + L2")
    r = gl.inspect_training_step(model, x, y)
    pred = model(tf.constant(x, tf.float32))
    mae = float(tf.reduce_mean(tf.abs(_y32(y) - pred)))
    l2 = float(0.1 * tf.reduce_sum(tf.square(model.layers[0].kernel)))
    assert r.loss == pytest.approx(mae + l2, rel=1e-5)
    assert "compiled" in r.loss_description


def test_inspect_batchnorm_dropout_training_flag():
    model, x, y = _build("BatchNorm + Dropout")
    before = _state(model)
    train = gl.inspect_training_step(model, x, y)
    infer = gl.inspect_training_step(model, x, y, training=False)
    assert _same(before, _state(model))
    assert train.training and not infer.training
    assert infer.loss == pytest.approx(reference(model, x, y, training=False)[0], rel=1e-5)
    assert train.loss != pytest.approx(infer.loss, rel=1e-3)


# ----------------------------------------------------------------------------- gradient_report
@pytest.mark.parametrize("kind", sorted(DENSE_KINDS - {"dict output"}))
def test_gradient_report_loss_is_the_models_own(kind):
    model, x, y = _build(kind)
    before = _state(model)
    rep = gl.gradient_report(model, x, y)
    assert _same(before, _state(model))
    assert rep.loss == pytest.approx(reference(model, x, y)[0], rel=1e-5)


def test_gradient_report_on_a_subclassed_skip_connection():
    model, x, y = _build("subclassed + skip")
    rep = gl.gradient_report(model, x, y)
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        z = tf.matmul(xt, model.a.kernel) + model.a.bias
        tape.watch(z)
        loss = tf.reduce_mean(tf.square(_y32(y) - model.b(tf.nn.relu(z) + xt)))
    assert rep.loss == pytest.approx(float(loss), rel=1e-6)
    assert rep.signal_norms[0] == pytest.approx(float(tf.norm(tape.gradient(loss, z))), rel=1e-5)


@pytest.mark.parametrize("kind,match", [
    ("shared Dense (applied twice)", "applied 2 times"),
    ("MultiHeadAttention(scores)", "found MultiHeadAttention"),
    ("LSTM(return_state)", "found LSTM"),
    ("Embedding", "found Embedding"),
])
def test_gradient_report_refuses_what_it_cannot_measure(kind, match):
    model, x, y = _build(kind)
    with pytest.raises(ValueError, match=match):
        gl.gradient_report(model, x, y)


# ----------------------------------------------------------------------------- training tools
def _expected_after_sgd(model, x, y, lr):
    _, grads, _ = reference(model, x, y, training=True)
    return [v.numpy() - lr * tf.convert_to_tensor(g).numpy() for v, g in
            zip(model.trainable_variables, grads, strict=True)]


TRAIN_KINDS = ["sequential", "shared Dense (applied twice)", "subclassed + skip", "MultiHeadAttention(scores)",
               "LSTM(return_state)", "dict output", "nested backbone", "Embedding", "compiled mae + L2"]


@pytest.mark.parametrize("tool", ["train_steps", "make_train_step"])
@pytest.mark.parametrize("kind", TRAIN_KINDS)
def test_one_training_step_equals_an_independent_sgd_step(kind, tool):
    model, x, y = _build(kind)
    expected = _expected_after_sgd(model, x, y, 0.1)
    if tool == "train_steps":
        gl.train_steps(model, x, y, optimizer=keras.optimizers.SGD(0.1), steps=1)
    else:
        gl.make_train_step(model, keras.optimizers.SGD(0.1))(x, y)
    for v, e in zip(model.trainable_variables, expected, strict=True):
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-4, atol=1e-6)


def test_check_trains_on_float64_numpy_data():
    model, x, y = _build("sequential")
    r = gl.exercises.checks.check_trains("fit", model, x, y, optimizer=keras.optimizers.SGD(0.05), steps=60, below=1.0)
    assert r.ok, r.feedback


# ----------------------------------------------------------------------------- mixed precision
@pytest.fixture
def mixed():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _mixed_model():
    keras.utils.set_random_seed(11)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(1, dtype="float32")])


def _moved(model, start):
    return [v.numpy() - s for v, s in zip(model.trainable_variables, start, strict=True)]


def test_mixed_precision_trains_as_fit_does(mixed):
    ref = _mixed_model()
    start = [v.numpy().copy() for v in ref.trainable_variables]
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    assert isinstance(ref.optimizer, keras.optimizers.LossScaleOptimizer)
    ref.fit(X4, Y1, batch_size=16, epochs=2, verbose=0, shuffle=False)
    want = _moved(ref, start)
    runs = {}
    m = _mixed_model()
    gl.train_steps(m, X4, Y1, optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), steps=2)
    runs["train_steps"] = m
    m = _mixed_model()
    step = gl.make_train_step(m, keras.optimizers.SGD(0.1))
    step(X4, Y1)
    step(X4, Y1)
    runs["make_train_step"] = m
    g = gl.GradNormSequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                               keras.layers.Dense(1, dtype="float32")])
    g.set_weights(start)
    g.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    g.fit(X4, Y1, batch_size=16, epochs=2, verbose=0, shuffle=False)
    runs["GradNormSequential.fit"] = g
    assert np.abs(want[0]).max() > 1e-2
    for name, model in runs.items():
        for got, exp in zip(_moved(model, start), want, strict=True):
            np.testing.assert_allclose(got, exp, rtol=2e-3, atol=1e-5, err_msg=name)
    assert gl.exercises.checks.check_trains("mp", _mixed_model(), X4, Y1, optimizer=keras.optimizers.SGD(0.05),
                           steps=80, below=1.0).ok


def test_mixed_precision_report_describes_the_float16_model(mixed):
    model = _mixed_model()
    r = gl.inspect_training_step(model, X4, Y1)
    assert r.compute_dtype == "float16" and r.loss_scale == 2.0 ** 15
    assert r.loss == pytest.approx(reference(model, X4, Y1)[0], rel=1e-6)
    assert "loss scale 32768" in str(r)


def test_mixed_precision_overflow_is_reported_as_it_runs(mixed):
    keras.utils.set_random_seed(14)
    big = keras.initializers.Constant(100.0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu", kernel_initializer=big),
                              keras.layers.Dense(8, activation="relu", kernel_initializer=big, name="overflows"),
                              keras.layers.Dense(1, dtype="float32")])
    x = np.abs(X4)
    r = gl.inspect_training_step(model, x, Y1)
    assert not np.isfinite(reference(model, x, Y1)[0])  # the float16 model's loss is inf
    assert not np.isfinite(r.loss) and r.first_nonfinite_layer == "overflows"
    assert r.problem_kinds[0] == "non-finite-forward"


# ----------------------------------------------------------------------------- recurrent models
def test_simple_rnn_over_50_steps_vanishes_through_time():
    keras.utils.set_random_seed(12)
    model = keras.Sequential([keras.Input((50, 2)), keras.layers.SimpleRNN(8), keras.layers.Dense(1)])
    x = RNG.normal(size=(8, 50, 2))
    y = RNG.normal(size=(8, 1))
    r = gl.inspect_training_step(model, x, y)
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        loss = tf.reduce_mean(tf.square(_y32(y) - model(xt, training=True)))
    g = tf.cast(tape.gradient(loss, xt), tf.float64)
    expected = np.sqrt(tf.reduce_sum(tf.square(g), axis=[0, 2]).numpy())
    np.testing.assert_allclose(r.time_step_norms, expected, rtol=1e-4)
    assert r.time_step_norms[0] / r.time_step_norms[-1] < 1e-3
    assert r.status == "vanishing" and "vanishing-through-time" in r.problem_kinds
    assert "LSTM or GRU" in str(r)


# ----------------------------------------------------------------------------- real architectures
@pytest.fixture(scope="module")
def mobilenet():
    keras.utils.set_random_seed(13)
    return keras.applications.MobileNetV2(input_shape=(32, 32, 3), weights=None, alpha=0.35, classes=3)


def test_mobilenet_is_unchanged_and_the_advice_names_batchnorm(mobilenet):
    x = RNG.normal(size=(4, 32, 32, 3))
    y = keras.utils.to_categorical([0, 1, 2, 0], 3)
    before = _state(mobilenet)
    cce = keras.losses.CategoricalCrossentropy()
    r = gl.inspect_training_step(mobilenet, x, y, loss=cce)
    assert _same(before, _state(mobilenet))  # 104 BatchNorm statistics included
    infer = gl.inspect_training_step(mobilenet, x, y, loss=cce, training=False)
    assert "batchnorm-statistics" in infer.problem_kinds and "moving statistics" in str(infer)
    assert _same(before, _state(mobilenet))
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        loss = cce(y, mobilenet(xt, training=True))
    grads = tape.gradient(loss, mobilenet.trainable_variables)
    norm = np.sqrt(sum(float(tf.reduce_sum(tf.square(tf.cast(g, tf.float64)))) for g in grads))
    assert r.loss == pytest.approx(float(loss), rel=1e-5)
    assert r.global_norm == pytest.approx(norm, rel=1e-3)
    assert "batchnorm-statistics" in r.problem_kinds
    assert "1×1 feature map" in str(r) and "glorot" not in r.message


# ----------------------------------------------------------------------------- bad inputs
def _gen():
    yield X4, Y1


TOOLS = {
    "inspect_training_step": lambda m, x, y: gl.inspect_training_step(m, x, y),
    "train_steps": lambda m, x, y: gl.train_steps(m, x, y, optimizer=keras.optimizers.SGD(0.01), steps=1),
    "make_train_step": lambda m, x, y: gl.make_train_step(m, keras.optimizers.SGD(0.01))(x, y),
    "gradient_report": lambda m, x, y: gl.gradient_report(m, x, y),
}
BAD = {
    "tf.data.Dataset": (lambda: tf.data.Dataset.from_tensor_slices((X4, Y1)).batch(4), Y1,
                        "tf.data.Dataset.*Pass one batch"),
    "generator": (_gen, Y1, "generator.*Pass one batch"),
    "y of shape (n,)": (lambda: X4, Y1[:, 0], r"y has shape \(16,\).*\(16, 1\)"),
    "empty batch": (lambda: X4[:0], Y1[:0], "empty batch"),
    "wrong features": (lambda: X4[:, :3], Y1, r"x has shape \(16, 3\), but the model expects \(batch, 4\)"),
    "x/y length": (lambda: X4, Y1[:5], "same number of examples"),
}


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("tool", list(TOOLS))
def test_bad_input_is_a_clear_value_error(tool, bad):
    make_x, y, match = BAD[bad]
    model, _, _ = _build("sequential")
    before = _state(model)
    with pytest.raises(ValueError, match=match):
        TOOLS[tool](model, make_x(), y)
    assert _same(before, _state(model))


def test_check_trains_turns_bad_input_into_feedback():
    model, x, y = _build("sequential")
    r = gl.exercises.checks.check_trains("fit", model, x, y[:, 0], optimizer=keras.optimizers.SGD(0.05), steps=5, below=1.0)
    assert not r.ok and "Reshape y" in r.feedback


def test_nan_in_the_data_is_a_data_problem():
    model, x, y = _build("sequential")
    bad = x.copy()
    bad[3, 1] = np.nan
    r = gl.inspect_training_step(model, bad, y)
    assert r.problem_kinds == ("non-finite-data",)
    assert "x holds 1 NaN/inf value (in 1 of 16 examples)" in str(r)
    assert "initializer" not in str(r)
    with pytest.raises(ValueError, match="data problem"):
        gl.train_steps(model, bad, y, optimizer=keras.optimizers.SGD(0.1), steps=1)
    with pytest.raises(ValueError, match="data problem"):
        gl.gradient_report(model, bad, y)


def test_python_lists_are_accepted_like_arrays():
    model, x, y = _build("sequential")
    a = gl.inspect_training_step(model, x.tolist(), y.tolist())
    b = gl.inspect_training_step(model, x.astype(np.float32), y.astype(np.float32))
    assert a.loss == b.loss and a.global_norm == b.global_norm


class GraphCall(keras.Model):
    """A subclassed model whose call is a tf.function: its layers cannot be tapped eagerly."""

    def __init__(self):
        super().__init__(name="graph_call")
        self.a = keras.layers.Dense(4, activation="relu")
        self.b = keras.layers.Dense(1)

    @tf.function
    def call(self, x):
        return self.b(self.a(x))


def test_untappable_model_gets_the_per_variable_view_with_true_numbers():
    keras.utils.set_random_seed(15)
    model = GraphCall()
    r = gl.inspect_training_step(model, X4, Y1)
    assert r.layers == () and r.status == "n/a" and "per-variable view" in str(r)
    loss, grads, norm = reference(model, X4, Y1)
    assert r.loss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose([v.grad_norm for v in r.variables], [float(tf.norm(g)) for g in grads], rtol=1e-5)
    with pytest.raises(ValueError, match="tf.function.*cannot be measured|inside a tf.function"):
        gl.gradient_report(model, X4, Y1)


def test_two_input_model_takes_a_list_of_float64_arrays():
    keras.utils.set_random_seed(16)
    a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(3, activation="relu")(a), b])
    model = keras.Model([a, b], keras.layers.Dense(1)(h))
    xb = RNG.normal(size=(16, 2))
    r = gl.inspect_training_step(model, [X4, xb], Y1)
    xt = [tf.constant(X4, tf.float32), tf.constant(xb, tf.float32)]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(_y32(Y1) - model(xt, training=True)))
    grads = tape.gradient(loss, model.trainable_variables)
    assert r.loss == pytest.approx(float(loss), rel=1e-6)
    assert r.global_norm == pytest.approx(float(tf.linalg.global_norm(grads)), rel=1e-5)
    with pytest.raises(ValueError, match=r"x\[1\] has shape \(16, 3\), but the model expects \(batch, 2\)"):
        gl.train_steps(model, [X4, RNG.normal(size=(16, 3))], Y1, optimizer=keras.optimizers.SGD(0.1), steps=1)


# ----------------------------------------------------------------------------- padded sequences (f1)
@pytest.mark.parametrize("pad", ["post", "pre"])
def test_padded_bidirectional_lstm_is_not_diagnosed_through_its_padding(pad):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((12,), dtype="int32")
    emb = keras.layers.Embedding(50, 8, mask_zero=True, name="emb")(tokens)
    h = keras.layers.Bidirectional(keras.layers.LSTM(8), name="bi")(emb)
    m = keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(h))
    m.compile(loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, size=(16, 12))
    if pad == "post":
        x[:, 8:] = 0
    else:
        x[:, :4] = 0
    y = rng.integers(0, 3, size=(16,))
    r = gl.inspect_training_step(m, x, y)
    # an independent tape: the gradient at the padded steps is exactly 0 (the LSTM skips them)
    with tf.GradientTape() as tape:
        e = m.get_layer("emb")(x)
        tape.watch(e)
        loss = keras.losses.sparse_categorical_crossentropy(y, m.layers[-1](m.get_layer("bi")(
            e, mask=tf.constant(x != 0))))
        loss = tf.reduce_mean(loss)
    g = tape.gradient(loss, e).numpy().astype(np.float64)
    per_step = np.sqrt(np.square(g).sum(axis=(0, 2)))
    padded, real = (per_step[8:], per_step[:8]) if pad == "post" else (per_step[:4], per_step[4:])
    assert np.all(padded == 0)
    np.testing.assert_allclose(r.time_step_norms, real, rtol=1e-4)
    assert not any(k.endswith("through-time") for k in r.problem_kinds)
    assert "inf" not in str(r)
