"""Self-checks for chapter 00's exercises (``from gradlab.exercises import ch00``).

Exercise 1 asks for d/dx sin(x)·x² at x = 1.5 from a tape; exercise 2 for the gradients of a
model's mean squared error. Each check knows the typical wrong answers and says why they are
wrong: a NumPy round-trip inside the tape (``None``, or a factor the tape never saw), the
function's value instead of its slope, the loss instead of the gradients, a sum where the
mean was wanted (every gradient is then batch-size times too large).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..core import mean_squared_error
from ..i18n import N_, _, join_sentences
from .compare import check_array, check_arrays
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()

__all__ = ["X1", "check_derivative", "check_model_gradients", "expected_derivative", "reference_gradients"]

X1 = 1.5  # where exercise 1 takes the derivative


def expected_derivative(x: float = X1) -> float:
    """d/dx sin(x)·x² = cos(x)·x² + 2x·sin(x), derived by hand."""
    return float(np.cos(x) * x**2 + 2 * x * np.sin(x))


_ROUND_TRIP = N_("A NumPy round-trip inside the tape gives this too: np.sin(x) or x.numpy() returns a NumPy "
                 "value that the tape cannot follow, so use TensorFlow ops (tf.sin) all the way from x to f.")


def check_derivative(answer) -> CheckResult:
    """Exercise 1: ``answer`` is the tape's d/dx sin(x)·x² at x = 1.5."""
    x = X1
    hints = [
        (2 * x * np.sin(x), join_sentences(_("your number is 2x·sin(x), the slope of x² alone: sin(x) reached the "
                                             "product as a constant."), _(_ROUND_TRIP))),
        (np.cos(x) * x**2, join_sentences(_("your number is cos(x)·x², the slope of sin(x) alone: x² reached the "
                                            "product as a constant."), _(_ROUND_TRIP))),
        (np.sin(x) * x**2, _("your number is sin(x)·x², the value of the function, not its slope: return "
                             "tape.gradient(f, x).")),
    ]
    if_none = _("Two usual causes: x is a constant and was not watched (tape.watch(x)); or a NumPy round-trip "
                "inside the tape (np.sin(x), x.numpy()) handed the tape a value it cannot follow back to x: use "
                "TensorFlow ops (tf.sin) all the way from x to f.")
    name = "d/dx sin(x)·x²"
    near = _near_miss(name, answer, expected_derivative(x))
    if near is not None:
        return near
    return check_array(name, answer, expected_derivative(x), rtol=_RTOL, hints=hints, if_none=if_none)


#: The tape's float32 answer is within a few float32 roundings (~1e-7) of the hand-derived value;
#: a finite-difference estimate or a number typed in from a printout is further off than this.
_RTOL = 1e-6


def _near_miss(name: str, answer, want: float) -> CheckResult | None:
    """Feedback for a number close to the slope but not the tape's value: an estimate or a typed-in copy."""
    if isinstance(answer, (bool, np.bool_)) or answer is None:
        return None
    try:
        value = float(np.asarray(answer.numpy() if hasattr(answer, "numpy") else answer, dtype=np.float64))
    except (TypeError, ValueError):
        return None  # not one number: check_array says what it is
    gap = abs(value - want) / abs(want)
    if not _RTOL < gap < 1e-3:
        return None
    return CheckResult(name, False, _(
        "got {got}, expected {want}: close (relative gap {gap}), but further off than the tape's float32 rounding "
        "(about 1e-7). A rounded copy of a printout, a number typed in, or a finite-difference estimate such as "
        "(f(x + h) - f(x)) / h gives this: pass the tape's result itself, tape.gradient(f, x).").format(
            got=f"{value:.7g}", want=f"{want:.7g}", gap=f"{gap:.1g}"))


def reference_gradients(model, x, y) -> list:
    """The gradients of ``mean((model(x) - y)²)`` with respect to ``model.trainable_variables``."""
    with tf.GradientTape() as tape:
        loss = mean_squared_error(y, model(x))
    return tape.gradient(loss, model.trainable_variables)


