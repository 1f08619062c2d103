"""The explorers without a browser: the one base, controls, reports, plots, retracing, advice, memory.

Every explorer (GradientExplorer, TimeExplorer, JacobianViewer, TracingLab, TangentExplorer)
is one class on :class:`gradlab.widgets.base.Explorer`; the tests of the base's machinery run
over all of them. The advice tests iterate over the explorers' settings (the hidden-case
style of issue 20): whatever is selected, the status line never recommends it.
"""

from __future__ import annotations

import base64
import gc
import itertools
import json
import re

import numpy as np
import psutil
import pytest

import gradlab as gl
from gradlab.engines.mlp import MLPGradientEngine
from gradlab.engines.rnn import TimeGradientEngine
from gradlab.reports import advice
from gradlab.widgets.base import Explorer
from gradlab.widgets.gradient_explorer import ADVANCED, LOSS_SCALES


@pytest.fixture(scope="module")
def ex():
    return gl.GradientExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform", advanced=True)


@pytest.fixture(scope="module")
def small_engine():
    return MLPGradientEngine(width=8, batch_size=8, max_depth=100)


#: One of each explorer, small where the constructor allows it (built on demand: a test of one
#: explorer builds that one only, not all five).
MAKERS = {
    "gradient": lambda: gl.GradientExplorer(depth=6, width=8, batch_size=8, advanced=True),
    "time": lambda: gl.TimeExplorer(steps=20, units=8, batch_size=8),
    "jacobian": lambda: gl.JacobianViewer(size=4),
    "tracing": lambda: gl.TracingLab(value=0.1, mode="tensor"),
    "tangent": lambda: gl.TangentExplorer(),
}


def _every_explorer():
    """One of each explorer, small where the constructor allows it."""
    return {name: make() for name, make in MAKERS.items()}


@pytest.fixture(scope="module")
def explorers():
    return _every_explorer()


#: One change per explorer that alters the picture but not the figure's axes much.
CHANGES = {
    "gradient": [dict(depth=7), dict(activation="tanh"), dict(clip_mode="norm"), dict(clip_norm=0.01)],
    "time": [dict(steps=21), dict(cell="gru"), dict(input_scale=0.5), dict(clip_mode="value")],
    "jacobian": [dict(size=5), dict(function="square"), dict(size=6)],
    "tracing": [dict(value=0.2), dict(value=0.3), dict(value=0.4)],
    "tangent": [dict(w=0.5), dict(learning_rate=0.5), dict(w=1.5)],
}


# ----------------------------------------------------------------------------- the one base
def test_every_explorer_is_one_class_on_the_base(explorers):
    for name, e in explorers.items():
        assert isinstance(e, Explorer), name
        for method in ("set", "snapshot", "copy", "_on_change", "_on_values", "_repr_mimebundle_", "_view", "png"):
            assert getattr(type(e), method) is getattr(Explorer, method), (name, method)
        # one view module for all: the page finds it as [data-gradlab-explorer="<class>"]
        assert e.kind == type(e).__name__ and e._esm == gl.widgets.base._read("explorer.js")
        assert [c["name"] for c in e.spec] == list(e.control_names)


def test_one_change_handler_per_control(explorers):
    for name, e in explorers.items():
        for w in e.controls:
            if w.kind in ("button", "progress"):
                continue
            handlers = [h for h in w._trait_notifiers.get("value", {}).get("change", [])
                        if getattr(h, "__func__", None) is Explorer._on_change]
            assert len(handlers) == 1, (name, w.description)


@pytest.mark.parametrize("name", list(CHANGES))
def test_no_retrace_after_warm_up_exact_zero(name):
    """After one pass over the changes (warm-up), the same changes trace nothing new: delta 0."""
    e = MAKERS[name]()  # a fresh one: these tests count its traces
    for change in CHANGES[name] * 2:  # warm-up: every mode used once
        e.set(**change)
    for change in CHANGES[name]:
        e.set(**{k: v for k, v in change.items()})
    before = e.tracing_count()
    for i in range(3):
        for change in CHANGES[name]:
            e.set(**change)
        e.set(**CHANGES[name][i % len(CHANGES[name])])
    assert e.tracing_count() - before == 0, name


@pytest.mark.parametrize("name", list(CHANGES))
def test_the_view_is_numbers_not_pictures(name):
    """After every change the kernel sends numbers in JSON (non-finite ones spelled out), never a picture."""
    e = MAKERS[name]()  # a fresh one: these tests count its traces
    for change in CHANGES[name]:
        e.set(**change)
        text = json.dumps(e.view, allow_nan=False)  # NaN/inf would be invalid JSON for the page
        assert "iVBOR" not in text and "data:image" not in text and "base64" not in text, (name, change)
        json.dumps(e.spec, allow_nan=False)
        assert e.view["values"] == e.values == e._values()
        assert e.view["status"]["text"] == e.status_text
        for k, v in change.items():
            assert e.view["values"][k] == pytest.approx(v), (name, k)


def test_non_finite_numbers_are_spelled_out(ex):
    from gradlab.plots.view import jsonable

    assert jsonable(np.array([1.0, np.inf, -np.inf, np.nan])) == [1.0, "inf", "-inf", "nan"]
    assert jsonable({"a": np.float32(2.5), "b": (np.int64(3), np.bool_(True))}) == {"a": 2.5, "b": [3, True]}
    e = ex
    e.set(depth=60, activation="linear", initializer="large_normal", clip_mode="off", residual=False, norm="none",
          dtype="float32", loss_scale=1)
    sig = e.report.signal_norms
    assert not np.all(np.isfinite(sig))  # this setting overflows: the view must still be valid JSON
    got = e.view["report"]["signal_norms"]
    assert [g if isinstance(g, str) else float(g) for g in got] == jsonable(sig)
    e.set(depth=20, activation="sigmoid", initializer="glorot_uniform")


