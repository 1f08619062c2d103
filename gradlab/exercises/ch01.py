"""Self-checks for chapter 01's exercises (vanishing and exploding gradients).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_vanishing_depth`, the smallest depth at which ReLU with Glorot
  initialization is diagnosed ``vanishing``;
* exercise 2: :func:`check_clip_by_global_norm`, global-norm clipping written by hand;
* exercise 3: :func:`check_last_zero_layer`, the last layer of a depth-100 sigmoid network
  whose gradient signal underflowed to exactly 0.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong
answer: a typical mistake (a flat tensor, ``tf.clip_by_global_norm``'s ``(list, norm)``
tuple, a 0-based layer index, ...) gets feedback that says what is wrong and hints at why.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import textwrap
import tokenize

import numpy as np

from .._env import quiet_import_tensorflow
from ..engines.mlp import MLPGradientEngine
from ..i18n import N_, _
from ..reports.verdict import status_word
from .answers import as_int_answer
from .compare import check_arrays
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()

__all__ = [
    "CLIP_TEST_GRADS",
    "check_clip_by_global_norm",
    "check_last_zero_layer",
    "check_vanishing_depth",
]

#: Exercise 1: the network whose first vanishing depth the learner finds.
VANISH_ACTIVATION, VANISH_INITIALIZER = "relu", "glorot_uniform"
#: Exercise 3: the network whose last exactly-zero layer the learner finds.
ZERO_DEPTH, ZERO_ACTIVATION, ZERO_INITIALIZER = 100, "sigmoid", "glorot_uniform"


@functools.lru_cache(maxsize=1)
def _engine() -> MLPGradientEngine:
    # the same network and batch as the chapter's engine and explorer (width 64, batch 128)
    return MLPGradientEngine()


_SEVERAL = N_("With np.nonzero you get every matching index: pick the one asked for, and add 1 for a 1-based "
              "layer number")
_SEVERAL_DEPTHS = N_("Several depths are vanishing: the exercise asks for the smallest one, e.g. min(depths) or "
                     "next(d for d in range(1, 101) if engine.report(d, 'relu', 'glorot_uniform').status == "
                     "'vanishing')")


# ----------------------------------------------------------------------------- exercise 1
def check_vanishing_depth(answer) -> CheckResult:
    """Exercise 1: the smallest depth at which ReLU + Glorot uniform is diagnosed ``vanishing``."""
    name = _("first vanishing depth of relu + glorot_uniform")
    depth, problem = as_int_answer(name, answer, _("a depth"), several_hint=_(_SEVERAL_DEPTHS))
    if problem is not None:
        return problem
    engine = _engine()
    if not 1 <= depth <= engine.max_depth:
        return CheckResult(name, False, _("depth {depth} is outside 1..{top}, the depths the explorer offers").format(
            depth=depth, top=engine.max_depth))

    def report(d):
        return engine.report(d, VANISH_ACTIVATION, VANISH_INITIALIZER)

    truth = next(d for d in range(1, engine.max_depth + 1) if report(d).status == "vanishing")
    r = report(depth)
    numbers_ = _("gain {gain} per layer, ratio {ratio}").format(gain=f"{r.gain:.3g}", ratio=f"{r.ratio:.3g}")
    if depth == truth:
        before = report(depth - 1)
        return CheckResult(name, True, _(
            "depth {depth}: {numbers}, both past the per-layer rule (gain < 0.95 and ratio < 0.1); at depth {prev} "
            "the ratio was still {prev_ratio}").format(depth=depth, numbers=numbers_, prev=depth - 1,
                                                       prev_ratio=f"{before.ratio:.3g}"))
    if r.status != "vanishing":
        return CheckResult(name, False, _(
            "at depth {depth} the verdict is {status!r} ({numbers}): the gain is below 0.95, but the total ratio is "
            "not yet below 0.1. Go deeper.").format(depth=depth, status=status_word(r.status), numbers=numbers_))
    return CheckResult(name, False, _(
        "depth {depth} is vanishing ({numbers}), but a shallower network already is: find the smallest depth (try "
        "the ones below it one by one).").format(depth=depth, numbers=numbers_))


# ----------------------------------------------------------------------------- exercise 2
#: The gradients exercise 2 clips: global norm sqrt(3² + 4² + 1² + 2² + 2²) = sqrt(34) ≈ 5.83.
CLIP_TEST_GRADS = ([3.0, 4.0], [[1.0, 2.0], [2.0, 0.0]])
_CLIP_THRESHOLDS = (2.0, 10.0)  # one below the global norm, one above it
#: Two more gradient sets the check feeds (other shapes and norms, float32 like the shown set): a norm or a
#: scale fixed from CLIP_TEST_GRADS fails on them.
_HIDDEN_GRADS = (
    (([0.5, -1.5, 2.0], [-0.5], [[1.0], [3.0]]), (1.0, 5.0)),  # global norm sqrt(16.75) ≈ 4.09
    (([[0.02, -0.01]], [0.03, 0.0, -0.04]), (0.01, 0.1)),  # global norm sqrt(0.003) ≈ 0.0548
)


def _close(got, expected) -> bool:
    try:
        return bool(check_arrays("", got, expected))
    except Exception:  # noqa: BLE001 - a comparison that fails is "not close"
        return False


def _is_number(v) -> bool:
    try:
        arr = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
    except Exception:  # noqa: BLE001
        return False
    return arr.shape == () and np.issubdtype(arr.dtype, np.number)


def _calls_forbidden(fn) -> bool:
    """Whether ``fn``'s source names ``clip_by_global_norm`` outside comments and strings."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        names = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                 if tok.type == tokenize.NAME]
    except (OSError, TypeError, tokenize.TokenError, IndentationError):
        return False  # no source (a builtin, a lambda typed at a console): the call monitor still sees it
    return "clip_by_global_norm" in names


