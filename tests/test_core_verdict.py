"""The verdict as a typed result: what the rule measured, apart from the advice, with the kind of
cause as data (issues 19 and 21), and an inspector that knows where normalization sits.

Ratios and gains are checked against NumPy on the same norms (the gain as the geometric mean of
the successive ratios, not the endpoint formula the code uses); statuses against the rule's
thresholds on hand-made norms; the normalization-aware verdict on pre- and post-LN Transformer
blocks written here, on ``gl.build_transformer``, and against a control without normalization
that must still get the initializer advice.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl
from gradlab.reports.verdict import CAUSES, RULES, STATUSES


def geometric_gain(s):
    s = np.asarray(s, np.float64)
    return float(np.exp(np.mean(np.log(s[:-1] / s[1:]))))


# ----------------------------------------------------------------------------- the rule in numbers
@pytest.mark.parametrize("norms,status,rule", [
    ([0.21 ** k for k in range(4, -1, -1)], "vanishing", "per-layer"),  # 0.21 per layer, 1.9e-3 in all
    ([1e-4, 1e-2, 1.0], "vanishing", "total"),
    ([0.25, 0.5, 1.0], "healthy", "none"),  # 0.5 per layer but only 0.25 in all
    ([0.97 ** k for k in range(99, -1, -1)], "healthy", "none"),  # within 5 %: 0.049 in all, not flagged
    ([1.06 ** k for k in range(60, -1, -1)], "exploding", "per-layer"),
    ([2e3, 1.0], "exploding", "total"),
    ([0.0, 1e-3, 1.0], "vanishing", "total"),
    ([0.0, 0.0], "vanishing", "all-zero"),
    ([1.0, np.nan], "non-finite", "non-finite"),
    ([3.0], "healthy", "one-layer"),
])
def test_judge_statuses_and_rules(norms, status, rule):
    v = gl.judge(norms)
    assert (v.status, v.rule) == (status, rule)
    assert v.status in STATUSES and v.rule in RULES and set(v.causes) <= set(CAUSES)
    assert gl.diagnose(norms) == (v.status, v.message)
    s = np.asarray(norms, np.float64)
    if s.size > 1 and np.all(np.isfinite(s)) and np.all(s > 0):
        assert v.ratio == pytest.approx(s[0] / s[-1], rel=1e-12)
        assert v.gain == pytest.approx(geometric_gain(s), rel=1e-9)
        assert f"{v.ratio:.2g}×" in v.finding and f"{v.gain:.3g}×" in v.finding
    if status == "healthy":
        assert v.causes == () and v.advice == ""


def test_findings_name_the_threshold_that_decided():
    assert "below the threshold 0.001 for the total ratio" in gl.judge([1e-4, 1e-2, 1.0]).finding
    per_layer = gl.judge([0.9 ** k for k in range(30, -1, -1)]).finding
    assert "below 0.95" in per_layer and "below 0.1" in per_layer and "per-layer rule" in per_layer
    assert "above the threshold 500" in gl.judge([600.0, 1.0], explode_above=500).finding
    loose = gl.judge([0.25, 0.5, 1.0]).finding
    assert "outside 0.95–1.0526" in loose and "within 0.1–10" in loose and "needs both" in loose


def test_the_healthy_message_says_what_it_measured(engine):
    """Issue 21: "every layer gets a gradient of usable size" was printed for 40 and 0.083."""
    for depth, act, init, ratio in ((100, "selu", "lecun_normal", 40), (100, "tanh", "orthogonal", 0.083)):
        r = engine.report(depth, act, init)
        s = r.signal_norms
        assert r.status == "healthy" and r.ratio == pytest.approx(s[0] / s[-1])
        assert f"{r.ratio:.2g}" == f"{ratio:.2g}"
        assert "usable size" not in r.message
        assert "within 0.95–1.0526" in r.message and f"compounds to {r.ratio:.2g}× over 100 layers" in r.message
        assert f"{geometric_gain(s):.3g}× per layer" in r.message
    # chapter 01's tanh + Glorot at depth 50 is flagged, by the per-layer rule
    r = engine.report(50, "tanh", "glorot_uniform")
    assert r.status == "vanishing" and r.verdict.rule == "per-layer" and "0.048×" in r.message


def test_finding_and_advice_are_apart():
    v = gl.judge([0.2 ** k for k in range(10, -1, -1)], activation="sigmoid")
    assert v.advice and v.advice not in v.finding and "relu" not in v.finding
    assert v.message == f"{v.finding} {v.advice}"
    assert str(v).startswith("vanishing: ")


@pytest.mark.parametrize("settings,cause", [
    (dict(depth=50, activation="sigmoid", initializer="glorot_uniform"), "saturating-activation"),
    (dict(depth=30, activation="relu", initializer="glorot_uniform"), "initializer-scale"),
    (dict(depth=8, activation="relu", initializer="zeros"), "dead-units"),
    (dict(depth=60, activation="linear", initializer="large_normal"), "overflow"),
    (dict(depth=14, activation="sigmoid", initializer="glorot_uniform", dtype="float16"), "underflow"),
    (dict(depth=30, activation="relu", initializer="he_normal", residual=True), "residual-growth"),
])
def test_the_kind_of_cause_is_data(engine, settings, cause):
    r = engine.report(settings.pop("depth"), settings.pop("activation"), settings.pop("initializer"), **settings)
    assert r.verdict.cause == cause, (r.status, r.verdict.causes, r.message)
    assert r.status != "healthy"


def test_float32_underflow_is_named_second_and_float16_first():
    s = [0.0, 1e-30, 1e-3, 1.0]
    assert gl.judge(s, activation="sigmoid").causes == ("saturating-activation", "underflow")
    assert gl.judge(s, activation="sigmoid", dtype="float16").causes[0] == "underflow"
    assert "float16" in gl.judge(s, dtype="float16").finding


def test_names_steps_and_bad_arguments():
    v = gl.judge([1e-5, 1.0], names=["'emb'", "'out'"])
    assert "'emb'" in v.finding and "'out'" in v.finding
    t = gl.judge([1e-5, 1e-3, 1.0], unit="step")
    assert "step 1" in t.finding and "per step" in t.finding
    with pytest.raises(ValueError, match="names must hold one name per norm"):
        gl.judge([1.0, 2.0], names=["a"])
    with pytest.raises(ValueError, match="unit must be"):
        gl.judge([1.0, 2.0], unit="block")
    with pytest.raises(ValueError, match="signal_norms holds None"):
        gl.judge([1.0, None])
    with pytest.raises(ValueError, match="need 0 < vanish_below < explode_above"):
        gl.judge([1.0, 2.0], vanish_below=10, explode_above=1)


def test_every_report_carries_its_verdict(engine):
    x, y = gl.models.mlp.make_data(32, 8, 0)
    model = gl.models.mlp.build_mlp(6, width=8, activation="sigmoid")
    assert gl.gradient_report(model, x, y).verdict.status == gl.gradient_report(model, x, y).status
    assert engine.report(5).verdict.cause == "saturating-activation"
    t = gl.engines.rnn.TimeGradientEngine(max_steps=40).report("simple_rnn", 40)
    assert t.verdict.status == t.status and t.verdict.depth == 40
    s = gl.inspect_training_step(model, x, y)
    assert s.verdict.status == s.status and s.verdict.finding in s.message


# ----------------------------------------------------------------------------- normalization
def _block(x, dim, pre):
    def attn(h):
        return keras.layers.MultiHeadAttention(2, dim // 2)(h, h, use_causal_mask=True)

    if pre:
        x = keras.layers.Add()([x, attn(keras.layers.LayerNormalization()(x))])
        return keras.layers.Add()([x, keras.layers.Dense(dim)(keras.layers.Dense(2 * dim, activation="relu")(
            keras.layers.LayerNormalization()(x)))])
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, attn(x)]))
    return keras.layers.LayerNormalization()(keras.layers.Add()([x, keras.layers.Dense(dim)(
        keras.layers.Dense(2 * dim, activation="relu")(x))]))


def _transformer(pre, layers=3, dim=32, seed=0):
    keras.utils.set_random_seed(seed)
    inp = keras.Input((16,), dtype="int32")
    h = keras.layers.Embedding(50, dim)(inp)  # Keras's default U(-0.05, 0.05), before the first LayerNorm
    for _i in range(layers):
        h = _block(h, dim, pre)
    if pre:
        h = keras.layers.LayerNormalization()(h)
    model = keras.Model(inp, keras.layers.Dense(50)(h))
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _tokens(seed=0):
    x = tf.random.stateless_uniform([8, 16], [seed, 1], maxval=50, dtype=tf.int32)
    return x, tf.roll(x, -1, axis=1)


@pytest.mark.parametrize("pre", [True, False])
def test_transformer_blocks_get_no_initializer_advice(pre):
    report = gl.inspect_training_step(_transformer(pre), *_tokens())
    text = str(report)
    assert "initializer" not in text and "glorot" not in text and "he_normal" not in text
    if report.status in ("vanishing", "exploding"):
        assert report.verdict.cause == "normalization"
        assert "normalization" in report.message


@pytest.mark.parametrize("position", ["pre", "post"])
def test_build_transformer_gets_no_initializer_advice(position):
    model = gl.build_transformer(6, norm_position=position)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = gl.markov_tokens(8, 32, 64)
    report = gl.inspect_training_step(model, x, y)
    assert "initializer" not in str(report)
    if position == "pre":  # the embedding's small scale before the first LayerNorm: 30x the last block's signal
        s = report.signal_norms
        assert s[0] / s[-1] > 10
        # ... which the rule alone calls exploding; across LayerNorms it is "uneven", with its reason, and no problem
        assert report.status == "uneven" and report.verdict.cause == "normalization"
        assert "uneven, not exploding" in report.message and report.problems == ()


def test_without_normalization_the_initializer_advice_stays():
    """The control: the same kind of ratio without a normalization layer is still blamed on the weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), *[keras.layers.Dense(16, activation="relu",
                              kernel_initializer=keras.initializers.RandomNormal(stddev=1.0)) for _i in range(8)],
                              keras.layers.Dense(1)])
    report = gl.inspect_training_step(model, tf.random.stateless_normal([32, 8], [1, 1]),
                                      tf.random.stateless_normal([32, 1], [1, 2]))
    assert report.status == "exploding" and report.verdict.cause == "initializer-scale"
    assert "initializer" in str(report)


