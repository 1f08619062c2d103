"""The training run of chapter 11: the built-in engine and watch_training against an independent
GradientTape loop (Keras models and optimizers, no gradlab), the report's rules, bad input, tracing,
the model's state put back, and CPU-independent numbers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradlab.engines.training import TrainingEngine
from gradlab.reports.training import GRAD_LOG_EDGES, HIST_BINS, SATURATION
from gradlab.train.watch import watch_training, watch_training_chunks


@pytest.fixture(scope="module")
def engine():
    return TrainingEngine()


# ----------------------------------------------------------------------------- the independent loop
def _keras_optimizer(name, lr):
    return {"sgd": lambda: keras.optimizers.SGD(lr), "momentum": lambda: keras.optimizers.SGD(lr, momentum=0.9),
            "adam": lambda: keras.optimizers.Adam(lr)}[name]()


def _clip(grads, clip):
    if clip is None:
        return grads
    mode, t = clip
    if mode == "value":
        return [tf.clip_by_value(g, -t, t) for g in grads]
    if mode == "norm":
        return [tf.clip_by_norm(g, t) for g in grads]
    return tf.clip_by_global_norm(grads, t)[0]


def _histogram(values, lo, hi):
    v = np.asarray(values, np.float64).ravel()
    v = v[~np.isnan(v)]
    v = np.clip(v, lo, hi)
    counts, _ = np.histogram(v, bins=HIST_BINS, range=(lo, hi))
    return counts


def _reference(weights, x, y, activation, optimizer, lr, clip, steps):
    """A float64 Keras MLP with ``weights``, trained by a plain GradientTape loop; numpy statistics."""
    depth = len(weights) // 2 - 1
    model = keras.Sequential([keras.Input((x.shape[1],), dtype="float64")]
                             + [keras.layers.Dense(64, activation=activation, dtype="float64") for _ in range(depth)]
                             + [keras.layers.Dense(1, dtype="float64")])
    model.set_weights(weights)
    opt = _keras_optimizer(optimizer, lr)
    out = {"loss": [], "grad_norms": [], "update_ratios": [], "dead": [], "act_hist": [], "grad_zeros": []}
    # derivative threshold: 1% of the largest |f'| on a fine grid
    grid = np.linspace(-20, 20, 40001)
    zg = tf.constant(grid)
    with tf.GradientTape() as t:
        t.watch(zg)
        fg = keras.activations.get(activation)(zg)
    thr = SATURATION * np.max(np.abs(t.gradient(fg, zg).numpy()))
    for _ in range(steps):
        before = [v.numpy().copy() for v in model.trainable_variables]
        with tf.GradientTape(persistent=True) as tape:
            h = tf.constant(x)
            zs, hs = [], []
            for layer in model.layers[:-1]:
                z = tf.matmul(h, layer.kernel) + layer.bias
                tape.watch(z)
                zs.append(z)
                h = layer.activation(z)
                hs.append(h)
            pred = model.layers[-1](h)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, model.trainable_variables)
        acts = []
        for z in zs:
            with tf.GradientTape() as t2:
                t2.watch(z)
                a = keras.activations.get(activation)(z)
            acts.append(t2.gradient(a, z).numpy())
        del tape
        g = [gr.numpy() for gr in grads]
        out["loss"].append(float(loss.numpy()))
        out["grad_norms"].append([np.sqrt(np.sum(g[2 * i] ** 2) + np.sum(g[2 * i + 1] ** 2)) for i in range(depth + 1)])
        out["dead"].append([np.mean(np.all(np.abs(d) < thr, axis=0)) for d in acts])
        lo, hi = {"sigmoid": (0, 1), "tanh": (-1, 1), "relu": (0, 4)}[activation]
        out["act_hist"].append([_histogram(hh.numpy(), lo, hi) for hh in hs])
        out["grad_zeros"].append([int(np.sum(g[2 * i] == 0) + np.sum(g[2 * i + 1] == 0)) for i in range(depth + 1)])
        opt.apply_gradients(zip(_clip(grads, clip), model.trainable_variables, strict=True))
        after = [v.numpy() for v in model.trainable_variables]
        out["update_ratios"].append([
            np.sqrt(np.sum((after[2 * i] - before[2 * i]) ** 2) + np.sum((after[2 * i + 1] - before[2 * i + 1]) ** 2))
            / np.sqrt(np.sum(before[2 * i] ** 2) + np.sum(before[2 * i + 1] ** 2)) for i in range(depth + 1)])
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("activation,initializer,optimizer,lr,clip", [
    ("sigmoid", "glorot_uniform", "sgd", 0.1, None),
    ("relu", "he_normal", "momentum", 0.05, ("global_norm", 1.0)),
    ("tanh", "glorot_normal", "adam", 0.01, ("norm", 0.5)),
    ("relu", "he_normal", "adam", 0.05, ("value", 0.01)),
])
def test_builtin_run_matches_an_independent_tape_loop(engine, activation, initializer, optimizer, lr, clip):
    depth, steps = 4, 6
    r = engine.run(depth, activation, initializer, optimizer, lr, clip, steps)
    ref = _reference(engine.initial_weights(depth, initializer), engine.x.numpy(), engine.y.numpy(), activation,
                     optimizer, lr, clip, steps)
    np.testing.assert_allclose(r.loss, ref["loss"], rtol=1e-10)
    np.testing.assert_allclose(r.grad_norms, ref["grad_norms"], rtol=1e-9)
    np.testing.assert_allclose(r.update_ratios, ref["update_ratios"], rtol=1e-7)
    np.testing.assert_allclose(r.dead_fraction[:, :-1], ref["dead"])
    assert np.all(np.isnan(r.dead_fraction[:, -1]))  # the output layer has no activation
    np.testing.assert_array_equal(r.act_hist[:, :-1], ref["act_hist"])
    np.testing.assert_array_equal(r.grad_zeros, ref["grad_zeros"])
    # every gradient element is counted once: in a bin or among the zeros
    sizes = np.array([64 * 64 + 64] * depth + [65])
    np.testing.assert_array_equal(r.grad_hist.sum(axis=2) + r.grad_zeros, np.broadcast_to(sizes, r.grad_zeros.shape))
    assert r.layer_names == ("hidden_1", "hidden_2", "hidden_3", "hidden_4", "output")
    assert r.diverged_at is None and r.steps_taken == steps


def test_builtin_initial_weights_are_build_mlps(engine):
    from gradlab.models.mlp import build_mlp

    model = build_mlp(3, activation="relu", initializer="he_normal")
    for a, b in zip(engine.initial_weights(3, "he_normal"), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b.astype(np.float64))


def test_changing_settings_does_not_retrace(engine):
    engine.run(3, "relu", "he_normal", "sgd", 0.01, None, 3)
    before = engine.tracing_count()
    for kw in [dict(depth=7), dict(initializer="glorot_uniform"), dict(optimizer="adam"), dict(optimizer="momentum"),
               dict(learning_rate=0.2), dict(clip=1.0), dict(clip=("norm", 0.3)), dict(clip=("value", 0.1)),
               dict(steps=11)]:
        settings = dict(depth=3, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.01,
                        clip=None, steps=3)
        settings.update(kw)
        engine.run(**settings)
    assert engine.tracing_count() == before
    engine.run(3, "elu", "he_normal", "sgd", 0.01, None, 3)  # a new activation: one trace
    assert engine.tracing_count() == before + 1


def test_chunks_deliver_the_run_progressively(engine):
    whole = engine.run(5, "tanh", "glorot_uniform", "momentum", 0.05, None, 23)
    parts = list(engine.chunks(5, "tanh", "glorot_uniform", "momentum", 0.05, None, 23, chunk=10))
    assert [p.steps_taken for p in parts] == [10, 20, 23]
    assert [p.partial for p in parts] == [True, True, False]
    assert parts[0].status == "running"
    np.testing.assert_array_equal(parts[-1].loss, whole.loss)
    np.testing.assert_array_equal(parts[-1].update_ratios, whole.update_ratios)
    np.testing.assert_array_equal(parts[1].grad_norms, whole.grad_norms[:20])


def test_a_diverging_run_stops_at_the_first_nonfinite_loss(engine):
    r = engine.run(10, "relu", "he_normal", "sgd", 0.3, None, 100)
    assert r.diverged_at == r.steps_taken < 100
    assert not np.isfinite(r.loss[-1]) and np.all(np.isfinite(r.loss[:-1]))
    parts = list(engine.chunks(10, "relu", "he_normal", "sgd", 0.3, None, 100, chunk=2))
    assert not parts[-1].partial and parts[-1].diverged_at == r.diverged_at


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw,exc,word", [
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=-3), ValueError, "steps"),
    (dict(optimizer="rmsprop"), ValueError, "optimizer"),
    (dict(optimizer=3), TypeError, "optimizer"),
    (dict(learning_rate=0), ValueError, "learning_rate"),
    (dict(learning_rate=-0.1), ValueError, "learning_rate"),
    (dict(clip=("sideways", 1.0)), ValueError, "clip"),
    (dict(depth=0), ValueError, "depth"),
    (dict(activation="swish!"), ValueError, "activation"),
])
def test_builtin_bad_input_names_the_argument(engine, kw, exc, word):
    settings = dict(depth=3, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.01,
                    clip=None, steps=3)
    settings.update(kw)
    with pytest.raises(exc, match=word):
        engine.run(**settings)


def _small_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])


def _batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 6)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


@pytest.mark.parametrize("kw,exc,word", [
    (dict(steps=0), ValueError, "steps"),
    (dict(optimizer="rmsprop"), ValueError, "optimizer"),
    (dict(optimizer=0.1), TypeError, "optimizer"),
    (dict(y=np.zeros((5, 1), "float32")), ValueError, "y"),
])
def test_watch_training_bad_input_names_the_argument(kw, exc, word):
    x, y = _batch()
    args = dict(x=x, y=y, optimizer="sgd", steps=2)
    args.update(kw)
    with pytest.raises(exc, match=word):
        watch_training(_small_model(), args.pop("x"), args.pop("y"), **args)


# ----------------------------------------------------------------------------- the learner's model
def test_watch_training_matches_an_independent_tape_loop():
    x, y = _batch()
    model = _small_model()
    ref_model = _small_model()
    r = watch_training(model, x, y, optimizer=keras.optimizers.SGD(0.05, momentum=0.9), steps=5,
                       clip=("global_norm", 0.5))
    opt = keras.optimizers.SGD(0.05, momentum=0.9)
    losses, norms, ratios, dead = [], [], [], []
    for _ in range(5):
        before = [v.numpy().copy() for v in ref_model.trainable_variables]
        with tf.GradientTape() as tape:
            h1 = ref_model.layers[0](x)
            z2 = tf.matmul(h1, ref_model.layers[1].kernel) + ref_model.layers[1].bias
            pred = ref_model.layers[2](tf.tanh(z2))
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, ref_model.trainable_variables)
        z1 = (x @ ref_model.layers[0].kernel.numpy() + ref_model.layers[0].bias.numpy())
        dead.append([np.mean(np.all(z1 <= 0, axis=0)),
                     np.mean(np.all(1 - np.tanh(z2.numpy().astype(np.float64)) ** 2 < 0.01, axis=0))])
        g = [gr.numpy().astype(np.float64) for gr in grads]
        losses.append(float(loss.numpy()))
        norms.append([np.sqrt(np.sum(g[2 * i] ** 2) + np.sum(g[2 * i + 1] ** 2)) for i in range(3)])
        opt.apply_gradients(zip(tf.clip_by_global_norm(grads, 0.5)[0], ref_model.trainable_variables, strict=True))
        after = [v.numpy().astype(np.float64) for v in ref_model.trainable_variables]
        b64 = [b.astype(np.float64) for b in before]
        ratios.append([np.sqrt(np.sum((after[2 * i] - b64[2 * i]) ** 2) + np.sum((after[2 * i + 1] - b64[2 * i + 1]) ** 2))
                       / np.sqrt(np.sum(b64[2 * i] ** 2) + np.sum(b64[2 * i + 1] ** 2)) for i in range(3)])
    np.testing.assert_allclose(r.loss, losses, rtol=1e-5)
    np.testing.assert_allclose(r.grad_norms, norms, rtol=1e-4)
    np.testing.assert_allclose(r.update_ratios, ratios, rtol=1e-3)
    np.testing.assert_allclose(r.dead_fraction[:, :2], dead)
    assert np.all(np.isnan(r.dead_fraction[:, 2]))
    assert r.layer_names == tuple(layer.name for layer in model.layers)
    assert r.dtype == "float32"
    # the model was put back: its weights are the untrained ones
    for a, b in zip(model.get_weights(), _small_model().get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


class _Counter(keras.layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = tf.Variable(0, trainable=False, dtype=tf.int64)

    def call(self, x):
        self.calls.assign_add(1)
        return x


def test_watch_training_leaves_model_optimizer_and_state_exactly_as_they_were():
    x, y = _batch(64)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dropout(0.3), _Counter(),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(x, y, epochs=1, verbose=0)  # a built, stepped compiled optimizer, moved BN statistics
    counter = model.layers[3]
    state = [v.numpy().copy() for v in model.variables] + [counter.calls.numpy()] + \
        [v.numpy().copy() for v in model.optimizer.variables]
    given = keras.optimizers.SGD(0.01, momentum=0.9)
    r = watch_training(model, x, y, optimizer=given, steps=4)
    names = tuple(layer.name for layer in model.layers if layer.trainable_weights)
    assert r.steps_taken == 4 and r.layer_names == names and len(names) == 3
    after = [v.numpy() for v in model.variables] + [counter.calls.numpy()] + [v.numpy() for v in model.optimizer.variables]
    assert len(after) == len(state)
    for a, b in zip(state, after, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not given.built  # the given optimizer was copied, not used
    # and the run did move things while it ran: a second run gives the same numbers (nothing leaked)
    r2 = watch_training(model, x, y, optimizer=given, steps=4)
    np.testing.assert_array_equal(r.loss, r2.loss)


def test_watch_training_uses_loss_and_sample_weight_like_train_steps():
    from gradlab.train.steps import train_steps

    x, y = _batch()
    sw = np.linspace(0.1, 2.0, len(x)).astype("float32")
    loss = keras.losses.MeanAbsoluteError()
    r = watch_training(_small_model(), x, y, optimizer=keras.optimizers.SGD(0.05), steps=4, loss=loss,
                       sample_weight=sw)
    run = train_steps(_small_model(), x, y, optimizer=keras.optimizers.SGD(0.05), steps=4, loss=loss,
                      sample_weight=sw, progress=False)
    np.testing.assert_allclose(r.loss, run.losses, rtol=1e-6)
    np.testing.assert_allclose(np.sqrt(np.sum(r.grad_norms ** 2, axis=1)), run.global_norms, rtol=1e-5)


def test_watch_training_chunks_and_divergence():
    x, y = _batch()
    parts = list(watch_training_chunks(_small_model(), x, y, optimizer="sgd", steps=7, chunk=3))
    assert [p.steps_taken for p in parts] == [3, 6, 7] and parts[-1].partial is False
    r = watch_training(_small_model(), x * 1e3, y, optimizer=keras.optimizers.SGD(10.0), steps=50)
    assert r.diverged_at is not None and r.status == "diverged"


# ----------------------------------------------------------------------------- the rules
RUNS = {
    "diverged": dict(depth=10, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.3),
    "not-learning": dict(depth=20, activation="sigmoid", initializer="glorot_uniform", optimizer="sgd",
                         learning_rate=0.1),
    "dead-units": dict(depth=10, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.1),
    "saturated": dict(depth=5, activation="sigmoid", initializer="large_normal", optimizer="sgd", learning_rate=0.1),
    "steps-too-large": dict(depth=2, activation="tanh", initializer="small_normal", optimizer="sgd",
                            learning_rate=0.5),
    "stalled": dict(depth=3, activation="relu", initializer="small_normal", optimizer="sgd", learning_rate=0.1),
}
HEALTHY = [
    dict(depth=10, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.03),
    dict(depth=10, activation="relu", initializer="he_normal", optimizer="sgd", learning_rate=0.3, clip=1.0),
    dict(depth=5, activation="tanh", initializer="large_normal", optimizer="sgd", learning_rate=0.1),
]


@pytest.mark.parametrize("kind", list(RUNS))
def test_each_rule_fires_on_its_run(engine, kind):
    r = engine.run(**RUNS[kind], steps=100)
    kinds = [f.kind for f in r.findings()]
    assert kind in kinds, (kind, kinds, r.status_line)
    for other in HEALTHY:
        assert kind not in [f.kind for f in engine.run(**other, steps=100).findings()]


def test_healthy_runs_say_so(engine):
    for settings in HEALTHY:
        r = engine.run(**settings, steps=100)
        assert r.status == "healthy", r.status_line
        assert "1e-3" in r.status_line


def test_a_finite_loss_that_explodes_has_diverged(engine):
    r = engine.run(depth=2, activation="tanh", initializer="glorot_uniform", optimizer="sgd", learning_rate=1.0,
                   steps=100)
    assert r.diverged_at is None and np.isfinite(r.loss[-1]) and r.loss[-1] > 1e100
    assert r.status == "diverged" and "the loss grew from" in r.status_line


def test_status_words(engine):
    r = engine.run(**RUNS["diverged"], steps=100)
    assert r.status_line.startswith(f"diverged at step {r.diverged_at}: the loss became")
    r = engine.run(**RUNS["not-learning"], steps=100)
    assert "the first layer (hidden_1)'s updates are" in r.status_line and "not learning" in r.status_line
    r = engine.run(**RUNS["dead-units"], steps=100)
    assert "units in layer" in r.status_line and "after a large step" in r.status_line


def test_to_dict_rounds_and_maps_nonfinite_to_none(engine):
    r = engine.run(**RUNS["diverged"], steps=100)
    d = r.to_dict()
    assert d["loss"][-1] is None and d["diverged_at"] == r.diverged_at
    assert d["loss"][0] == float(f"{r.loss[0]:.4g}")
    assert len(d["grad_norms"]) == r.steps_taken and len(d["grad_norms"][0]) == 11


def test_grad_histogram_edges_are_fixed():
    assert GRAD_LOG_EDGES[0] == -12 and GRAD_LOG_EDGES[-1] == 4 and len(GRAD_LOG_EDGES) == HIST_BINS + 1


# ----------------------------------------------------------------------------- any CPU
_DIGEST = textwrap.dedent("""
    import hashlib, numpy as np
    from gradlab.engines.training import TrainingEngine
    e = TrainingEngine()
    h = hashlib.sha256()
    for kw in [dict(activation="sigmoid"), dict(activation="relu", initializer="he_normal", learning_rate=0.03),
               dict(activation="tanh", optimizer="adam", learning_rate=0.01, clip=1.0)]:
        r = e.run(depth=8, steps=20, **kw)
        for a in (r.loss, r.grad_norms, r.update_ratios, r.dead_fraction, r.act_hist, r.grad_hist):
            h.update(np.ascontiguousarray(a).tobytes())
    print("DIGEST", h.hexdigest())
""")


def _digest(env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line.startswith("DIGEST")][0]


def test_numbers_do_not_depend_on_the_cpus_instruction_set():
    assert _digest({"ONEDNN_MAX_CPU_ISA": "SSE41"}) == _digest({})

