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



# ----------------------------------------------------------------------------- exercise 3 (issue 29 redesign)
def _log_norms(learning_rate=1e-2, *, reduction="sum_over_batch_size", train=True, compiled=None, norm="dense",
               model_and_batches=None, passes=1):
    """A learner's loop over ch09.clip_exercise(): one norm per step, logged before the update."""
    model, batches = model_and_batches or ch09.clip_exercise()
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
    opt = keras.optimizers.Adam(learning_rate)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_obj(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        if norm == "dense":                                        # float32, in the graph
            out = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.convert_to_tensor(g))) for g in grads]))
        elif norm == "global":
            out = tf.linalg.global_norm(grads)                     # IndexedSlices' rows as they are
        elif norm == "sum":
            out = tf.add_n([tf.norm(g) for g in grads])            # the variables' norms added
        else:
            out = tf.stack([tf.norm(g) for g in grads])            # one norm per variable
        if train:
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return out

    if compiled is not None:
        step = tf.function(step, jit_compile=compiled == "xla")
    logged = []
    for __ in range(passes):
        logged = [step(tf.constant(x), tf.constant(y)).numpy() for x, y in batches]
    return np.array(logged, dtype=np.float64)


@pytest.fixture(scope="module")
def norms_3():
    """The right norms as the solution logs them: eager, float64 global norms (gl.true_global_norm)."""
    model, batches = ch09.clip_exercise()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(1e-2)
    out = []
    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        out.append(gradlab.true_global_norm(grads))
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return out


def test_ex3_batches_and_model_are_the_reference_run():
    runs = ch09._clip_runs()
    model, batches = ch09.clip_exercise()
    assert len(batches) == 40 and np.array_equal(np.stack([b[0] for b in batches]), runs.x.numpy())
    assert np.array_equal(np.stack([b[1] for b in batches]), runs.y.numpy())
    other, __ = ch09.clip_exercise()
    assert other is not model                                       # a fresh model every call
    for a, b in zip(model.trainable_variables, runs.model().trainable_variables, strict=True):
        assert np.array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("threshold", [
    lambda n: np.percentile(n, 90),
    lambda n: np.quantile(n, 0.9),
    lambda n: np.percentile(n, 90, method="lower"),
    lambda n: np.percentile(n, 90, method="nearest"),
    lambda n: float(f"{np.percentile(n, 90):.3g}"),                 # typed in from the ✅ message
    lambda n: tf.constant(np.percentile(n, 90), tf.float32),
    lambda n: gradlab.train.warmup.clip_threshold(n, 90),
])
def test_ex3_right_thresholds(norms_3, threshold):
    r = ch09.check_clip_threshold(norms_3, threshold(norms_3))
    assert r.ok and "steps 1, 2, 3, 16" in r.feedback, r.feedback


def test_ex3_right_norms_in_other_forms(norms_3):
    t = np.percentile(norms_3, 90)
    for norms in (np.array(norms_3), np.sort(norms_3), [tf.constant(v) for v in norms_3],
                  tf.constant(norms_3, tf.float32)):
        r = ch09.check_clip_threshold(norms, t)
        assert r.ok, r.feedback
    r = ch09.check_clip_threshold(norms_3, 3.0)       # clips the same 4 steps as the 90th percentile
    assert r.ok and "same steps" in r.feedback, r.feedback


def test_ex3_a_compiled_loop_with_float32_norms_is_right():
    norms = _log_norms(compiled="xla")
    r = ch09.check_clip_threshold(norms, np.percentile(norms, 90))
    assert r.ok, r.feedback


