"""Forty-odd real models nobody here wrote × every tool (issue 19's hidden cases, built here).

For each model: ``inspect_training_step`` against an independent ``GradientTape`` whose norms
NumPy takes in float64 (loss, every variable's gradient norm, the global norm), and nothing the
tool touched changed (weights, BatchNorm statistics, dropout seeds, stateful RNN states, the
compiled model's trackers, the optimizer's state), collected here without gradlab;
``gradient_report`` (Dense models, LoRA included) or its ``ValueError``; ``time_report`` for
sequence models (per-step norms against the tape's input gradient); one ``train_steps`` or
``make_train_step`` step against the plain SGD update; and ``sample_weight`` with Keras's
meaning where a model is trained with weights. Inputs are small, so each model takes about a
second.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from tests._matrix import Case, everything, registry, same, seq
from tests._matrix import restore as _restore

B = 8
RNG = np.random.default_rng(0)


def f32(*shape):
    return RNG.normal(size=shape).astype("float32")


X4, Y1, Y3 = f32(B, 4), f32(B, 1), f32(B, 3)
XS, XI = f32(B, 5, 4), f32(B, 8, 8, 3)
TOKENS = RNG.integers(1, 20, size=(B, 6)).astype("int32")
LABELS = RNG.integers(0, 3, size=(B,)).astype("int32")
SW = np.array([1, 2, 0, 1, 0.5, 3, 1, 1], "float32")


# ----------------------------------------------------------------------------- the zoo
ZOO: dict[str, Case] = {}
case = registry(ZOO, rtol=1e-5)

D = keras.layers.Dense


@case("dense tanh/relu", X4, Y1, dense=True)
def _():
    return seq(D(8, activation="tanh"), D(8, activation="relu"), D(1))


@case("deep sigmoid (vanishing)", X4, Y1, dense=True)
def _():
    return seq(*[D(8, activation="sigmoid") for _i in range(12)], D(1))


@case("float64 model", X4.astype("float64"), Y1.astype("float64"), dense=True, rtol=1e-9)
def _():
    return seq(D(8, activation="tanh", dtype="float64"), D(1, dtype="float64"), dtype="float64")


@case("LoRA Dense", X4, Y1, dense=True)
def _():
    m = seq(D(8, activation="relu", name="h1"), D(8, activation="relu", name="h2"), D(1))
    for name in ("h1", "h2"):
        m.get_layer(name).enable_lora(2)
    m.get_layer("h1").lora_kernel_b.assign(tf.random.stateless_normal((2, 8), [1, 2]) * 0.1)
    return m


@case("LayerNorm MLP", X4, Y1, dense=True)
def _():
    return seq(D(8), keras.layers.LayerNormalization(), keras.layers.Activation("gelu"), D(8),
               keras.layers.LayerNormalization(), keras.layers.Activation("gelu"), D(1))


@case("BatchNorm + Dropout", X4, Y1, dense=True, train=False)
def _():
    return seq(D(8), keras.layers.BatchNormalization(), keras.layers.Activation("relu"), keras.layers.Dropout(0.3),
               D(1))


@case("compiled mae + L2 + metric", X4, Y1, dense=True)
def _():
    m = seq(D(8, activation="relu", kernel_regularizer=keras.regularizers.L2(0.05)), D(1))
    m.compile(optimizer="sgd", loss="mae", metrics=["mse"])
    return m


@case("activity regularizer", X4, Y1, dense=True)
def _():
    return seq(D(8, activation="relu", activity_regularizer=keras.regularizers.L1(0.01)), D(1))


@case("weighted fit, compiled", X4, Y1, sw=SW, dense=True)
def _():
    m = seq(D(8, activation="tanh"), D(1))
    m.compile(optimizer="sgd", loss="mse")
    return m


@case("weighted, default loss", X4, Y1, sw=SW, dense=True)
def _():
    return seq(D(8, activation="tanh"), D(1))


@case("binary cross-entropy", X4, (Y1 > 0).astype("float32"))
def _():
    m = seq(D(8, activation="relu"), D(1, activation="sigmoid"))
    m.compile(optimizer="sgd", loss="binary_crossentropy")
    return m


@case("sparse categorical (logits)", X4, LABELS)
def _():
    m = seq(D(8, activation="relu"), D(3))
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


@case("categorical one-hot + Huber output", X4, np.eye(3, dtype="float32")[LABELS])
def _():
    m = seq(D(8, activation="relu"), D(3, activation="softmax"))
    m.compile(optimizer="sgd", loss="categorical_crossentropy")
    return m


@case("loss_fn Huber", X4, Y1, loss_fn=keras.losses.Huber(0.5), dense=True)
def _():
    return seq(D(8, activation="elu"), D(1))


@case("two outputs compiled (loss weights)", X4, [Y1, Y3])
def _():
    inp = keras.Input((4,))
    h = D(8, activation="relu")(inp)
    m = keras.Model(inp, [D(1, name="a")(h), D(3, name="b")(h)])
    m.compile(optimizer="sgd", loss=["mse", "mae"], loss_weights=[1.0, 0.5])
    return m


@case("dict outputs, default loss", X4, {"a": Y1, "b": Y3})
def _():
    inp = keras.Input((4,))
    h = D(8, activation="relu")(inp)
    return keras.Model(inp, {"a": D(1, name="a")(h), "b": D(3, name="b")(h)})


@case("two inputs", [X4, f32(B, 2)], Y1)
def _():
    a, b = keras.Input((4,)), keras.Input((2,))
    h = keras.layers.Concatenate()([D(4, activation="relu")(a), D(4, activation="relu")(b)])
    return keras.Model([a, b], D(1)(h))


@case("nested backbone", X4, Y1, dense=True)
def _():
    backbone = seq(D(8, activation="relu"), D(8, activation="relu"))
    return seq(backbone, D(1))


class Skip(keras.Model):
    def __init__(self):
        super().__init__(name="skip")
        self.a, self.b, self.out = D(4, activation="relu"), D(4), D(1)

    def call(self, x):
        return self.out(self.b(self.a(x)) + x)


@case("subclassed + skip", X4, Y1, dense=True)
def _():
    return Skip()


class Gated(keras.layers.Layer):
    """A learner's own layer with its own weights."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 4), initializer="glorot_uniform", name="w")
        self.g = self.add_weight(shape=(4,), initializer="zeros", name="g")

    def call(self, x):
        return tf.tanh(x @ self.w) * tf.sigmoid(self.g)