def test_snapshot_and_bundle_carry_the_same_timing_free_text(explorers):
    for name, e in explorers.items():
        snap = e.snapshot()
        assert snap.png[:8] == b"\x89PNG\r\n\x1a\n"
        bundle = e._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert base64.b64decode(bundle["image/png"]) == e.png() == snap.png
        assert bundle["text/plain"] == repr(e) == f"{type(e).__name__}({snap.text})"
        assert not re.search(r"\d ms\b", snap.text), (name, snap.text)


def test_copy_keeps_the_settings_and_leaves_the_original_alone():
    e = gl.GradientExplorer(depth=12, activation="tanh", clip=("norm", 0.1), width=8, batch_size=8)
    c = e.copy()
    assert c.engine is e.engine and c.settings() == e.settings() and c.advanced == e.advanced
    before = e.tracing_count()
    c.set(depth=50, activation="sigmoid")
    assert e.depth.value == 12 and e.activation.value == "tanh" and e.report.depth == 12
    assert e.tracing_count() == before + 1  # one new mode (sigmoid), traced once, shared
    t = gl.TimeExplorer(steps=30, units=8, batch_size=8)
    tc = t.copy(cell="lstm")
    assert tc.engine is t.engine and tc.cell.value == "lstm" and t.cell.value == "simple_rnn"
    j = gl.JacobianViewer(size=5)
    assert j.copy().bench is j.bench


def test_controls_are_named_and_laid_out_for_the_page(explorers):
    for name, e in explorers.items():
        for spec in e.spec:
            assert spec["label"] or spec["type"] == "progress", (name, spec)
            json.dumps(spec, allow_nan=False)
    # chapter 01's depth has a row of its own over the whole explorer (100 values need a track)
    spec = {c["name"]: c for c in explorers["gradient"].spec}
    assert spec["depth"]["wide"] and not spec["activation"]["wide"]


# ----------------------------------------------------------------------------- the GradientExplorer
def test_controls(ex):
    assert (ex.depth.min, ex.depth.max) == (1, 100)
    assert set(gl.models.mlp.ACTIVATIONS) <= set(ex.activation.options)
    inits = {v for _k, v in ex.initializer.options}
    assert {"zeros", "small_normal", "large_normal", "glorot_uniform", "he_normal", "orthogonal"} <= inits
    assert list(ex.clip_mode.options) == ["off", "value", "norm", "global_norm"]
    assert ex.axis == "depth"


def _shown(e):
    """The names of the controls the page shows."""
    return {c["name"] for c in e.spec if not c["hidden"]}


def test_chapter01_explorer_shows_only_chapter01_controls():
    e = gl.GradientExplorer(depth=5, width=8, batch_size=8)
    shown = _shown(e)
    assert not e.advanced
    for name in (*ADVANCED, "preset"):
        assert name not in shown, name
    for name in ("depth", "activation", "initializer", "clip_mode", "clip_norm", "show_forward"):
        assert name in shown
    e.set(residual=True)  # hidden controls still work from code
    assert e.report.residual
    e5 = gl.GradientExplorer(depth=5, width=8, batch_size=8, residual=True)  # a chapter-05 keyword
    assert e5.advanced and {"residual", "preset"} <= _shown(e5)
    with pytest.raises(ValueError, match="advanced must be"):
        gl.GradientExplorer(advanced="yes")


def test_report_is_current_after_assignment(ex):
    ex.set(depth=20, activation="sigmoid", initializer="glorot_uniform", clip_mode="off", residual=False,
           norm="none", dtype="float32", loss_scale=1)
    ex.depth.value = 50
    assert ex.report.depth == 50 and ex.report.status == "vanishing"
    assert ex.status_text.startswith("depth 50 · sigmoid · glorot_uniform · clip off → vanishing: ")
    ex.activation.value = "relu"
    assert ex.report.status == "vanishing"  # relu with glorot still vanishes at depth 50
    ex.initializer.value = "he_normal"
    assert ex.report.status == "healthy" and "relu · he_normal" in ex.status_text
    ex.clip_mode.value = "global_norm"
    ex.clip_norm.value = 1e-3
    assert ex.report.clip == ("global_norm", pytest.approx(1e-3))
    assert "clip global_norm ≤ 0.001" in ex.status_text
    assert not ex.clip_norm.disabled
    ex.clip_mode.value = "off"
    assert ex.clip_norm.disabled and ex.report.clip is None


def _plot(e) -> dict:
    return e.view["plots"][0]


def _labels(e) -> list[str]:
    """The legend the page and the picture show: the series with a finite value, the band, the markers."""
    p = _plot(e)
    out = [p["band"]["label"]] if p["band"] else []
    out += [s["label"] for s in p["series"] if any(not isinstance(v, str) and v > 0 for v in s["y"])]
    out += [m["label"] for m in p["markers"] if m["x"]]
    return out


