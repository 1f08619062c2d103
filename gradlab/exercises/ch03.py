"""Self-checks for chapter 03's exercises (GradientTape with tf.function).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_sweep`, a sweep over five values traced only once;
* exercise 2: :func:`check_prediction`, the predicted number of traces of a call sequence;
* exercise 3: :func:`check_clipped_step`, a training step with SGD(0.05) and global-norm
  clipping at 1.0, judged by how far the weights really move.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong
answer. Exercise 2 accepts a number written as a string (and says so); exercise 3 tells the
intended fix from a coincidence such as ``SGD(0.1)`` with a clip of 0.5, whose product is
the same 0.05.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..core import mean_squared_error
from ..i18n import _, end_sentence, join_sentences
from ..topics.tracing import TraceCounter
from .clipping import targets_with_gradient_norm
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()

__all__ = [
    "PREDICTION_ARGS",
    "check_clipped_step",
    "check_prediction",
    "check_sweep",
    "count_prediction_traces",
    "regression_data",
]


# ----------------------------------------------------------------------------- exercise 1
#: How a TraceCounter's log names a tensor argument, ``float32[]`` or ``float32[3]``; any other
#: part of the entry is a Python value (its wording is translated, so it is not matched itself).
_TENSOR_PART = re.compile(r"^(\w+=)?\w+\[[^\]]*\]$")


def _python_value_in(entry: str) -> bool:
    """Whether one TraceCounter log entry holds an argument that is not a tensor (an int, a float, a bool)."""
    parts = re.split(r", (?![^\[]*\])", entry)  # not at the commas inside a shape, float32[None, 3]
    return any(not _TENSOR_PART.match(part.strip()) for part in parts)


def check_sweep(sweep, calls: int = 5) -> CheckResult:
    """Exercise 1: ``sweep`` is a :class:`~gradlab.TraceCounter` called ``calls`` times with one trace."""
    name = _("one trace for the sweep")
    count, made = getattr(sweep, "count", None), getattr(sweep, "calls", None)
    if count is None or made is None:
        return CheckResult(name, False, _("expected the gl.TraceCounter named sweep, got {kind}").format(
            kind=type(sweep).__name__))
    if made != calls:
        return CheckResult(name, False, _("{made} calls, expected {calls}: keep the loop over the five values").format(
            made=made, calls=calls))
    if count != 1:
        return CheckResult(name, False, _(
            "{count} traces for {made} calls: each new Python float is a new constant in the graph. What kind of "
            "value can change without a retrace?").format(count=count, made=made))
    if count != getattr(sweep, "tracing_count", count):
        return CheckResult(name, False, _(
            "sweep.count says {count} but TensorFlow counted {traced} traces: leave the counter as the calls left "
            "it").format(count=count, traced=sweep.tracing_count))
    log = list(getattr(sweep, "log", []))
    if log and _python_value_in(log[0]):
        return CheckResult(name, False, _(
            "1 trace, but it was made for a Python value ({value}): the five calls passed the same number, so the "
            "sweep no longer sweeps. Keep the five values and pass each as a tensor").format(value=log[0]))
    scales = [call[-1] for call in getattr(sweep, "values", []) if call]
    if len(scales) == made and len(set(scales)) < made:
        return CheckResult(name, False, _(
            "1 trace, but the five calls passed scale = {values}: a tensor of one fixed number, such as "
            "tf.constant(0.3), does not sweep. Pass each value of the loop, tf.constant(scale)").format(
                values=_list_values(scales)))
    return CheckResult(name, True, _("{made} calls, 1 trace").format(made=made))


def _list_values(values) -> str:
    """``0.3, 0.3, …``: each call's scale, a tensor's values shown as numbers."""
    shown = [v[0] if isinstance(v, tuple) and len(v) == 1 else v for v in values]
    return ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in shown)


# ----------------------------------------------------------------------------- exercise 2
#: Exercise 2: the call sequence, described for the learner in the chapter.
PREDICTION_ARGS = ("tensor [2]", "tensor [2]", "tensor [3]", "Python int 1", "Python int 1")


def count_prediction_traces() -> tuple[int, list[str]]:
    """Run exercise 2's five calls through a :class:`~gradlab.TraceCounter`: ``(traces, log)``."""
    counter = TraceCounter(lambda x: x + 1)
    for arg in [tf.ones([2]), tf.zeros([2]), tf.ones([3]), 1, 1]:
        counter(arg)
    return counter.count, list(counter.log)