@case("custom layer", X4, Y1)
def _():
    return seq(Gated(), D(1))


class StopBranch(keras.Model):
    def __init__(self):
        super().__init__(name="stop_branch")
        self.body, self.aux, self.head = D(4), D(4), D(1)

    def call(self, x):
        return self.head(self.body(x) + tf.stop_gradient(self.aux(x)))


@case("stop_gradient branch (None grads)", X4, Y1, train=False)
def _():
    return StopBranch()


@case("PReLU", X4, Y1)
def _():
    return seq(D(8), keras.layers.PReLU(), D(1))


@case("Conv2D + BatchNorm", XI, Y1, train=False)
def _():
    return seq(keras.layers.Conv2D(4, 3, padding="same"), keras.layers.BatchNormalization(),
               keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), D(1), inp=(8, 8, 3))


@case("GroupNorm conv", XI, Y1)
def _():
    return seq(keras.layers.Conv2D(4, 3), keras.layers.GroupNormalization(2), keras.layers.Activation("swish"),
               keras.layers.Flatten(), D(1), inp=(8, 8, 3))


def _convnext_block(x, dim):
    h = keras.layers.DepthwiseConv2D(7, padding="same")(x)
    h = keras.layers.LayerNormalization(epsilon=1e-6)(h)
    h = D(4 * dim, activation="gelu")(h)
    h = D(dim)(h)
    return keras.layers.Add()([x, h])


@case("ConvNeXt-like", XI, Y1)
def _():
    inp = keras.Input((8, 8, 3))
    h = keras.layers.Conv2D(8, 2, strides=2)(inp)
    h = keras.layers.LayerNormalization(epsilon=1e-6)(h)
    h = _convnext_block(_convnext_block(h, 8), 8)
    return keras.Model(inp, D(1)(keras.layers.GlobalAveragePooling2D()(h)))


@case("Conv1D causal", XS, Y1)
def _():
    return seq(keras.layers.Conv1D(4, 3, padding="causal", activation="relu"), keras.layers.Flatten(), D(1),
               inp=(5, 4))


