"""The core, mechanism by mechanism, against an independent computation (issue 19).

Each mechanism of ``gradlab.core`` (inputs, loss, sample weights, norms, clipping, the update,
save/restore) is checked against a plain ``GradientTape`` with NumPy in float64, against
Keras's own ``compute_loss``/``fit``, or against a closed form; each bad argument against its
``ValueError``; and save/restore against a model whose state really moves.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradlab import core

RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 3))
Y = RNG.normal(size=(6, 2))
SW = np.array([1.0, 2.0, 0.0, 0.5, 3.0, 1.0])


def dense(dtype=None, seed=0, **kw):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,), dtype=dtype), keras.layers.Dense(4, activation="tanh", dtype=dtype, **kw),
                             keras.layers.Dense(2, dtype=dtype)])


# ----------------------------------------------------------------------------- inputs
def test_coerce_batch_converts_as_fit_does_and_keeps_float64_models():
    x, y = core.coerce_batch(dense(), X, Y)
    assert x.dtype == tf.float32 and y.dtype == tf.float32
    x, y = core.coerce_batch(dense("float64"), X, Y)
    assert x.dtype == tf.float64 and y.dtype == tf.float64
    np.testing.assert_array_equal(y.numpy(), Y)  # not rounded through float32


@pytest.mark.parametrize("x,y,match", [
    (X, None, "y is None"),
    (X[:, :2], Y, r"x has shape \(6, 2\), but the model expects \(batch, 3\)"),
    (X, Y[:4], "x and y must hold the same number of examples"),
    (X[:0], Y[:0], "empty batch"),
    (3.0, Y, "x must have a batch axis"),
    ([[1.0, 2.0], [3.0]], Y, "ragged"),
    (tf.data.Dataset.from_tensor_slices((X, Y)).batch(2), Y, "tf.data.Dataset"),
    ((r for r in X), Y, "generator"),
])
def test_coerce_batch_bad_arguments_name_the_argument(x, y, match):
    with pytest.raises(ValueError, match=match):
        core.coerce_batch(dense(), x, y)


@pytest.mark.parametrize("sw,match", [
    ([1.0, 2.0], r"sample_weight must hold one weight per example: y has 6 examples"),
    (np.full(6, -1.0), "negative weights"),
    (np.array([1, np.nan, 1, 1, 1, 1.0]), "NaN/inf"),
    (2.0, "one weight per example"),
    ({"a": np.ones(6)}, "y must be a dict"),
])
def test_sample_weight_bad_arguments(sw, match):
    _x, y = core.coerce_batch(dense(), X, Y)
    with pytest.raises(ValueError, match=match):
        core.coerce_sample_weight(sw, y)


def test_data_problems_are_about_the_data():
    bad = X.copy()
    bad[1, 2] = np.nan
    x, y = core.coerce_batch(dense(), bad, Y)
    assert core.data_problems(x, y) == ["x holds 1 NaN/inf value (in 1 of 6 examples)"]


# ----------------------------------------------------------------------------- sparse and ragged inputs
def _sparse_model(seed=0):
    keras.utils.set_random_seed(seed)
    inp = keras.Input((20,), sparse=True)
    h = keras.layers.Dense(16, activation="tanh")(inp)
    h = keras.layers.Dense(16, activation="tanh")(h)
    return keras.Model(inp, keras.layers.Dense(1)(h))


def _sparse_batch():
    rng = np.random.default_rng(3)
    x = np.zeros((8, 20), np.float32)
    for i in range(8):
        x[i, rng.choice(20, 3, replace=False)] = rng.normal(size=3)
    return tf.sparse.from_dense(x), rng.normal(size=(8, 1)).astype(np.float32)


class _RaggedBag(keras.Model):
    """Token ids of different lengths (a tf.RaggedTensor) -> Embedding -> mean over each row -> Dense."""

    def __init__(self):
        super().__init__(name="ragged_bag")
        self.emb = keras.layers.Embedding(30, 8)
        self.hidden = keras.layers.Dense(16, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(tf.reduce_mean(self.emb(x), axis=1)))


def _ragged_model(seed=0):
    keras.utils.set_random_seed(seed)
    return _RaggedBag()


RAGGED = tf.ragged.constant([[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [1, 1], [2], [3, 4], [5, 6, 7]], dtype=tf.int32)
RAGGED_Y = np.linspace(-1, 1, 8, dtype=np.float32)[:, None]


def _tape_norms(model, x, y):
    """The mean-squared-error loss and its gradients from a plain GradientTape, norms in float64."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    return float(loss), [float(np.linalg.norm(tf.convert_to_tensor(g).numpy().astype(np.float64))) for g in grads]


