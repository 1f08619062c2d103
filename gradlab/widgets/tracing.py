"""Chapter 03's interactive tracing lab: pass a value as a Python float or a tensor, watch retracing."""

from __future__ import annotations

import time

import ipywidgets as widgets
import numpy as np

from ..plots.tracing import RETRACE_COLOR, CallTimePlot
from ..tracing import tf
from ._base import FigureView, SnapshotMixin, css, static_bundle, status_html

__all__ = ["TracingLab"]

MODES = ("python float", "tensor")


def _make_step(x, y, w0):
    """One SGD step of a small linear least-squares model from fixed weights; returns the new loss."""

    def sgd_step(learning_rate):
        w = tf.identity(w0)
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = tf.reduce_mean(tf.square(x @ w - y))
        w_next = w - learning_rate * tape.gradient(loss, w)
        return tf.reduce_mean(tf.square(x @ w_next - y))

    return tf.function(sgd_step)


class TracingLab(SnapshotMixin, widgets.VBox):
    """Move the learning-rate slider and watch a ``tf.function`` retrace, or not (chapter 03).

    The same one-step SGD function is called with the slider's value either as a Python float
    (every new value is a new trace) or as a ``tf.constant`` (one trace serves every value).
    Public controls: ``mode`` (``"python float"`` or ``"tensor"``), ``value`` (the learning
    rate) and ``reset`` (a button that forgets all traces). Setting a control's ``value`` calls
    the function before the assignment returns, so ``lab.value.value = 0.3; lab.traces`` is
    current. :attr:`traces` is the tracing count of the current mode's function.
    """

    def __init__(self, value: float = 0.1, mode: str = "python float", *, seed: int = 0,
                 plot: bool = True):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"value must be a number from 0 to 1; got {value!r}")
        rng = np.random.default_rng(seed)
        self._x = tf.constant(rng.normal(size=(256, 16)), tf.float32)
        self._w0 = tf.constant(rng.normal(size=(16, 1)) * 0.1, tf.float32)
        true_w = rng.normal(size=(16, 1))
        self._y = self._x @ tf.constant(true_w, tf.float32)
        self.mode = css(widgets.ToggleButtons(options=list(MODES), value=mode,
                                              description="pass as"), "tracing-mode")
        self.value = css(widgets.FloatSlider(value=float(value), min=0.0, max=1.0, step=0.01,
                                             description="learning rate", readout_format=".2f",
                                             continuous_update=False), "tracing-value")
        self.reset = css(widgets.Button(description="reset traces", icon="refresh"),
                         "tracing-reset")
        self.status = css(widgets.HTML(), "tracing-status")
        self.traces = 0
        self.last_ms = float("nan")
        self.last_retraced = False
        self.loss = float("nan")
        self._new_functions()
        self._plot = CallTimePlot() if plot else None
        self.plot = FigureView(self._plot.fig, css_name="tracing-plot") if plot else None
        self._call()
        self.mode.observe(self._on_change, names="value")
        self.value.observe(self._on_change, names="value")
        self.reset.on_click(self._on_reset)
        controls = widgets.VBox([self.mode, self.value, self.reset],
                                layout=widgets.Layout(min_width="330px"))
        row = [controls] + ([self.plot] if self.plot is not None else [])
        super().__init__([widgets.HBox(row), self.status])
        css(self, "tracing")

    # --------------------------------------------------------------------- public helpers
    @property
    def function(self):
        """The ``tf.function`` the current mode calls."""
        return self._functions[self.mode.value]

    @property
    def summary(self) -> str:
        """The status without timings: ``python float · value 0.3 → traces: 4``."""
        return f"{self.mode.value} · value {self.value.value:.3g} → traces: {self.traces}"

    @property
    def status_text(self) -> str:
        """The status line in plain words, with the time of the last call."""
        retraced = "retraced" if self.last_retraced else "cached graph"
        return f"{self.summary} · last call {self.last_ms:.3g} ms ({retraced})"

    # --------------------------------------------------------------------- internals
    def _new_functions(self) -> None:
        self._functions = {m: _make_step(self._x, self._y, self._w0) for m in MODES}
        self._times = {m: [] for m in MODES}
        self._traced = {m: [] for m in MODES}

    def _call(self) -> None:
        mode, fn = self.mode.value, self.function
        lr = float(self.value.value)
        arg = lr if mode == "python float" else tf.constant(lr, tf.float32)
        before = fn.experimental_get_tracing_count()
        t0 = time.perf_counter()
        self.loss = float(fn(arg).numpy())
        self.last_ms = 1e3 * (time.perf_counter() - t0)
        self.traces = int(fn.experimental_get_tracing_count())
        self.last_retraced = self.traces > before
        self._times[mode].append(self.last_ms)
        self._traced[mode].append(self.last_retraced)
        if self._plot is not None:
            self._plot.update(self._times[mode], self._traced[mode])
            self.plot.refresh()
        color = RETRACE_COLOR if self.last_retraced else "inherit"
        self.status.value = status_html(self.status_text, color)

    def _on_change(self, change=None) -> None:
        self._call()

    def _on_reset(self, _button=None) -> None:
        self._new_functions()
        self._call()

    def _repr_mimebundle_(self, **kwargs):
        """Widget view in a live front end; a static PNG and the timing-free status elsewhere."""
        text = f"TracingLab({self.summary})"
        if self.plot is not None:
            return static_bundle(self, self.plot.value, text, **kwargs)
        data = super()._repr_mimebundle_(**kwargs)
        data = dict((data[0] if isinstance(data, tuple) else data) or {})
        data["text/plain"] = text
        return data

    def __repr__(self) -> str:
        return f"TracingLab({self.summary})"
