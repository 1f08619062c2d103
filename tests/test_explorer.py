"""The GradientExplorer without a browser: controls, report, plot data, retracing, memory."""

from __future__ import annotations

import base64
import gc
import itertools

import numpy as np
import psutil
import pytest

import gradlab as gl


@pytest.fixture(scope="module")
def ex():
    return gl.GradientExplorer(depth=20, activation="sigmoid", initializer="glorot_uniform")


def test_controls_and_css_classes(ex):
    classes = {
        "gradlab-depth": ex.depth,
        "gradlab-activation": ex.activation,
        "gradlab-initializer": ex.initializer,
        "gradlab-clip-mode": ex.clip_mode,
        "gradlab-clip-norm": ex.clip_norm,
        "gradlab-status": ex.status,
        "gradlab-plot": ex.plot,
        "gradlab-preset-note": ex.preset_note,
        "gradlab-explorer": ex,
    }
    for cls, widget in classes.items():
        assert cls in widget._dom_classes
    assert (ex.depth.min, ex.depth.max) == (1, 100)
    assert set(gl.ACTIVATIONS) <= set(ex.activation.options)
    inits = {v for _, v in ex.initializer.options}
    assert {"zeros", "small_normal", "large_normal", "glorot_uniform", "glorot_normal", "he_normal",
            "he_uniform", "lecun_normal", "orthogonal"} <= inits
    assert list(ex.clip_mode.options) == ["off", "value", "norm", "global_norm"]


def test_report_is_current_after_assignment(ex):
    ex.set(depth=20, activation="sigmoid", initializer="glorot_uniform", clip_mode="off")
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


def test_plot_data_follows_report(ex):
    ex.set(depth=12, activation="tanh", initializer="glorot_uniform", clip_mode="norm", clip_norm=0.01)
    xs, ys = ex._plot.signal.get_data()
    np.testing.assert_array_equal(xs, np.arange(1, 13))
    np.testing.assert_allclose(ys, ex.report.signal_norms)
    np.testing.assert_allclose(ex._plot.clipped.get_data()[1], ex.report.clipped_weight_norms)
    before = ex.plot.value
    ex.depth.value = 30
    assert ex.plot.value != before  # the image was re-rendered
    assert bytes(ex.plot.value[:8]) == b"\x89PNG\r\n\x1a\n"
    ex.show_forward.value = False
    assert len(ex._plot.forward.get_data()[0]) == 0


def test_zeros_and_nonfinite_are_drawn(ex):
    ex.set(depth=10, activation="relu", initializer="zeros", clip_mode="off")
    assert ex.report.status == "vanishing"
    assert len(ex._plot.zeros.get_data()[0]) == 10  # every layer marked as exactly 0
    ex.set(depth=60, activation="linear", initializer="large_normal")
    assert ex.report.status == "non-finite"
    assert len(ex._plot.nonfinite.get_data()[0]) > 0


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
    """All activations × initializers at depth 100 and 1, each clip mode on a rotating third of them."""
    ex = gl.GradientExplorer(depth=2, width=8, batch_size=8)
    seen = {}
    for i, (act, (_, init)) in enumerate(itertools.product(ex.activation.options, ex.initializer.options)):
        for depth, mode in ((100, "off"), (1, "off"), (100, ex.clip_mode.options[1 + i % 3])):
            ex.set(depth=depth, activation=act, initializer=init, clip_mode=mode)
            assert ex.report.depth == depth
            assert f"depth {depth} · {act} · {init}" in ex.status_text
            assert bytes(ex.plot.value[:4]) == b"\x89PNG"
            ys = ex._plot.signal.get_data()[1]
            np.testing.assert_array_equal(ys, ex.report.signal_norms)
            expected = _expected_status(ys)
            if expected is not None:
                assert ex.report.status == expected, (act, init, depth)
            if depth == 1 and ys[0] > 0:
                assert ex.report.status == "healthy"  # one layer: nothing to vanish over
            seen[(act, init, depth, mode)] = ex.report.status
    # pinned cases from chapter 01 and the literature (width 8 here, so only robust ones)
    assert seen[("sigmoid", "glorot_uniform", 100, "off")] == "vanishing"
    assert seen[("relu", "zeros", 100, "off")] == "vanishing"
    assert seen[("linear", "large_normal", 100, "off")] == "non-finite"
    assert seen[("linear", "orthogonal", 100, "off")] == "healthy"


