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
                return CheckResult(name, False, _("right for ordinary weights, wrong for weights near 1e-22: "
                                                  "take the norms in float64 (float32 squares below about "
                                                  "1e-38 become 0)") + " (" + result.feedback + ")")
            return result
    return CheckResult(name, True, _("the step's size relative to the weights, in float64"))


def dead_fraction_reference(z) -> float:
    """The fraction of columns of ``z`` (``[batch, units]``) that are ``<= 0`` in every row."""
    z = np.asarray(z)
    return float(np.mean(np.all(z <= 0, axis=0)))


def check_dead_fraction(fn) -> CheckResult:
    """Exercise 2: ``fn(z)`` for a ReLU layer's pre-activation ``[batch, units]`` returns the dead fraction."""
    name = _("dead fraction")
    z = np.array([[-1.0, 2.0, 0.0, -3.0, 0.5], [-0.5, -1.0, 0.0, -2.0, -0.1], [-2.0, 0.3, -1.0, -0.1, -4.0]],
                 "float32")
    got, failed = call_answer(name, fn, tf.constant(z))
    if failed is not None:
        return failed
    result = check_array(name, got, dead_fraction_reference(z), rtol=1e-6, atol=1e-9)
    if not result.ok:
        try:
            value = float(np.asarray(got))
        except (TypeError, ValueError):
            return result
        if abs(value - 0.4) < 1e-6:
            return CheckResult(name, False, _("a unit whose z is exactly 0 at every example is dead too: relu's "
                                              "derivative at 0 is 0 (use z <= 0)"))
        if abs(value - float(np.mean(z <= 0))) < 1e-6 or abs(value - float(np.mean(z < 0))) < 1e-6:
            return CheckResult(name, False, _("that is the fraction of values <= 0; a unit is dead when its z is "
                                              "<= 0 at every example of the batch (reduce over axis 0 first)"))
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
    if not isinstance(lr, (int, float)) or lr < RESCUE_MIN_RATE:
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
