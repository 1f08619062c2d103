"""Chapter 09's self-checks: right answers pass, typical wrong answers get specific feedback."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab
from gradlab.exercises import ch09

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402


def _grads(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
    return model.trainable_variables, tape.gradient(loss, model.trainable_variables)


def right_block_norms(model, x, y):
    variables, grads = _grads(model, x, y)
    out = []
    for i in range(3):
        sq = [tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for v, g in zip(variables, grads, strict=True)
              if v.path.startswith(f"block_{i}/")]
        out.append(float(tf.sqrt(tf.add_n(sq))))
    return out


def test_block_norms_right_answer():
    result = ch09.check_block_norms(right_block_norms)
    assert result.ok, result.feedback


@pytest.mark.parametrize("wrong, words", [
    (lambda m, x, y: right_block_norms(m, x, y)[::-1], "reversed"),
    (lambda m, x, y: [v**2 for v in right_block_norms(m, x, y)], "squared"),
    (lambda m, x, y: None, "return statement"),
    (lambda m, x, y: 1 / 0, "ZeroDivisionError"),
    ("norms", "expected a function"),
])
def test_block_norms_wrong_answers(wrong, words):
    result = ch09.check_block_norms(wrong)
    assert not result.ok and words in result.feedback, result.feedback


def test_block_norms_ffn_only_and_per_variable():
    def ffn_only(model, x, y):
        variables, grads = _grads(model, x, y)
        return [float(tf.norm(tf.cast(g, tf.float64))) for v, g in zip(variables, grads, strict=True)
                if v.path.endswith("ffn_2/kernel")]

    def per_variable(model, x, y):
        variables, grads = _grads(model, x, y)
        return [float(tf.norm(tf.cast(tf.convert_to_tensor(g), tf.float64))) for v, g in
                zip(variables, grads, strict=True) if v.path.startswith("block_")]

    assert "second FFN kernel" in ch09.check_block_norms(ffn_only).feedback
    assert "one norm per variable" in ch09.check_block_norms(per_variable).feedback


def test_warmup_schedule():
    good = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=180, alpha=1.0, warmup_target=3e-3,
                                                  warmup_steps=20)
    assert ch09.check_warmup_schedule(good).ok
    no_warmup = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=180, alpha=1.0, warmup_target=3e-3,
                                                       warmup_steps=20)
    assert "no warmup" in ch09.check_warmup_schedule(no_warmup).feedback
    decays = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=180, warmup_target=3e-3, warmup_steps=20)
    assert "decays towards 0" in ch09.check_warmup_schedule(decays).feedback
    late = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=180, alpha=1.0, warmup_target=3e-3,
                                                  warmup_steps=40)
    assert "step 40" in ch09.check_warmup_schedule(late).feedback
    assert "constant learning rate" in ch09.check_warmup_schedule(3e-3).feedback
    assert "LearningRateSchedule" in ch09.check_warmup_schedule("cosine").feedback


def test_clip_threshold():
    norms = ch09.exercise_norms()
    assert ch09.check_clip_threshold(np.percentile(norms, 90)).ok
    assert "extremely aggressive" in ch09.check_clip_threshold(np.percentile(norms, 40)).feedback
    assert "largest norm" in ch09.check_clip_threshold(norms.max()).feedback
    assert "mean" in ch09.check_clip_threshold(norms.mean()).feedback
    assert "10%" in ch09.check_clip_threshold(np.percentile(norms, 80)).feedback
    assert "string" in ch09.check_clip_threshold("1.5").feedback


def test_flat_pre_ln():
    assert ch09.check_flat_pre_ln("d").ok
    assert ch09.check_flat_pre_ln(dict(embedding_initializer="normal", scale_embedding=True)).ok
    for wrong in ("a", "b", "c"):
        assert "grows block by block" in ch09.check_flat_pre_ln(wrong).feedback
    assert "answer with one of" in ch09.check_flat_pre_ln("e").feedback


def test_flat_pre_ln_table_is_what_the_engine_measures():
    """The table behind exercise 4 against a measurement: only setting d is flat (12 blocks, pre-LN)."""
    from gradlab.engines.transformer import TransformerGradientEngine

    engine = TransformerGradientEngine(max_layers=12)
    ratios = {k: engine.report(12, "pre", **v).ratio for k, v in ch09.FLAT_SETTINGS.items()}
    assert ratios["d"] > 0.85
    assert all(ratios[k] < 0.7 for k in "abc"), ratios


def test_block_norms_review_cases():
    def fixed_six(model, x, y):           # the chapter's block_norms copied with its range(6)
        variables, grads = _grads(model, x, y)
        return [float(tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for v, g in zip(variables, grads, strict=True)
                                        if v.path.startswith(f"block_{i}/")]))) for i in range(6)]

    model, (x, y) = ch09.exercise_model("post")
    post_numbers = list(gradlab.reports.transformer.block_gradient_report(model, x, y).layer_grad_norms)
    assert "count the blocks" in ch09.check_block_norms(fixed_six).feedback
    constant = ch09.check_block_norms(lambda m, x, y: post_numbers)      # right numbers for one model only
    assert not constant.ok and "fixed numbers" in constant.feedback, constant.feedback
    assert "one number" in ch09.check_block_norms(lambda m, x, y: 9.9).feedback


def test_warmup_schedule_review_cases():
    CosineDecay = keras.optimizers.schedules.CosineDecay
    wrong_peak = ch09.check_warmup_schedule(CosineDecay(0.0, decay_steps=180, alpha=1.0, warmup_target=3e-2,
                                                        warmup_steps=20))
    assert "peak of 0.003" in wrong_peak.feedback and "warmup_target" in wrong_peak.feedback
    assert "plain function" in ch09.check_warmup_schedule(lambda step: 3e-3 * min(step / 20, 1)).feedback
    assert "class" in ch09.check_warmup_schedule(CosineDecay).feedback

    class ReturnsNone(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return None

    assert "returned None at step 0" in ch09.check_warmup_schedule(ReturnsNone()).feedback
    poly = keras.optimizers.schedules.PolynomialDecay(0.0, 20, 3e-3, power=1.0)   # a right answer, not CosineDecay
    assert ch09.check_warmup_schedule(poly).ok


def test_clip_threshold_review_cases():
    norms = ch09.exercise_norms()
    typed = float(f"{np.percentile(norms, 90):.3g}")          # the value as the ✅ message prints it
    assert ch09.check_clip_threshold(typed).ok
    assert not ch09.check_clip_threshold(np.percentile(norms, 89)).ok
    assert "np.quantile" in ch09.check_clip_threshold(np.percentile(norms, 0.9)).feedback


def test_block_norms_from_probabilities_gets_the_logits_hint():
    def probabilities(model, x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x))      # from_logits=False
        grads = tape.gradient(loss, model.trainable_variables)
        return [float(tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64)))
                                        for v, g in zip(model.trainable_variables, grads, strict=True)
                                        if v.path.startswith(f"block_{i}/")]))) for i in range(3)]

    result = ch09.check_block_norms(probabilities)
    assert not result.ok and "from_logits=True" in result.feedback, result.feedback


# ----------------------------------------------------------------------------- third review (issue 29)
def _schedule(target=3e-3, steps=20):
    return keras.optimizers.schedules.CosineDecay(0.0, decay_steps=180, alpha=1.0, warmup_target=target,
                                                  warmup_steps=steps)


@pytest.mark.parametrize("steps", [300, 1000])
def test_ex2_a_warmup_longer_than_the_run_names_warmup_steps_not_the_target(steps):
    r = ch09.check_warmup_schedule(_schedule(steps=steps))
    assert not r and "still rising at step 199" in r.feedback and "warmup_steps" in r.feedback, r.feedback
    assert "check warmup_target" not in r.feedback


def test_ex2_a_short_warmup_names_warmup_steps():
    r = ch09.check_warmup_schedule(_schedule(steps=10))
    assert not r and "at step 10, not at step 20: check warmup_steps" in r.feedback, r.feedback


def test_ex2_the_right_ramp_length_with_a_wrong_top_names_warmup_target():
    r = ch09.check_warmup_schedule(_schedule(target=1e-3))
    assert not r and "ends at step 20 as it should" in r.feedback and "check warmup_target" in r.feedback, r.feedback


def test_ex2_both_wrong_names_both():
    r = ch09.check_warmup_schedule(_schedule(target=6e-3, steps=10))
    assert not r and "warmup_steps" in r.feedback and "warmup_target" in r.feedback, r.feedback
