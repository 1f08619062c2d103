"""Self-check for chapter 04's capstone (``from gradlab.exercises import ch04``).

The capstone asks for a model, an optimizer and an optional clipping threshold that train a
small regression problem to a final loss below 0.1 within 200 steps. :func:`check_capstone`
runs :func:`gradlab.exercises.training.check_trains` on it and, when the loss simply ends too high, adds advice
that fits what the run did: a loss still falling but too slowly (steps too short: with every
step clipped, each moves the weights by exactly learning rate × clip), or a loss that jumps
around (steps too long). That advice is as specific with clipping as without it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list, join_sentences
from ..models.precision import float64_copy
from ..train.steps import train_steps
from .feedback import CheckResult, describe_error
from .training import check_trains, step_length_advice

tf = quiet_import_tensorflow()

__all__ = ["BELOW", "REQUIRED", "STEPS", "capstone_data", "check_capstone"]

STEPS = 200  # training steps the capstone allows
BELOW = 0.1  # the final loss (mean of the last 10 steps) must be below this
REQUIRED = ("standardize/shift", "standardize/scale")  # the Standardize layer must stay, repaired


def capstone_data(n: int = 256, seed: int = 0):
    """The capstone's batch: 8 features with mean 3 and std 2, a target that uses three of them.

    ``x = 3 + 2·z`` for standard normal ``z``, and ``y = sin(z₀) + 0.5·z₁·z₂``; returns
    ``(x, y)`` with shapes ``(n, 8)`` and ``(n, 1)``.
    """
    raw = tf.random.stateless_normal([n, 8], seed=[seed, 1])
    x = 3.0 + 2.0 * raw
    y = tf.sin(raw[:, :1]) + 0.5 * raw[:, 1:2] * raw[:, 2:3]
    return x, y


def _in_float64(model):
    """The float64 copy the check trains (same starting weights), or ``model`` if it cannot be copied.

    Two hundred float32 steps grow the CPU-dependent last bit of a matmul into other printed
    digits and, at the edge of divergence, into another verdict (issue 28); the float64 copy
    gives the same verdict on every x86 CPU. A subclassed model, which cannot be copied layer by
    layer, trains as it is.
    """
    try:
        return float64_copy(model)
    except ValueError:
        return model


def check_capstone(make_model: Callable, make_optimizer: Callable, clip: float | None = None, *,
                   steps: int = STEPS, below: float = BELOW) -> CheckResult:
    """The capstone's self-check: build a fresh model and optimizer, train, judge (chapter 04).

    ``make_model()`` and ``make_optimizer()`` are the learner's functions; ``clip`` is ``None``
    or a global-norm threshold. The check trains a float64 copy of the model, with the same
    starting weights (:func:`gradlab.models.precision.float64_copy`), so that its verdict and
    digits are the same on every CPU. Passes when :func:`gradlab.exercises.training.check_trains` passes on the capstone
    data with ``require_variables=REQUIRED``. When the final loss stays above ``below`` for
    another reason than NaN or ``None``, :func:`gradlab.exercises.training.step_length_advice` is appended.
    """
    name = _("capstone")
    import keras

    for label, fn in (("make_model", make_model), ("make_optimizer", make_optimizer)):
        if isinstance(fn, (keras.Model, keras.optimizers.Optimizer)):
            return CheckResult(name, False, _("{label} must be your function, got the {kind} it built: pass it without "
                                              "calling it, so the check can build a fresh one").format(
                                                  label=label, kind=type(fn).__name__))
        if not callable(fn):
            return CheckResult(name, False, _("{label} must be your function (pass it without calling it), got "
                                              "{kind}").format(label=label, kind=type(fn).__name__))
    if hasattr(clip, "numpy") and getattr(clip, "shape", None) is not None and len(clip.shape) == 0:
        clip = clip.numpy()  # a scalar tensor
    if isinstance(clip, np.ndarray) and clip.shape == ():
        clip = clip.item()
    if clip is not None and (isinstance(clip, (bool, np.bool_)) or not isinstance(clip, numbers.Real)
                             or not math.isfinite(clip) or not clip > 0):
        if isinstance(clip, (str, bytes)):
            return CheckResult(name, False, _("the clip must be None or a number > 0, got {value!r} (a string: write "
                                              "the number without quotes)").format(value=clip))
        return CheckResult(name, False, _("the clip must be None or a number > 0, got {value!r}").format(value=clip))
    if clip is not None:
        clip = float(clip)  # np.float32(1.0) and 1 are as good as 1.0
    try:
        model, optimizer = _in_float64(make_model()), make_optimizer()
    except Exception as err:  # noqa: BLE001 - a learner's error is feedback
        return CheckResult(name, False, _("building your model or optimizer raised {error}").format(
            error=describe_error(err)))
    x, y = capstone_data()
    try:
        before = {v.path: v.numpy().copy() for v in model.variables
                  if any(r in v.path for r in REQUIRED)}
    except Exception:  # noqa: BLE001 - an unbuilt or unusual model: check_trains reports it
        before = {}
    result = check_trains(name, model, x, y, optimizer=optimizer, steps=steps, below=below,
                          clip_global_norm=clip, require_variables=list(REQUIRED))
    if result:
        still = [v.path for v in model.variables if v.path in before and np.array_equal(v.numpy(), before[v.path])]
        if still:
            return CheckResult(name, False, _(
                "the loss is low enough, but {names} never changed in {steps} steps: its gradient is exactly 0, so the "
                "layer's output does not really depend on it (multiplied by 0, or cut off with stop_gradient). Make "
                "Standardize return (x - shift) * scale.").format(names=join_list(still), steps=steps))
        return result
    details = result.details if isinstance(result.details, dict) else {}
    if details.get("kind") != "not below":
        return result
    run = details["run"]
    if not (hasattr(run, "losses") and hasattr(run, "global_norms")):
        # a run without its history: train a fresh copy to see what happened
        run = train_steps(_in_float64(make_model()), x, y, optimizer=make_optimizer(), steps=steps, clip=clip)
    advice = step_length_advice(run.losses, run.global_norms, optimizer=optimizer, clip=clip, below=below)
    return CheckResult(name, False, join_sentences(details["summary"], advice), details=run)