@pytest.mark.parametrize("make,batch", [(_sparse_model, _sparse_batch), (_ragged_model, lambda: (RAGGED, RAGGED_Y))])
def test_sparse_and_ragged_inputs_pass_through_as_keras_runs_them(make, batch):
    import gradlab as gl

    x, y = batch()
    model = make()
    xs, _ys = core.coerce_batch(model, x, y)
    assert type(xs) is type(x) and core.example_count(xs) == 8
    loss, norms = _tape_norms(model, x, y)
    report = gl.inspect_training_step(model, x, y)
    assert report.loss == pytest.approx(loss, rel=1e-6)
    assert report.global_norm == pytest.approx(float(np.sqrt(np.sum(np.square(norms)))), rel=1e-5)
    run = gl.train_steps(model, x, y, steps=3, optimizer=keras.optimizers.SGD(0.1))
    twin = make()  # the same three SGD steps by hand
    twin(x)
    by_hand = []
    for _step in range(3):
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(tf.square(twin(x, training=True) - y))
        grads = tape.gradient(value, twin.trainable_variables)
        for v, g in zip(twin.trainable_variables, grads, strict=True):
            v.assign_sub(0.1 * tf.convert_to_tensor(g))
        by_hand.append(float(value))
    np.testing.assert_allclose(run.losses, by_hand, rtol=1e-5)


def test_gradient_report_on_a_sparse_input_matches_the_tape():
    import gradlab as gl

    x, y = _sparse_batch()
    model = _sparse_model()
    _loss, norms = _tape_norms(model, x, y)
    kernels = [i for i, v in enumerate(model.trainable_variables) if v.path.endswith("kernel")]
    report = gl.gradient_report(model, x, y)
    np.testing.assert_allclose(report.weight_norms, [norms[i] for i in kernels[:2]], rtol=1e-5)


@pytest.mark.parametrize("x,match", [
    (object(), r"got builtins\.object, which TensorFlow cannot convert"),
    ([[1.0, 2.0, 3.0], [3.0]], r"rows have different lengths.*tf\.ragged\.constant\(x\)"),
    (tf.sparse.from_dense(X), r"x is a tf\.SparseTensor, but the model's input is not sparse.*sparse=True"),
    (tf.ragged.constant([[1.0, 2.0, 3.0], [3.0]]), r"x is a tf\.RaggedTensor, but the model's input is not ragged"),
    (tf.sparse.from_dense(tf.constant([["a", "b", "c"]])), "x must hold numbers; got a SparseTensor of dtype string"),
])
def test_inputs_that_cannot_be_accepted_name_their_type(x, match):
    with pytest.raises(ValueError, match=match):
        core.coerce_batch(dense(), x, Y[:2])


def test_data_problems_in_sparse_and_ragged_values():
    sparse = tf.SparseTensor([[0, 1], [0, 4], [3, 2]], [np.nan, 1.0, np.inf], [5, 6])
    ragged = tf.ragged.constant([[[1.0], [np.nan]], [[2.0]], [[np.inf], [np.nan], [3.0]]], ragged_rank=1)
    assert core.data_problems(sparse) == ["x holds 2 NaN/inf values (in 2 of 5 examples)"]
    assert core.data_problems(ragged) == ["x holds 3 NaN/inf values (in 2 of 3 examples)"]


# ----------------------------------------------------------------------------- the loss
def _numpy_mse(model, x, y, sw=None):
    pred = model(tf.constant(x, model.compute_dtype)).numpy().astype(np.float64)
    per = np.mean((pred - y) ** 2, axis=-1)
    return float(np.sum(per * (1 if sw is None else sw)) / per.size)


def test_default_loss_is_numpy_mse_with_keras_sample_weighting():
    model = dense()
    x, y = core.coerce_batch(model, X, Y)
    loss = core.resolve_loss(model)
    assert loss.kind == "mse"
    assert float(loss(x, y, model(x))) == pytest.approx(_numpy_mse(model, X, Y), rel=1e-6)
    sw = core.coerce_sample_weight(SW, y)
    got = float(loss(x, y, model(x), True, sw))
    assert got == pytest.approx(_numpy_mse(model, X, Y, SW), rel=1e-6)
    # ... which is what Keras's own MeanSquaredError does with a sample_weight
    assert got == pytest.approx(float(keras.losses.MeanSquaredError()(y, model(x), sample_weight=SW)), rel=1e-6)


