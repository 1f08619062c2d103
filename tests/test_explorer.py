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


def test_every_combination_yields_plot_and_status():
    """All activations × initializers × clip modes at depth 100, and at depth 1 without clipping."""
    ex = gl.GradientExplorer(depth=2, width=8, batch_size=8)
    seen = set()
    for act, (_, init), mode in itertools.product(ex.activation.options, ex.initializer.options,
                                                  ex.clip_mode.options):
        for depth in (100, 1) if mode == "off" else (100,):
            ex.set(depth=depth, activation=act, initializer=init, clip_mode=mode)
            assert ex.report.status in {"healthy", "vanishing", "exploding", "non-finite"}
            assert ex.report.depth == depth
            assert f"depth {depth} · {act} · {init}" in ex.status_text
            assert bytes(ex.plot.value[:4]) == b"\x89PNG"
            seen.add(ex.report.status)
    assert {"healthy", "vanishing", "non-finite"} <= seen  # exploding: test_grads.py


def test_no_retrace_on_slider_moves():
    ex = gl.GradientExplorer(depth=5)
    ex.depth.value = 6
    ex.clip_mode.value = "norm"
    before = ex.engine.tracing_count()
    for i in range(20):
        ex.depth.value = 1 + (i * 13) % 100
        ex.clip_norm.value = 10 ** ((i % 7) - 3)
    assert ex.engine.tracing_count() - before <= 2


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
    ex = gl.GradientExplorer(depth=10)
    proc = psutil.Process()
    for i in range(60):  # warm up: traces, caches, matplotlib font cache
        ex.depth.value = 1 + i % 100
        ex.activation.value = gl.ACTIVATIONS[i % 8]
    gc.collect()
    rss0 = proc.memory_info().rss
    for i in range(900):
        ex.depth.value = 1 + (i * 7) % 100
        if i % 50 == 0:
            ex.activation.value = gl.ACTIVATIONS[(i // 50) % 8]
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