def test_normalization_crossings_in_numbers():
    """The share of the change carried across normalization layers, on hand-made calls."""
    class Call:
        def __init__(self, position, layer):
            self.position, self.layer, self.name = position, layer, layer.name

    dense, ln = keras.layers.Dense(2, name="d"), keras.layers.LayerNormalization(name="ln")
    calls = [Call(0, dense), Call(1, ln), Call(2, dense), Call(3, dense)]
    # d(0) -> ln(1) -> d(2) -> d(3): the segment 0 -> 2 crosses ln, 2 -> 3 does not
    log_rest, names = gl.reports.diagnostics.normalization_crossings(calls, [0, 2, 3], [100.0, 1.0, 0.5])
    assert names == ["ln"] and log_rest == pytest.approx(np.log(2.0))


# ----------------------------------------------------------------------------- uneven (issue 29)
@pytest.mark.parametrize("position", ["pre", "post"])
@pytest.mark.parametrize("depth", [1, 6])
def test_a_fresh_transformer_is_uneven_not_exploding(position, depth):
    """The embedding's small scale before the first LayerNorm gives a ratio near 30 at any depth: uneven."""
    model = gl.build_transformer(depth, norm_position=position)
    x, y = gl.markov_tokens(8, 32, 64)
    report = gl.inspect_training_step(model, x, y, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    s = report.signal_norms
    assert 10 < s[0] / s[-1] < 100 and report.verdict.ratio == pytest.approx(s[0] / s[-1], rel=1e-12)
    assert gl.judge(s).status == "exploding"  # the bare rule on the same numbers
    assert report.status == "uneven" and report.problems == ()
    assert "uneven, not exploding" in report.message and "normalization" in report.message
    assert "status uneven · 0 problems" in report.summary()


def test_uneven_keeps_the_numbers_and_leaves_other_verdicts_alone():
    v = gl.judge([2e3, 1.0], normalized=True)
    u = gl.reports.verdict.uneven(v, ["ln_1", "ln_2"])
    assert (u.status, u.rule, u.ratio, u.gain, u.depth) == ("uneven", v.rule, v.ratio, v.gain, v.depth)
    assert u.finding.startswith(v.finding) and "'ln_1', 'ln_2'" in u.finding and u.cause == "normalization"
    assert u.status in STATUSES and gl.reports.verdict.status_word("uneven") == "uneven"
    healthy = gl.judge([1.0, 1.0])
    assert gl.reports.verdict.uneven(healthy, ["ln"]) is healthy


def test_a_real_explosion_across_batchnorm_stays_exploding():
    """Normalization present, but the rest of the chain explodes on its own: the rule's word stays."""
    keras.utils.set_random_seed(0)
    big = keras.initializers.RandomNormal(stddev=1.0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu", kernel_initializer=big),
                              keras.layers.BatchNormalization(),
                              *[keras.layers.Dense(16, activation="relu", kernel_initializer=big) for _i in range(8)],
                              keras.layers.Dense(1)])
    report = gl.inspect_training_step(model, tf.random.stateless_normal([32, 8], [1, 1]),
                                      tf.random.stateless_normal([32, 1], [1, 2]))
    assert report.status == "exploding" and "exploding" in report.problem_kinds
    assert report.verdict.cause != "normalization"


