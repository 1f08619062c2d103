"""Sliders that keep the exact value a learner passes (chapters 00, 01, 03, 05, 07, 09).

ipywidgets 8.1's slider view (noUiSlider) snaps a value the kernel sets to ``min + k*step``
(of the exponent, for a FloatLogSlider) and, while ``continuous_update`` is on, sends the
snapped value back to the kernel. Measured in JupyterLab with Chromium (issue 29):
``FloatLogSlider(0.25, min=-3, max=3, step=0.1)`` became 0.25118864315095796 (it read 0.251),
``FloatSlider(0.33, min=-1, max=5, step=0.05)`` became 0.3500000000000001, and a value typed
into the readout snapped too (0.07 to 0.0631). Without a step the round trip still changed the
last bits (0.25 to 0.24999999999999994), and an arrow key jumped a tenth of the range.

With ``continuous_update=False`` the view sends only what the learner does with the slider
itself: a drag or an arrow key, on release, on the step grid, and a number typed into the
readout, exactly. A value set from Python (the constructor, ``ex.set(...)``,
``ex.clip_norm.value = 0.25``) stays exactly what it was, and the readout shows it. So every
float slider of an explorer is one of these.

ipywidgets' own Python side clamps a value outside the range to the nearest end without a
word (``clip_norm.value = 5000`` became 1000). These sliders raise a ValueError that names the
control and the range instead. The front end cannot send such a value: it clamps what is
typed into the readout to the range and shows the clamped number.
"""

from __future__ import annotations

import ipywidgets as widgets
from traitlets import validate

__all__ = ["ExactFloatLogSlider", "ExactFloatSlider", "ExactIntSlider"]


def _check_range(name: str, value, low, high):
    if not low <= value <= high:  # also False for NaN
        raise ValueError(f"{name} must be from {low:g} to {high:g}; got {value!r}")
    return value


def _check_initial(slider, kwargs: dict) -> None:
    """The constructor's value against the final range (traitlets sets ``value`` before
    ``min``/``max``, and ipywidgets' ``max`` validator then clamps the value to it)."""
    if "value" in kwargs:
        _check_range(slider._exact_name, kwargs["value"], *slider._range())


class _Exact:
    """What the three sliders share: the control's name, the checked constructor value and the
    range check on every assignment. A subclass gives :meth:`_range` and, for float sliders,
    turns ``continuous_update`` off (the module docstring says why)."""

    _continuous_update: bool | None = False  # None: as the caller gives it

    def __init__(self, name: str, **kwargs):
        self._exact_name = name
        if self._continuous_update is not None:
            kwargs = {"continuous_update": self._continuous_update, **kwargs}
        super().__init__(**kwargs)
        _check_initial(self, kwargs)

    def _range(self) -> tuple:
        return self.min, self.max

    @validate("value")
    def _validate_value(self, proposal):
        return _check_range(self._exact_name, proposal["value"], *self._range())


class ExactFloatSlider(_Exact, widgets.FloatSlider):
    """A FloatSlider that keeps the value it is given and refuses one outside its range.

    ``name`` is the control's name for the error message; ``continuous_update`` is off.
    """


class ExactFloatLogSlider(_Exact, widgets.FloatLogSlider):
    """A FloatLogSlider that keeps the value it is given and refuses one outside its range.

    ``name`` is the control's name for the error message; ``continuous_update`` is off.
    """

    def _range(self) -> tuple[float, float]:
        return self.base ** self.min, self.base ** self.max


class ExactIntSlider(_Exact, widgets.IntSlider):
    """An IntSlider (step 1: the view never snaps it) that refuses a value outside its range.

    ``name`` is the control's name for the error message. ``continuous_update`` stays as
    given: with a step of 1 every integer is on the grid.
    """

    _continuous_update = None

    def __init__(self, name: str, **kwargs):
        if kwargs.get("step", 1) != 1:
            raise ValueError(f"step must be 1 (the view snaps other values); got {kwargs['step']!r}")
        super().__init__(name, **kwargs)
