"""Self-checks for chapter 01's exercises (vanishing and exploding gradients).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_vanishing_depth`, the smallest depth at which ReLU with Glorot
  initialization is diagnosed ``vanishing``;
* exercise 2: :func:`check_clip_by_global_norm`, global-norm clipping written by hand;
* exercise 3: :func:`check_last_zero_layer`, the last layer of a depth-100 sigmoid network
  whose gradient signal underflowed to exactly 0.

Every check returns a :class:`~gradlab.checks.CheckResult` and never raises on a wrong
answer: a typical mistake (a flat tensor, ``tf.clip_by_global_norm``'s ``(list, norm)``
tuple, a 0-based layer index, ...) gets feedback that says what is wrong and hints at why.
"""

from __future__ import annotations

import functools

import numpy as np

from .._env import quiet_import_tensorflow
from ..checks import CheckResult, as_int_answer, check_arrays
from ..engine import MLPGradientEngine

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


_SEVERAL = ("With np.nonzero you get every matching index: pick the one asked for, and add 1 "
            "for a 1-based layer number")


# ----------------------------------------------------------------------------- exercise 1
def check_vanishing_depth(answer) -> CheckResult:
    """Exercise 1: the smallest depth at which ReLU + Glorot uniform is diagnosed ``vanishing``."""
    name = "first vanishing depth of relu + glorot_uniform"
    depth, problem = as_int_answer(name, answer, "a depth", several_hint=_SEVERAL)
    if problem is not None:
        return problem
    engine = _engine()
    if not 1 <= depth <= engine.max_depth:
        return CheckResult(name, False, f"depth {depth} is outside 1..{engine.max_depth}, the depths the explorer offers")

    def report(d):
        return engine.report(d, VANISH_ACTIVATION, VANISH_INITIALIZER)

    truth = next(d for d in range(1, engine.max_depth + 1) if report(d).status == "vanishing")
    r = report(depth)
    numbers_ = f"gain {r.gain:.3g} per layer, ratio {r.ratio:.3g}"
    if depth == truth:
        before = report(depth - 1)
        return CheckResult(
            name, True,
            f"depth {depth}: {numbers_}, both past the per-layer rule (gain < 0.95 and ratio < 0.1); "
            f"at depth {depth - 1} the ratio was still {before.ratio:.3g}",
        )
    if r.status != "vanishing":
        return CheckResult(
            name, False,
            f"at depth {depth} the verdict is {r.status!r} ({numbers_}): the gain is below 0.95, but the "
            "total ratio is not yet below 0.1. Go deeper.",
        )
    return CheckResult(
        name, False,
        f"depth {depth} is vanishing ({numbers_}), but a shallower network already is: find the smallest "
        "depth (try the ones below it one by one).",
    )


# ----------------------------------------------------------------------------- exercise 2
#: The gradients exercise 2 clips: global norm sqrt(3² + 4² + 1² + 2² + 2²) = sqrt(34) ≈ 5.83.
CLIP_TEST_GRADS = ([3.0, 4.0], [[1.0, 2.0], [2.0, 0.0]])
_CLIP_THRESHOLDS = (2.0, 10.0)  # one below the global norm, one above it


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


