"""The live GradientExplorer of chapters 01 and 05: depth, activation, initializer, clipping,
and (chapter 05) residual connections, normalization, mixed precision, loss scaling, paper presets."""

from __future__ import annotations

import math

import ipywidgets as widgets

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from ..engine import MLPGradientEngine, check_mode
from ..grads import CLIP_MODES, check_clip
from ..mlp import ACTIVATIONS, DTYPES, INITIALIZERS, NORMS
from ..plots.gradients import STATUS_COLORS, ReportPlot
from ..presets import PRESETS, compare_preset
from ._base import ClipControlsMixin, FigureView, SnapshotMixin, css, static_bundle, status_html

__all__ = ["GradientExplorer", "LOSS_SCALES"]

EXPLORER_MAX_DEPTH = 100
#: The loss-scale factors the explorer offers: 1 (off) and the powers of two up to 2^24.
LOSS_SCALES: tuple[float, ...] = tuple(2.0**k for k in range(25))


def _loss_scale_label(v: float) -> str:
    k = int(math.log2(v))
    return "1 (off)" if k == 0 else f"2^{k} = {int(v):,}"


def check_loss_scale(value) -> float:
    """``value`` must be one of :data:`LOSS_SCALES` (1 meaning off)."""
    v = check_mode(loss_scale=value)[3]
    if v not in LOSS_SCALES:
        raise ValueError(f"loss_scale must be a power of two from 1 (off) to 2**24; got {value!r}")
    return v