def test_no_retrace_on_slider_moves():
    ex = gl.GradientExplorer(depth=5)
    ex.depth.value = 6
    ex.clip_mode.value = "norm"
    before = ex.engine.tracing_count()
    for i in range(20):
        ex.depth.value = 1 + (i * 13) % 100
        ex.clip_norm.value = 10 ** ((i % 7) - 3)
    assert ex.engine.tracing_count() - before == 0


def test_no_retrace_per_value_in_any_mode():
    ex = gl.GradientExplorer(depth=5, activation="tanh")
    modes = [dict(residual=True), dict(norm="batch"), dict(norm="layer"), dict(dtype="float16"),
             dict(dtype="bfloat16", residual=True, norm="layer")]
    for m in modes:
        ex.set(**{"residual": False, "norm": "none", "dtype": "float32", **m})  # warm-up: one trace
        before = ex.engine.tracing_count()
        for i in range(6):
            ex.set(depth=1 + (i * 37) % 100, loss_scale=2 ** (i * 3), clip_mode="global_norm",
                   clip_norm=10.0 ** (i - 3))
        assert ex.engine.tracing_count() - before == 0, m
        ex.set(clip_mode="off", loss_scale=1)


def test_new_controls(ex):
    classes = {"gradlab-residual": ex.residual, "gradlab-norm": ex.norm, "gradlab-dtype": ex.dtype,
               "gradlab-loss-scale": ex.loss_scale, "gradlab-preset": ex.preset}
    for cls, widget in classes.items():
        assert cls in widget._dom_classes
    assert list(ex.norm.options) == ["none", "batch", "layer"]
    assert list(ex.dtype.options) == ["float32", "float16", "bfloat16"]
    scales = [v for _, v in ex.loss_scale.options]
    assert scales[0] == 1 and all(b == 2 * a for a, b in zip(scales, scales[1:], strict=False))
    ex.set(depth=50, activation="sigmoid", initializer="glorot_uniform", clip_mode="off")
    assert ex.report.ratio < 1e-30
    ex.residual.value = True
    assert ex.report.residual and ex.report.status == "healthy" and ex.report.ratio > 1
    assert "glorot_uniform · residual · clip off → healthy" in ex.status_text
    ex.set(residual=False, norm="batch")
    assert ex.report.status == "healthy" and "· batch norm ·" in ex.status_text
    ex.set(norm="none", depth=14, dtype="float16")
    assert np.count_nonzero(ex.report.signal_norms == 0) == 5
    assert len(ex._plot.zeros.get_data()[0]) == 5 and ex.report.predicted_signal is None
    assert len(ex._plot.theory.get_data()[0]) == 0  # no theory drawn in float16
    ex.loss_scale.value = 2**15
    assert np.all(ex.report.signal_norms > 0) and "float16 · loss scale 2^15 ·" in ex.status_text
    ex.set(dtype="float32", loss_scale=1)
    np.testing.assert_allclose(ex._plot.theory.get_data()[1], ex.report.predicted_signal)
    with pytest.raises(ValueError, match="loss_scale must be a power of two"):
        ex.set(loss_scale=3)


def test_constructor_keywords_and_presets():
    ex = gl.GradientExplorer(depth=14, residual=True, norm="layer", dtype="bfloat16", loss_scale=8)
    assert (ex.residual.value, ex.norm.value, ex.dtype.value, ex.loss_scale.value) == (
        True, "layer", "bfloat16", 8)
    assert ex.report.mode == "residual · layer norm · bfloat16 · loss scale 2^3"
    ex.preset.value = "micikevicius2018_fp16"
    assert (ex.depth.value, ex.dtype.value, ex.loss_scale.value, ex.residual.value) == (14, "float16", 1, False)
    assert ex.preset_result.measured == 5 and "paper 1, measured 5" in repr(ex)
    assert "Micikevicius" in ex.preset_note.value
    ex.loss_scale.value = 2**15  # leaves the preset: deselected, note cleared
    assert ex.preset.value == "" and ex.preset_result is None and ex.preset_note.value == ""
    ex.set(preset="saxe2014")
    assert ex.preset_result.measured == pytest.approx(1.0, abs=1e-3)
    ex2 = gl.GradientExplorer(preset="he2015_xavier")
    assert ex2.depth.value == 30 and ex2.preset_result.measured == pytest.approx(2**-14.5, rel=0.6)
    with pytest.raises(ValueError, match="preset must be one of"):
        gl.GradientExplorer(preset="nope")