def test_plot_data_follows_report(ex):
    ex.set(depth=12, activation="tanh", initializer="glorot_uniform", clip_mode="norm", clip_norm=0.01)
    p = _plot(ex)
    assert p["x"] == list(range(1, 13))
    series = {s["label"]: s["y"] for s in p["series"]}
    np.testing.assert_allclose(series["signal dL/dz (back-propagated)"], ex.report.signal_norms)
    np.testing.assert_allclose(series["dL/dW after clipping"], ex.report.clipped_weight_norms)
    lo, hi = p["ylim"]
    assert lo <= np.min(ex.report.clipped_weight_norms) and hi >= np.max(ex.report.weight_norms)
    before = ex.view
    ex.depth.value = 30
    assert ex.view["plots"] != before["plots"] and _plot(ex)["xlim"] == [0.5, 30.5]
    ex.show_forward.value = False
    assert "forward activation std" not in {s["label"] for s in _plot(ex)["series"]}
    ex.set(show_forward=True, clip_mode="off")


def test_legend_lists_only_what_is_drawn(ex):
    ex.set(depth=14, activation="sigmoid", initializer="glorot_uniform", clip_mode="off", residual=False,
           norm="none", dtype="float32", loss_scale=1, show_forward=True)
    labels = _labels(ex)
    assert "dL/dW after clipping" not in labels  # clipping off: no clipped line, no legend entry
    assert "signal exactly 0 (underflow)" not in labels and "NaN / inf" not in labels
    assert "signal predicted by variance propagation" in labels
    ex.set(clip_mode="norm")
    assert "dL/dW after clipping" in _labels(ex)
    ex.set(clip_mode="off", dtype="float16")  # float16: no theory line, zeros drawn
    labels = _labels(ex)
    assert "signal predicted by variance propagation" not in labels
    assert "signal exactly 0 (underflow)" in labels
    ex.set(dtype="float32")


def test_zeros_and_nonfinite_are_marked_on_the_edges(ex):
    ex.set(depth=10, activation="relu", initializer="zeros", clip_mode="off")
    assert ex.report.status == "vanishing"
    zeros, nonfinite = _plot(ex)["markers"]
    assert zeros["at"] == "bottom" and zeros["x"] == list(range(1, 11))  # every layer exactly 0
    ex.set(depth=60, activation="linear", initializer="large_normal")
    assert ex.report.status == "non-finite"
    zeros, nonfinite = _plot(ex)["markers"]
    bad = np.flatnonzero(~np.isfinite(ex.report.signal_norms)) + 1
    assert nonfinite["at"] == "top" and nonfinite["x"] == bad.tolist() and len(bad)


def test_float16_plot_says_values_are_unscaled(ex):
    ex.set(depth=14, activation="sigmoid", initializer="glorot_uniform", dtype="float16", loss_scale=2**15)
    note = " ".join(part["text"] for line in ex.view["notes"] for part in line)
    assert "unscaled" in note and "2^15" in note
    assert "worked" in ex.advice.finding and "2^15" in ex.advice.finding
    ex.set(loss_scale=1)
    assert not ex.view["notes"]
    ex.set(dtype="float32")


def _expected_status(signal):
    """The verdict's total-ratio rule, recomputed from the plotted line (independent of GradientReport)."""
    signal = np.asarray(signal, dtype=float)
    if not np.all(np.isfinite(signal)):
        return "non-finite"
    if signal.size > 1 and signal[0] < 1e-3 * signal[-1]:
        return "vanishing"
    if signal.size > 1 and signal[0] > 1e3 * signal[-1]:
        return "exploding"
    return None  # the per-layer rule decides: not pinned here


def test_every_combination_yields_plot_and_status():
    """All activations × initializers at depth 100 or 30 (rotating, one clip mode each) and depth 1."""
    e = gl.GradientExplorer(depth=2, width=8, batch_size=8)
    seen = {}
    for i, (act, (_label, init)) in enumerate(itertools.product(e.activation.options, e.initializer.options)):
        for depth, mode in (((100, 30, 30)[i % 3], e.clip_mode.options[i % 4]), (1, "off")):
            e.set(depth=depth, activation=act, initializer=init, clip_mode=mode)
            assert e.report.depth == depth
            assert f"depth {depth} · {act} · {init}" in e.status_text
            ys = np.array([float(v) for v in e.view["plots"][0]["series"][0]["y"]])
            np.testing.assert_array_equal(ys, e.report.signal_norms)
            expected = _expected_status(ys)
            if expected is not None:
                assert e.report.status == expected, (act, init, depth)
            if depth == 1 and ys[0] > 0:
                assert e.report.status == "healthy"  # one layer: nothing to vanish over
            seen[(act, init, depth)] = e.report.status
    assert e.png()[:4] == b"\x89PNG"
    assert seen[("sigmoid", "glorot_uniform", 30)] == "vanishing"
    assert seen[("relu", "zeros", 100)] == "vanishing"
    assert seen[("linear", "large_normal", 30)] in ("exploding", "non-finite")
    assert seen[("linear", "orthogonal", 100)] == "healthy"


def test_no_retrace_per_value_in_any_mode():
    e = gl.GradientExplorer(depth=5, activation="tanh", width=8, batch_size=8)
    modes = [dict(residual=True), dict(norm="batch"), dict(norm="layer"), dict(dtype="float16"),
             dict(dtype="bfloat16", residual=True, norm="layer")]
    for m in modes:
        e.set(**{"residual": False, "norm": "none", "dtype": "float32", **m})  # warm-up: one trace
        before = e.tracing_count()
        for i in range(6):
            e.set(depth=1 + (i * 37) % 100, loss_scale=2 ** (i * 3), clip_mode="global_norm",
                  clip_norm=10.0 ** (i - 3))
        assert e.tracing_count() - before == 0, m
        e.set(clip_mode="off", loss_scale=1)