# ----------------------------------------------------------------------------- judge in stages (issue 27)
def test_judge_is_a_short_pipeline_of_named_stages():
    import ast
    import inspect

    import gradlab.reports.verdict as verdict

    tree = ast.parse(inspect.getsource(verdict))
    lengths = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert lengths["judge"] < 60 and max(lengths.values()) < 100
    called = {n.func.id for n in ast.walk(next(n for n in tree.body if getattr(n, "name", "") == "judge"))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"_check_thresholds", "_degenerate", "_vanishing", "_exploding", "_no_rule", "_causes"} <= called


# ----------------------------------------------------------------------------- one report base (issue 27)
def test_reports_hold_only_their_verdict():
    import dataclasses

    from gradlab.reports.base import VerdictReport

    for cls in (gl.GradientReport, gl.TimeReport, gl.engines.mlp.EngineReport):
        fields = {f.name for f in dataclasses.fields(cls)}
        assert issubclass(cls, VerdictReport) and "verdict" in fields
        assert not fields & {"ratio", "status", "message", "gain"}
    x, y = gl.models.mlp.make_data(32, 8, 0)
    model = gl.models.mlp.build_mlp(6, width=8, activation="sigmoid")
    r = gl.gradient_report(model, x, y)
    v = gl.judge(r.signal_norms)  # the verdict recomputed from the report's own norms
    assert (r.status, r.ratio, r.gain, r.message) == (v.status, v.ratio, v.gain, r.verdict.message)
    assert r.ratio == pytest.approx(r.signal_norms[0] / r.signal_norms[-1], rel=1e-12)
    t = gl.TimeReport.from_norms(loss=1.0, time_step_norms=[1e-4, 1e-2, 1.0], weight_names=["w"], weight_norms=[1.0])
    assert (t.status, t.ratio, t.message) == ("vanishing", pytest.approx(1e-4), gl.judge([1e-4, 1e-2, 1.0],
                                                                                            unit="step").message)
    e = dataclasses.replace(gl.engines.mlp.MLPGradientEngine().report(4), residual=True)
    assert e.status == e.verdict.status and e.summary().endswith("[residual]")
    old = gl.GradientReport(np.array([1.0, 2.0]), np.ones(2), np.ones(2), np.ones(2), 0.5, "healthy", "fine", 0.1)
    assert (old.status, old.ratio, old.message, old.loss) == ("healthy", 0.5, "fine", 0.1)


