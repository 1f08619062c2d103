"""The TransformerExplorer driven from Python: per-block norms against a tape, no retrace, the runs."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab  # noqa: F401
from gradlab.engines.transformer import TransformerGradientEngine
from gradlab.widgets.transformer_explorer import TransformerExplorer

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402


@pytest.fixture(scope="module")
def engine():
    return TransformerGradientEngine(max_layers=4, d_model=16, num_heads=2, vocab_size=11, seq_len=8)


@pytest.fixture(scope="module")
def ex(engine):
    return TransformerExplorer(num_layers=3, engine=engine, steps=20, warmup_steps=10, batch_size=4)


def tape_norms(model, data):
    """Independent reference: a plain tape on ex.model with its compiled loss, NumPy float64 norms."""
    x, y = data
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=False))
    grads = tape.gradient(loss, model.trainable_variables)
    sums: dict[int, float] = {}
    for v, g in zip(model.trainable_variables, grads, strict=True):
        if v.path.startswith("block_"):
            i = int(v.path.split("/")[0][len("block_"):])
            sums[i] = sums.get(i, 0.0) + float(np.sum(np.asarray(g, np.float64) ** 2))
    return np.sqrt([sums[i] for i in range(len(sums))])


@pytest.mark.parametrize("position", ["pre", "post"])
def test_block_norms_equal_an_independent_tape(ex, position):
    ex.set(norm_position=position, num_layers=3)
    norms = ex.report.layer_grad_norms
    assert norms.dtype == np.float64 and norms.shape == (3,)
    assert isinstance(ex.model.loss, keras.losses.SparseCategoricalCrossentropy) and ex.model.loss.from_logits
    np.testing.assert_allclose(norms, tape_norms(ex.model, ex.data), rtol=1e-3)
    # the view the page draws shows them, and so does its data-report
    np.testing.assert_allclose(ex.view["plots"][0]["series"][0]["y"], norms)
    np.testing.assert_allclose(ex.view["report"]["layer_grad_norms"], norms)


def test_norm_position_changes_the_norms(ex):
    ex.set(norm_position="pre", num_layers=3)
    pre = ex.report.layer_grad_norms.copy()
    ex.norm_position.value = "post"
    assert not np.allclose(ex.report.layer_grad_norms, pre, rtol=1e-2)
    assert "post-LN" in ex.status_text


def test_no_retrace_per_change(ex):
    ex.set(num_layers=2, norm_position="pre")          # warm-up
    before = ex.tracing_count()
    for depth, position in ((1, "post"), (4, "pre"), (3, "post"), (2, "pre"), (4, "post")):
        ex.set(num_layers=depth, norm_position=position)
    ex.learning_rate.value = 0.01
    ex.warmup_steps.value = 0
    assert ex.tracing_count() - before == 0


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_layers=0), "num_layers"), (dict(num_layers=5), "num_layers"),
    (dict(norm_position="middle"), "norm_position"), (dict(learning_rate=1.0), "learning_rate"),
    (dict(learning_rate=-1e-3), "learning_rate"), (dict(warmup_steps=15), "warmup_steps"),
    (dict(clip=("global_norm", -1)), "clip"), (dict(engine="fast"), "engine"), (dict(steps=3), "steps"),
])
def test_bad_arguments(engine, kwargs, name):
    with pytest.raises(ValueError, match=name):
        TransformerExplorer(**{"engine": engine, "num_layers": 2, "steps": 20, "warmup_steps": 0, **kwargs})


def test_first_steps_run_once_per_setting(engine):
    lab = TransformerExplorer(num_layers=2, engine=engine, steps=20, warmup_steps=10, batch_size=4)
    assert lab.runs is None and len(lab.view["plots"]) == 1
    assert [c["label"] for c in lab.spec if c["name"] == "run"] == ["run the first 20 steps"]
    epoch = lab.view["epoch"]
    warm, plain = lab.run_steps()
    assert lab.view["epoch"] == epoch + 1  # views sent before (no runs) are stale in the page
    assert len(lab.view["plots"]) == 3
    assert lab.progress.value == lab.progress.max == 40
    assert warm.steps == plain.steps == 20 and np.all(np.isfinite(warm.losses))
    # the warmup ramps the learning rate from 0 (Keras's CosineDecay with warmup_target)
    assert warm.learning_rates[0] == 0.0 and warm.learning_rates[10] == pytest.approx(1e-3)
    assert np.all(plain.learning_rates == pytest.approx(1e-3))
    np.testing.assert_allclose(lab.view["plots"][1]["series"][0]["y"], warm.losses)
    assert "with 10 warmup steps" in lab.status_text
    traces = lab._runs[2, "pre"].tracing_count()
    again = lab.run_steps()
    assert again[0] is warm and lab._runs[2, "pre"].tracing_count() == traces     # cached, nothing retrained
    lab.num_layers.value = 3
    assert lab.runs is None
    lab.num_layers.value = 2
    assert lab.runs == (warm, plain)
    copy = lab.copy(num_layers=2)
    assert copy.runs == (warm, plain) and copy.engine is engine
    assert repr(copy).startswith("TransformerExplorer(pre-LN")
    assert copy.snapshot().text == repr(copy)[len("TransformerExplorer("):-1]


def test_values_are_accepted_exactly_never_rounded(engine):
    """Issue 29: warmup 25 read 30 and 3e-3 read 0.0032 (the sliders' steps rounded them)."""
    lab = TransformerExplorer(num_layers=2, engine=engine, steps=60, learning_rate=3e-3, warmup_steps=25,
                              batch_size=4)
    assert lab.learning_rate.value == 3e-3 and lab.warmup_steps.value == 25
    assert lab.warmup_steps.step == 1 and lab.learning_rate.label == "0.003"
    labels = [label for label, _v in lab.learning_rate.options]
    assert labels == sorted(labels, key=float) and len(set(labels)) == len(labels)
    lab.set(learning_rate=7e-4, warmup_steps=23)            # off the 1-2-3-5 grid: it joins it
    assert lab.learning_rate.value == 7e-4 and lab.learning_rate.label == "0.0007"
    assert lab.warmup_steps.value == 23
    odd = TransformerExplorer(num_layers=2, engine=engine, steps=60, learning_rate=1.7e-3, warmup_steps=0,
                              batch_size=4)
    assert odd.learning_rate.value == 1.7e-3 and odd.copy().learning_rate.value == 1.7e-3
    with pytest.raises(ValueError, match="learning_rate"):
        lab.set(learning_rate=0.5)
