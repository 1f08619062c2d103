"""gradlab.core.step: the one training step, its parts, and every tool that once reassembled it (issue 27).

Two kinds of tests: rules read from the source (AST), so that a removed bypass cannot come
back unnoticed; and numbers, each bypass's result against an independent computation or
against the core, so that a tool whose numbers drift from the core's fails.
"""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest

import gradlab as gl
from gradlab import core
from gradlab.engines import mlp as engine_mlp
from gradlab.plots import replicas as replicas_plot

tf = gl._env.quiet_import_tensorflow()
import keras  # noqa: E402

ROOT = pathlib.Path(gl.__file__).parent


def _tree(rel: str) -> ast.Module:
    return ast.parse((ROOT / rel).read_text(encoding="utf-8"))


def _names(tree) -> set[str]:
    """Every identifier used as a name or an attribute (strings and docstrings left out)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def _calls(tree, name: str) -> list[int]:
    """Lines where ``name(...)`` or ``x.name(...)`` is called."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called == name:
                lines.append(node.lineno)
    return lines


def _modules(*packages):
    for package in packages:
        yield from sorted((ROOT / package).glob("*.py"))


# ----------------------------------------------------------------------------- rules read from the source
@pytest.mark.parametrize("path", list(_modules("plots", "widgets")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_plots_and_widgets_hold_no_training_code(path):
    names = _names(ast.parse(path.read_text(encoding="utf-8")))
    forbidden = {n for n in names if n in ("GradientTape", "apply_gradients", "apply", "clip_gradients", "clip_with")
                 or n.startswith("clip_by")}
    assert not forbidden, f"{path.name} uses {sorted(forbidden)}: plots draw and widgets show, the core computes"


def test_only_the_core_builds_a_loss_scale_optimizer():
    outside = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "core":
            continue
        lines = _calls(ast.parse(path.read_text(encoding="utf-8")), "LossScaleOptimizer")
        if lines:
            outside[str(rel)] = lines
    assert not outside, f"LossScaleOptimizer(...) built outside gradlab/core: {outside}"


def test_the_loss_check_is_called_only_inside_the_core():
    pattern = re.compile(r"\b(loss|_loss|self\._loss)\.check\(")
    outside = [f"{path.relative_to(ROOT)}:{i}" for path in ROOT.rglob("*.py") if path.relative_to(ROOT).parts[0] != "core"
               for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not outside, f"Loss.check called outside the core (the core's step runs it): {outside}"


# the tools that once wrote "tape, forward, loss.check, loss" by hand now call the core's step
STEP_TOOLS = ["train/steps.py", "train/fit.py", "reports/diagnostics.py", "reports/gradients.py", "reports/time.py",
              "topics/rnn_theory.py"]


@pytest.mark.parametrize("rel", STEP_TOOLS)
def test_tools_take_no_tape_of_their_own_around_a_model(rel):
    tree = _tree(rel)
    if rel == "topics/rnn_theory.py":  # the cliff's tape differentiates a formula, not a model
        tree = ast.Module([n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == "_cliff_tape")], [])
    assert "GradientTape" not in _names(tree), f"{rel} opens its own GradientTape: call gradlab.core.step"


def test_no_bypass_keywords_remain():
    assert "clipnorm" not in (ROOT / "topics/rnn_theory.py").read_text(encoding="utf-8").replace(
        'renamed_keywords(clipnorm="clip")', "")
    warmup = _tree("train/warmup.py")
    assert not _calls(warmup, "assign"), "warmup restores variables by hand: use core.restore"
    assert "linalg" not in _names(_tree("plots/replicas.py")), "the plot computes norms: clip_placement does"


def _function_lengths(rel: str) -> dict[str, int]:
    out = {}
    for node in ast.walk(_tree(rel)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


MY_FILES = ["core/step.py", "core/clipping.py", "core/loss.py", "core/state.py", "core/update.py", "core/layers.py",
            "core/norms.py", "train/steps.py", "train/fit.py", "train/warmup.py", "train/distribute.py",
            "reports/diagnostics.py", "topics/rnn_theory.py", "topics/tracing.py", "plots/replicas.py",
            "widgets/tracing_lab.py"]


def test_every_function_fits_on_a_screen_or_two():
    long = {k: n for rel in MY_FILES for k, n in _function_lengths(rel).items() if n >= 100}
    assert not long, f"functions of 100 lines or more: {long}"


# ----------------------------------------------------------------------------- the step and its parts
def _dense(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])


def _batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


def test_train_step_is_forward_loss_gradient_clip_and_apply():
    x, y = _batch()
    model, ref = _dense(), _dense()
    t = 0.05
    out = core.train_step(model, keras.optimizers.SGD(0.1), x, y, loss=core.resolve_loss(model), clip=("global_norm", t))
    with tf.GradientTape() as tape:  # independent: a plain tape, tf.clip_by_global_norm, w -= lr * g
        loss = tf.reduce_mean(tf.square(ref(x, training=True) - y))
    grads = tape.gradient(loss, ref.trainable_variables)
    clipped, norm = tf.clip_by_global_norm(grads, t)
    for v, g in zip(ref.trainable_variables, clipped, strict=True):
        v.assign_sub(0.1 * g)
    assert float(out["loss"]) == pytest.approx(float(loss), rel=1e-6)
    assert float(out["global_norm"]) == pytest.approx(float(norm), rel=1e-5)
    for a, b in zip(model.trainable_variables, ref.trainable_variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_loss_and_gradients_scale_and_unscale_with_a_loss_scale_optimizer():
    x, y = _batch()
    model = _dense()
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    value, scaled = core.loss_and_gradients(model, x, y, loss=core.resolve_loss(model), optimizer=lso)
    _v, plain = core.loss_and_gradients(model, x, y, loss=core.resolve_loss(model))
    for a, b in zip(scaled, plain, strict=True):  # a power-of-two scale: exactly the plain gradient
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_compute_loss_runs_the_loss_check():
    x, y = _batch()
    model = _dense()
    with pytest.raises(ValueError, match="would broadcast"):
        core.compute_loss(model, x, y[:, 0], loss=core.resolve_loss(model))
    with pytest.raises(ValueError, match="taps=True needs the tape"):
        core.compute_loss(model, x, y, loss=core.resolve_loss(model), taps=True)


def test_measuring_optimizer_is_what_compile_would_add():
    assert core.measuring_optimizer(_dense()) is None
    sgd = keras.optimizers.SGD()
    assert core.measuring_optimizer(_dense(), sgd) is sgd
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        mixed = _dense()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert isinstance(core.measuring_optimizer(mixed), keras.optimizers.LossScaleOptimizer)
    assert core.measuring_optimizer(mixed).initial_scale == keras.optimizers.LossScaleOptimizer(sgd).initial_scale


def test_check_clip_takes_a_number_or_a_pair():
    assert core.check_clip(2) == ("global_norm", 2.0)
    assert core.check_clip(("norm", 1)) == ("norm", 1.0)
    for bad in (0, -1.0, True, float("nan"), "1.0", ("l2", 1.0)):
        with pytest.raises(ValueError, match="clip must be None or a number > 0"):
            core.check_clip(bad)


# ----------------------------------------------------------------------------- the removed bypasses, in numbers
def test_train_rnn_clips_the_global_norm_like_every_other_tool():
    x, y = gl.topics.rnn_theory.adding_problem(32, 6, seed=2)
    steps, t = 3, 0.05

    model = _rnn
    got = model()
    gl.topics.rnn_theory.train_rnn(got, x, y, train_steps=steps, batch_size=32, learning_rate=0.01, clip=t)

    def independent(clip_each):
        m = model()
        opt = keras.optimizers.Adam(0.01, clipnorm=t) if clip_each else keras.optimizers.Adam(0.01)
        for i in range(steps):  # train_rnn's batches: one seeded permutation per epoch (here: per step)
            order = tf.argsort(tf.random.stateless_uniform([32], [0, 91 + i]))
            xb, yb = tf.gather(x, order), tf.gather(y, order)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(m(xb, training=True) - yb))
            g = tape.gradient(loss, m.trainable_weights)
            if not clip_each:
                g, _n = tf.clip_by_global_norm(g, t)
            opt.apply_gradients(zip(g, m.trainable_weights, strict=True))
        return np.concatenate([w.numpy().ravel() for w in m.trainable_weights])

    mine = np.concatenate([w.numpy().ravel() for w in got.trainable_weights])
    np.testing.assert_allclose(mine, independent(False), rtol=1e-4, atol=1e-6)
    assert not np.allclose(mine, independent(True), rtol=1e-4, atol=1e-6), "train_rnn clips per variable again"


def _rnn():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((6, 2)), keras.layers.SimpleRNN(4), keras.layers.Dense(1)])