@pytest.mark.parametrize("threshold, words", [
    (lambda n: np.mean(n), "that is the mean"),
    (lambda n: np.max(n), "largest norm"),
    (lambda n: np.percentile(n, 0.9), "np.quantile"),
    (lambda n: np.percentile(n, 40), "extremely aggressive"),
    (lambda n: np.percentile(n, 80), "the 90th percentile clips 10%"),
    (lambda n: np.percentile(n, 89), "the 90th percentile clips 10%"),       # off by one percent
    (lambda n: 2.0, "the 90th percentile clips 10%"),                         # a constant
    (lambda n: "2.64", "string"),
    (lambda n: None, "got None"),
    (lambda n: np.percentile(n, 90, axis=None, keepdims=True), "one value"),
])
def test_ex3_wrong_thresholds(norms_3, threshold, words):
    r = ch09.check_clip_threshold(norms_3, threshold(norms_3))
    assert not r and words in r.feedback, r.feedback


def test_ex3_wrong_norms_of_the_right_run(norms_3):
    n = np.array(norms_3)
    cases = [
        (None, "pass the norms you logged"),
        (n[1:], "the first step is missing"),
        (n[:-1], "the last step is missing"),
        (np.append(n, n[-1]), "41 norms for 40 batches"),
        (n**2, "squared norms"),
        (np.full(40, 2.0), "step 1's norm is 2"),                       # a constant
        (np.where(np.arange(40) == 5, np.nan, n), "step 6 is nan"),
        ("norms", "list or array"),
    ]
    for norms, words in cases:
        r = ch09.check_clip_threshold(norms, 2.64)
        assert not r and words in r.feedback, (words, r.feedback)
    r = ch09.check_clip_threshold(2.64, n)
    assert not r and "swapped" in r.feedback, r.feedback


@pytest.mark.parametrize("kwargs, words", [
    (dict(reduction="sum", compiled="graph"), "sums over the tokens"),                   # sum instead of mean
    (dict(learning_rate=1e-3, compiled="graph"), "Keras's default for Adam"),
    (dict(train=False, compiled="graph"), "never trained"),
    (dict(norm="sum", compiled="graph"), "sum of the variables' norms"),
    (dict(norm="global", compiled="xla"), "tf.linalg.global_norm's, not the gradient's"),
    (dict(norm="each", compiled="graph"), "one norm per variable"),                     # the wrong axis
    (dict(learning_rate=3e-2, compiled="graph"), "the training differs"),
])
def test_ex3_wrong_runs(kwargs, words):
    norms = _log_norms(**kwargs)
    threshold = np.percentile(norms, 90)
    r = ch09.check_clip_threshold(norms, threshold)
    assert not r and words in r.feedback, r.feedback


def test_ex3_a_model_trained_twice_gets_the_fresh_model_hint():
    norms = _log_norms(compiled="graph", passes=2)                 # the cell run twice on the same model
    r = ch09.check_clip_threshold(norms, np.percentile(norms, 90))
    assert not r and "fresh ch09.clip_exercise()" in r.feedback, r.feedback


# ----------------------------------------------------------------------------- exercise 4 (issue 29 redesign)
@pytest.fixture(scope="module")
def flat_4():
    """``{key: (block norms (8, 24), FFN kernel norms, stream rms (8, 25))}``, measured here."""
    engine = ch09._flat_engine()      # the check's own engine (traced once for both)
    out = {}
    for key, setting in ch09.FLAT_SETTINGS.items():
        reports = [engine.report(24, "pre", seed=s, **setting) for s in range(8)]
        out[key] = (np.array([r.layer_grad_norms for r in reports]), np.array([r.ffn_grad_norms for r in reports]),
                    np.array([r.stream_rms for r in reports]))
    out["engine"] = engine
    return out


def _ratios(flat, fn):
    return {k: fn(*flat[k]) for k in ch09.FLAT_SETTINGS}


def test_ex4_the_answer_and_its_story(flat_4):
    want = _ratios(flat_4, lambda n, f, s: n.mean(0)[-1] / n.mean(0)[0])
    assert want["d"] > 0.8 and all(want[k] < 0.35 for k in "abc"), want   # only d stays near flat
    assert want["d"] < 0.9   # ... and less flat than the chapter's one 12-block model (0.91)