def test_blitted_png_matches_a_full_draw():
    import io

    from PIL import Image

    ex = gl.GradientExplorer(depth=30, activation="tanh")
    draws = ex._plot.full_draws
    ex.clip_norm.value = 0.5  # nothing but data changes: no full draw
    ex.activation.value = "sigmoid"
    ex.activation.value = "tanh"
    assert ex._plot.full_draws - draws <= 1  # at most a new decade range
    ref = gl.plots.gradients.ReportPlot(ex.report, show_forward=True, live=False,
                                        figsize=tuple(ex._plot.fig.get_size_inches()))
    ref.fig.set_layout_engine(None)
    ref.fig.subplots_adjust(**{k: getattr(ex._plot.fig.subplotpars, k)
                               for k in ("left", "right", "bottom", "top")})
    ref.update(ex.report)
    a = np.asarray(Image.open(io.BytesIO(ex.plot.value)).convert("RGB"), dtype=int)
    b = np.asarray(Image.open(io.BytesIO(ref.png(fast=True))).convert("RGB"), dtype=int)
    assert a.shape == b.shape
    differ = np.mean(np.abs(a - b).max(axis=2) > 40)
    assert differ < 0.005, differ  # the same picture, drawn two ways


def test_static_fallback_bundle(ex):
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"
    assert bundle["text/plain"] == ex.status_text


@pytest.mark.parametrize("kwargs,match", [
    (dict(depth=0), "depth must be 1 to 100"),
    (dict(depth=101), "depth must be 1 to 100"),
    (dict(activation="softplus"), "activation must be one of"),
    (dict(initializer="he"), "initializer must be one of"),
    (dict(clip=("norm", 0)), "clip must be None or"),
    (dict(width=0), "width must be"),
    (dict(batch_size=-1), "batch_size must be"),
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gl.GradientExplorer(**kwargs)


def test_set_rejects_unknown_controls(ex):
    with pytest.raises(ValueError, match="unknown control"):
        ex.set(dept=3)


def test_memory_is_bounded_over_900_changes():
    """900 changes, every mode axis included: the figure, its background cache and the traced
    functions are reused, so RSS stays flat once each mode has been seen (width 16 keeps it fast)."""
    ex = gl.GradientExplorer(depth=10, width=16, batch_size=16)
    proc = psutil.Process()
    acts = ("sigmoid", "relu")
    modes = [dict(residual=False, norm="none", dtype="float32"),
             dict(residual=True, norm="layer", dtype="float16"),
             dict(residual=True, norm="batch", dtype="bfloat16")]

    def depth_at(i):  # a back-and-forth drag over 71..100, with a jump every 25 changes
        d = i % 58
        return 71 + (d if d < 29 else 57 - d) if i % 25 else 1 + (i * 37) % 100

    for m in modes:  # warm up: traces, caches, matplotlib font cache, the background cache
        for a in acts:
            ex.set(activation=a, **m)
    for i in range(0, 900, 7):
        ex.depth.value = depth_at(i)
    gc.collect()
    rss0 = proc.memory_info().rss
    for i in range(900):
        ex.depth.value = depth_at(i)
        if i % 50 == 0:
            ex.activation.value = acts[(i // 50) % 2]
        if i % 100 == 0:
            ex.set(loss_scale=2 ** ((i // 100) % 16), **modes[(i // 100) % 3])
    gc.collect()
    grown_mb = (proc.memory_info().rss - rss0) / 2**20
    print(f"RSS growth over 900 changes: {grown_mb:.1f} MB")
    assert grown_mb < 50


def test_tangent_explorer():
    t = gl.TangentExplorer(w=-0.5, learning_rate=0.3)
    assert "gradlab-tangent-w" in t.w._dom_classes
    assert t.slope < 0 and t.w_next > -0.5
    t.w.value = 3.5
    assert t.slope > 0 and t.w_next < 3.5 and "to the left" in t.status_text
    t.w.value, t.learning_rate.value = 0.0, 1.5  # too large a step: past the minimum, loss rises
    assert t.w_next == pytest.approx(4.5) and "(loss 6.4" in t.status_text
    assert gl.toy_loss(4.5).numpy() > t.loss
    with pytest.raises(ValueError, match="w must be between"):
        gl.TangentExplorer(w=10)
    with pytest.raises(ValueError, match="learning_rate"):
        gl.TangentExplorer(learning_rate=-1)