def test_warmup_runs_restore_through_the_core():
    runs = gl.train.warmup.TrainingRuns(1, "pre", steps=3, batch_size=2, d_model=8, num_heads=2, ff_dim=8,
                                        vocab_size=8, seq_len=4)
    start = [v.numpy().copy() for v in runs.variables]
    first = runs.run(1e-2)
    assert [np.array_equal(v.numpy(), s) for v, s in zip(runs.variables, start, strict=True)] == [True] * len(start)
    assert all(not np.any(v.numpy()) for v in runs.optimizer.variables)  # a fresh Adam: iterations, slots, lr 0
    runs._cache.clear()
    again = runs.run(1e-2)
    np.testing.assert_array_equal(first.losses, again.losses)


@pytest.mark.parametrize("mode", core.CLIP_MODES)
def test_engine_clipped_norms_are_the_cores(mode):
    rng = np.random.default_rng(1)
    kernels = [tf.constant(rng.normal(size=(5, 5)) * 10.0 ** k, tf.float32) for k in (-2, 0, 1)]
    others = [tf.constant(rng.normal(size=(5,)), tf.float32), tf.constant(rng.normal(size=(5, 1)), tf.float32)]
    t = 0.3
    got = engine_mlp.clipped_kernel_norms(tf.stack(kernels), others, tf.constant(t))[core.CLIP_MODES.index(mode)]
    clipped = gl.clip_gradients([*kernels, *others], (mode, t))
    np.testing.assert_allclose(got.numpy(), [gl.true_norm(g) for g in clipped[:3]], rtol=1e-6)