def _traces_forbidden(fn, grads, t: float) -> bool:
    """Whether tracing ``fn`` builds ops under tf.clip_by_global_norm's name scope.

    Catches what the call monitor cannot see: a reference to the function taken before the
    check ran (``clip = tf.clip_by_global_norm``), or ``tf.compat.v1.clip_by_global_norm``. A
    function that cannot be traced (NumPy inside) is left to the other two tests.
    """
    try:
        specs = [tf.TensorSpec(g.shape, g.dtype) for g in grads]
        graph = tf.function(lambda gs: fn(list(gs), t), autograph=False).get_concrete_function(specs).graph
    except Exception:  # noqa: BLE001 - a function that does not trace: not evidence either way
        return False
    return any(op.name.startswith("clip_by_global_norm/") or "/clip_by_global_norm/" in op.name
               for op in graph.get_operations())


@contextlib.contextmanager
def _monitor_clip_by_global_norm(calls: list):
    """Count the calls of ``tf.clip_by_global_norm`` while the learner's function runs."""
    original = tf.clip_by_global_norm

    def watched(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    tf.clip_by_global_norm = watched
    try:
        yield
    finally:
        tf.clip_by_global_norm = original


def _common_scale(got, grads) -> float | None:
    """The one factor c with got[i] == c * grads[i] for every tensor, when there is one."""
    try:
        a = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in got])
        e = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads])
    except Exception:  # noqa: BLE001 - shapes that do not line up have no common factor
        return None
    if a.shape != e.shape or not np.any(e):
        return None
    c = float(a @ e / (e @ e))
    return c if np.allclose(a, c * e, rtol=1e-5, atol=1e-12) else None


def _scale_feedback(label: str, got, grads, t: float, norm: float, first_norm: float, hidden: bool) -> str | None:
    """What a single wrong scale factor says: a norm fixed from the shown set, or a rounded norm."""
    c = _common_scale(got, grads)
    if c is None or c <= 0:
        return None
    want = min(1.0, t / norm)
    implied = t / c
    if hidden and abs(implied - first_norm) < 0.01 * first_norm and abs(norm - first_norm) > 0.01 * first_norm:
        return _("with {label} your function scaled by t / {implied}, and {implied} is the global norm of "
                 "CLIP_TEST_GRADS, not of these gradients: compute the norm from the gradients you are given, "
                 "every call").format(label=label, implied=f"{implied:.4g}")
    if want < 1 and abs(implied - norm) < 0.01 * norm:
        return _("with {label} your function scaled by t / {implied}, but the global norm is {norm}: a rounded "
                 "or typed-in norm? Compute it from the gradients with TensorFlow or NumPy, so every digit "
                 "is right").format(label=label, implied=f"{implied:.7g}", norm=f"{norm:.7g}")
    return _("with {label} your function multiplied every gradient by {c}, expected min(1, t / global_norm) = "
             "{want}. The global norm is the square root of the sum of the squares of all elements of all "
             "tensors").format(label=label, c=f"{c:.4g}", want=f"{want:.4g}")