def _block(x, heads, dim, pre):
    def attn(h):
        return keras.layers.MultiHeadAttention(heads, dim // heads)(h, h, use_causal_mask=True)

    if pre:
        x = keras.layers.Add()([x, attn(keras.layers.LayerNormalization()(x))])
        f = keras.layers.LayerNormalization()(x)
        return keras.layers.Add()([x, D(dim)(D(2 * dim, activation="relu")(f))])
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attn(x)]))
    return keras.layers.LayerNormalization()(keras.layers.Add()([x, D(dim)(D(2 * dim, activation="relu")(x))]))


def transformer(pre: bool, layers: int = 2, dim: int = 16):
    inp = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(20, dim)(inp)  # Keras's default U(-0.05, 0.05): a small scale
    for _i in range(layers):
        h = _block(h, 2, dim, pre)
    if pre:
        h = keras.layers.LayerNormalization()(h)
    m = keras.Model(inp, D(20)(h))
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


NEXT = np.roll(TOKENS, -1, axis=1)


@case("causal Transformer, pre-LN", TOKENS, NEXT)
def _():
    return transformer(True)


@case("causal Transformer, post-LN", TOKENS, NEXT)
def _():
    return transformer(False)


@case("Embedding mask_zero + GAP", np.where(np.arange(6) < 4, TOKENS, 0).astype("int32"), Y1)
def _():
    return seq(keras.layers.Embedding(20, 4, mask_zero=True), keras.layers.GlobalAveragePooling1D(), D(1),
               inp=(6,), dtype="int32")


@case("stacked LSTM", XS, Y1, sequence=True)
def _():
    return seq(keras.layers.LSTM(6, return_sequences=True), keras.layers.LSTM(4), D(1), inp=(5, 4))


@case("stateful GRU", XS, Y1, sequence=True, train=False)
def _():
    return seq(keras.layers.GRU(4, stateful=True), D(1), inp=(5, 4), batch_size=B)


@case("Bidirectional LSTM", XS, Y1, sequence=True)
def _():
    return seq(keras.layers.Bidirectional(keras.layers.LSTM(3)), D(1), inp=(5, 4))


@case("Masking + GRU", np.where(np.arange(5)[None, :, None] < 3, XS, 0).astype("float32"), Y1, sequence=True)
def _():
    return seq(keras.layers.Masking(0.0), keras.layers.GRU(4), D(1), inp=(5, 4))


@case("SimpleRNN sequence outputs", XS, f32(B, 5, 1), sequence=True, sw=SW)
def _():
    return seq(keras.layers.SimpleRNN(4, return_sequences=True), keras.layers.TimeDistributed(D(1)), inp=(5, 4))


@case("float64 LSTM", XS.astype("float64"), Y1.astype("float64"), sequence=True, rtol=1e-9)
def _():
    return seq(keras.layers.LSTM(4, dtype="float64"), D(1, dtype="float64"), inp=(5, 4), dtype="float64")


@case("MultiHeadAttention(scores)", XS, Y1)
def _():
    inp = keras.Input((5, 4))
    out, _scores = keras.layers.MultiHeadAttention(2, 2)(inp, inp, return_attention_scores=True)
    return keras.Model(inp, D(1)(keras.layers.GlobalAveragePooling1D()(out)))


@case("shared Dense applied twice", X4, Y1)
def _():
    inp = keras.Input((4,))
    d = D(4, activation="tanh", name="shared")
    return keras.Model(inp, D(1)(d(d(inp))))


@case("frozen layer", X4, Y1)
def _():
    m = seq(D(8, activation="relu", name="frozen"), D(1))
    m.get_layer("frozen").trainable = False
    return m


@case("UnitNormalization", X4, Y1)
def _():
    return seq(D(8), keras.layers.UnitNormalization(), D(1))


@case("mixed_bfloat16", X4, Y1, rtol=2e-2)
def _():
    return seq(D(8, activation="relu", dtype="mixed_bfloat16"), D(1, dtype="float32"))


@case("mixed_float16 (loss scale)", X4, Y1, rtol=2e-3)
def _():
    return seq(D(8, activation="relu", dtype="mixed_float16"), D(1, dtype="float32"))


# ----------------------------------------------------------------------------- independent references
def build(name):
    keras.utils.set_random_seed(7)
    c = ZOO[name]
    model = c.build()
    x = tf.nest.map_structure(tf.convert_to_tensor, c.x)
    model(x)  # built, as a learner's model is after its first call
    return model, c


