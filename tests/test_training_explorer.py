"""gl.TrainingExplorer (issue 36): its report against an independent GradientTape loop (the built-in
run and a model the test writes), the view's frames against the loop's histograms, the step slider
without a new run, the run drawn as it comes in, the model left as it was, and bad input."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_training_run import _batch, _reference, _small_model

import gradlab as gl
from gradlab.engines.training import TrainingEngine
from gradlab.plots.training import histogram_layers
from gradlab.plots.view import at_frame


@pytest.fixture(scope="module")
def engine():
    return TrainingEngine()


def _explorer(engine, **kw):
    settings = dict(depth=3, activation="relu", initializer="he_normal", optimizer="momentum", learning_rate=0.05,
                    clip=("global_norm", 1.0), steps=10)
    settings.update(kw)
    return gl.TrainingExplorer(**settings, engine=engine), settings


def _check_against_reference(ex, engine, settings):
    ref = _reference(engine.initial_weights(settings["depth"], settings["initializer"]), engine.x.numpy(),
                     engine.y.numpy(), settings["activation"], settings["optimizer"], settings["learning_rate"],
                     settings["clip"], settings["steps"])
    r = ex.report
    np.testing.assert_allclose(r.loss, ref["loss"], rtol=1e-10)
    np.testing.assert_allclose(r.grad_norms, ref["grad_norms"], rtol=1e-9)
    np.testing.assert_allclose(r.update_ratios, ref["update_ratios"], rtol=1e-7)
    np.testing.assert_allclose(r.dead_fraction[:, :-1], ref["dead"])
    return ref


def test_the_builtin_run_is_an_independent_tape_loops_and_follows_the_controls(engine):
    ex, settings = _explorer(engine)
    _check_against_reference(ex, engine, settings)
    ex.set(optimizer="adam", learning_rate=0.01, clip_mode="norm", clip_norm=0.5)
    _check_against_reference(ex, engine, dict(settings, optimizer="adam", learning_rate=0.01, clip=("norm", 0.5)))
    ex.activation.value = "tanh"
    ex.initializer.value = "glorot_normal"
    _check_against_reference(ex, engine, dict(settings, optimizer="adam", learning_rate=0.01, clip=("norm", 0.5),
                                              activation="tanh", initializer="glorot_normal"))
    # the page's data-report carries the same numbers, and the keywords that rebuild the run
    report = ex.view["report"]
    np.testing.assert_allclose(np.array(report["loss"], dtype=float), ex.report.loss, rtol=1e-15)
    np.testing.assert_allclose(np.array(report["update_ratios"], dtype=float).T, ex.report.update_ratios, rtol=1e-15)
    assert report["run"] == {**ex.run_settings(), "clip": ["norm", 0.5]}  # JSON: a list
    again = gl.TrainingExplorer(**ex.run_settings(), engine=engine)
    np.testing.assert_array_equal(again.report.grad_norms, ex.report.grad_norms)


def test_each_step_of_the_view_shows_that_steps_histograms(engine):
    ex, settings = _explorer(engine, clip=None, optimizer="sgd", learning_rate=0.1)
    ref = _check_against_reference(ex, engine, dict(settings, clip=None, optimizer="sgd", learning_rate=0.1))
    view = ex.view
    assert view["frames"] == {"control": "step", "values": list(range(1, 11))}
    shown = histogram_layers(ex.report)
    assert shown == [0, 1, 2]  # depth 3: every hidden layer
    for step in (1, 4, 10):
        plots = at_frame(view, step)["plots"]
        outputs = plots[4]
        assert str(step) in outputs["title"]
        for series, layer in zip(outputs["series"], shown, strict=True):
            np.testing.assert_array_equal(series["y"], ref["act_hist"][step - 1][layer])
        for p in plots[:4]:  # the curves' cursor is at the step
            assert p["cursor_x"] == step
    assert at_frame(view, 99)["plots"][4]["title"] == at_frame(view, 10)["plots"][4]["title"]  # beyond: the last


def test_moving_the_step_runs_nothing_and_fewer_steps_keep_it_in_the_run(engine, monkeypatch):
    ex, _ = _explorer(engine, steps=20)
    report, traces = ex.report, engine.tracing_count()
    monkeypatch.setattr(ex, "_compute", lambda: pytest.fail("the step needs no new run"))
    ex.step.value = 5
    assert ex.report is report and ex.values["step"] == 5
    png5 = ex.png()
    ex.set(step=20)
    assert ex.report is report and ex.png() != png5  # the picture shows the step's histograms
    monkeypatch.undo()
    ex.steps.value = 10
    assert ex.step.value == 10 and ex.step.max == 10 and ex.report.steps_taken == 10
    assert engine.tracing_count() == traces  # no new trace for new settings of the same activation


def test_a_change_from_the_page_draws_the_run_as_it_comes_in(engine):
    ex, _ = _explorer(engine, steps=60, clip=None)
    views = []
    ex.observe(lambda change: views.append(change["new"]), names="view")

    async def run():
        ex.set_state({"values": {**ex.values, "depth": 4}})
        assert not views  # the handler returned at once
        for _ in range(200):
            await asyncio.sleep(0.01)
            if views and views[-1]["report"]["status"] != "running":
                break

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()
    steps = [v["report"]["steps_taken"] for v in views]
    assert steps == [25, 50, 60], steps  # CHUNK = 25 steps per view
    assert [v["report"]["status"] for v in views][:2] == ["running", "running"]
    whole = gl.TrainingExplorer(depth=4, activation="relu", initializer="he_normal", optimizer="momentum",
                                learning_rate=0.05, steps=60, engine=engine)
    np.testing.assert_array_equal(ex.report.loss, whole.report.loss)
    assert ex.report.status == whole.report.status and not ex.report.partial


def test_the_chapters_divergence_and_what_clipping_does(engine):
    ex = gl.TrainingExplorer(depth=10, activation="relu", initializer="he_normal", optimizer="sgd",
                             learning_rate=0.3, steps=100, engine=engine)
    assert ex.report.diverged_at == 5 and ex.report.status == "diverged"
    assert "diverged at step 5" in ex.status_text
    assert ex.view["status"]["color"] == gl.plots.view.STATUS_COLORS["non-finite"]
    ex.set(clip_mode="global_norm", clip_norm=1.0)
    assert ex.report.diverged_at is None and ex.report.steps_taken == 100
    total = np.sqrt(np.sum(ex.report.grad_norms ** 2, axis=1))
    assert np.sum(total > 1.0) > 90  # the clip is on at nearly every step (chapter 11 says so)


def _plain_loop(model, x, y, lr, steps):
    """Loss and per-layer gradient norms of SGD(lr) by hand (no gradlab)."""
    opt = keras.optimizers.SGD(lr)
    losses, norms = [], []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        g = [gr.numpy().astype(np.float64) for gr in grads]
        losses.append(float(loss))
        norms.append([np.sqrt(np.sum(g[2 * i] ** 2) + np.sum(g[2 * i + 1] ** 2)) for i in range(len(g) // 2)])
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return np.array(losses), np.array(norms)


def test_on_a_learners_model_it_trains_a_copy_and_leaves_everything_as_it_was():
    x, y = _batch()
    model = _small_model()
    opt = keras.optimizers.SGD(0.05)
    weights = [w.copy() for w in model.get_weights()]
    ex = gl.TrainingExplorer(model, x, y, optimizer=opt, steps=6)
    assert ex.control_names == ("learning_rate", "clip_mode", "clip_norm", "steps", "step")
    loss, norms = _plain_loop(_small_model(), x, y, 0.05, 6)
    np.testing.assert_allclose(ex.report.loss, loss, rtol=1e-5)
    np.testing.assert_allclose(ex.report.grad_norms, norms, rtol=1e-4)
    ex.learning_rate.value = 0.2  # the copy's learning rate; the optimizer given keeps its own
    loss, _ = _plain_loop(_small_model(), x, y, 0.2, 6)
    np.testing.assert_allclose(ex.report.loss, loss, rtol=1e-5)
    assert float(opt.learning_rate) == pytest.approx(0.05) and opt.iterations.numpy() == 0
    for a, b in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(a, b)
    assert "sequential" in ex.status_text and "SGD 0.2" in ex.status_text
    # Keras reads SGD(0.1)'s rate back in float32: the slider starts on its own 0.1, once
    adam = gl.TrainingExplorer(model, x, y, optimizer="adam", steps=2)
    assert adam.learning_rate.value == 0.001 and [v for _l, v in adam.learning_rate.options].count(0.001) == 1


@pytest.mark.parametrize("kw,exc,word", [
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=500), ValueError, "steps"),
    (dict(optimizer="rmsprop"), ValueError, "optimizer"),
    (dict(optimizer=0.1), TypeError, "optimizer"),
    (dict(learning_rate=0), ValueError, "learning_rate"),
    (dict(learning_rate=-0.1), ValueError, "learning_rate"),
    (dict(depth=0), ValueError, "depth"),
    (dict(depth=51), ValueError, "depth"),
    (dict(activation="swishy"), ValueError, "activation"),
    (dict(clip=("sideways", 1.0)), ValueError, "clip"),
    (dict(x=np.zeros((4, 8))), ValueError, "model"),
])
def test_bad_input_names_the_argument(engine, kw, exc, word):
    with pytest.raises(exc, match=word):
        gl.TrainingExplorer(**kw, engine=engine)


def test_bad_input_on_a_model_names_the_argument():
    x, y = _batch()
    with pytest.raises(ValueError, match="y"):
        gl.TrainingExplorer(_small_model(), x, y[:5], optimizer="sgd", steps=2)
    with pytest.raises(TypeError, match="depth=20"):
        gl.TrainingExplorer(20)
    with pytest.raises(ValueError, match="batch"):
        gl.TrainingExplorer(_small_model(), x, optimizer="sgd", steps=2)
    with pytest.raises(ValueError, match="learning_rate"):
        gl.TrainingExplorer(_small_model(), x, y, optimizer="sgd", steps=2, learning_rate=float("nan"))
    with pytest.raises(ValueError, match="learning_rate"):
        gl.TrainingExplorer(_small_model(), x, y, optimizer=keras.optimizers.SGD(-1.0), steps=2)
    with pytest.raises(ValueError, match="depth"):
        gl.TrainingExplorer(_small_model(), x, y, optimizer="sgd", steps=2, depth=5)
    with pytest.raises(ValueError, match="clip_mode"):
        gl.TrainingExplorer(_small_model(), x, y, optimizer="sgd", steps=2).clip_mode.value = "sideways"
