"""Chapter 03's interactive tracing lab: pass a value as a Python float or a tensor, watch retracing."""

from __future__ import annotations

import time

import numpy as np

from ..i18n import N_, _
from ..plots.view import COLORS, STATUS_COLORS, line_plot
from ..topics.tracing import sgd_step_function, tf
from .base import Explorer
from .controls import Button, Dropdown, Slider

__all__ = ["TracingLab"]

MODES = ("python float", "tensor")
#: The toggle buttons' and the status line's labels (the code name in English).
MODE_LABELS = {"python float": N_("python float"), "tensor": N_("tensor")}


class TracingLab(Explorer):
    """Move the learning-rate slider and watch a ``tf.function`` retrace, or not (chapter 03).

    The same one-step SGD function is called with the slider's value either as a Python float
    (every new value is a new trace) or as a ``tf.constant`` (one trace serves every value).
    Public controls: ``mode`` (``"python float"`` or ``"tensor"``), ``value`` (the learning
    rate) and ``reset`` (a button that forgets all traces). Setting a control's ``value`` calls
    the function before the assignment returns, so ``lab.value.value = 0.3; lab.traces`` is
    current. :attr:`traces` is the tracing count of the current mode's function.
    """

    #: every call is measured (and may trace): nothing is cached or computed ahead
    cache_reports = False
    #: the calls the plot shows (the latest)
    MAX_CALLS = 40

    def __init__(self, value: float = 0.1, mode: str = "python float", *, seed: int = 0,
                 plot: bool = True):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ValueError(f"value must be a number from 0 to 1; got {value!r}")
        if not isinstance(plot, bool):
            raise ValueError(f"plot must be True or False; got {plot!r}")
        self._seed, self._with_plot = seed, plot
        rng = np.random.default_rng(seed)
        self._x = tf.constant(rng.normal(size=(256, 16)), tf.float32)
        self._w0 = tf.constant(rng.normal(size=(16, 1)) * 0.1, tf.float32)
        true_w = rng.normal(size=(16, 1))
        self._y = self._x @ tf.constant(true_w, tf.float32)
        self.mode = self.control(Dropdown("mode", options=[(_(MODE_LABELS[m]), m) for m in MODES], value=mode,
                                          description=_("pass as")))
        self.value = self.control(Slider("value", value=float(value), min=0.0, max=1.0, step=0.01,
                                         description=_("learning rate")))
        self.reset = self.control(Button("reset", description=_("reset traces")))
        self.traces = 0
        self.last_ms = float("nan")
        self.last_retraced = False
        self.loss = float("nan")
        self._new_functions()
        self.start()
        self.reset.on_click(self._on_reset)

    # --------------------------------------------------------------------- the base's hooks
    def _compute(self):
        """Call the current mode's function once, timed; record whether it traced."""
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
        return self.loss

    def _plots(self) -> list[dict]:
        if not self._with_plot:
            return []
        times = self._times[self.mode.value]
        t = np.asarray(times, dtype=np.float64)[-self.MAX_CALLS:]
        r = np.asarray(self._traced[self.mode.value], dtype=bool)[-self.MAX_CALLS:]
        start = max(0, len(times) - self.MAX_CALLS)
        x = np.arange(start + 1, start + t.size + 1)
        return [line_plot(
            x=x, series=[{"label": _("call (cached graph)"), "y": t, "color": COLORS["signal"], "width": 1, "marker": "dot"},
                         {"label": _("call that traced"), "y": np.where(r, t, np.nan), "color": STATUS_COLORS["exploding"],
                          "line": False, "marker": "dot"}],
            xlabel=_("call"), ylabel=_("ms (log scale)"), title=_("time of each call"),
            xlim=(x[0] - 0.5, 10 * np.ceil(x[-1] / 10) + 0.5) if t.size else (0.5, 10.5), height=240)]

    def _report_fields(self) -> dict:
        return {"traces": self.traces, "loss": self.loss}

    def _status_color(self):
        return STATUS_COLORS["exploding"] if self.last_retraced else None

    def _text(self) -> str:
        return self.summary

    def _copy_kwargs(self) -> dict:
        return dict(self.settings(), seed=self._seed, plot=self._with_plot)

    def tracing_count(self) -> int:
        """Traces of the current mode's function (the float mode retraces per new value: that is its lesson)."""
        return self.traces

    # --------------------------------------------------------------------- public helpers
    @property
    def function(self):
        """The ``tf.function`` the current mode calls."""
        return self._functions[self.mode.value]

    @property
    def summary(self) -> str:
        """The status without timings: ``python float · value 0.3 → traces: 4``."""
        return _("{mode} · value {value} → traces: {traces}").format(
            mode=_(MODE_LABELS[self.mode.value]), value=f"{self.value.value:.3g}", traces=self.traces)

    @property
    def status_text(self) -> str:
        """The status line in plain words, with the time of the last call."""
        if self.last_retraced:
            return _("{summary} · last call {ms} ms (retraced)").format(
                summary=self.summary, ms=f"{self.last_ms:.3g}")
        return _("{summary} · last call {ms} ms (cached graph)").format(
            summary=self.summary, ms=f"{self.last_ms:.3g}")

    # --------------------------------------------------------------------- internals
    def _new_functions(self) -> None:
        self._functions = {m: sgd_step_function(self._x, self._y, self._w0) for m in MODES}
        self._times = {m: [] for m in MODES}
        self._traced = {m: [] for m in MODES}

    def _on_reset(self, _button=None) -> None:
        self._new_functions()
        self._redraw()