def test_clip_placement_is_the_cores_clipping_and_the_plot_only_draws():
    rng = np.random.default_rng(0)
    replicas = [[rng.normal(size=(3, 2)), rng.normal(size=2)], [3 * rng.normal(size=(3, 2)), 3 * rng.normal(size=2)]]
    p = gl.train.distribute.clip_placement(replicas, 0.5)
    summed = [a + b for a, b in zip(*replicas, strict=True)]
    after = gl.clip_gradients([tf.constant(g) for g in summed], 0.5)
    np.testing.assert_array_equal(p.after, np.concatenate([g.numpy().ravel() for g in after]))
    before = sum(np.concatenate([g.numpy().ravel() for g in gl.clip_gradients([tf.constant(g) for g in r], 0.5)])
                 for r in replicas)
    np.testing.assert_array_equal(p.before, before)
    fig = replicas_plot.plot_clip_placement(p)
    assert f"{p.ratio:.3g}×" in fig.axes[0].get_title()


def test_tracing_lab_step_lives_in_topics_and_is_one_sgd_step():
    rng = np.random.default_rng(0)
    x, w0 = rng.normal(size=(32, 3)), rng.normal(size=(3, 1))
    y = x @ rng.normal(size=(3, 1))
    step = gl.topics.tracing.sgd_step_function(tf.constant(x), tf.constant(y), tf.constant(w0))
    w1 = w0 - 0.1 * (2.0 / x.shape[0]) * x.T @ (x @ w0 - y)  # d mean((xw - y)^2) / dw by hand
    assert float(step(tf.constant(0.1, tf.float64))) == pytest.approx(float(np.mean((x @ w1 - y) ** 2)), rel=1e-10)
    assert "sgd_step_function" in _names(_tree("widgets/tracing_lab.py"))


