"""gradlab.train.warmup: Keras's warmup schedule, the Playbook's clip threshold, short Transformer runs."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab  # noqa: F401
from gradlab.models.transformer import build_transformer
from gradlab.train import warmup as W

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

SMALL = dict(d_model=16, num_heads=2, vocab_size=11, seq_len=6)


@pytest.fixture(scope="module")
def runs():
    return W.TrainingRuns(2, "post", steps=12, batch_size=4, **SMALL)


def test_warmup_schedule_is_a_linear_ramp_then_constant():
    s = W.warmup_schedule(2e-3, 4, 20)
    got = np.array([float(s(i)) for i in range(20)])
    want = np.minimum(np.arange(20) / 4, 1.0) * 2e-3        # closed form: 0, lr/4, lr/2, 3lr/4, lr, lr, ...
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    flat = W.warmup_schedule(2e-3, 0, 20)
    np.testing.assert_allclose([float(flat(i)) for i in range(20)], 2e-3, rtol=1e-6)
    for args, name in (((0.0, 4, 20), "learning_rate"), ((1e-3, 30, 20), "warmup_steps"),
                       ((1e-3, 4, 0), "total_steps")):
        with pytest.raises(ValueError, match=name):
            W.warmup_schedule(*args)


def test_clip_threshold_is_the_percentile():
    norms = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 10.0])
    assert W.clip_threshold(norms) == pytest.approx(np.percentile([1, 2, 3, 4, 10], 90))
    assert W.clip_threshold(norms, 50) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="percentile"):
        W.clip_threshold(norms, 100)
    with pytest.raises(ValueError, match="finite"):
        W.clip_threshold([np.nan])


def test_first_steps_equal_plain_keras_steps(runs):
    """Three steps against an independent loop: the Keras model with the same seed, a tape, Adam."""
    curve = runs.run(3e-3, steps=3)
    model = build_transformer(2, norm_position="post", **SMALL)
    adam = keras.optimizers.Adam(3e-3)
    for i in range(3):
        x, y = runs.x[i], runs.y[i]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True),
                                                                               from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        norm = np.sqrt(sum(float(np.sum(np.asarray(tf.convert_to_tensor(g), np.float64) ** 2)) for g in grads))
        assert curve.losses[i] == pytest.approx(float(loss), rel=1e-4), i
        assert curve.grad_norms[i] == pytest.approx(norm, rel=1e-3), i
        adam.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    # after the run the weights are the initial ones again: the loss is the fresh model's
    fresh = build_transformer(2, norm_position="post", **SMALL)
    x, y = runs.x[0], runs.y[0]
    want = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, fresh(x), from_logits=True))
    assert float(runs.loss(x, y)) == pytest.approx(float(want), rel=1e-5)
    assert runs.model().name == fresh.name


def test_runs_are_reproducible_cached_and_share_one_trace(runs):
    a = runs.run(1e-3, 4)
    traces = runs.tracing_count()
    b = runs.run(2e-3, 0)                       # another learning rate and no warmup: same traced step
    assert runs.tracing_count() == traces
    assert runs.run(1e-3, 4) is a and runs.cached(1e-3, 4) is a and runs.cached(5e-3, 4) is None
    runs._cache.clear()
    again = runs.run(1e-3, 4)
    np.testing.assert_allclose(again.losses, a.losses, rtol=1e-5)
    assert not np.allclose(a.losses, b.losses)
    assert a.learning_rates[0] == 0.0 and a.learning_rates[4] == pytest.approx(1e-3)


def test_clipping_records_the_unclipped_norm_and_the_share(runs):
    free = runs.run(3e-3, 0)
    t = W.clip_threshold(free.grad_norms, 50)
    clipped = runs.run(3e-3, 0, clip=t)
    assert clipped.grad_norms[0] == pytest.approx(free.grad_norms[0])      # step 1: before any update
    assert clipped.clipped_fraction == pytest.approx(np.mean(clipped.grad_norms > t))
    assert "clipped at" in clipped.summary()
    assert not np.allclose(clipped.losses[1:], free.losses[1:])
    with pytest.raises(TypeError, match="takes clip= instead of clip_norm="):
        runs.run(3e-3, 0, clip_norm=1.0)
    assert runs.cached(3e-3, 0, clip=("global_norm", t)) is clipped  # a number is the global-norm threshold
    value = runs.run(3e-3, 0, clip=("value", 1e-3))
    assert np.isnan(value.clipped_fraction) and "clip value" in value.summary()


def test_a_run_that_blows_up_stops_at_the_first_non_finite_step():
    runs = W.TrainingRuns(1, "pre", steps=12, batch_size=4, **SMALL)
    start = [np.asarray(v).copy() for v in runs.variables]
    curve = runs.run(1e30, 0)          # step 1 moves every weight by about 1e30: step 2 is NaN
    assert np.isfinite(curve.losses[0]) and np.all(np.isnan(curve.losses[1:])) and curve.diverged
    for v, w in zip(runs.variables, start, strict=True):
        np.testing.assert_array_equal(np.asarray(v), w)     # the initial weights are back


def test_bad_arguments():
    with pytest.raises(ValueError, match="norm_position"):
        W.TrainingRuns(1, "middle", **SMALL)
    with pytest.raises(ValueError, match="steps"):
        W.TrainingRuns(1, "pre", steps=0, **SMALL)
    with pytest.raises(ValueError, match="unknown keyword"):
        W.TrainingRuns(1, "pre", dropout=0.1, **SMALL)
