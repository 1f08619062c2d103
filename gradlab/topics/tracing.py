"""tf.function tracing: counting traces, timing steps, reading TensorFlow's errors (chapter 03).

Pure computation: TensorFlow in, NumPy numbers and small dataclasses out. Nothing
here imports ipywidgets (the live :class:`~gradlab.widgets.tracing_lab.TracingLab` does).

* :class:`TraceCounter` wraps a Python function in ``tf.function`` and counts, with a
  Python side effect, how often it is traced, and what it was traced for.
* :func:`time_step` times a step function: the first call (tracing, compiling) apart from
  the steady state.
* :func:`error_summary` keeps the one line of a TensorFlow error that says what went wrong.
* :func:`sgd_step_function` is the TracingLab's ``tf.function``: one SGD step of a small linear
  least-squares model (the explorer holds no training code).

The training steps built on these live in :mod:`gradlab.train.steps` and :mod:`gradlab.train.fit`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_int
from ..i18n import _, ngettext, pad

tf = quiet_import_tensorflow()

__all__ = [
    "StepTiming",
    "TraceCounter",
    "error_summary",
    "format_timings",
    "sgd_step_function",
    "time_step",
    "total_tracing_count",
    "tracing_count",
]


# ----------------------------------------------------------------------------- tracing
def tracing_count(fn) -> int:
    """How many times the ``tf.function`` ``fn`` has been traced (chapter 03).

    A thin, checked wrapper around ``fn.experimental_get_tracing_count()``; a
    :class:`TraceCounter` is accepted too.
    """
    if isinstance(fn, TraceCounter):
        fn = fn.function
    getter = getattr(fn, "experimental_get_tracing_count", None)
    if getter is None:
        raise ValueError(
            f"fn must be a tf.function (or a TraceCounter); got {type(fn).__name__}. "
            "A plain Python function is never traced."
        )
    return int(getter())


def total_tracing_count(functions) -> int:
    """The traces of several tf.functions together (an engine's functions, one per mode)."""
    return sum(tracing_count(f) for f in functions)


def _describe(value) -> str:
    """A short description of one argument, as a trace sees it."""
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "shape") and hasattr(value, "dtype"):
        shape = "[" + ", ".join("None" if d is None else str(d) for d in value.shape) + "]"
        return f"{value.dtype.name if hasattr(value.dtype, 'name') else value.dtype}{shape}"
    if isinstance(value, float):
        return _("python float {value}").format(value=f"{value:.6g}")
    if isinstance(value, bool):
        return _("python bool {value}").format(value=repr(value))
    if isinstance(value, int):
        return _("python int {value}").format(value=repr(value))[:60]
    return _("python {type} {value}").format(type=type(value).__name__, value=repr(value))[:60]


def _value_of(value):
    """The value of one small argument (a Python value, or a tensor's values as a tuple); None when large."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - a symbolic tensor (a call inside another tf.function) has no value
            return None
        return tuple(array.ravel().tolist()) if array.size <= 16 else None
    return value if isinstance(value, (bool, int, float, str)) else None


class TraceCounter:
    """A ``tf.function`` that counts its own traces with a Python side effect (chapter 03).

    ``TraceCounter(fn, **tf_function_kwargs)`` wraps ``fn`` in ``tf.function``. Python code in
    ``fn`` runs only while TensorFlow traces it, so a counter incremented there counts traces,
    not calls: :attr:`count` grows only when a call retraces, and :attr:`log` says which
    arguments each trace was made for. :attr:`calls` counts every call, and :attr:`values`
    holds each call's argument values (a tensor's as a tuple, or None when it has more than 16).

    >>> tc = TraceCounter(lambda x, a: x * a)
    >>> _ = tc(tf.constant(1.0), 0.5); _ = tc(tf.constant(1.0), 0.6)
    >>> tc.count   # two Python floats -> two traces
    2
    """

    def __init__(self, fn: Callable, **function_kwargs):
        if not callable(fn) or hasattr(fn, "experimental_get_tracing_count"):
            raise ValueError(
                "fn must be a plain Python function (TraceCounter applies tf.function itself); "
                f"got {type(fn).__name__}"
            )
        self.python_function = fn
        self.count = 0
        self.calls = 0
        self.log: list[str] = []
        self.values: list[tuple] = []

        @functools.wraps(fn)
        def traced(*args, **kwargs):
            self.count += 1
            parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
            self.log.append(", ".join(parts))
            return fn(*args, **kwargs)

        self.function = tf.function(traced, **function_kwargs)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.values.append(tuple(_value_of(a) for a in args) + tuple(_value_of(v) for v in kwargs.values()))
        return self.function(*args, **kwargs)

    @property
    def tracing_count(self) -> int:
        """TensorFlow's own count, ``experimental_get_tracing_count()``; equals :attr:`count`."""
        return int(self.function.experimental_get_tracing_count())

    def __repr__(self) -> str:
        name = getattr(self.python_function, "__name__", "fn")
        calls = ngettext("{n} call", "{n} calls", self.calls).format(n=self.calls)
        traces = ngettext("{n} trace", "{n} traces", self.count).format(n=self.count)
        return _("TraceCounter({name}: {calls}, {traces})").format(name=name, calls=calls, traces=traces)