def test_default_loss_keeps_a_float64_model_in_float64():
    """Issue 19: a float64 model's loss read 0 after a cast to float32; it is 1e-18."""
    model = dense("float64")
    x = tf.constant(X)
    y = model(x).numpy() + 1e-9  # a difference float32 cannot hold next to values of order 1
    xs, ys = core.coerce_batch(model, X, y)
    value = core.resolve_loss(model)(xs, ys, model(xs))
    assert value.dtype == tf.float64
    assert float(value) == pytest.approx(1e-18, rel=1e-3)
    with tf.GradientTape() as tape:
        ref = tf.reduce_mean(tf.square(model(x) - y))
    g = tape.gradient(ref, model.trainable_variables)
    with tf.GradientTape() as tape:
        got = core.resolve_loss(model)(xs, ys, model(xs))
    mine = tape.gradient(got, model.trainable_variables)
    assert core.true_global_norm(mine) == pytest.approx(
        float(np.sqrt(sum(np.sum(np.asarray(t, np.float64) ** 2) for t in g))), rel=1e-6)
    assert core.true_global_norm(mine) > 1e-10


def test_compiled_loss_with_sample_weight_is_what_fit_reports():
    model = dense()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    x, y = core.coerce_batch(model, X, Y)
    sw = core.coerce_sample_weight(SW, y)
    got = float(core.resolve_loss(model)(x, y, model(x), True, sw))
    hist = model.fit(X, Y, sample_weight=SW, batch_size=6, epochs=1, verbose=0, shuffle=False)
    assert got == pytest.approx(hist.history["loss"][0], rel=1e-6)
    assert got == pytest.approx(_numpy_mse(model, X, Y, SW), rel=1e-5)


def test_loss_adds_model_losses():
    model = dense(kernel_regularizer=keras.regularizers.L2(0.1))
    x, y = core.coerce_batch(model, X, Y)
    l2 = 0.1 * float(np.sum(np.asarray(model.layers[0].kernel, np.float64) ** 2))
    model(x)
    assert float(core.resolve_loss(model)(x, y, model(x))) == pytest.approx(_numpy_mse(model, X, Y) + l2, rel=1e-5)


def test_loss_fn_and_sample_weight():
    model = dense()
    x, y = core.coerce_batch(model, X, Y)
    sw = core.coerce_sample_weight(SW, y)
    keras_loss = core.resolve_loss(model, keras.losses.MeanAbsoluteError())
    pred = model(x)
    ref = np.sum(np.mean(np.abs(pred.numpy().astype(np.float64) - Y), axis=-1) * SW) / 6
    assert float(keras_loss(x, y, pred, True, sw)) == pytest.approx(ref, rel=1e-5)
    per_example = core.resolve_loss(model, lambda t, p: tf.reduce_mean(tf.abs(t - p), axis=-1))
    assert float(per_example(x, y, pred, True, sw)) == pytest.approx(ref, rel=1e-5)
    scalar = core.resolve_loss(model, lambda t, p: tf.reduce_mean(tf.abs(t - p)))
    with pytest.raises(ValueError, match="sample_weight needs per-example losses"):
        scalar.check(y, pred, sw)


def test_default_loss_refuses_a_broadcasting_y():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    x, y = core.coerce_batch(model, X, Y[:, 0])
    with pytest.raises(ValueError, match=r"y has shape \(6,\) but the model's output has shape \(6, 1\)"):
        core.resolve_loss(model).check(y, model(x))


# ----------------------------------------------------------------------------- norms
def test_true_norms_against_numpy_float64():
    tiny = np.full((64, 64), 1e-30, np.float32)
    assert float(tf.norm(tiny)) == 0.0  # float32 squares flush to zero
    assert core.true_norm(tiny) == pytest.approx(np.linalg.norm(tiny.astype(np.float64)), rel=1e-6)
    grads = [tf.constant(tiny), None, tf.constant([3.0, 4.0])]
    assert core.true_global_norm(grads) == pytest.approx(np.sqrt(64 * 64 * 1e-60 + 25.0))
    sl = tf.IndexedSlices(tf.constant([[3.0, 4.0], [3.0, 4.0]]), tf.constant([0, 0]), tf.constant([3, 2]))
    assert core.true_norm(sl) == pytest.approx(10.0)  # duplicate rows summed first, as the dense gradient
    stack = RNG.normal(size=(5, 3, 4))
    np.testing.assert_allclose(core.axis_norms64(stack, axis=0).numpy(),
                               np.sqrt((stack ** 2).sum(axis=(1, 2))), rtol=1e-12)
    with pytest.raises(ValueError, match="t is None"):
        core.true_norm(None)
    with pytest.raises(ValueError, match="grads must be a list"):
        core.true_global_norm(tf.ones(3))