def test_constructor_keywords_and_presets():
    e = gl.GradientExplorer(depth=14, residual=True, norm="layer", dtype="bfloat16", loss_scale=8)
    assert (e.residual.value, e.norm.value, e.dtype.value, e.loss_scale.value) == (True, "layer", "bfloat16", 8)
    assert e.report.mode == "residual · layer norm · bfloat16 · loss scale 2^3"
    e.preset.value = "micikevicius2018_fp16"
    assert (e.depth.value, e.dtype.value, e.loss_scale.value, e.residual.value) == (14, "float16", 1, False)
    assert e.preset_result.measured == 5
    # paper: "some layer underflows"; measured: 5 layers. That is agreement, and it reads so.
    assert "agrees" in repr(e) and "differs" not in repr(e)
    note = " ".join(part["text"] for line in e.view["notes"] for part in line)
    assert "Micikevicius et al. 2018 · float16, no loss scale, 14 layers" in note
    e.loss_scale.value = 2**15  # leaves the preset: deselected, note cleared
    assert e.preset.value == "" and e.preset_result is None
    assert [part["text"] for line in e.view["notes"] for part in line] == [
        "gradients shown unscaled (divided by the loss scale 2^15)"]  # the preset's note is gone
    assert e.values["preset"] == ""  # the page's dropdown follows
    e.set(preset="saxe2014")
    assert e.preset_result.measured == pytest.approx(1.0, abs=1e-3)
    assert "agrees" in " ".join(part["text"] for line in e.view["notes"] for part in line)
    e2 = gl.GradientExplorer(preset="he2015_xavier")
    assert e2.depth.value == 30 and e2.preset_result.measured == pytest.approx(2**-14.5, rel=0.6)
    with pytest.raises(ValueError, match="preset must be one of"):
        gl.GradientExplorer(preset="nope")


def test_preset_names_are_told_apart_in_full():
    """Both Micikevicius presets differ only late in their titles: the dropdown gets the full row width."""
    e = gl.GradientExplorer(depth=3, width=8, batch_size=8, advanced=True)
    labels = [label for label, _key in e.preset.options]
    assert len(set(labels)) == len(labels)
    (spec,) = [c for c in e.spec if c["name"] == "preset"]
    assert [label for _v, label in spec["options"]] == labels and not spec["hidden"]


def test_preset_comparison_words():
    from gradlab.engines.presets import PRESETS, PresetResult

    def words(key, measured):
        return advice.compare_with_paper(PresetResult(key, PRESETS[key], measured))

    assert words("micikevicius2018_fp16", 5).agrees  # "at least one layer" and 5 layers agree
    assert not words("micikevicius2018_fp16", 0).agrees
    assert words("micikevicius2018_scaled", 0).agrees and not words("micikevicius2018_scaled", 2).agrees
    assert words("saxe2014", 1.0).verdict == "agrees"
    assert words("he2015_he", 0.58).agrees and words("he2015_he", 0.58).verdict == "agrees closely (×1.7)"
    # issue 29: a 1.5x and a 9.4x agreement no longer read the same
    close, loose = words("he2015_xavier", 2.95e-5), words("he2016_residual", 9.38)
    assert (close.closeness, close.verdict) == ("close", "agrees closely (×1.5)")
    assert (loose.closeness, loose.verdict) == ("tolerance", "same order of magnitude (×9.4), not close")
    assert close.agrees and loose.agrees and "closely" not in loose.verdict
    assert words("he2015_he", 2.5).closeness == "tolerance" and words("he2015_he", 1.9).closeness == "close"
    assert words("he2015_he", 11.0).verdict == "differs by a factor of 11" and not words("he2015_he", 11.0).agrees
    assert words("glorot2010_normalized", 0.737).verdict == "within ±30% (×1.4), not close"
    assert words("glorot2010_standard", 0.489).verdict == "agrees closely (×1.2)"
    assert not words("he2015_xavier", 1.0).agrees  # 1 against 4.3e-5: a factor of 23,000
    assert not words("glorot2010_normalized", 0.5).agrees and words("pennington2017", 0.975).agrees
    assert not words("klambauer2017", float("nan")).agrees


def test_bad_constructor_arguments_and_set():
    for kwargs, match in [(dict(depth=0), "depth must be 1 to 100"), (dict(depth=101), "depth must be 1 to 100"),
                          (dict(activation="softplus"), "activation must be one of"),
                          (dict(initializer="he"), "initializer must be one of"),
                          (dict(clip=("norm", 0)), "clip must be None or"), (dict(width=0), "width must be"),
                          (dict(batch_size=-1), "batch_size must be"), (dict(loss_scale=3), "loss_scale must be")]:
        with pytest.raises(ValueError, match=match):
            gl.GradientExplorer(**kwargs)
    e = gl.GradientExplorer(depth=3, width=8, batch_size=8)
    with pytest.raises(ValueError, match="unknown control"):
        e.set(dept=3)
    with pytest.raises(ValueError, match="loss_scale must be a power of two"):
        e.set(loss_scale=3)


# ----------------------------------------------------------------------------- advice (issue 20)
def _labels_of(e):
    return e.labels()


def _word(label: str) -> re.Pattern:
    return re.compile(rf"(?<![\w]){re.escape(label)}(?![\w])")


#: Dropdown labels too generic to search for in a sentence ("none", "layer", "batch", "off").
_GENERIC = {"none", "layer", "batch", "off", "value", "norm", "linear"}


