"""Explorers never change a value silently: every slider keeps the exact value it is given (issue 29).

ipywidgets 8.1's slider view snaps a value the kernel sets to ``min + k*step`` and, while
``continuous_update`` is on, sends the snapped value back (the clip threshold 0.25 became
0.2512 and read 0.251; gradlab.widgets.sliders has the measurements). The explorers' float
sliders therefore keep ``continuous_update`` off, and every slider refuses a value outside its
range with a ValueError instead of ipywidgets' silent clamp. These tests check both on every
explorer's controls, the exact values in the status lines, and, in the installed front end,
the rule the fix relies on.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import ipywidgets as widgets
import pytest

import gradlab as gl
from gradlab.engines.transformer import TransformerGradientEngine
from gradlab.widgets.sliders import ExactFloatLogSlider, ExactFloatSlider, ExactIntSlider

SLIDER_TYPES = (widgets.FloatSlider, widgets.FloatLogSlider, widgets.IntSlider, widgets.FloatRangeSlider,
                widgets.IntRangeSlider)


@pytest.fixture(scope="module")
def explorers():
    """One of each explorer, small; the clip threshold and the float values are off the step grid."""
    engine = TransformerGradientEngine(max_layers=2, d_model=8, num_heads=2, vocab_size=11, seq_len=4)
    return {
        "gradient": gl.GradientExplorer(depth=6, width=8, batch_size=8, clip=("norm", 0.25)),
        "time": gl.TimeExplorer(steps=20, units=8, batch_size=8, input_scale=0.03, clip=("value", 0.25)),
        "jacobian": gl.JacobianViewer(size=4),
        "tracing": gl.TracingLab(value=0.125, mode="tensor", plot=False),
        "tangent": gl.TangentExplorer(w=0.33, learning_rate=0.33),
        "transformer": gl.TransformerExplorer(num_layers=2, steps=10, warmup_steps=3, batch_size=2,
                                              clip=("global_norm", 0.25), engine=engine),
    }


def sliders(explorer) -> dict:
    return {n: w for n, w in explorer._controls.items() if isinstance(w, SLIDER_TYPES)}


# ----------------------------------------------------------------------------- every slider
def test_every_slider_is_an_exact_one(explorers):
    """No explorer builds a plain ipywidgets slider: each would round or clamp without a word."""
    seen = 0
    for name, ex in explorers.items():
        for control, w in sliders(ex).items():
            assert isinstance(w, (ExactFloatSlider, ExactFloatLogSlider, ExactIntSlider)), (name, control, type(w))
            if isinstance(w, (widgets.FloatSlider, widgets.FloatLogSlider)):
                # the front end sends back a snapped value only while continuous_update is on
                assert w.continuous_update is False, (name, control)
            else:
                assert w.step == 1, (name, control)  # every integer is on the grid
            seen += 1
    assert seen >= 10  # clip_norm x3, input_scale, steps, size, value, w, learning_rate, blocks, warmup


def test_constructor_values_are_kept_exactly(explorers):
    assert explorers["gradient"].clip == ("norm", 0.25)
    assert explorers["gradient"].clip_norm.value == 0.25
    assert explorers["time"].input_scale.value == 0.03 and explorers["time"].clip == ("value", 0.25)
    assert explorers["transformer"].clip == ("global_norm", 0.25)
    assert explorers["tracing"].value.value == 0.125
    assert explorers["tangent"].w.value == 0.33 and explorers["tangent"].learning_rate.value == 0.33


def test_status_lines_show_the_exact_values(explorers):
    assert "≤ 0.25 " in explorers["gradient"].status_text + " "
    assert "0.251" not in explorers["gradient"].status_text
    time_text = explorers["time"].status_text
    assert "input ×0.03 ·" in time_text and "≤ 0.25 " in time_text, time_text
    assert "value 0.125 →" in explorers["tracing"].status_text
    assert explorers["tangent"].status_text.startswith("w = 0.33:")


def test_tangent_status_shows_the_digits_a_value_needs(explorers):
    t = explorers["tangent"].copy()
    t.w.value = 0.333
    assert t.status_text.startswith("w = 0.333:"), t.status_text
    t.w.value = -0.5
    assert t.status_text.startswith("w = -0.50:"), t.status_text  # the two decimals it had
    t.w.value = 0.3999999999999999  # the front end's grid value after an arrow key (measured)
    assert t.status_text.startswith("w = 0.40:"), t.status_text
    t.set(w=2.25, learning_rate=0.125)
    assert t.status_text.startswith("w = 2.25:") and t.learning_rate.value == 0.125
    assert t.w_next == pytest.approx(2.25 - 0.125 * t.slope)


@pytest.mark.parametrize("setting", [("gradient", "clip_norm", 0.37), ("time", "input_scale", 0.07),
                                     ("time", "clip_norm", 3e-3), ("tracing", "value", 0.333),
                                     ("tangent", "w", 1.23), ("tangent", "learning_rate", 0.07),
                                     ("transformer", "clip_norm", 0.3)])
def test_set_and_value_and_copy_keep_the_exact_value(explorers, setting):
    name, control, value = setting
    ex = explorers[name]
    ex.set(**{control: value})
    assert ex._controls[control].value == value
    assert ex.copy()._controls[control].value == value
    ex._controls[control].value = value * 2
    assert ex._controls[control].value == value * 2


def test_a_value_on_the_drag_grid_reads_as_it_is(explorers):
    """A drag lands on 10**(k/10): 10**-0.6 is 0.2512, and the status line says 0.251."""
    ex = explorers["gradient"].copy()
    ex.clip_norm.value = 10 ** -0.6
    assert ex.clip == ("norm", 10 ** -0.6) and "≤ 0.251 " in ex.status_text + " "


# ----------------------------------------------------------------------------- out of range
@pytest.mark.parametrize("setting", [
    ("gradient", "clip_norm", 5000.0, "clip_norm must be from 0.001 to 1000"),
    ("gradient", "clip_norm", 1e-4, "clip_norm must be from 0.001 to 1000"),
    ("gradient", "depth", 500, "depth must be from 1 to 100"),
    ("time", "input_scale", 100.0, "input_scale must be from 0.01 to 10"),
    ("time", "steps", 100_000, "steps must be from 5 to"),
    ("jacobian", "size", 1000, "size must be from"),
    ("tracing", "value", 1.5, "value must be from 0 to 1"),
    ("tangent", "w", 7.0, "w must be from -1 to 5"),
    ("tangent", "learning_rate", float("nan"), "learning_rate must be from 0 to 2"),
    ("transformer", "num_layers", 9, "num_layers must be from 1 to 2"),
    ("transformer", "warmup_steps", 6, "warmup_steps must be from 0 to 5"),
])
def test_out_of_range_raises_instead_of_clamping(explorers, setting):
    name, control, value, message = setting
    ex = explorers[name]
    before = ex._controls[control].value
    with pytest.raises(ValueError, match=re.escape(message)):
        ex._controls[control].value = value
    with pytest.raises(ValueError, match=re.escape(message)):
        ex.set(**{control: value})
    assert ex._controls[control].value == before  # not clamped to the nearest end


def test_constructor_threshold_outside_the_slider_raises():
    with pytest.raises(ValueError, match=r"clip's threshold must be from 0.001 to 1000 .*5000"):
        gl.GradientExplorer(depth=6, width=8, batch_size=8, clip=("norm", 5000))
    with pytest.raises(ValueError, match=r"clip's threshold must be from 0.001 to 1000"):
        gl.TimeExplorer(steps=20, units=8, batch_size=8, clip=1e-5)


# ----------------------------------------------------------------------------- the slider classes
@pytest.mark.parametrize("make", [
    lambda: ExactFloatSlider("w", value=7, min=-1, max=5),
    lambda: ExactFloatSlider("w", value=-3, min=-1, max=5),
    lambda: ExactFloatLogSlider("s", value=20, base=10, min=-2, max=1),
    lambda: ExactIntSlider("n", value=600, min=5, max=500),
])
def test_constructor_value_outside_the_range_raises(make):
    """traitlets sets value before max; ipywidgets' max validator would clamp it without a word."""
    with pytest.raises(ValueError, match="must be from"):
        make()