def _shape_problem(label: str, got, grads) -> CheckResult | None:
    """Feedback when the answer is not a list of one tensor per gradient (None, a pair, one tensor...)."""
    name = "my_clip_by_global_norm"
    if got is None:
        return CheckResult(name, False, _("returned None: did you forget the return statement?"))
    if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (list, tuple)) and _is_number(got[1]):
        return CheckResult(name, False, _("returned a pair (list, norm), as tf.clip_by_global_norm does: return "
                                          "only the list of clipped gradients"))
    if hasattr(got, "shape") and not isinstance(got, (list, tuple)):
        size = int(np.prod(got.shape)) if got.shape is not None else -1
        if size == sum(np.size(g) for g in grads):
            text = _("with {label} it returned one flat tensor of {size} values: return a list with one tensor "
                     "per gradient, each with its own shape (scale each g instead of concatenating them)").format(
                         label=label, size=size)
        else:
            text = _("with {label} it returned one tensor of shape {shape}: return a list with one tensor per "
                     "gradient").format(label=label, shape=tuple(got.shape))
        return CheckResult(name, False, text)
    if not isinstance(got, (list, tuple)):
        return CheckResult(name, False, _("returned a {kind}: expected a list of {n} tensors").format(
            kind=type(got).__name__, n=len(grads)))
    nones = [i for i, g in enumerate(got) if g is None]
    if nones:
        return CheckResult(name, False, _(
            "with {label} item {i} of your list is None: return one scaled tensor per gradient (g * scale), not "
            "the result of an in-place method or an unfinished placeholder").format(label=label, i=nones[0]))
    if len(got) != len(grads):
        return CheckResult(name, False, _("returned {k} items, expected {n}: one per gradient").format(
            k=len(got), n=len(grads)))
    return None


def _value_problem(label: str, got, grads, t: float, norm: float, first_norm: float, hidden: bool) -> str:
    """Why a list of the right shapes has the wrong values: the typical slips, then the generic comparison."""
    if _close(got, [tf.clip_by_norm(g, t) for g in grads]):
        return _("with {label} you clipped each tensor on its own (that is tf.clip_by_norm): use one factor, t / "
                 "global_norm, for all tensors, where the global norm covers every element of every "
                 "tensor").format(label=label)
    if _close(got, [tf.clip_by_value(g, -t, t) for g in grads]):
        return _("with {label} you clipped each element to ±t (tf.clip_by_value): that changes the gradient's "
                 "direction and leaves a long gradient of small elements as it is. Multiply every gradient by one "
                 "factor, min(1, t / global_norm)").format(label=label)
    if norm > t and _close(got, grads):
        return _("with {label} the gradients came back unchanged: above the threshold every gradient must be "
                 "multiplied by t / global_norm").format(label=label)
    if norm <= t and _close(got, [g * (t / norm) for g in grads]):
        return _("with {label} you scaled the gradients up by t / global_norm = {factor}: below the threshold "
                 "clipping must return them unchanged (scale = min(1, t / global_norm))").format(
                     label=label, factor=f"{t / norm:.3g}")
    scale = _scale_feedback(label, got, grads, t, norm, first_norm, hidden)
    if scale is not None:
        return scale
    expected = tf.clip_by_global_norm(grads, t)[0]
    result = check_arrays("my_clip_by_global_norm", got, expected)
    return _("with {label}: {feedback}. The global norm is the square root of the sum of the squares of all "
             "elements of all tensors").format(label=label, feedback=result.feedback.rstrip(".。"))


def _cases():
    """``(grads, t, hidden)`` for every call the check makes: the shown set first, then the hidden ones."""
    for t in _CLIP_THRESHOLDS:
        yield [tf.constant(g) for g in CLIP_TEST_GRADS], t, False
    for grads, thresholds in _HIDDEN_GRADS:
        for t in thresholds:
            yield [tf.constant(g) for g in grads], t, True