def reference(model, c, *, training=True, wrt_x=False):
    """Loss and gradients from a plain tape: compiled loss, loss_fn, or MSE in the output's dtype."""
    x = tf.nest.map_structure(tf.convert_to_tensor, c.x)
    y = tf.nest.map_structure(tf.convert_to_tensor, c.y)
    sw = None if c.sw is None else tf.constant(c.sw)
    variables = list(model.trainable_variables)
    mixed16 = any(getattr(lay, "dtype_policy", None) is not None and lay.dtype_policy.name == "mixed_float16"
                  for lay in model.layers)
    with tf.GradientTape(watch_accessed_variables=True) as tape:
        if wrt_x:
            tape.watch(x)
        pred = model(x, training=training)
        if getattr(model, "compiled", False):
            loss = model.compute_loss(x=x, y=y, y_pred=pred, sample_weight=sw, training=training)
        elif c.loss_fn is not None:
            loss = c.loss_fn(y, pred, sample_weight=sw) + tf.add_n(model.losses or [tf.constant(0.0)])
        else:
            parts = []
            for t, p in zip(tf.nest.flatten(y), tf.nest.flatten(pred), strict=True):
                dt = tf.float64 if p.dtype == tf.float64 else tf.float32
                per = tf.reduce_mean(tf.square(tf.cast(p, dt) - tf.cast(t, dt)), axis=-1)
                w = per if sw is None else per * tf.reshape(tf.cast(sw, dt), [-1] + [1] * (per.shape.rank - 1))
                parts.append(tf.reduce_sum(w) / tf.cast(tf.size(per), dt))
            loss = tf.add_n(parts)
            if model.losses:
                loss += tf.cast(tf.add_n([tf.reduce_sum(v) for v in model.losses]), loss.dtype)
        scaled = loss * 2.0**15 if mixed16 else loss
    grads = tape.gradient(scaled, variables + ([x] if wrt_x else []))
    if mixed16:
        grads = [None if g is None else tf.cast(tf.convert_to_tensor(g), tf.float32) / 2.0**15 for g in grads]
    numpy = [None if g is None else np.asarray(tf.convert_to_tensor(g), np.float64) for g in grads]
    return float(loss), numpy


def norm(g) -> float:
    return float(np.sqrt(np.sum(g.astype(np.float64) ** 2)))


def close(a, b, rtol):
    return a == pytest.approx(b, rel=rtol, abs=1e-30)


# ----------------------------------------------------------------------------- the tools
@pytest.mark.parametrize("name", list(ZOO))
def test_inspect_and_report_match_an_independent_tape_and_touch_nothing(name):
    model, c = build(name)
    start = everything(model)
    r = gl.inspect_training_step(model, c.x, c.y, c.loss_fn, sample_weight=c.sw)
    assert same(start, everything(model)), "inspect_training_step changed the model"
    assert str(gl.inspect_training_step(model, c.x, c.y, c.loss_fn, sample_weight=c.sw)) == str(r)
    loss, grads = reference(model, c)  # the state the tool found: the same dropout masks, RNN states
    _restore(model, start)
    assert close(r.loss, loss, c.rtol), (r.loss, loss)
    assert len(r.variables) == len(grads)
    for vs, g in zip(r.variables, grads, strict=True):
        if g is None:
            assert vs.grad_norm is None, vs.path
        else:
            assert close(vs.grad_norm, norm(g), max(c.rtol, 1e-5) * 10), (vs.path, vs.grad_norm, norm(g))
    assert close(r.global_norm, math.sqrt(sum(norm(g) ** 2 for g in grads if g is not None)), max(c.rtol, 1e-5) * 10)

    if c.dense:
        rep = gl.gradient_report(model, c.x, c.y, sample_weight=c.sw, loss=c.loss_fn)
        assert same(start, everything(model)), "gradient_report changed the model"
        assert str(gl.gradient_report(model, c.x, c.y, sample_weight=c.sw, loss=c.loss_fn)) == str(rep)
        assert close(rep.loss, loss, c.rtol)
        paths = [gl.core.variable_path(v) for v in model.trainable_variables]
        expected = []
        for layer in gl.reports.gradients.dense_layers(model)[:-1]:
            own = [id(v) for v in gl.reports.gradients.dense_kernel_variables(layer)]
            picked = [g for v, g in zip(model.trainable_variables, grads, strict=True) if id(v) in own]
            expected.append(math.sqrt(sum(norm(g) ** 2 for g in picked)))
        np.testing.assert_allclose(rep.weight_norms, expected, rtol=max(c.rtol, 1e-5) * 10, err_msg=str(paths))
        assert np.all(rep.weight_norms > 0)
    elif not c.sequence:
        try:
            gl.gradient_report(model, c.x, c.y, sample_weight=c.sw, loss=c.loss_fn)
        except ValueError as err:
            assert "inspect_training_step" in str(err) or "Dense" in str(err)
        assert same(start, everything(model))

    if c.sequence:
        t = gl.time_report(model, c.x, c.y, sample_weight=c.sw, loss=c.loss_fn)
        assert same(start, everything(model)), "time_report changed the model"
        tloss, tgrads = reference(model, c, training=False, wrt_x=True)
        _restore(model, start)
        dx = tgrads[-1]
        assert close(t.loss, tloss, c.rtol)
        ref_steps = np.sqrt((dx ** 2).sum(axis=(0, 2)))
        if any(isinstance(layer, keras.layers.Masking) for layer in model.layers):
            ref_steps = ref_steps[np.any(np.asarray(c.x) != 0, axis=(0, 2))]  # padded steps are left out
            assert t.status != "exploding" and np.isfinite(t.ratio)
        np.testing.assert_allclose(t.time_step_norms, ref_steps, rtol=max(c.rtol, 1e-5) * 10)