class GradientExplorer(ClipControlsMixin, SnapshotMixin, widgets.VBox):
    """Move the sliders and watch the per-layer gradient norms vanish, explode or stay healthy.

    Public controls: ``depth``, ``activation``, ``initializer``, ``clip_mode``, ``clip_norm``,
    ``show_forward`` (chapter 01) and ``residual``, ``norm``, ``dtype``, ``loss_scale``,
    ``preset`` (chapter 05). Setting any control's ``value`` recomputes :attr:`report` before
    the assignment returns, so ``ex.depth.value = 50; ex.report`` is current. Choosing a preset
    sets the other controls to a paper's setting and shows the paper's number beside the
    measured one (``ex.preset_result``). ``engine=`` shares an :class:`MLPGradientEngine` (and
    its traced functions) with the chapter's own cells. The figure is built once and updated in place, with
    a cached background (Agg blitting): an update redraws only the data.
    """

    def __init__(
        self,
        depth: int = 20,
        activation: str = "sigmoid",
        initializer: str = "glorot_uniform",
        clip=None,
        width: int = 64,
        batch_size: int = 128,
        seed: int = 0,
        *,
        show_forward: bool = True,
        residual: bool = False,
        norm: str = "none",
        dtype: str = "float32",
        loss_scale: float = 1,
        preset: str | None = None,
        engine: MLPGradientEngine | None = None,
    ):
        depth = _check_int("depth", depth, 1, EXPLORER_MAX_DEPTH)
        _check_choice("activation", activation, ACTIVATIONS)
        _check_choice("initializer", initializer, tuple(INITIALIZERS))
        clip = check_clip(clip)
        residual, norm, dtype, _ = check_mode(residual, norm, dtype)
        loss_scale = check_loss_scale(loss_scale)
        if preset is not None:
            _check_choice("preset", preset, tuple(PRESETS))
        if engine is None:
            engine = MLPGradientEngine(width=width, batch_size=batch_size, max_depth=EXPLORER_MAX_DEPTH,
                                       seed=seed)
        elif not isinstance(engine, MLPGradientEngine) or engine.max_depth < EXPLORER_MAX_DEPTH:
            raise ValueError(f"engine must be an MLPGradientEngine with max_depth >= {EXPLORER_MAX_DEPTH}; "
                             f"got {engine!r}")
        self.engine = engine  # shared with the chapter's own engine: its traces are reused
        self.depth = css(
            widgets.IntSlider(value=depth, min=1, max=EXPLORER_MAX_DEPTH, description="depth"),
            "depth",
        )
        self.activation = css(
            widgets.Dropdown(options=list(ACTIVATIONS), value=activation, description="activation"),
            "activation",
        )
        self.initializer = css(
            widgets.Dropdown(
                options=[(label, name) for name, label in INITIALIZERS.items()],
                value=initializer,
                description="initializer",
            ),
            "initializer",
        )
        self.clip_mode = css(
            widgets.Dropdown(
                options=["off", *CLIP_MODES],
                value="off" if clip is None else clip[0],
                description="clip",
            ),
            "clip-mode",
        )
        self.clip_norm = css(
            widgets.FloatLogSlider(
                value=1.0 if clip is None else clip[1],
                base=10,
                min=-3,
                max=3,
                step=0.1,
                description="threshold",
                readout_format=".3g",
                disabled=clip is None,
            ),
            "clip-norm",
        )
        self.show_forward = css(
            widgets.Checkbox(value=show_forward, description="forward std", indent=False),
            "show-forward",
        )
        self.residual = css(
            widgets.Checkbox(value=residual, description="residual h + a", indent=False), "residual"
        )
        self.norm = css(widgets.Dropdown(options=list(NORMS), value=norm, description="norm"), "norm")
        self.dtype = css(widgets.Dropdown(options=list(DTYPES), value=dtype, description="dtype"), "dtype")
        self.loss_scale = css(
            widgets.Dropdown(
                options=[(_loss_scale_label(v), v) for v in LOSS_SCALES],
                value=loss_scale,
                description="loss scale",
            ),
            "loss-scale",
        )
        self.preset = css(
            widgets.Dropdown(
                options=[("(none)", "")] + [(p.title, key) for key, p in PRESETS.items()],
                value="",
                description="preset",
            ),
            "preset",
        )
        self.status = css(widgets.HTML(), "status")
        self.preset_note = css(widgets.HTML(), "preset-note")
        self.preset_result = None
        self.report = self._compute()
        self._plot = ReportPlot(self.report, show_forward=show_forward, live=True)
        self.plot = FigureView(self._plot.fig, css_name="plot", render=self._plot.render_png)
        self._set_status()
        for control in self.controls:
            control.observe(self._on_change, names="value")
        self.preset.observe(self._on_preset, names="value")
        layout = widgets.Layout(min_width="310px")
        controls = widgets.VBox(
            [self.depth, self.activation, self.initializer, self.clip_mode, self.clip_norm,
             self.show_forward, self.residual, self.norm, self.dtype, self.loss_scale, self.preset],
            layout=layout,
        )
        super().__init__([widgets.HBox([controls, self.plot]), self.status, self.preset_note])
        css(self, "explorer")
        if preset is not None:
            self.preset.value = preset

    # --------------------------------------------------------------------- public helpers
    @property
    def controls(self) -> tuple:
        return (self.depth, self.activation, self.initializer, self.clip_mode, self.clip_norm,
                self.show_forward, self.residual, self.norm, self.dtype, self.loss_scale)

    @property
    def status_text(self) -> str:
        """The status line in plain words, e.g. ``depth 50 · sigmoid · ... → vanishing: ...``.

        Chapter 05's modes appear only when they differ from the defaults
        (``depth 14 · sigmoid · glorot_uniform · float16 · clip off → ...``).
        """
        clip = "clip off" if self.clip is None else f"clip {self.clip[0]} ≤ {self.clip[1]:.3g}"
        r = self.report
        mode = f"{r.mode} · " if r.mode else ""
        return (
            f"depth {self.depth.value} · {self.activation.value} · {self.initializer.value} · "
            f"{mode}{clip} → {r.status}: {r.message}"
        )

    def set(self, **values) -> None:
        """Set several controls at once with one recompute, e.g. ``ex.set(depth=50, activation="relu")``.

        ``preset=key`` applies a paper preset first; the other values then override it.
        """
        names = {"depth", "activation", "initializer", "clip_mode", "clip_norm", "show_forward",
                 "residual", "norm", "dtype", "loss_scale", "preset"}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; allowed: {sorted(names)}")
        if "loss_scale" in values:
            values["loss_scale"] = check_loss_scale(values["loss_scale"])
        preset = values.pop("preset", None)
        self._muted = True  # one recompute at the end, not one per control
        try:
            if preset is not None:
                _check_choice("preset", preset, ("", *PRESETS))
                self.preset.value = preset
                if preset:
                    for name, value in PRESETS[preset].settings.items():
                        getattr(self, name).value = value
            for name, value in values.items():
                getattr(self, name).value = value
        finally:
            self._muted = False
        self._on_change()

    # --------------------------------------------------------------------- internals
    def _compute(self):
        return self.engine.report(
            self.depth.value, self.activation.value, self.initializer.value, self.clip,
            residual=self.residual.value, norm=self.norm.value, dtype=self.dtype.value,
            loss_scale=float(self.loss_scale.value),
        )

    def _set_status(self) -> None:
        self.status.value = status_html(self.status_text, STATUS_COLORS.get(self.report.status, "black"))

    _muted = False

    def _on_preset(self, change) -> None:
        if self._muted:
            return
        if change["new"]:
            self.set(preset=change["new"])
        else:
            self._on_change()

    def _on_change(self, change=None) -> None:
        if self._muted:
            return
        disabled = self.clip_mode.value == "off"
        if self.clip_norm.disabled != disabled:  # no state message when nothing changed
            self.clip_norm.disabled = disabled
        self.report = self._compute()
        self._plot.update(self.report, show_forward=self.show_forward.value)
        self.plot.refresh()
        self._set_status()
        self._update_preset()

    def _update_preset(self) -> None:
        key = self.preset.value
        if key and any(getattr(self, n).value != v for n, v in PRESETS[key].settings.items()):
            self._muted = True  # the settings left the preset: deselect it, no recompute
            try:
                self.preset.value = key = ""
            finally:
                self._muted = False
        self.preset_result = compare_preset(key, self.report) if key else None
        note = "" if self.preset_result is None else self.preset_result.html()
        if self.preset_note.value != note:
            self.preset_note.value = note

    def _repr_mimebundle_(self, **kwargs):
        """Widget view in a live front end; a static PNG and the status line everywhere else."""
        return static_bundle(self, self.plot.value, self._text(), **kwargs)

    def _text(self) -> str:
        if self.preset_result is None:
            return self.status_text
        return self.status_text + "\n" + self.preset_result.text()

    def __repr__(self) -> str:
        return f"GradientExplorer({self._text()})"