def test_slider_classes_keep_the_ends_and_the_model():
    s = ExactFloatLogSlider("s", value=0.01, base=10, min=-2, max=1, step=0.1)
    s.value = 10.0
    assert s.value == 10.0 and s.continuous_update is False
    assert s.get_state()["_model_name"] == "FloatLogSliderModel"  # the stock front end draws it
    f = ExactFloatSlider("w", value=0.33, min=-1, max=5, step=0.05, continuous_update=True)
    assert f.continuous_update is True  # an explicit choice is honoured (no explorer makes it)
    with pytest.raises(ValueError, match="step must be 1"):
        ExactIntSlider("n", value=20, min=0, max=100, step=10)


# ----------------------------------------------------------------------------- the front end
def _front_end_source() -> str | None:
    for root in {Path(sys.prefix), Path(sys.base_prefix)}:
        for js in (root / "share/jupyter/labextensions/@jupyter-widgets/jupyterlab-manager/static").glob("*.js"):
            text = js.read_text(errors="replace")
            if "FloatLogSliderView" in text and "handleSliderUpdateEvent" in text:
                return text
    return None


def test_installed_front_end_echoes_only_with_continuous_update():
    """The rule the fix relies on, read from the installed ipywidgets front end.

    noUiSlider's "update" event (which also fires when the kernel sets a value) sends the
    snapped value back only ``if continuous_update``; a user's drag or key fires "change",
    which always sends. If a new ipywidgets changes this, re-probe (gradlab.widgets.sliders).
    """
    text = _front_end_source()
    if text is None:
        pytest.skip("the jupyterlab_widgets front end is not installed in this environment")
    updates = re.findall(r'handleSliderUpdateEvent\(e,t\)\{([^}]*)\}', text)
    assert len(updates) >= 3, "the slider views' update handlers were not found"
    for body in updates:
        assert body.endswith('this.model.get("continuous_update")&&this.handleSliderChanged(e,t)'), body
    changes = re.findall(r'handleSliderChangeEvent\(e,t\)\{([^}]*)\}', text)
    assert changes and all(body.endswith("this.handleSliderChanged(e,t)") for body in changes)