# ----------------------------------------------------------------------------- one spelling per concept
RENAMED = [
    (lambda **kw: gl.inspect_training_step(_dense(), *_batch(), **kw), "loss_fn", "loss"),
    (lambda **kw: gl.gradient_report(_dense(), *_batch(), **kw), "loss_fn", "loss"),
    (lambda **kw: gl.time_report(_rnn(), np.zeros((2, 6, 2), "float32"), np.zeros((2, 1), "float32"), **kw),
     "loss_fn", "loss"),
    (lambda **kw: gl.train_steps(_dense(), *_batch(), optimizer=keras.optimizers.SGD(), **kw), "loss_fn", "loss"),
    (lambda **kw: gl.train_steps(_dense(), *_batch(), optimizer=keras.optimizers.SGD(), **kw), "clip_global_norm",
     "clip"),
    (lambda **kw: gl.make_train_step(_dense(), keras.optimizers.SGD(), **kw), "loss_fn", "loss"),
    (lambda **kw: gl.make_train_step(_dense(), keras.optimizers.SGD(), **kw), "clip_global_norm", "clip"),
    (lambda **kw: gl.GradNormSequential([keras.layers.Dense(1)], **kw), "clip_global_norm", "clip"),
    (lambda **kw: gl.topics.rnn_theory.train_rnn(_rnn(), np.zeros((2, 6, 2)), np.zeros((2, 1)), **kw), "clipnorm",
     "clip"),
    (lambda **kw: gl.topics.rnn_theory.descent_path(1.0, 1.0, **kw), "clip_norm", "clip"),
]


@pytest.mark.parametrize("call, old, new", RENAMED, ids=[f"{o}->{n}-{i}" for i, (_c, o, n) in enumerate(RENAMED)])
def test_an_old_keyword_is_a_type_error_naming_the_new_one(call, old, new):
    with pytest.raises(TypeError, match=f"takes {new}= instead of {old}="):
        call(**{old: 1.0})


def test_gl_all_spells_loss_and_clip_one_way():
    import inspect

    for name in set(gl.__all__) - {"explain_none_gradients", "find_nonfinite_source"}:  # a closure, not a loss
        obj = getattr(gl, name)
        fn = obj.__init__ if isinstance(obj, type) else obj
        if not callable(fn):
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        assert not {"loss_fn", "clip_global_norm", "clip_norm", "clipnorm"} & set(params), name


# ----------------------------------------------------------------------------- issue 29: refusal and progress
def test_grad_norm_logger_without_a_probe_refuses_before_training():
    model = _dense()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [v.numpy().copy() for v in model.trainable_variables]
    with pytest.raises(ValueError, match="plain Keras model"):
        model.fit(*_batch(64), epochs=1, batch_size=8, verbose=0, callbacks=[gl.GradNormLogger()])
    for v, b in zip(model.trainable_variables, before, strict=True):  # refused in on_train_begin: no batch ran
        np.testing.assert_array_equal(v.numpy(), b)


def test_train_steps_progress_is_a_deterministic_bar(capsys):
    gl.train_steps(_dense(), *_batch(), optimizer=keras.optimizers.SGD(0.01), steps=3, progress=True)
    out = capsys.readouterr().out
    assert out.endswith("3/3\n") and "training steps" in out
    assert "loss" not in out.split("\r")[-1]
    gl.train_steps(_dense(), *_batch(), optimizer=keras.optimizers.SGD(0.01), steps=3, progress=False)
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="progress must be"):
        gl.train_steps(_dense(), *_batch(), optimizer=keras.optimizers.SGD(0.01), steps=3, progress="yes")


def test_warmup_sweep_shows_run_k_of_n(capsys):
    runs = gl.train.warmup.TrainingRuns(1, "pre", steps=2, batch_size=2, d_model=8, num_heads=2, ff_dim=8,
                                        vocab_size=8, seq_len=4)
    curves = runs.sweep((1e-3, 1e-2), progress=True)
    out = capsys.readouterr().out
    assert list(curves) == [1e-3, 1e-2] and "2/2" in out.split("\r")[-1]
    assert curves[1e-2] is runs.cached(1e-2)