def test_step_norms_with_a_mask():
    g = RNG.normal(size=(4, 5, 3))
    mask = np.ones((4, 5), bool)
    mask[:2, 3:] = False
    np.testing.assert_allclose(core.step_norms(g), np.sqrt((g ** 2).sum(axis=(0, 2))), rtol=1e-12)
    per = (g ** 2).sum(axis=2) * mask
    expected = np.sqrt(per.sum(axis=0) * 4 / mask.sum(axis=0))
    np.testing.assert_allclose(core.step_norms(g, mask), expected, rtol=1e-12)


# ----------------------------------------------------------------------------- clipping
def test_clipping_equals_tensorflow_and_numpy():
    a, b = tf.constant([[3.0, -4.0]]), tf.constant([12.0])
    got = core.clip_gradients([a, None, b], ("global_norm", 6.5))
    ref, _ = tf.clip_by_global_norm([a, b], 6.5)
    np.testing.assert_allclose(got[0].numpy(), ref[0].numpy(), rtol=1e-6)
    assert got[1] is None
    np.testing.assert_allclose(got[2].numpy(), np.array([12.0]) * 6.5 / 13.0, rtol=1e-6)
    np.testing.assert_allclose(core.clip_gradients([a], ("norm", 1.0))[0].numpy(), [[0.6, -0.8]], rtol=1e-6)
    np.testing.assert_array_equal(core.clip_gradients([a], ("value", 3.5))[0].numpy(), [[3.0, -3.5]])
    sl = tf.IndexedSlices(tf.constant([[2.0], [2.0]]), tf.constant([1, 1]), tf.constant([3, 1]))
    clipped = tf.convert_to_tensor(core.clip_gradients([sl], ("value", 3.0))[0]).numpy()
    assert clipped.max() == 3.0  # the dense gradient (4 in row 1) is clipped, not each duplicate


@pytest.mark.parametrize("clip", [("max", 1.0), ("norm", 0), ("norm", float("inf")), ("norm", True), "norm"])
def test_bad_clip_is_a_value_error(clip):
    with pytest.raises(ValueError, match="clip must be None or"):
        core.clip_gradients([tf.ones(2)], clip)


# ----------------------------------------------------------------------------- the update
def test_apply_update_is_one_sgd_step_and_skips_non_finite_steps():
    model = dense()
    variables = model.trainable_variables
    before = [v.numpy().astype(np.float64) for v in variables]
    grads = [tf.ones_like(v) for v in variables]
    opt = keras.optimizers.SGD(0.1)
    opt.build(variables)
    out = core.apply_update(opt, grads, variables, clip=("global_norm", 1.0))
    n = np.sqrt(sum(v.size for v in before))
    assert float(out["global_norm"]) == pytest.approx(n)
    for v, b in zip(variables, before, strict=True):
        np.testing.assert_allclose(v.numpy(), b - 0.1 / n, rtol=1e-5)
    mid = [v.numpy() for v in variables]
    bad = [g * np.nan for g in grads]
    out = core.apply_update(opt, bad, variables)
    assert not bool(out["applied"]) and not bool(out["finite"])
    for v, m in zip(variables, mid, strict=True):
        np.testing.assert_array_equal(v.numpy(), m)


def test_check_optimizer_refuses_another_models_optimizer():
    a, b = dense(seed=1), dense(seed=2)
    opt = keras.optimizers.SGD()
    opt.build(a.trainable_variables)
    with pytest.raises(ValueError, match="optimizer was already built for other variables"):
        core.check_optimizer(opt, b.trainable_variables)


# ----------------------------------------------------------------------------- save / restore
def _stateful_model():
    """BatchNorm, Dropout, a stateful GRU, two compiled outputs (loss trackers) and Adam state."""
    keras.utils.set_random_seed(3)
    inp = keras.Input((5, 3), batch_size=6)
    h = keras.layers.GRU(4, stateful=True, name="gru")(inp)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.Dropout(0.3, name="drop")(h)
    model = keras.Model(inp, [keras.layers.Dense(1, name="a")(h), keras.layers.Dense(1, name="b")(h)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=["mse", "mse"])
    return model


def _everything(model):
    """Every value a step can touch, found without gradlab: weights, GRU states, trackers, Adam."""
    gru = model.get_layer("gru")
    values = [v.numpy() for v in model.variables] + [v.numpy() for v in gru.states]
    values += [v.numpy() for v in model.metrics_variables]
    values += [v.numpy() for v in model.optimizer.variables]
    return values


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(u, v, equal_nan=True) for u, v in zip(a, b, strict=True))


