"""The live GradientExplorer of chapter 01: sliders for depth, activation, initializer, clipping."""

from __future__ import annotations

import ipywidgets as widgets

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from ..engine import MLPGradientEngine
from ..grads import CLIP_MODES, check_clip
from ..mlp import ACTIVATIONS, INITIALIZERS
from ..plots.gradients import STATUS_COLORS, ReportPlot
from ._base import FigureView, SnapshotMixin, css, legend_html, static_bundle, status_html

__all__ = ["GradientExplorer"]

EXPLORER_MAX_DEPTH = 100


class GradientExplorer(SnapshotMixin, widgets.VBox):
    """Move the sliders and watch the per-layer gradient norms vanish, explode or stay healthy.

    Public controls: ``depth``, ``activation``, ``initializer``, ``clip_mode``, ``clip_norm``
    and ``show_forward``. Setting any control's ``value`` recomputes :attr:`report` before the
    assignment returns, so ``ex.depth.value = 50; ex.report`` is current. The figure is built
    once and updated in place. Used in chapters 01 and 04.
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
    ):
        depth = _check_int("depth", depth, 1, EXPLORER_MAX_DEPTH)
        _check_choice("activation", activation, ACTIVATIONS)
        _check_choice("initializer", initializer, tuple(INITIALIZERS))
        clip = check_clip(clip)
        self.engine = MLPGradientEngine(
            width=width, batch_size=batch_size, max_depth=EXPLORER_MAX_DEPTH, seed=seed
        )
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
        self.status = css(widgets.HTML(), "status")
        self.report = self.engine.report(depth, activation, initializer, clip)
        self._plot = ReportPlot(self.report, show_forward=show_forward, legend=False)
        self.plot = FigureView(self._plot.fig, css_name="plot")
        legend = css(widgets.HTML(legend_html(self._plot.legend_items())), "legend")
        self._set_status()
        for control in self.controls:
            control.observe(self._on_change, names="value")
        controls = widgets.VBox(
            [self.depth, self.activation, self.initializer, self.clip_mode, self.clip_norm,
             self.show_forward, legend],
            layout=widgets.Layout(min_width="310px"),
        )
        super().__init__([widgets.HBox([controls, self.plot]), self.status])
        css(self, "explorer")

    # --------------------------------------------------------------------- public helpers
    @property
    def controls(self) -> tuple:
        return (self.depth, self.activation, self.initializer, self.clip_mode, self.clip_norm,
                self.show_forward)

    @property
    def clip(self):
        """The current clip setting as ``None`` or ``(mode, threshold)``."""
        if self.clip_mode.value == "off":
            return None
        return (self.clip_mode.value, float(self.clip_norm.value))

    @property
    def status_text(self) -> str:
        """The status line in plain words, e.g. ``depth 50 · sigmoid · ... → vanishing: ...``."""
        clip = "clip off" if self.clip is None else f"clip {self.clip[0]} ≤ {self.clip[1]:.3g}"
        r = self.report
        return (
            f"depth {self.depth.value} · {self.activation.value} · {self.initializer.value} · "
            f"{clip} → {r.status}: {r.message}"
        )

    def set(self, **values) -> None:
        """Set several controls at once with one recompute, e.g. ``ex.set(depth=50, activation="relu")``."""
        names = {"depth", "activation", "initializer", "clip_mode", "clip_norm", "show_forward"}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; allowed: {sorted(names)}")
        self._muted = True  # one recompute at the end, not one per control
        try:
            for name, value in values.items():
                getattr(self, name).value = value
        finally:
            self._muted = False
        self._on_change()

    # --------------------------------------------------------------------- internals
    def _set_status(self) -> None:
        self.status.value = status_html(self.status_text, STATUS_COLORS.get(self.report.status, "black"))

    _muted = False

    def _on_change(self, change=None) -> None:
        if self._muted:
            return
        self.clip_norm.disabled = self.clip_mode.value == "off"
        self.report = self.engine.report(
            self.depth.value, self.activation.value, self.initializer.value, self.clip
        )
        self._plot.update(self.report, show_forward=self.show_forward.value)
        self.plot.refresh()
        self._set_status()

    def _repr_mimebundle_(self, **kwargs):
        """Widget view in a live front end; a static PNG and the status line everywhere else."""
        return static_bundle(self, self.plot.value, self.status_text, **kwargs)

    def __repr__(self) -> str:
        return f"GradientExplorer({self.status_text})"