@pytest.mark.parametrize("answer", [
    lambda fl: _ratios(fl, lambda n, f, s: n.mean(0)[-1] / n.mean(0)[0]),
    lambda fl: _ratios(fl, lambda n, f, s: float(n.sum(0)[-1] / n.sum(0)[0])),            # sum over seeds
    lambda fl: _ratios(fl, lambda n, f, s: np.mean(n[:, -1] / n[:, 0])),                 # mean of the ratios
    lambda fl: _ratios(fl, lambda n, f, s: tf.constant(n.mean(0)[-1] / n.mean(0)[0], tf.float32)),
    lambda fl: {k: fl["engine"].mean_report(24, "pre", seeds=range(8), **s).ratio
                for k, s in ch09.FLAT_SETTINGS.items()},
    lambda fl: {k.upper(): v for k, v in _ratios(fl, lambda n, f, s: n.mean(0)[-1] / n.mean(0)[0]).items()},
])
def test_ex4_right_answers(flat_4, answer):
    r = ch09.check_flat_pre_ln(answer(flat_4))
    assert r.ok and "Only d stays near flat" in r.feedback, r.feedback


@pytest.mark.parametrize("answer, words", [
    (lambda n, f, s: n[0, -1] / n[0, 0], "one initialization's ratios (seed 0)"),
    (lambda n, f, s: n.mean(0)[0] / n.mean(0)[-1], "inverted"),
    (lambda n, f, s: f.mean(0)[-1] / f.mean(0)[0], "second FFN kernel"),
    (lambda n, f, s: n.mean(0)[-2] / n.mean(0)[0], "next-to-last block"),                 # off by one
    (lambda n, f, s: n.mean(0)[-1] / n.mean(0)[1], "by the second (index 1)"),            # off by one
    (lambda n, f, s: n.mean(1)[-1] / n.mean(1)[0], "averaged over the blocks"),           # the wrong axis
    (lambda n, f, s: s[:, -1].mean() / s[:, 0].mean(), "residual stream's growth"),
    (lambda n, f, s: 1.0, "same number"),                                                 # a constant
    (lambda n, f, s: n.mean(0)[-1] / n.mean(0)[0] * 1.05, "not yet right for a, b, c, d"),
])
def test_ex4_wrong_answers(flat_4, answer, words):
    r = ch09.check_flat_pre_ln(_ratios(flat_4, answer))
    assert not r and words in r.feedback, r.feedback


def test_ex4_values_from_earlier_outputs(flat_4):
    printed = {"a": 0.28, "b": 0.28, "c": 0.43, "d": 0.91}       # condition 1's printout (12 blocks, seed 0)
    r = ch09.check_flat_pre_ln(printed)
    assert not r and "the chapter printed" in r.feedback, r.feedback
    engine = flat_4["engine"]
    twelve = {k: engine.mean_report(12, "pre", seeds=range(8), **s).ratio for k, s in ch09.FLAT_SETTINGS.items()}
    r = ch09.check_flat_pre_ln(twelve)
    assert not r and "these are 12 blocks" in r.feedback, r.feedback
    seed_0 = {k: engine.report(12, "pre", **s).ratio for k, s in ch09.FLAT_SETTINGS.items()}
    assert all(abs(seed_0[k] - printed[k]) < 0.006 for k in printed), seed_0   # the printout is the engine's


@pytest.mark.parametrize("answer, words", [
    ("d", "answer with a dict"),
    ([0.23, 0.23, 0.31, 0.86], "answer with a dict"),
    ({"a": 0.23, "b": 0.23, "c": 0.31}, "missing: d"),
    ({"a": 0.23, "b": 0.23, "c": 0.31, "d": 0.86, "e": 1.0}, "unknown: 'e'"),
    ({"a": 0.23, "b": 0.23, "c": 0.31, "d": None}, "got None"),
    ({"a": 0.23, "b": 0.23, "c": 0.31, "d": "0.86"}, "string"),
    (None, "answer with a dict"),
])
def test_ex4_malformed_answers(answer, words):
    r = ch09.check_flat_pre_ln(answer)
    assert not r and words in r.feedback, r.feedback