TRAIN = [n for n, c in ZOO.items() if c.train]


@pytest.mark.parametrize("name", TRAIN)
def test_one_training_step_is_the_plain_sgd_update(name):
    model, c = build(name)
    lr = 0.05
    start = everything(model)
    loss, grads = reference(model, c)
    _restore(model, start)
    before = [v.numpy().astype(np.float64) for v in model.trainable_variables]
    tool = "make_train_step" if TRAIN.index(name) % 2 else "train_steps"
    if tool == "train_steps":
        run = gl.train_steps(model, c.x, c.y, optimizer=keras.optimizers.SGD(lr), steps=1, loss=c.loss_fn,
                             sample_weight=c.sw)
        assert close(run.losses[0], loss, c.rtol)
    else:
        out = gl.make_train_step(model, keras.optimizers.SGD(lr), loss=c.loss_fn)(c.x, c.y, c.sw)
        assert close(float(out["loss"]), loss, c.rtol)
    for v, b, g in zip(model.trainable_variables, before, grads, strict=True):
        want = b if g is None else b - lr * g
        np.testing.assert_allclose(v.numpy().astype(np.float64), want, rtol=max(c.rtol, 1e-5) * 10,
                                   atol=1e-7 if c.rtol < 1e-3 else 1e-3, err_msg=f"{tool} {v.path}")


@pytest.mark.parametrize("name", ["dense tanh/relu", "stacked LSTM", "two outputs compiled (loss weights)"])
def test_bad_sample_weight_and_y_are_value_errors_naming_them(name):
    model, c = build(name)
    start = everything(model)
    with pytest.raises(ValueError, match="sample_weight must hold one weight per example"):
        gl.inspect_training_step(model, c.x, c.y, sample_weight=SW[:3])
    with pytest.raises(ValueError, match="sample_weight holds negative weights"):
        gl.train_steps(model, c.x, c.y, optimizer=keras.optimizers.SGD(), steps=1, sample_weight=-SW)
    if not getattr(model, "compiled", False):
        with pytest.raises(ValueError, match=r"y has shape \(8,\)"):
            gl.make_train_step(model, keras.optimizers.SGD())(c.x, np.zeros(B))
    assert same(start, everything(model))


def test_matrix_covers_what_issue_19_lists():
    names = " ".join(ZOO).lower()
    for needle in ("convnext", "causal transformer", "stacked lstm", "stateful", "float64", "bfloat16", "lora",
                   "two outputs", "weighted", "subclassed", "batchnorm", "mixed_float16", "embedding"):
        assert needle in names, needle
    assert len(ZOO) >= 40


@pytest.mark.parametrize("name", ["BatchNorm + Dropout", "stateful GRU", "two outputs compiled (loss weights)"])
def test_the_untouched_check_sees_a_raw_pass(name):
    """The comparison above can fail: one plain training pass (what the tools run, without their
    restore) moves BatchNorm statistics and the dropout seed, the GRU's states, the loss trackers."""
    model, c = build(name)
    start = everything(model)
    reference(model, c)
    assert not same(start, everything(model))