def _check_advice(a, settings, labels, shown, where):
    for s in a.suggestions:
        assert s.control in shown, (where, s)
        assert settings[s.control] != s.value, (where, s)  # never what is selected
        assert s.label == labels.get(s.control, {}).get(s.value, str(s.value)), (where, s)
        assert s.label in a.fix, (where, s, a.fix)  # named by its dropdown label
    for control, value in settings.items():
        label = labels.get(control, {}).get(value)
        if not label or label in _GENERIC or control not in shown:
            continue
        if any(s.label == label for s in a.suggestions):
            continue
        assert not _word(label).search(a.fix), (where, control, label, a.fix)
    if settings.get("residual") is True:
        assert "residual connection" not in a.fix, where


def _keras_variance(name: str, n: int) -> float:
    """Var W of a square n x n kernel from the Keras initializer's own definition (its config),
    independently of gradlab.reports.advice: VarianceScaling's scale over fan_in, fan_out or
    fan_avg (all n here), a uniform limit sqrt(3 scale / n) or a normal's stddev sqrt(scale / n)
    (truncated at 2 stddev: stddev divided by .8796 and the truncation's variance factor
    1 - 4 phi(2) / (Phi(2) - Phi(-2))); RandomNormal's stddev**2; Orthogonal gain**2 / n; Zeros 0."""
    import math

    init = gl.models.mlp.make_initializer(name)
    config = init.get_config()
    if type(init).__name__ == "Zeros":
        return 0.0
    if type(init).__name__ == "RandomNormal":
        return config["stddev"] ** 2
    if type(init).__name__ in ("Orthogonal", "OrthogonalInitializer"):
        return config.get("gain", 1.0) ** 2 / n
    # a VarianceScaling subclass (HeNormal, GlorotUniform, ...) holds its definition as attributes
    fan = {"fan_in": n, "fan_out": n, "fan_avg": (n + n) / 2}[init.mode]
    scale = init.scale / fan
    if init.distribution == "uniform":
        return (math.sqrt(3 * scale)) ** 2 / 3
    if init.distribution == "untruncated_normal":
        return scale
    phi2 = math.exp(-2) / math.sqrt(2 * math.pi)
    truncation = 1 - 2 * 2 * phi2 / math.erf(2 / math.sqrt(2))
    return (math.sqrt(scale) / 0.87962566103423978) ** 2 * truncation


def test_keras_variances_match_samples():
    """The formulas above against the initializers' own draws (a 256 x 256 kernel, 65,536 values)."""
    for name in gl.models.mlp.INITIALIZERS:
        sample = np.asarray(gl.models.mlp.make_initializer(name, seed=3)((256, 256)))
        np.testing.assert_allclose(np.var(sample), _keras_variance(name, 256), rtol=0.03, atol=1e-12,
                                   err_msg=name)


def _check_initializer_claims(a, settings, width, claims):
    """Every suggested initializer changes the variance the way the advice says (issue 29: no
    same-variance twin called "smaller-variance"), computed from Keras's definitions."""
    for s in a.suggestions:
        if s.control != "initializer":
            continue
        now, new = _keras_variance(settings["initializer"], width), _keras_variance(s.value, width)
        claims[s.claim] = claims.get(s.claim, 0) + 1
        if s.claim == "smaller-variance":
            assert new < now * (1 - 1e-6) and "smaller-variance initializer" in a.fix, (settings, s, a.fix)
        elif s.claim in ("larger-variance", "random"):
            assert new > now * (1 + 1e-6), (settings, s, a.fix)
            assert ("larger-variance initializer" if s.claim == "larger-variance" else "Zero weights") in a.fix
        elif s.claim == "isometry":
            assert s.value == "orthogonal" and settings["initializer"] != "orthogonal" and "singular value" in a.fix
        else:  # a change of activation with its matched initializer: never one of the same variance
            assert abs(new - now) > 1e-6 * max(new, now), (settings, s, a.fix)


def test_gradient_advice_never_recommends_what_is_selected(small_engine):
    """Hidden cases: every activation × initializer at three depths in float32 and in float16
    (loss scale off, 2^15 and 2^24 rotating); then residual and residual + layer norm in every
    precision for a saturating and a rectifying activation; each with chapter 05's controls
    shown and hidden, clipping off and on."""
    e = gl.GradientExplorer(depth=3, width=8, batch_size=8, advanced=True, engine=small_engine)
    labels = _labels_of(e)
    inits = [v for _l, v in e.initializer.options]
    scales = (1.0, 2.0**15, 2.0**24)
    cases = []
    for i, (act, init) in enumerate(itertools.product(gl.models.mlp.ACTIVATIONS, inits)):
        for k, depth in enumerate((3, 14, 60)):
            cases.append((act, init, depth, "float32", 1.0, False, "none", "off" if k % 2 else "global_norm"))
            cases.append((act, init, depth, "float16", scales[(i + k) % 3], False, "none", "off"))
    for act, init, (residual, norm), dtype, scale in itertools.product(
            ("sigmoid", "relu"), inits, ((True, "none"), (True, "layer")),
            ("float32", "float16", "bfloat16"), (1.0, 2.0**24)):
        if dtype != "float16" and scale != 1.0:
            continue
        cases.append((act, init, 14 if scale == 1.0 else 60, dtype, scale, residual, norm, "off"))
    checked, claims = 0, {}
    for act, init, depth, dtype, scale, residual, norm, clip_mode in cases:
        settings = dict(depth=depth, activation=act, initializer=init, clip_mode=clip_mode, clip_norm=1.0,
                        show_forward=True, residual=residual, norm=norm, dtype=dtype, loss_scale=scale)
        report = small_engine.report(depth, act, init, None if clip_mode == "off" else (clip_mode, 1.0),
                                     residual=residual, norm=norm, dtype=dtype, loss_scale=scale, theory=False)
        for shown in (tuple(settings), tuple(n for n in settings if n not in ADVANCED)):
            a = advice.gradient_advice(report, settings, labels, shown=shown, loss_scales=LOSS_SCALES)
            assert a.status == report.status
            _check_advice(a, settings, labels, shown, (act, init, depth, dtype, scale, residual, norm, clip_mode))
            _check_initializer_claims(a, settings, small_engine.width, claims)
            if report.status == "healthy":
                assert a.fix == "" and not a.suggestions
            checked += 1
    assert checked > 800
    assert claims.get("smaller-variance", 0) > 10 and claims.get("larger-variance", 0) > 10, claims