def test_ex2_a_decay_without_warmup_is_not_sent_to_warmup_steps():
    decay = keras.optimizers.schedules.ExponentialDecay(3e-3, decay_steps=100, decay_rate=0.9)
    r = ch09.check_warmup_schedule(decay)
    assert not r and "does not rise: there is no warmup" in r.feedback, r.feedback
    assert "check warmup_steps" not in r.feedback


# ----------------------------------------------------------------------------- second pass (answers2)
def _combined(combine):
    def per_block(model, x, y):
        variables, grads = _grads(model, x, y)
        return [float(combine([float(tf.norm(tf.cast(tf.convert_to_tensor(g), tf.float64)))
                               for v, g in zip(variables, grads, strict=True) if v.path.startswith(f"block_{i}/")]))
                for i in range(3)]
    return per_block


@pytest.mark.parametrize("combine, words", [
    (np.sum, "the sum of its variables' norms"),
    (np.mean, "the mean of its variables' norms"),
    (np.max, "its largest variable norm"),
])
def test_block_norms_variable_norms_combined_otherwise_are_named(combine, words):
    result = ch09.check_block_norms(_combined(combine))
    assert not result.ok and words in result.feedback, result.feedback
    assert _combined(lambda n: np.sqrt(np.sum(np.square(n)))) and ch09.check_block_norms(
        _combined(lambda n: np.sqrt(np.sum(np.square(n))))).ok  # combined as a global norm: right


def test_ex3_a_loss_without_from_logits_is_named_not_a_used_model():
    # issue 38: it was told to start from a fresh model
    model, batches = ch09.clip_exercise()
    loss_fn, opt, norms = keras.losses.SparseCategoricalCrossentropy(), keras.optimizers.Adam(1e-2), []
    for x, y in batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        norms.append(gradlab.true_global_norm(grads))
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    r = ch09.check_clip_threshold(norms, np.percentile(norms, 90))
    assert not r and "from_logits=True" in r.feedback and "fresh" not in r.feedback, r.feedback


def _norms_by_name(model, x, y):
    """Grouped by v.name, as in Keras 2: in Keras 3 the name is 'kernel', the block is in the path."""
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    out = []
    for i in range(3):
        squares = [tf.reduce_sum(tf.square(tf.convert_to_tensor(g)))
                   for g, v in zip(grads, model.trainable_variables, strict=True) if v.name.startswith(f"block_{i}")]
        out.append(float(tf.sqrt(tf.add_n(squares))))
    return out


def test_ex1_grouping_by_name_is_named_not_told_to_count_the_blocks():
    r = ch09.check_block_norms(_norms_by_name)
    assert not r and "v.path" in r.feedback and "count the blocks" not in r.feedback, r.feedback


def test_block_norms_feedback_reads_as_chinese():
    """Issue 37: the numbers are a Chinese list (、), and the feedback has one colon after the label."""
    from gradlab import i18n
    from tools.catalog import typography_problems

    i18n.set_language("zh")
    try:
        right = ch09.check_block_norms(right_block_norms)
        model, (x, y) = ch09.exercise_model("post")
        post_numbers = list(gradlab.reports.transformer.block_gradient_report(model, x, y).layer_grad_norms)
        constant = ch09.check_block_norms(lambda m, x, y: post_numbers)
    finally:
        i18n.set_language("en")
    assert right.ok and right.feedback.startswith("post-LN 模型各块的值为 ") and "、" in right.feedback, right.feedback
    assert ", " not in right.feedback and "：" not in right.feedback, right.feedback
    assert not constant.ok and "、" in constant.feedback and ", " not in constant.feedback, constant.feedback
    assert typography_problems(right.feedback) == typography_problems(constant.feedback) == []
    english = ch09.check_block_norms(right_block_norms)
    assert english.ok and ", " in english.feedback.split(":")[0], english.feedback
