"""The live TimeExplorer of chapter 07: cell, sequence length, recurrent initializer, input scale, clipping."""

from __future__ import annotations

import ipywidgets as widgets

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..grads import CLIP_MODES, check_clip
from ..plots.gradients import STATUS_COLORS
from ..plots.recurrent import TimePlot
from ..recurrent import CELLS, MAX_STEPS, RECURRENT_INITIALIZERS, TimeGradientEngine
from ._base import (
    ClipControlsMixin,
    FigureView,
    SnapshotMixin,
    css,
    legend_html,
    static_bundle,
    status_html,
)

__all__ = ["TimeExplorer"]

MIN_STEPS = 5
_SCALE_RANGE = (-2.0, 1.0)  # log10 of the input scale: 0.01 to 10


class TimeExplorer(ClipControlsMixin, SnapshotMixin, widgets.VBox):
    """Drag the sequence length and watch the gradient at the first time step vanish (chapter 07).

    Public controls: ``cell``, ``steps``, ``recurrent_initializer``, ``input_scale``,
    ``clip_mode`` and ``clip_norm``. Setting any control's ``value`` recomputes :attr:`report`
    (a :class:`gradlab.recurrent.TimeReport`) before the assignment returns. The figure is
    built once and updated in place; no control change retraces the engine's ``tf.function``.
    """

    def __init__(self, cell: str = "simple_rnn", steps: int = 50, units: int = 32,
                 recurrent_initializer: str = "orthogonal", clip=None, seed: int = 0, *,
                 input_scale: float = 1.0, input_dim: int = 8, batch_size: int = 32):
        _check_choice("cell", cell, tuple(CELLS))
        steps = _check_int("steps", steps, MIN_STEPS, MAX_STEPS)
        _check_choice("recurrent_initializer", recurrent_initializer, tuple(RECURRENT_INITIALIZERS))
        input_scale = _check_positive("input_scale", input_scale)
        if not 10 ** _SCALE_RANGE[0] <= input_scale <= 10 ** _SCALE_RANGE[1]:
            raise ValueError(f"input_scale must be 0.01 to 10; got {input_scale}")
        clip = check_clip(clip)
        self.engine = TimeGradientEngine(units=units, input_dim=input_dim, batch_size=batch_size,
                                         max_steps=MAX_STEPS, seed=seed)
        self.cell = css(widgets.Dropdown(options=list(CELLS), value=cell, description="cell"),
                        "time-cell")
        self.steps = css(widgets.IntSlider(value=steps, min=MIN_STEPS, max=MAX_STEPS,
                                           description="steps"), "time-steps")
        self.recurrent_initializer = css(widgets.Dropdown(
            options=[(label, name) for name, label in RECURRENT_INITIALIZERS.items()],
            value=recurrent_initializer, description="recurrent"), "time-initializer")
        self.input_scale = css(widgets.FloatLogSlider(
            value=input_scale, base=10, min=_SCALE_RANGE[0], max=_SCALE_RANGE[1], step=0.1,
            description="input scale", readout_format=".3g"), "time-input-scale")
        self.clip_mode = css(widgets.Dropdown(
            options=["off", *CLIP_MODES], value="off" if clip is None else clip[0],
            description="clip"), "time-clip-mode")
        self.clip_norm = css(widgets.FloatLogSlider(
            value=1.0 if clip is None else clip[1], base=10, min=-3, max=3, step=0.1,
            description="threshold", readout_format=".3g", disabled=clip is None), "time-clip-norm")
        for c in self.controls:
            c.style.description_width = "80px"
        self.status = css(widgets.HTML(), "time-status")
        self.report = self._compute()
        self._plot = TimePlot(self.report, legend=False)
        self.plot = FigureView(self._plot.fig, css_name="time-plot")
        legend = css(widgets.HTML(legend_html(self._plot.legend_items())), "time-legend")
        self._set_status()
        for control in self.controls:
            control.observe(self._on_change, names="value")
        controls = widgets.VBox([*self.controls, legend], layout=widgets.Layout(min_width="310px"))
        super().__init__([widgets.HBox([controls, self.plot]), self.status])
        css(self, "time-explorer")

    # --------------------------------------------------------------------- public helpers
    @property
    def controls(self) -> tuple:
        return (self.cell, self.steps, self.recurrent_initializer, self.input_scale,
                self.clip_mode, self.clip_norm)

    @property
    def status_text(self) -> str:
        """The status line, e.g. ``simple_rnn · 50 steps · orthogonal · input ×1 · clip off → vanishing: ...``."""
        clip = "clip off" if self.clip is None else f"clip {self.clip[0]} ≤ {self.clip[1]:.3g}"
        r = self.report
        return (f"{self.cell.value} · {self.steps.value} steps · {self.recurrent_initializer.value} · "
                f"input ×{self.input_scale.value:.3g} · {clip} → {r.status}: {r.message}")

    def set(self, **values) -> None:
        """Set several controls at once with one recompute, e.g. ``ex.set(cell="lstm", steps=100)``."""
        names = {"cell", "steps", "recurrent_initializer", "input_scale", "clip_mode", "clip_norm"}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; allowed: {sorted(names)}")
        self._muted = True
        try:
            for name, value in values.items():
                getattr(self, name).value = value
        finally:
            self._muted = False
        self._on_change()

    # --------------------------------------------------------------------- internals
    _muted = False

    def _compute(self):
        return self.engine.report(self.cell.value, self.steps.value, self.recurrent_initializer.value,
                                  float(self.input_scale.value), self.clip)

    def _set_status(self) -> None:
        self.status.value = status_html(self.status_text, STATUS_COLORS.get(self.report.status, "black"))

    def _on_change(self, change=None) -> None:
        if self._muted:
            return
        self.clip_norm.disabled = self.clip_mode.value == "off"
        self.report = self._compute()
        self._plot.update(self.report)
        self.plot.refresh()
        self._set_status()

    def _repr_mimebundle_(self, **kwargs):
        """Widget view in a live front end; a static PNG and the status line everywhere else."""
        return static_bundle(self, self.plot.value, self.status_text, **kwargs)

    def __repr__(self) -> str:
        return f"TimeExplorer({self.status_text})"