def test_advice_in_the_status_line_reads_the_settings(ex):
    """The four cases issue 20 quotes, each now answered from the settings."""
    # glorot or he selected: the advice does not recommend them
    ex.set(depth=30, activation="tanh", initializer="glorot_uniform", clip_mode="off", residual=False,
           norm="none", dtype="float32", loss_scale=1)
    for init in ("glorot_uniform", "he_normal"):
        ex.set(activation="relu" if init == "he_normal" else "tanh", initializer=init, depth=60)
        assert not _word(ex.labels()["initializer"][init]).search(ex.advice.fix), ex.advice.fix
    # the loss scale 2^24 overflows float16: named, and a smaller scale is offered that works
    ex.set(depth=14, activation="sigmoid", initializer="glorot_uniform", dtype="float16", loss_scale=2**24)
    assert ex.report.status == "non-finite"
    assert "2^24" in ex.advice.finding and "loss scale" in ex.advice.finding
    assert "weight scale" not in ex.advice.text
    (s,) = [s for s in ex.advice.suggestions if s.control == "loss_scale"]
    assert s.value < 2**24
    ex.set(loss_scale=s.value)
    assert ex.report.status != "non-finite" and np.all(ex.report.signal_norms > 0)
    # "a loss scale shifts gradients up" is not repeated when one is on and it worked
    assert "shifts float16 gradients up" not in ex.advice.fix and "worked" in ex.advice.finding
    ex.set(dtype="float32", loss_scale=1)


def test_time_advice_never_recommends_what_is_selected():
    engine = TimeGradientEngine(units=8, batch_size=8, max_steps=200)
    t = gl.TimeExplorer(steps=20, engine=engine)
    labels = t.labels()
    checked = 0
    for cell, init in itertools.product(gl.models.rnn.CELLS, gl.models.rnn.RECURRENT_INITIALIZERS):
        for steps, scale in ((10, 0.01), (60, 1.0), (200, 5.0)):
            for clip_mode in ("off", "norm"):
                settings = dict(cell=cell, steps=steps, recurrent_initializer=init, input_scale=scale,
                                clip_mode=clip_mode, clip_norm=1.0)
                report = engine.report(cell, steps, init, scale, None if clip_mode == "off" else (clip_mode, 1.0))
                a = advice.time_advice(report, settings, labels)
                _check_advice(a, settings, labels, tuple(settings), (cell, init, steps, scale))
                checked += 1
    assert checked == 3 * 5 * 3 * 2
    t.set(steps=200, recurrent_initializer="identity")
    assert "identity" not in t.advice.fix  # issue 20: "orthogonal, identity" while identity is selected