def test_snapshot_restore_puts_back_everything_a_step_touches():
    model = _stateful_model()
    x = RNG.normal(size=(6, 5, 3)).astype("float32")
    y = [RNG.normal(size=(6, 1)).astype("float32")] * 2
    model.fit(x, y, batch_size=6, epochs=1, verbose=0)  # builds trackers and Adam slots, moves states
    start = _everything(model)
    saved = core.snapshot(model)
    model.train_on_batch(x, y)  # moves weights, BN statistics, the dropout seed, GRU states, trackers, Adam
    moved = _everything(model)
    assert not _same(start, moved)  # the comparison can see a change
    changed = sum(not np.array_equal(a, b) for a, b in zip(start, moved, strict=True))
    assert changed >= 10
    core.restore(saved)
    assert _same(start, _everything(model))


def test_restore_resets_trackers_the_tool_created():
    keras.utils.set_random_seed(4)
    inp = keras.Input((3,))
    model = keras.Model(inp, [keras.layers.Dense(1)(inp), keras.layers.Dense(1)(inp)])
    model.compile(optimizer="sgd", loss=["mse", "mse"])
    saved = core.snapshot(model)
    x = tf.constant(X, tf.float32)
    model.compute_loss(x, [tf.ones((6, 1))] * 2, model(x))  # builds and fills per-output trackers
    assert any(float(v.numpy()) != 0 for v in model.metrics_variables)
    core.restore(saved)
    assert all(float(v.numpy()) == 0 for v in model.metrics_variables)


def test_stateful_rnn_layers_are_found_inside_bidirectional():
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((4, 2), batch_size=3),
                              keras.layers.Bidirectional(keras.layers.LSTM(3, stateful=True)),
                              keras.layers.Dense(1)])
    assert len(core.stateful_rnn_layers(model)) == 2
    model(tf.ones((3, 4, 2)))
    before = [v.numpy() for layer in core.stateful_rnn_layers(model) for v in layer.states]
    saved = core.snapshot(model)
    model(tf.ones((3, 4, 2)) * 2)
    assert not _same(before, [v.numpy() for layer in core.stateful_rnn_layers(model) for v in layer.states])
    core.restore(saved)
    assert _same(before, [v.numpy() for layer in core.stateful_rnn_layers(model) for v in layer.states])


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("graph", [False, True])
def test_the_default_loss_leaves_out_masked_steps_as_compile_mse_does(weighted, graph):
    """A per-step output that carries a mask (Masking, mask_zero=True): Keras's MeanSquaredError
    weighs the valid steps by total/valid and the padded ones by 0; so does the default loss."""
    rng = np.random.default_rng(3)
    lengths = np.array([5, 3, 2, 4])
    x = np.where(np.arange(5)[None, :, None] < lengths[:, None, None], rng.normal(size=(4, 5, 4)), 0)
    x, y = x.astype("float32"), rng.normal(size=(4, 5, 1)).astype("float32")
    sw = np.array([1.0, 2.0, 0.0, 0.5], "float32") if weighted else None
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((5, 4)), keras.layers.Masking(0.0),
                              keras.layers.GRU(3, return_sequences=True), keras.layers.Dense(1)])
    model(x)
    default = core.resolve_loss(model)
    assert default.kind == "mse"

    def both(x, y, sw):
        pred = model(x, training=False)
        return default(x, y, pred, False, sample_weight=sw), pred

    got, pred = (tf.function(both) if graph else both)(tf.constant(x), tf.constant(y), sw)
    valid = np.arange(5)[None, :] < lengths[:, None]  # computed here, not read from Keras
    se = np.mean((np.asarray(pred) - y) ** 2, axis=-1)
    w = np.ones(4) if sw is None else sw
    want = np.sum(se * valid * w[:, None]) / valid.sum()
    assert float(got) == pytest.approx(want, rel=1e-6)
    if not graph and not weighted:  # Keras itself: its compute_loss fails on a (batch,) weight with a mask
        model.compile(optimizer="sgd", loss="mse")
        assert float(got) == pytest.approx(float(model.compute_loss(x=x, y=y, y_pred=pred)), rel=1e-6)
