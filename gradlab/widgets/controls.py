"""An explorer's controls in Python: the values a learner sets, checked, with no view of their own.

Each control is a small traitlets object (``value``, ``disabled``, ``description`` and, for a
choice, ``options``); the explorer's one view (``static/explorer.js``) draws it as a form element
named after the control. A test or a cell sets ``ex.depth.value = 12`` and the explorer
recomputes before the assignment returns, with no browser.

A value is kept exactly as given (``clip_norm.value = 0.25`` stays 0.25: the page's slider only
positions itself near it), and a value outside the control's range or choices raises a
``ValueError`` that names the control and what it allows.
"""

from __future__ import annotations

import math

from traitlets import Any, Bool, HasTraits, List, Unicode, validate

__all__ = ["Button", "Checkbox", "Control", "Dropdown", "Progress", "Slider"]


def _pairs(options) -> list[tuple]:
    """``[(label, value)]`` of ipywidgets-style options (values, or ``(label, value)`` pairs)."""
    return [o if isinstance(o, tuple) else (o, o) for o in options]


def _json_value(v):
    """A control value as JSON carries it (NumPy scalars become Python ones)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        return v.item()
    return v


class Control(HasTraits):
    """A control: ``name``, ``value``, ``description`` (its label), ``disabled``.

    ``setting=False`` marks a control that is not one of the explorer's settings (a button, a
    progress bar, a preset that sets the others): it is drawn, but :meth:`Explorer.settings`
    leaves it out.
    """

    kind = "control"
    value = Any()
    description = Unicode("")
    disabled = Bool(False)

    def __init__(self, name: str, *, value=None, description: str = "", disabled: bool = False,
                 setting: bool = True, **kwargs):
        self.name = name
        self.setting = setting
        super().__init__(description=description, disabled=disabled, **kwargs)
        if value is not None or self.kind in ("control",):
            self.value = value

    def spec(self) -> dict:
        """What the view draws: ``{name, type, label, disabled}`` and the kind's own fields."""
        return {"name": self.name, "type": self.kind, "label": self.description, "disabled": self.disabled}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}={self.value!r})"


class Slider(Control):
    """A number from ``min`` to ``max`` on a grid of ``step``; ``log=True``: ``10**min`` to
    ``10**max`` (the grid is over the exponent, like ipywidgets' FloatLogSlider). ``integer``
    keeps the value an ``int``. The value itself is never snapped to the grid."""

    kind = "range"

    def __init__(self, name: str, *, value, min, max, step=1, log: bool = False, integer: bool = False,
                 digits: int = 3, description: str = "", disabled: bool = False, setting: bool = True,
                 frame: bool = False, play: str = ""):
        self.min, self.max, self.step, self.log, self.integer, self.digits = min, max, step, log, integer, digits
        #: ``frame``: the view holds every value of this slider (its frames), so the page moves it
        #: without the kernel; ``play``: the label of a play/pause button beside it ("" none).
        self.frame, self.play = frame, play
        super().__init__(name, value=value, description=description, disabled=disabled, setting=setting)

    def bounds(self) -> tuple[float, float]:
        return (10.0 ** self.min, 10.0 ** self.max) if self.log else (self.min, self.max)

    @validate("value")
    def _check(self, proposal):
        v = proposal["value"]
        lo, hi = self.bounds()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:  # NaN fails too
            raise ValueError(f"{self.name} must be a number from {lo:g} to {hi:g}; got {v!r}")
        if self.integer:
            if int(v) != v:
                raise ValueError(f"{self.name} must be a whole number from {lo:g} to {hi:g}; got {v!r}")
            return int(v)
        return float(v)

    def spec(self) -> dict:
        spec = dict(super().spec(), min=self.min, max=self.max, step=self.step, log=self.log, digits=self.digits)
        if self.frame:
            spec["frame"] = True
        if self.play:
            spec["play"] = self.play
        return spec


class Dropdown(Control):
    """One of ``options``: values, or ``(label, value)`` pairs (the label is what the page shows)."""

    kind = "select"
    options = List()

    def __init__(self, name: str, *, options, value, description: str = "", disabled: bool = False,
                 setting: bool = True, slider: bool = False):
        self.slider = slider  # drawn as a slider over the options (a learning rate's grid)
        super().__init__(name, value=value, description=description, disabled=disabled, setting=setting,
                         options=list(options))

    @property
    def label(self) -> str:
        """The label the page shows for the current value."""
        return next(str(label) for label, v in _pairs(self.options) if v == self.value)

    @property
    def choices(self) -> list:
        return [v for _label, v in _pairs(self.options)]

    @validate("value")
    def _check(self, proposal):
        v = proposal["value"]
        if v not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"{self.name} must be one of {allowed}; got {v!r}")
        return v

    def spec(self) -> dict:
        options = [[_json_value(v), str(label)] for label, v in _pairs(self.options)]
        if self.slider:
            return dict(super().spec(), type="range", options=options)
        return dict(super().spec(), options=options)


class Checkbox(Control):
    kind = "checkbox"

    @validate("value")
    def _check(self, proposal):
        if not isinstance(proposal["value"], bool):
            raise ValueError(f"{self.name} must be True or False; got {proposal['value']!r}")
        return proposal["value"]


class Button(Control):
    """A button: the page sends a click, and ``on_click`` callbacks run (``click()`` from Python)."""

    kind = "button"

    def __init__(self, name: str, *, description: str = ""):
        self._callbacks: list = []
        super().__init__(name, value=None, description=description, setting=False)

    def on_click(self, callback) -> None:
        self._callbacks.append(callback)

    def click(self) -> None:
        for callback in list(self._callbacks):
            callback(self)


class Progress(Control):
    """A progress bar from 0 to ``max``."""

    kind = "progress"

    def __init__(self, name: str, *, max: int, value: int = 0):
        self.max = max
        super().__init__(name, value=value, setting=False)

    def spec(self) -> dict:
        return dict(super().spec(), value=self.value, max=self.max)


def is_finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