def error_summary(err: BaseException) -> str:
    """``"TypeName: the one line that says what went wrong"`` for a TensorFlow error (chapter 03).

    TensorFlow errors raised from inside a ``tf.function`` carry file paths and graph node
    names around the message. This keeps the message line, so a notebook can print a stable,
    readable summary of an error it catches.
    """
    if not isinstance(err, BaseException):
        raise ValueError(f"err must be an exception, got {type(err).__name__}")
    name = type(err).__name__
    for raw in str(err).splitlines():
        line = raw.strip()
        if (
            not line
            or line in ("in user code:", "Graph execution error:")
            or line.startswith(("File ", "Detected at node", "[[{{node", "See https"))
            or raw.startswith("        ")  # source lines quoted under a File line
        ):
            continue
        if line.startswith(f"{name}: "):
            line = line[len(name) + 2:]
        line = line.split(" [Op:")[0].split(" See https")[0].strip()
        return f"{name}: {line}"
    return name


# ----------------------------------------------------------------------------- timing
@dataclasses.dataclass(frozen=True)
class StepTiming:
    """Wall-clock times of one step function, in seconds (chapter 03).

    ``first_s`` is the first call (for a ``tf.function``: tracing, graph building and, with
    ``jit_compile=True``, XLA compilation, plus one run). ``steady_s`` is the median of the
    ``times_s`` measured after the warm-up calls.
    """

    name: str
    first_s: float
    steady_s: float
    times_s: np.ndarray

    @property
    def first_ms(self) -> float:
        return 1e3 * self.first_s

    @property
    def steady_ms(self) -> float:
        return 1e3 * self.steady_s

    def __repr__(self) -> str:
        return "StepTiming({text})".format(text=_("{name}: first {first} ms, steady {steady} ms").format(
            name=self.name, first=f"{self.first_ms:.3g}", steady=f"{self.steady_ms:.3g}"))


def _block(out) -> None:
    """Wait for every tensor in ``out`` (copy it to the host), so a timing includes the work."""
    for t in tf.nest.flatten(out):
        if hasattr(t, "numpy"):
            t.numpy()


def time_step(fn: Callable, args: Sequence = (), *, warmup: int = 3, repeats: int = 20,
              name: str | None = None) -> StepTiming:
    """Time ``fn(*args)``: the first call on its own, then the median of ``repeats`` calls (chapter 03).

    Call it on a function that has not run yet, so the first call includes tracing. Between
    the first call and the timed ones, ``warmup`` untimed calls let caches settle. Every call's
    outputs are copied to the host, so the time includes the computation, not just its launch.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args must be a tuple or list of arguments, got {type(args).__name__}")
    warmup = check_int("warmup", warmup, 0)
    repeats = check_int("repeats", repeats, 1)
    t0 = time.perf_counter()
    _block(fn(*args))
    first = time.perf_counter() - t0
    for _unused in range(warmup):
        _block(fn(*args))
    times = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        _block(fn(*args))
        times[i] = time.perf_counter() - t0
    label = name or getattr(fn, "__name__", None) or type(fn).__name__
    return StepTiming(str(label), first, float(np.median(times)), times)


def format_timings(timings: Sequence[StepTiming], baseline: str | None = None) -> str:
    """A plain-text table of step times and speed-ups against ``baseline`` (chapter 03).

    ``baseline`` is the ``name`` of one timing (default: the first). Speed-up is the
    baseline's steady-state time divided by each row's.
    """
    timings = list(timings)
    if not timings or not all(isinstance(t, StepTiming) for t in timings):
        raise ValueError("timings must be a non-empty list of StepTiming (from time_step)")
    names = [t.name for t in timings]
    base_name = names[0] if baseline is None else baseline
    if base_name not in names:
        raise ValueError(f"baseline must be one of {names}; got {baseline!r}")
    base = timings[names.index(base_name)]
    width = max(8, *(len(n) for n in names))
    mode_h, first_h, steady_h, speedup_h, ratio_h = (_("mode"), _("first call"), _("steady step"), _("speed-up"),
                                                     _("first/steady"))
    rows = [f"{pad(mode_h, width)}  {pad(first_h, 11, '>')}  {pad(steady_h, 11, '>')}  {pad(speedup_h, 8, '>')}  {pad(ratio_h, 12, '>')}"]
    for t in timings:
        rows.append(
            f"{pad(t.name, width)}  {t.first_ms:>8.3g} ms  {t.steady_ms:>8.3g} ms  "
            f"{base.steady_s / t.steady_s:>7.3g}x  {t.first_s / t.steady_s:>11.3g}x"
        )
    return "\n".join(rows)


def sgd_step_function(x, y, w0):
    """A ``tf.function`` ``step(learning_rate)``: one SGD step of the linear model ``x @ w`` from
    the fixed weights ``w0`` on the core's mean squared error, returning the loss after it
    (chapter 03's TracingLab: a Python float retraces per value, a tensor does not)."""

    def sgd_step(learning_rate):
        w = tf.identity(w0)
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = core.mean_squared_error(y, x @ w)  # the core's loss, one implementation
        w_next = w - learning_rate * tape.gradient(loss, w)
        return core.mean_squared_error(y, x @ w_next)

    return tf.function(sgd_step)