@pytest.mark.parametrize("gain, side", [(1.051, "within"), (1.053, "outside"), (0.9501, "within"), (0.9499, "outside")])
def test_the_band_printed_is_the_band_used(gain, side):
    """The per-layer band is 0.95..1/0.95 = 1.0526: a gain of 1.051 is inside it, 1.053 outside, and
    the message prints the edge and the gain so that a reader sees which (it printed 0.95–1.05)."""
    norms = gain ** np.arange(30.0)[::-1]  # layer 1 first: gain**29 .. 1, total ratio within 0.1..10 or not
    r = gl.judge(norms)
    band = "0.95–1.0526"
    assert f"({side} {band})" in r.message, r.message
    shown = float(r.message.split(" changes ")[1].split("×")[0])
    assert (0.95 <= shown <= 1 / 0.95) == (side == "within")


def test_an_exact_zero_without_tiny_neighbours_is_not_called_an_underflow():
    v = gl.judge([0.0, 1e-3, 1e-2, 1.0])
    assert v.status == "vanishing" and "underflow" not in v.causes, v.causes
    assert "underflowed" not in v.finding and "no underflow" in v.finding and "zero weights" in v.finding
    near = gl.judge([0.0, 1e-36, 1e-20, 1.0])  # a neighbour near float32's smallest numbers: evidence
    assert "underflowed in float32" in near.finding


@pytest.mark.parametrize("norms, status, word", [([1.0, 1e-5, 1.0], "vanishing", "dip"),
                                                 ([1.0, 1e5, 1.0], "exploding", "spike")])
def test_a_dip_or_a_spike_in_the_middle_layers_is_seen(norms, status, word):
    v = gl.judge(norms)  # the end-to-end ratio is 1: it was "healthy"
    assert v.status == status and v.rule == "middle" and word in v.finding, v.finding
    assert "layer 2" in v.finding
    assert gl.judge([1.0, 0.5, 2.0, 1.0]).status == "healthy"  # a factor of 2 in the middle is no dip