def check_clip_by_global_norm(fn) -> CheckResult:
    """Exercise 2: ``fn(grads, t)`` must equal ``tf.clip_by_global_norm(grads, t)[0]``.

    Tried with a threshold below the global norm (2, clipping happens) and one above it (10,
    the gradients come back unchanged).
    """
    name = "my_clip_by_global_norm"
    if not callable(fn):
        return CheckResult(name, False, f"expected a function, got {type(fn).__name__}")
    for t in _CLIP_THRESHOLDS:
        grads = [tf.constant(g) for g in CLIP_TEST_GRADS]
        expected, global_norm = tf.clip_by_global_norm(grads, t)
        label = f"t={t:g} (global norm {float(global_norm):.3g})"
        try:
            got = fn(grads, t)
        except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
            return CheckResult(name, False, f"with {label} your function raised {type(err).__name__}: {err}")
        if got is None:
            return CheckResult(name, False, "returned None: did you forget the return statement?")
        if (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (list, tuple))
                and _is_number(got[1])):
            return CheckResult(
                name, False,
                "returned a pair (list, norm), as tf.clip_by_global_norm does: return only the list of "
                "clipped gradients",
            )
        if hasattr(got, "shape") and not isinstance(got, (list, tuple)):
            size = int(np.prod(got.shape)) if got.shape is not None else -1
            if size == sum(np.size(g) for g in CLIP_TEST_GRADS):
                hint = (f"one flat tensor of {size} values: return a list with one tensor per gradient, each "
                        "with its own shape (scale each g instead of concatenating them)")
            else:
                hint = f"one tensor of shape {tuple(got.shape)}: return a list with one tensor per gradient"
            return CheckResult(name, False, f"with {label} it returned {hint}")
        if isinstance(got, (map, filter, zip)) or type(got).__name__ == "generator":
            got = list(got)  # a lazy sequence of the right tensors is a right answer
        if not isinstance(got, (list, tuple)):
            return CheckResult(name, False, f"returned a {type(got).__name__}: expected a list of {len(grads)} tensors")
        nones = [i for i, g in enumerate(got) if g is None]
        if nones:
            return CheckResult(name, False, (
                f"with {label} item {nones[0]} of your list is None: return one scaled tensor per gradient "
                "(g * scale), not the result of an in-place method or an unfinished placeholder"))
        if len(got) != len(grads):
            return CheckResult(name, False, f"returned {len(got)} items, expected {len(grads)}: one per gradient")
        if _close(got, expected):
            continue
        # a wrong value: recognize the typical slips before the generic comparison
        if _close(got, [tf.clip_by_norm(g, t) for g in grads]):
            return CheckResult(
                name, False,
                f"with {label} you clipped each tensor on its own (that is tf.clip_by_norm): use one factor, "
                "t / global_norm, for all tensors, where the global norm covers every element of every tensor",
            )
        if float(global_norm) > t and _close(got, grads):
            return CheckResult(
                name, False,
                f"with {label} the gradients came back unchanged: above the threshold every gradient must be "
                "multiplied by t / global_norm",
            )
        if float(global_norm) <= t and _close(got, [g * (t / global_norm) for g in grads]):
            return CheckResult(
                name, False,
                f"with {label} you scaled the gradients up by t / global_norm = {t / float(global_norm):.3g}: "
                "below the threshold clipping must return them unchanged (scale = min(1, t / global_norm))",
            )
        result = check_arrays(name, got, expected)
        return CheckResult(
            name, False,
            f"with {label}: {result.feedback.rstrip('.')}. The global norm is the square root of the sum of the "
            "squares of all elements of all tensors",
        )
    return CheckResult(name, True, "matches tf.clip_by_global_norm below and above the threshold")


# ----------------------------------------------------------------------------- exercise 3
def check_last_zero_layer(answer) -> CheckResult:
    """Exercise 3: the 1-based index of the last layer of sigmoid + Glorot at depth 100 whose signal is exactly 0."""
    name = "last exactly-zero layer at depth 100"
    layer, problem = as_int_answer(name, answer, "a layer number", several_hint=_SEVERAL)
    if problem is not None:
        return problem
    sig = _engine().report(ZERO_DEPTH, ZERO_ACTIVATION, ZERO_INITIALIZER).signal_norms
    zeros = np.nonzero(sig == 0)[0]
    truth = int(zeros.max()) + 1
    if layer == truth:
        return CheckResult(
            name, True,
            f"layer {layer}: layers 1 to {layer} have a gradient tensor of exact zeros; layer {layer + 1}'s "
            f"signal is {sig[layer]:.3g}",
        )
    if layer == truth - 1:
        return CheckResult(
            name, False,
            f"{layer} is the 0-based index (Python counts from 0): layer numbers start at 1 for the input "
            "side, so add 1",
        )
    if layer == ZERO_DEPTH - truth + 1:
        return CheckResult(name, False, f"layer {layer} counts from the output side: count from the input side")
    if not 1 <= layer <= ZERO_DEPTH:
        return CheckResult(name, False, f"layer {layer} does not exist: the network has layers 1..{ZERO_DEPTH}")
    if sig[layer - 1] == 0:
        return CheckResult(
            name, False,
            f"layer {layer}'s signal is exactly 0, but so is a later one: find the last (largest) such layer",
        )
    return CheckResult(
        name, False,
        f"layer {layer}'s signal is {sig[layer - 1]:.3g}, not exactly 0: look at np.nonzero(sig100 == 0)",
    )
