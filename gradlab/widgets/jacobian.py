"""Chapter 02's interactive Jacobian viewer: pick a function and a size, see J and its cost."""

from __future__ import annotations

import html

import ipywidgets as widgets

from .._validate import check_int as _check_int
from ..jacobians import JACOBIAN_FUNCTIONS, JacobianBench, jacobian_function
from ..plots.jacobians import JacobianPlot
from ._base import FigureView, SnapshotMixin, css, static_bundle, status_html

__all__ = ["JacobianViewer"]

VIEWER_MIN_SIZE = 2
VIEWER_MAX_SIZE = 48


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


class JacobianViewer(SnapshotMixin, widgets.VBox):
    """Choose a function and a size; see the Jacobian as a heatmap and what each method cost.

    Public controls: ``function`` (Dropdown of :data:`~gradlab.JACOBIAN_FUNCTIONS`) and
    ``size`` (IntSlider, the length of ``x``, or of each example for the batched Dense layer).
    Setting a control's ``value`` recomputes :attr:`jacobian` (NumPy), :attr:`run` (all three
    methods and their timings) and :attr:`status_text` before the assignment returns. The
    figure is built once and updated in place; the compiled Jacobian functions have shape-free
    signatures, so a new size does not retrace. Used in chapter 02.
    """

    def __init__(self, function: str = "softmax", size: int = 8, seed: int = 0):
        jacobian_function(function)
        size = _check_int("size", size, VIEWER_MIN_SIZE, VIEWER_MAX_SIZE)
        self.bench = JacobianBench(seed=seed)
        self.function = css(
            widgets.Dropdown(
                options=[(f"{f.name}: {f.label}", f.name) for f in JACOBIAN_FUNCTIONS.values()],
                value=function,
                description="function",
                layout=widgets.Layout(width="340px"),
            ),
            "jacobian-function",
        )
        self.size = css(
            widgets.IntSlider(value=size, min=VIEWER_MIN_SIZE, max=VIEWER_MAX_SIZE,
                              description="size n", continuous_update=False),
            "jacobian-size",
        )
        self.note = css(widgets.HTML(layout=widgets.Layout(width="340px")), "jacobian-note")
        self.status = css(widgets.HTML(), "jacobian-status")
        self._compute()
        self._plot = JacobianPlot(self.jacobian, title=self._plot_title(), y_ndim=len(self.run.y_shape))
        self.plot = FigureView(self._plot.fig, css_name="jacobian-plot")
        self._set_texts()
        for control in self.controls:
            control.observe(self._on_change, names="value")
        controls = widgets.VBox([self.function, self.size, self.note],
                                layout=widgets.Layout(min_width="350px"))
        super().__init__([widgets.HBox([controls, self.plot]), self.status])
        css(self, "jacobian")

    # --------------------------------------------------------------------- public helpers
    @property
    def controls(self) -> tuple:
        return (self.function, self.size)

    @property
    def times(self) -> dict:
        """Seconds per method for the current setting: jacobian, batch_jacobian, loop."""
        return dict(self.run.times)

    @property
    def description_text(self) -> str:
        """The status line without timings, e.g. ``softmax · n=8 → jacobian shape (8, 8)``."""
        r = self.run
        return f"{r.name} · n={r.n} → jacobian shape {tuple(self.jacobian.shape)}"

    @property
    def status_text(self) -> str:
        """The status line in plain words, timings included."""
        t = self.run.times
        return (
            f"{self.description_text} · jacobian {_ms(t['jacobian'])} · "
            f"batch_jacobian {_ms(t['batch_jacobian'])} · loop {_ms(t['loop'])}"
        )

    def tracing_count(self) -> int:
        """How many times the viewer's compiled functions have been traced so far."""
        return self.bench.tracing_count()

    # --------------------------------------------------------------------- internals
    def _compute(self) -> None:
        self.run = self.bench.run(self.function.value, int(self.size.value))
        self.jacobian = self.run.jacobian

    def _plot_title(self) -> str:
        return JACOBIAN_FUNCTIONS[self.run.name].label

    def _set_texts(self) -> None:
        spec = JACOBIAN_FUNCTIONS[self.run.name]
        r = self.run
        self.note.value = (
            f'<span style="font-size: 12px">{html.escape(spec.description)}<br>'
            f"x shape {r.x_shape}, y shape {r.y_shape}<br>"
            f"batch_jacobian shape {tuple(r.batch_jacobian.shape)}<br>"
            f"the three methods agree to {r.max_disagreement:.1g}</span>"
        )
        self.status.value = status_html(self.status_text)

    def _on_change(self, change=None) -> None:
        self._compute()
        self._plot.update(self.jacobian, title=self._plot_title(), y_ndim=len(self.run.y_shape))
        self.plot.refresh()
        self._set_texts()

    def _repr_mimebundle_(self, **kwargs):
        """Widget view in a live front end; a static PNG and a timing-free line everywhere else.

        ``text/plain`` leaves the timings out on purpose: nbval compares it, and timings change
        from run to run. The live status line (and :attr:`status_text`) carries them.
        """
        return static_bundle(self, self.plot.value, f"JacobianViewer({self.description_text})", **kwargs)

    def __repr__(self) -> str:
        return f"JacobianViewer({self.description_text})"