def _as_count(predicted):
    """``(int, note, problem)``: the prediction as a whole number, a note on its type, or the problem."""
    if predicted is None:
        return None, "", _("no prediction yet: set predicted to a whole number")
    if isinstance(predicted, bool):
        return None, "", _("got {value!r}, a bool: set predicted to a whole number of traces, e.g. 2").format(
            value=predicted)
    if isinstance(predicted, (str, bytes)):
        text = predicted.decode() if isinstance(predicted, bytes) else predicted
        try:
            value = float(text.strip())
        except ValueError:
            return None, "", _("got the string {value!r}: write the number of traces as a number, e.g. 2").format(
                value=predicted)
        if not value.is_integer():
            return None, "", _("got {value!r}: a number of traces is a whole number").format(value=predicted)
        return int(value), " " + _("(you wrote the string {value!r}; the number {number} works too)").format(
            value=predicted, number=int(value)), None
    if hasattr(predicted, "numpy"):
        predicted = predicted.numpy()
    if isinstance(predicted, np.ndarray) and predicted.shape == ():
        predicted = predicted.item()
    if isinstance(predicted, numbers.Integral):
        return int(predicted), "", None
    if isinstance(predicted, numbers.Real) and math.isfinite(predicted) and float(predicted).is_integer():
        return int(predicted), "", None
    return None, "", _("got {value!r} ({kind}): set predicted to a whole number").format(
        value=predicted, kind=type(predicted).__name__)


def check_prediction(predicted) -> CheckResult:
    """Exercise 2: ``predicted`` is the number of traces the five calls make (a number, or its string)."""
    name = _("predicted traces")
    value, note, problem = _as_count(predicted)
    if problem:
        return CheckResult(name, False, problem)
    count, log = count_prediction_traces()
    if value != count:
        text = (_("you predicted {value}; TensorFlow made fewer traces than that. Go through the five calls and ask "
                  "for each: is this signature (shape, dtype, or Python value) new?") if value > count else
                _("you predicted {value}; TensorFlow made more traces than that. Go through the five calls and ask "
                  "for each: is this signature (shape, dtype, or Python value) new?"))
        return CheckResult(name, False, join_sentences(text.format(value=value), _prediction_slip(value, count)))
    return CheckResult(name, True, _("{count} traces{note}: {log}").format(count=count, note=note, log=log))


def _prediction_slip(value: int, count: int, calls: int = 5) -> str:
    """What a wrong prediction of exercise 2 most likely missed (one sentence)."""
    if value < 1:
        return _("The first call always traces: the count is at least 1.")
    if value >= calls:
        return _("You counted one trace per call: a call whose signature was seen before reuses its trace (the "
                 "second tensor of shape [2], the second Python 1).")
    if value > count:
        return _("A repeat was counted as new: the second tensor of shape [2] and the second Python 1 each reuse a "
                 "trace made before.")
    return _("A new signature was missed: a tensor of a new shape ([3]) traces again, and so does a Python int (1), "
             "whose value is part of the signature, unlike a tensor's value.")


# ----------------------------------------------------------------------------- exercise 3
def regression_data(n: int, seed: int):
    """``(x, y)`` with ``y = x w_true + 0.1 noise``, 20 features: chapter 03's data."""
    x = tf.random.stateless_normal([n, 20], seed=[seed, 0])
    w_true = tf.random.stateless_normal([20, 1], seed=[99, 0])
    noise = 0.1 * tf.random.stateless_normal([n, 1], seed=[seed, 1])
    return x, x @ w_true + noise


