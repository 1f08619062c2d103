"""Self-checks for chapter 11's exercises (watch gradients while it trains).

* exercise 1: :func:`check_update_ratio`, ``‖θ(t+1) − θ(t)‖ / ‖θ(t)‖`` of one layer's weights,
  taken in float64;
* exercise 2: :func:`check_dead_fraction`, the fraction of ReLU units never active on a batch
  (``z <= 0`` at every example, ``z == 0`` included: ReLU's derivative there is 0);
* exercise 3: :func:`check_rescue`, settings that keep chapter 11's diverging ReLU network
  (depth 10, ``he_normal``, SGD at 0.3) from diverging and bring its loss below
  :data:`RESCUE_LOSS` in 100 steps, with a learning rate of at least 0.1.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

import numpy as np

from .._env import quiet_import_tensorflow
from ..engines.training import TrainingEngine
from ..i18n import _
from .compare import check_array
from .feedback import CheckResult, call_answer

tf = quiet_import_tensorflow()

__all__ = ["RESCUE_LOSS", "check_dead_fraction", "check_rescue", "check_update_ratio", "dead_fraction_reference",
           "update_ratio_reference"]

#: The loss a rescued run must reach in 100 steps (the run at 0.03 without a clip reaches 0.0053).
RESCUE_LOSS = 0.05
#: The smallest learning rate exercise 3 accepts (the point is to keep the large rate).
RESCUE_MIN_RATE = 0.1

_ENGINE: TrainingEngine | None = None


def update_ratio_reference(before, after) -> float:
    """``‖after − before‖ / ‖before‖`` in float64 over all the given tensors together."""
    b = [np.asarray(t, np.float64) for t in before]
    a = [np.asarray(t, np.float64) for t in after]
    num = np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b, strict=True)))
    return float(num / np.sqrt(sum(np.sum(y ** 2) for y in b)))


def _ratio_cases():
    rng = np.random.default_rng(11)
    k = rng.normal(size=(8, 4)).astype("float32")
    b = rng.normal(size=(4,)).astype("float32")
    cases = [([k, b], [k - 1e-3 * np.sign(k), b + 2e-3])]
    small = (1e-22 * rng.normal(size=(5, 5))).astype("float32")  # float32 squares of these flush to 0
    cases.append(([small], [small * 1.5]))
    return cases


def _ratio_mistake(got, before, after) -> str:
    """The usual mistake ``got`` matches on the ordinary case, in words ("" if none)."""
    try:
        value = float(np.asarray(got))
    except (TypeError, ValueError):
        return ""
    b = [np.asarray(t, np.float64) for t in before]
    a = [np.asarray(t, np.float64) for t in after]
    sq = lambda ts: sum(np.sum(t ** 2) for t in ts)  # noqa: E731
    delta = [x - y for x, y in zip(a, b, strict=True)]
    per_tensor = np.mean([np.sqrt(np.sum(d ** 2) / np.sum(y ** 2)) for d, y in zip(delta, b, strict=True)])
    known = [
        (update_ratio_reference(b[:1], a[:1]), _("that is the kernel's ratio alone: the bias moves too; take both "
                                                 "norms over every tensor of the layer together")),
        (np.sqrt(sq(delta) / sq(a)), _("that divides by the weights after the step; divide by ‖θ(t)‖, before it")),
        (sq(delta) / sq(b), _("those are squared norms: take the square root of each sum")),
        (per_tensor, _("that averages a ratio per tensor; take one norm over all the layer's tensors together")),
        (np.sqrt(sq(delta)), _("that is ‖Δθ‖ alone: divide it by ‖θ‖ before the step")),
    ]
    for want, text in known:
        if np.isclose(value, want, rtol=1e-5, atol=0.0):
            return text
    return ""


def check_update_ratio(fn) -> CheckResult:
    """Exercise 1: ``fn(before, after)`` for lists of one layer's tensors (kernel, bias) returns the ratio."""
    name = _("update ratio")
    for before, after in _ratio_cases():
        got, failed = call_answer(name, fn, [tf.constant(t) for t in before], [tf.constant(t) for t in after])
        if failed is not None:
            return failed
        result = check_array(name, got, update_ratio_reference(before, after), rtol=1e-6, atol=0.0)
        if not result.ok:
            if before[0].size == 25:
                mistake = _("right for ordinary weights, wrong for weights near 1e-22: take the norms in float64 "
                            "(float32 squares below about 1e-38 become 0)")
            else:
                mistake = _ratio_mistake(got, before, after)
            if not mistake:
                return result
            return CheckResult(name, False, _("{mistake} ({detail})").format(mistake=mistake, detail=result.feedback))
    return CheckResult(name, True, _("the step's size relative to the weights, in float64"))