def check_clip_by_global_norm(fn) -> CheckResult:
    """Exercise 2: ``fn(grads, t)`` must equal ``tf.clip_by_global_norm(grads, t)[0]``, without calling it.

    Tried on ``CLIP_TEST_GRADS`` with a threshold below the global norm (2, clipping happens)
    and one above it (10, the gradients come back unchanged), then on two more gradient sets
    of other shapes and norms (so a norm fixed from the shown set fails). A function that
    calls ``tf.clip_by_global_norm`` (seen while it runs, or named in its source) fails.
    """
    name = "my_clip_by_global_norm"
    if not callable(fn):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    forbidden = _("it calls tf.clip_by_global_norm, which this exercise asks you to write by hand: compute the "
                  "global norm from the squares of all elements, then multiply every gradient by min(1, t / "
                  "global_norm)")
    if _calls_forbidden(fn) or _traces_forbidden(fn, [tf.constant(g) for g in CLIP_TEST_GRADS], _CLIP_THRESHOLDS[0]):
        return CheckResult(name, False, forbidden)
    first_norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in CLIP_TEST_GRADS)))
    for grads, t, hidden in _cases():
        expected, global_norm = tf.clip_by_global_norm(grads, t)
        norm = float(global_norm)
        label = (_("another gradient set, t={t} (global norm {norm})") if hidden else
                 _("t={t} (global norm {norm})")).format(t=f"{t:g}", norm=f"{norm:.3g}")
        calls: list = []
        try:
            with _monitor_clip_by_global_norm(calls):
                got = fn(list(grads), t)
        except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
            return CheckResult(name, False, _("with {label} your function raised {error}").format(
                label=label, error=describe_error(err)))
        if calls:
            return CheckResult(name, False, forbidden)
        if isinstance(got, (map, filter, zip)) or type(got).__name__ == "generator":
            got = list(got)  # a lazy sequence of the right tensors is a right answer
        problem = _shape_problem(label, got, grads)
        if problem is not None:
            return problem
        if not _close(got, expected):
            return CheckResult(name, False, _value_problem(label, got, grads, t, norm, first_norm, hidden))
    return CheckResult(name, True, _("matches tf.clip_by_global_norm below and above the threshold, on three "
                                     "gradient sets"))


# ----------------------------------------------------------------------------- exercise 3
def check_last_zero_layer(answer) -> CheckResult:
    """Exercise 3: the 1-based index of the last layer of sigmoid + Glorot at depth 100 whose signal is exactly 0."""
    name = _("last exactly-zero layer at depth 100")
    layer, problem = as_int_answer(name, answer, _("a layer number"), several_hint=_(_SEVERAL))
    if problem is not None:
        return problem
    sig = _engine().report(ZERO_DEPTH, ZERO_ACTIVATION, ZERO_INITIALIZER).signal_norms
    zeros = np.nonzero(sig == 0)[0]
    truth = int(zeros.max()) + 1
    if layer == truth:
        return CheckResult(name, True, _(
            "layer {layer}: layers 1 to {layer} have a gradient tensor of exact zeros; layer {next}'s signal is "
            "{value}").format(layer=layer, next=layer + 1, value=f"{sig[layer]:.3g}"))
    if layer == truth - 1:
        return CheckResult(name, False, _(
            "{layer} is the 0-based index (Python counts from 0): layer numbers start at 1 for the input side, so add "
            "1").format(layer=layer))
    if layer == ZERO_DEPTH - truth + 1:
        return CheckResult(name, False, _("layer {layer} counts from the output side: count from the input "
                                          "side").format(layer=layer))
    if not 1 <= layer <= ZERO_DEPTH:
        return CheckResult(name, False, _("layer {layer} does not exist: the network has layers 1..{depth}").format(
            layer=layer, depth=ZERO_DEPTH))
    if sig[layer - 1] == 0:
        return CheckResult(name, False, _("layer {layer}'s signal is exactly 0, but so is a later one: find the last "
                                          "(largest) such layer").format(layer=layer))
    return CheckResult(name, False, _("layer {layer}'s signal is {value}, not exactly 0: look at np.nonzero(sig100 == "
                                      "0)").format(layer=layer, value=f"{sig[layer - 1]:.3g}"))