def _fresh_model():
    import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((20,)),
        keras.layers.Dense(32, activation="relu", name="hidden1"),
        keras.layers.Dense(32, activation="relu", name="hidden2"),
        keras.layers.Dense(1, name="output"),
    ])


def _shared_optimizer_feedback(lr: float) -> str:
    return _("the optimizer already belongs to another model's variables: a Keras optimizer serves one set of "
             "variables. Create it inside make_clipped_step, keras.optimizers.SGD(learning_rate={lr}), so each model "
             "gets its own").format(lr=lr)


def _distance_moved(make_step: Callable, x, y, steps: int = 1, lr: float = 0.05):
    """``(distances, problem)``: how far each of ``steps`` steps of ``make_step(model)`` moves a fresh model."""
    model = _fresh_model()
    before = [v.numpy().copy() for v in model.trainable_variables]
    if not callable(make_step):
        return None, _("expected your function make_clipped_step, got {kind}").format(kind=type(make_step).__name__)
    try:
        step_fn = make_step(model)
    except Exception as err:  # noqa: BLE001 - a failing factory is feedback
        if "already built for other variables" in str(err):  # gl.make_train_step refuses a shared optimizer
            return None, _shared_optimizer_feedback(lr)
        return None, _("make_clipped_step(model) raised {error}").format(error=describe_error(err))
    if step_fn is None:
        return None, _("make_clipped_step returned None: return the step that gl.make_train_step gives you")
    if not callable(step_fn):
        return None, _("make_clipped_step returned a {kind}, not a step function").format(kind=type(step_fn).__name__)
    moved = []
    for _step in range(steps):
        try:
            step_fn(x, y)
        except Exception as err:  # noqa: BLE001 - a failing step is feedback
            if "Unknown variable" in str(err) or "can only be called for the variables" in str(err):
                return None, _shared_optimizer_feedback(lr)
            return None, _("the step raised {error}").format(error=describe_error(err, 300))
        moved.append(math.sqrt(sum(float(np.sum((v.numpy() - b) ** 2))
                                   for v, b in zip(model.trainable_variables, before, strict=True))))
        before = [v.numpy().copy() for v in model.trainable_variables]
    return moved, None


def _other_clip(applied: float, x, y, clip: float) -> str:
    """A sentence when the applied gradient norm ``applied`` is that of a per-variable or per-element clip at ``clip``."""
    model = _fresh_model()
    with tf.GradientTape() as tape:
        loss = mean_squared_error(y, model(x))
    grads = [g.numpy().astype(np.float64) for g in tape.gradient(loss, model.trainable_variables)]
    per_variable = math.sqrt(sum(min(float(np.sum(g**2)), clip**2) for g in grads))
    per_element = math.sqrt(sum(float(np.sum(np.clip(g, -clip, clip) ** 2)) for g in grads))
    if abs(applied - per_variable) <= 2e-3 * per_variable:
        return _("That is each variable's gradient clipped to norm {clip} on its own (clipnorm= on a Keras optimizer, "
                 "or tf.clip_by_norm per tensor), not the global norm: pass clip={clip} to gl.make_train_step "
                 "instead.").format(clip=clip)
    if abs(applied - per_element) <= 2e-3 * per_element:
        return _("That is each element clipped to ±{clip} (clipvalue= on a Keras optimizer, or "
                 "tf.clip_by_value), not the global norm: pass clip={clip} to gl.make_train_step instead.").format(
                     clip=clip)
    return ""