def dead_fraction_reference(z) -> float:
    """The fraction of columns of ``z`` (``[batch, units]``) that are ``<= 0`` in every row."""
    z = np.asarray(z)
    return float(np.mean(np.all(z <= 0, axis=0)))


def _dead_batch() -> np.ndarray:
    """A ``[4, 8]`` batch on which every usual mistake gives its own value (unit 0 is exactly 0 everywhere)."""
    z = np.round(np.random.default_rng(3).normal(size=(4, 8)) - 0.6, 1).astype("float32")
    z[:, 0] = 0.0
    return z


def _dead_mistakes(z) -> list[tuple[float, str]]:
    """``(value, words)`` of the usual wrong answers on ``z`` (distinct on :func:`_dead_batch`)."""
    ref = dead_fraction_reference(z)
    return [
        (float(np.mean(np.all(z < 0, axis=0))), _("a unit whose z is exactly 0 at every example is dead too: relu's "
                                                  "derivative at 0 is 0 (use z <= 0)")),
        (float(np.mean(z <= 0)), _("that is the fraction of values <= 0; a unit is dead when its z is <= 0 at every "
                                   "example of the batch (reduce over axis 0 first)")),
        (float(np.mean(z < 0)), _("that is the fraction of values <= 0; a unit is dead when its z is <= 0 at every "
                                  "example of the batch (reduce over axis 0 first)")),
        (1.0 - ref, _("that is the fraction of units still alive; return the dead ones")),
        (float(np.mean(np.all(z <= 0, axis=1))), _("that reduces over the units (axis 1); the batch is axis 0: a "
                                                   "unit is a column")),
        (float(np.mean(np.any(z <= 0, axis=0))), _("a unit is dead when z <= 0 at every example (all), not at some "
                                                   "(any)")),
        (float(np.mean(np.mean(z, axis=0) <= 0)), _("a unit with z <= 0 on average still passes a gradient from the "
                                                    "examples where z > 0: test every example (all)")),
    ]


def check_dead_fraction(fn) -> CheckResult:
    """Exercise 2: ``fn(z)`` for a ReLU layer's pre-activation ``[batch, units]`` returns the dead fraction."""
    name = _("dead fraction")
    z = _dead_batch()
    got, failed = call_answer(name, fn, tf.constant(z))
    if failed is not None:
        return failed
    result = check_array(name, got, dead_fraction_reference(z), rtol=1e-6, atol=1e-9)
    if not result.ok:
        try:
            value = float(np.asarray(got))
        except (TypeError, ValueError):
            return result
        for want, text in _dead_mistakes(z):
            if abs(value - want) < 1e-6:
                return CheckResult(name, False, text)
        return result
    return CheckResult(name, True, _("units whose z is <= 0 at every example: no gradient reaches their weights"))


def check_rescue(settings) -> CheckResult:
    """Exercise 3: ``settings`` (a dict of ``learning_rate`` >= 0.1 and ``clip``, optionally ``optimizer``)
    that keep the depth-10 ReLU network from diverging and reach :data:`RESCUE_LOSS` in 100 steps."""
    global _ENGINE
    name = _("rescue the run")
    if not isinstance(settings, dict):
        return CheckResult(name, False, _("expected a dict such as {{'learning_rate': 0.3, 'clip': ...}}; got "
                                          "{kind}").format(kind=type(settings).__name__))
    unknown = sorted(set(settings) - {"learning_rate", "clip", "optimizer"})
    if unknown:
        return CheckResult(name, False, _("only learning_rate, clip and optimizer may change; got {keys}").format(
            keys=", ".join(unknown)))
    lr = settings.get("learning_rate", 0.3)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        return CheckResult(name, False, _("learning_rate must be a number, such as 0.3; got {value!r}").format(
            value=lr))
    if lr < RESCUE_MIN_RATE:
        return CheckResult(name, False, _("keep the learning rate at {least} or more: the point is to make the "
                                          "large rate work").format(least=RESCUE_MIN_RATE))
    if _ENGINE is None:
        _ENGINE = TrainingEngine()
    try:
        r = _ENGINE.run(10, "relu", "he_normal", settings.get("optimizer", "sgd"), lr, settings.get("clip"), 100)
    except (TypeError, ValueError) as err:
        return CheckResult(name, False, str(err))
    if r.diverged_at is not None:
        return CheckResult(name, False, _("it still diverges, at step {step}").format(step=r.diverged_at))
    if not r.loss[-1] < RESCUE_LOSS:
        return CheckResult(name, False, _("it no longer diverges, but the loss is {loss} after 100 steps; reach "
                                          "{target}").format(loss=f"{r.loss[-1]:.3g}", target=RESCUE_LOSS))
    return CheckResult(name, True, _("the loss reaches {loss} in 100 steps").format(loss=f"{r.loss[-1]:.3g}"))