# ----------------------------------------------------------------------------- memory
def test_memory_is_bounded_over_150_changes():
    """150 changes, every mode axis included: the figure, its background cache and the traced
    functions are reused, so RSS stays flat once each mode has been seen (width 8 keeps it fast)."""
    e = gl.GradientExplorer(depth=10, width=8, batch_size=8, advanced=True)
    proc = psutil.Process()
    acts = ("sigmoid", "relu")
    modes = [dict(residual=False, norm="none", dtype="float32"),
             dict(residual=True, norm="layer", dtype="float16"),
             dict(residual=True, norm="batch", dtype="bfloat16")]

    def depth_at(i):  # a back-and-forth drag over 11..30, with a jump every 25 changes
        d = i % 38
        return 11 + (d if d < 19 else 37 - d) if i % 25 else 1 + (i * 37) % 100

    for m in modes:  # warm up: traces, caches, matplotlib font cache, the background cache
        for a in acts:
            e.set(activation=a, **m)
    for i in range(0, 150, 5):
        e.depth.value = depth_at(i)
    gc.collect()
    rss0 = proc.memory_info().rss
    for i in range(150):
        e.depth.value = depth_at(i)
        if i % 25 == 0:
            e.activation.value = acts[(i // 25) % 2]
        if i % 50 == 0:
            e.set(loss_scale=2 ** ((i // 50) % 16), **modes[(i // 50) % 3])
    gc.collect()
    grown_mb = (proc.memory_info().rss - rss0) / 2**20
    print(f"RSS growth over 150 changes: {grown_mb:.1f} MB")
    assert grown_mb < 20


# ----------------------------------------------------------------------------- the small explorers
def test_tangent_explorer():
    t = gl.TangentExplorer(w=-0.5, learning_rate=0.3)
    assert [c["name"] for c in t.spec] == ["w", "learning_rate"] and t.axis == "w"
    assert t.slope < 0 and t.w_next > -0.5
    t.w.value = 3.5
    assert t.slope > 0 and t.w_next < 3.5 and "to the left" in t.status_text
    t.w.value, t.learning_rate.value = 0.0, 1.5  # too large a step: past the minimum, loss rises
    assert t.w_next == pytest.approx(4.5) and "(loss 6.4" in t.status_text
    assert gl.topics.intro.toy_loss(4.5).numpy() > t.loss
    step = [s for s in t.view["plots"][0]["series"] if s["label"] == "w after one step"][0]
    assert (step["x"][0], step["y"][0]) == (pytest.approx(4.5), pytest.approx(float(gl.topics.intro.toy_loss(4.5).numpy())))
    with pytest.raises(ValueError, match="w must be between"):
        gl.TangentExplorer(w=10)
    with pytest.raises(ValueError, match="learning_rate"):
        gl.TangentExplorer(learning_rate=-1)


def test_tracing_lab_without_a_plot_still_has_a_picture_and_text():
    bare = gl.TracingLab(plot=False)
    assert bare.view["plots"] == []
    snap = bare.snapshot()
    assert snap.png[:8] == b"\x89PNG\r\n\x1a\n" and snap.text.startswith("python float · value 0.1")


@pytest.fixture
def chinese():
    """gradlab speaks Chinese for one test (the zh edition's ``gl.setup(lang="zh")``)."""
    from gradlab.fonts import use_cjk_fonts
    from gradlab.i18n import get_language, set_language

    before = get_language()
    set_language("zh")
    use_cjk_fonts()  # what gl.setup does: Chinese glyphs in the figures
    try:
        yield
    finally:
        set_language(before)


def test_chinese_status_names_each_normalization_in_one_message(chinese, small_engine):
    # "{norm} norm" used to put the code word before a translated "norm": "batch 范数"
    ex = gl.GradientExplorer(depth=6, norm="batch", engine=small_engine)
    assert "批量规范化" in ex.status_text and "batch" not in ex.status_text, ex.status_text
    ex.norm.value = "layer"
    assert "层规范化" in ex.status_text and "layer" not in ex.status_text, ex.status_text


def test_chinese_status_lines_join_sentences_without_a_space(chinese, small_engine):
    # the finding and the advice are whole sentences; Chinese puts nothing after 。
    ex = gl.GradientExplorer(depth=30, activation="sigmoid", engine=small_engine)
    assert ex.report.status == "vanishing" and ex.status_text.count("。") >= 2, ex.status_text
    te = gl.TimeExplorer(steps=40, units=8, batch_size=8)
    assert te.report.status == "vanishing" and te.status_text.count("。") >= 2, te.status_text
    for text in (ex.status_text, te.status_text):
        assert "。 " not in text, text


# ----------------------------------------------------------------------------- changes from the page (issue 35)
def _in_a_loop(coro):
    """Run ``coro`` in a fresh event loop of its own thread, as a kernel runs a comm handler: the
    test process may already run a loop in this thread (Playwright's, in make test's worker)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _from_page(e, **values):
    """What ipywidgets does when the page sends state: ``set_state`` of the ``values`` trait."""
    e.set_state({"values": {**e.values, **values}})


def test_a_change_from_the_page_sets_the_controls_and_the_report(small_engine):
    e = gl.GradientExplorer(depth=5, width=8, batch_size=8, engine=small_engine)
    _from_page(e, depth=12, activation="tanh")  # no event loop: drawn at once
    assert (e.depth.value, e.activation.value, e.report.depth) == (12, "tanh", 12)
    assert e.view["values"]["depth"] == 12 and e.view["report"]["settings"]["activation"] == "tanh"
    _from_page(e, depth=500)  # a value no control takes is put back, the report unchanged
    assert e.depth.value == 12 and e.values["depth"] == 12 and e.report.depth == 12


def test_changes_from_the_page_return_at_once_and_draw_only_the_latest(monkeypatch, small_engine):
    import asyncio

    e = gl.GradientExplorer(depth=5, width=8, batch_size=8, engine=small_engine)
    calls = []
    compute = e._compute
    monkeypatch.setattr(e, "_compute", lambda: calls.append(e.depth.value) or compute())

    async def run():
        for d in (6, 7, 8):
            _from_page(e, depth=d)
            assert calls == []  # the handler returned without computing
        await asyncio.sleep(0.05)

    _in_a_loop(run())
    assert calls == [8] and e.report.depth == 8 and e.view["values"]["depth"] == 8


def test_a_page_message_on_another_thread_is_handled_on_the_explorers_own(small_engine):
    """JupyterLab 4.4+ with ipykernel 7 delivers the page's messages on a subshell's thread: the
    explorer applies them on the loop of the thread that built it, never beside its work ahead."""
    import asyncio
    import threading

    threads = []

    async def run():
        e = gl.GradientExplorer(depth=5, width=8, batch_size=8, engine=small_engine)
        compute = e._compute
        e._compute = lambda: threads.append(threading.get_ident()) or compute()
        page = threading.Thread(target=_from_page, args=(e,), kwargs={"depth": 12, "activation": "tanh"})
        page.start()
        page.join()
        before = (e.depth.value, e.activation.value)  # the page's thread only handed it over
        for _ in range(5):
            await asyncio.sleep(0.01)
        return e, before, threading.get_ident()

    e, before, home = _in_a_loop(run())
    assert before == (5, "sigmoid")
    assert (e.depth.value, e.activation.value, e.report.depth) == (12, "tanh", 12)
    assert threads == [home], threads  # computed once, on the explorer's thread


def test_back_to_back_page_messages_never_send_the_page_an_older_state(small_engine):
    """Two messages from the page on its own thread, handled later on the explorer's: the first
    one's handler must not send the page its (older) values back, which moved the page to a
    depth it had left (a stray 'depth 20' drawn at 50 in the browser test)."""
    import asyncio
    import threading

    pushed = []

    async def run():
        e = gl.GradientExplorer(depth=20, width=8, batch_size=8, engine=small_engine)
        e.observe(lambda ch: threading.get_ident() == home and pushed.append(dict(ch["new"])), names="values")

        def page():
            _from_page(e, depth=50, activation="tanh")
            _from_page(e, activation="relu", initializer="he_normal")

        t = threading.Thread(target=page)
        t.start()
        t.join()
        for _ in range(5):
            await asyncio.sleep(0.01)
        return e

    home = None

    async def outer():
        nonlocal home
        home = threading.get_ident()
        return await run()

    e = _in_a_loop(outer())
    assert (e.depth.value, e.activation.value, e.initializer.value) == (50, "relu", "he_normal")
    assert e.report.depth == 50 and e.values["activation"] == "relu"
    assert pushed == [], pushed  # nothing sent back: the page's own values were taken as they came


def test_a_python_change_is_computed_before_it_returns(small_engine):
    e = gl.GradientExplorer(depth=5, width=8, batch_size=8, engine=small_engine)

    async def run():
        e.depth.value = 33  # inside a running loop too
        return e.report.depth, e.view["values"]["depth"], e.values["depth"]

    assert _in_a_loop(run()) == (33, 33, 33)


def test_once_displayed_the_axis_is_computed_ahead_nearest_first(monkeypatch, small_engine):
    import asyncio

    e = gl.GradientExplorer(depth=50, width=8, batch_size=8, engine=small_engine)
    sent = []
    monkeypatch.setattr(e, "send", lambda msg, buffers=None: sent.append(msg))
    monkeypatch.setattr(gl.widgets.base, "store_picture", lambda *a, **k: True)

    async def run():
        e._repr_mimebundle_()
        await asyncio.sleep(1.0)
        first = [m["views"][0]["values"]["depth"] for m in sent]
        _from_page(e, activation="tanh")  # new settings: the work ahead starts again from 50
        sent.clear()
        await asyncio.sleep(0.6)
        return first, [m["views"][0]["values"] for m in sent]

    first, after = _in_a_loop(run())
    # nearest first, a depth at a time, the points behind (in the direction of the last move: up
    # by default) counted four times as far
    assert first[:10] == [51, 52, 53, 54, 49, 55, 56, 57, 58, 48]
    assert len(set(first)) == len(first)  # nothing sent twice
    tanh = [v["depth"] for v in after if v["activation"] == "tanh"]
    assert tanh[:5] == [51, 52, 53, 54, 49] and all(v["activation"] == "tanh" for v in after)
    # the views sent ahead are the ones a change to that depth draws
    view = next(m for m in sent if m["views"][0]["values"]["depth"] == 49)["views"][0]
    e.depth.value = 49
    assert json.dumps(view, sort_keys=True) == json.dumps(e.view, sort_keys=True)


def test_the_work_ahead_follows_a_drag_at_once_and_waits_after_a_click(monkeypatch, small_engine):
    """Along the axis the points in the drag's direction go first, from the next turn; after a
    change off the axis (a click) nothing is computed ahead before ``ahead_delay_s`` without a
    change, so a second click is not held back by a point computed meanwhile."""
    import asyncio

    e = gl.GradientExplorer(depth=50, width=8, batch_size=8, engine=small_engine)
    sent = []
    monkeypatch.setattr(e, "send", lambda msg, buffers=None: sent.append(msg["views"][0]["values"]))
    monkeypatch.setattr(gl.widgets.base, "store_picture", lambda *a, **k: True)

    async def run():
        e._repr_mimebundle_()
        await asyncio.sleep(0.5)
        _from_page(e, depth=45)  # a drag going down
        sent.clear()
        await asyncio.sleep(0.3)
        down = [v["depth"] for v in sent]
        _from_page(e, activation="relu")  # a click
        sent.clear()
        await asyncio.sleep(0.5 * e.ahead_delay_s)
        early = list(sent)
        await asyncio.sleep(e.ahead_delay_s + 0.3)
        return down, early, [v["depth"] for v in sent if v["activation"] == "relu"]

    down, early, later = _in_a_loop(run())
    assert down[:4] == [44, 43, 42, 41], down  # 46 is behind the drag: rank 4 after 44
    assert early == []
    assert later[:2] == [46, 47] or later[:2] == [44, 43], later  # the click itself moved no depth
    assert len(later) > 4


def test_the_picture_for_a_save_waits_for_the_last_change(monkeypatch, small_engine):
    import asyncio

    e = gl.GradientExplorer(depth=5, width=8, batch_size=8, engine=small_engine)
    stored = []
    monkeypatch.setattr(gl.widgets.base, "store_picture", lambda mid, png, text, note="": stored.append(text))
    monkeypatch.setattr(e, "send", lambda *a, **k: None)

    async def run():
        e._repr_mimebundle_()
        stored.clear()
        for d in range(6, 16):  # a drag: no picture while it goes on
            _from_page(e, depth=d)
            await asyncio.sleep(0.02)
        during = list(stored)
        await asyncio.sleep(e.picture_delay_s + 0.5)
        return during

    assert _in_a_loop(run()) == []
    assert len(stored) == 1 and "depth 15 ·" in stored[0]