def check_clipped_step(make_step: Callable, lr: float = 0.05, clip: float = 1.0) -> CheckResult:
    """Exercise 3: ``make_step(model)`` trains ``model`` with ``SGD(lr)``, global norm clipped to ``clip``.

    The check trusts nothing the step reports. It runs the step on fresh copies of a model
    twice: on a batch whose raw gradient norm is above ``clip`` (the weights must move by
    ``lr × clip``) and on one whose raw norm is 0.4·``clip``, below every threshold that could
    matter (they must move by ``lr × 0.4·clip``: the gradient passes unclipped). The first
    alone cannot tell SGD(0.05) clipped at 1.0 from SGD(0.1) clipped at 0.5; the second can.
    A second step on the small batch tells plain SGD from SGD with momentum, whose first
    step is the same.
    """
    name = _("SGD({lr}) clipped to {clip}").format(lr=lr, clip=clip)
    x, y = regression_data(64, seed=2000)
    small_norm = 0.4 * clip
    y_small, raw = targets_with_gradient_norm(_fresh_model, x, y, small_norm)  # the batch below the threshold
    big, problem = _distance_moved(make_step, x, y, lr=lr)
    if problem:
        return CheckResult(name, False, problem)
    small, problem = _distance_moved(make_step, x, y_small, steps=2, lr=lr)
    if problem:
        return CheckResult(name, False, problem)
    (big,), (small, small_again) = big, small
    if big == 0.0:
        return CheckResult(name, False, _(
            "the weights of the model passed to make_clipped_step did not move: build the step for its model argument "
            "(not for a global model such as net)"))
    tol = 2e-3
    big_ok = abs(big - lr * clip) <= tol * lr * clip
    small_ok = abs(small - lr * small_norm) <= tol * lr * small_norm
    lr_seen = small / small_norm
    facts = _("raw gradient norm {raw}: the weights moved by {big} (expected {lr} × {clip} = {big_want}); raw norm "
              "{small_norm}, below the threshold: moved {small} (expected {lr} × {small_norm} = {small_want})").format(
                  raw=f"{raw:.3g}", big=f"{big:.4g}", lr=lr, clip=clip, big_want=f"{lr * clip:.4g}",
                  small_norm=f"{small_norm:.2g}", small=f"{small:.4g}", small_want=f"{lr * small_norm:.4g}")
    if big_ok and small_ok and small_again > 1.3 * small:
        return CheckResult(name, False, _(
            "{facts}. The first steps are right, but a second step on the same small batch moved {again}, {times} "
            "times the first: the optimizer keeps momentum. Use plain SGD({lr}).").format(
                facts=facts, again=f"{small_again:.4g}", times=f"{small_again / small:.2g}", lr=lr))
    if big_ok and small_ok:
        return CheckResult(name, True, facts)
    if big_ok:
        return CheckResult(name, False, _(
            "{facts}. The big step is right only by coincidence: the unclipped step shows a learning rate of {seen}, "
            "not {lr}, so your threshold is about {threshold}, and {seen} × {threshold} happens to equal {product}. "
            "Use SGD({lr}) and clip={clip}.").format(
                facts=facts, seen=f"{lr_seen:.3g}", lr=lr, threshold=f"{big / lr_seen:.3g}",
                product=f"{lr * clip:.3g}", clip=clip))
    if abs(big - lr_seen * raw) <= tol * lr_seen * raw:
        return CheckResult(name, False, _(
            "{facts}. The big step moved by the learning rate times the raw norm: nothing was clipped. Pass "
            "clip={clip} to gl.make_train_step.").format(facts=facts, clip=clip))
    other = _other_clip(big / lr_seen, x, y, clip)
    if other:
        return CheckResult(name, False, join_sentences(end_sentence(facts), other))
    if small_ok:
        return CheckResult(name, False, _(
            "{facts}. The learning rate is right; the big step was clipped to a global norm of {norm}, not "
            "{clip}.").format(facts=facts, norm=f"{big / lr:.3g}", clip=clip))
    if abs(big - lr_seen * clip) <= tol * lr_seen * clip:
        return CheckResult(name, False, _(
            "{facts}. Both steps are clipped at {clip} correctly, but with a learning rate of {seen}, not {lr}: "
            "create SGD(learning_rate={lr}) (SGD() alone uses 0.01).").format(
                facts=facts, clip=clip, seen=f"{lr_seen:.3g}", lr=lr))
    return CheckResult(name, False, _(
        "{facts}. Neither step matches plain SGD({lr}) clipped at {clip} (a momentum or Adam optimizer moves by other "
        "amounts).").format(facts=facts, lr=lr, clip=clip))