def check_model_gradients(model_gradients: Callable, model, x, y) -> CheckResult:
    """Exercise 2: ``model_gradients(model, x, y)`` returns one gradient per trainable variable.

    The learner's function is called here, so an exception inside it is feedback too.
    """
    name = _("model gradients")
    if not callable(model_gradients):
        return CheckResult(name, False, _("expected your function model_gradients, got {kind}").format(
            kind=type(model_gradients).__name__))
    reference = reference_gradients(model, x, y)  # before the call: the learner's function may change the model
    weights = [v.numpy().copy() for v in model.trainable_variables]
    try:
        got = model_gradients(model, x, y)
    except Exception as err:  # noqa: BLE001 - a learner's error is feedback
        text = _("your function raised {error}").format(error=describe_error(err, 300))
        if isinstance(err, AttributeError) and "_id" in str(err):
            text += ". " + _("Hint: this is what tape.gradient says when the loss is a NumPy value (from .numpy() or "
                             "np.mean): the tape can only follow TensorFlow ops, so compute the loss with "
                             "tf.reduce_mean and tf.square")
        return CheckResult(name, False, text)
    changed = [v.path for v, w in zip(model.trainable_variables, weights, strict=True)
               if not np.array_equal(v.numpy(), w)]
    if changed:
        for v, w in zip(model.trainable_variables, weights, strict=True):
            v.assign(w)  # put the model back as it was
        return CheckResult(name, False, _(
            "your function changed the model's weights ({first} and {more} more): it should only compute and return "
            "the gradients, not apply them. (The check restored the weights.)").format(
                first=changed[0], more=len(changed) - 1))
    batch = int(x.shape[0])
    hints = [(lambda arrs: all(np.allclose(a, batch * np.asarray(r), rtol=1e-3, atol=1e-6)
                               for a, r in zip(arrs, reference, strict=True)),
              _("the ratio is the batch size ({batch}): the loss was summed over the examples (tf.reduce_sum) where "
                "the mean was wanted (tf.reduce_mean).").format(batch=batch)),
             (lambda arrs: all(np.allclose(a, 0.5 * np.asarray(r), rtol=1e-3, atol=1e-6)
                               for a, r in zip(arrs, reference, strict=True)),
              _("the ratio is 1/2: the loss has a factor 0.5 (0.5 · mean squared error, as some textbooks write "
                "it). The exercise asks for the mean squared error itself, tf.reduce_mean(tf.square(model(x) - "
                "y)).")),
             ]
    hints += _other_loss_hints(model, x, y)
    if len(y.shape) == 2 and y.shape[-1] == 1:
        with tf.GradientTape() as tape:  # the (n, 1) - (n,) broadcast that gives an (n, n) residual
            wrong = tf.reduce_mean(tf.square(model(x) - tf.reshape(y, [-1])))
        broadcast = tape.gradient(wrong, model.trainable_variables)
        hints.append((lambda arrs: all(np.allclose(a, np.asarray(r), rtol=1e-3, atol=1e-6)
                                       for a, r in zip(arrs, broadcast, strict=True)),
                      _("these are the gradients of a loss where model(x), shape {shape}, met a target of shape "
                        "({batch},): the subtraction broadcast to ({batch}, {batch}) and compared every prediction "
                        "with every target. Keep y's shape (n, 1), or reshape both sides alike.").format(
                            shape=tuple(model(x).shape), batch=batch)))
    return check_arrays(name, got, reference, labels=[v.path for v in model.trainable_variables],
                        what=_("one gradient per trainable variable"), hints=hints)


#: Losses that are not the mean squared error, as a learner writes them by slip, and what they are.
_OTHER_LOSSES = (
    (lambda p, y: tf.reduce_mean(tf.abs(p - y)),
     N_("these are the gradients of the mean absolute error, mean(|model(x) - y|) (tf.abs or "
        "keras.losses.MeanAbsoluteError): square the errors instead, tf.square.")),
    (lambda p, y: tf.sqrt(tf.reduce_mean(tf.square(p - y))),
     N_("these are the gradients of the root of the mean squared error (tf.sqrt of it, the RMSE): the exercise asks "
        "for the mean squared error itself, without the square root.")),
    (lambda p, y: tf.reduce_mean(p - y),
     N_("these are the gradients of mean(model(x) - y), the errors without the square: square them first, "
        "tf.square(model(x) - y).")),
)


def _other_loss_hints(model, x, y) -> list:
    """Hints for the gradients of a loss other than the mean squared error (:data:`_OTHER_LOSSES`)."""
    hints = []
    for loss_of, text in _OTHER_LOSSES:
        with tf.GradientTape() as tape:
            loss = loss_of(model(x), y)
        other = tape.gradient(loss, model.trainable_variables)
        hints.append((lambda arrs, other=other: all(np.allclose(a, np.asarray(r), rtol=1e-3, atol=1e-6)
                                                    for a, r in zip(arrs, other, strict=True)), _(text)))
    return hints
