"""Self-checks for chapter 07's exercises (gradients through time).

* exercise 1: :func:`check_step_norms`, per-time-step gradient norms measured with a tape;
* exercise 2: :func:`check_longest_healthy`, the longest sequence over which a freshly
  initialized LSTM's gradient is still diagnosed ``healthy``;
* exercise 3: :func:`check_clipped_step`, a custom training step that clips by the global
  norm, compared with Keras's ``global_clipnorm``.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong
answer; typical mistakes (norms per example, the latest step first, float32 norms that
underflow, per-tensor clipping) get feedback that says what is wrong.
"""

from __future__ import annotations

import functools

import numpy as np

from .._env import quiet_import_tensorflow
from ..core import global_norm, mean_squared_error
from ..engines.rnn import TimeGradientEngine
from ..i18n import _, end_sentence, join_sentences
from ..models.rnn import build_rnn, make_sequence_data
from ..reports.time import time_report
from ..reports.verdict import status_word
from .answers import as_int_answer
from .clipping import targets_with_gradient_norm
from .compare import check_array
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CLIP_THRESHOLD",
    "check_clipped_step",
    "check_longest_healthy",
    "check_step_norms",
    "exercise_data",
]

#: Exercise 2's network: the explorer's LSTM with Keras's default (orthogonal) recurrent kernel.
HEALTHY_CELL, HEALTHY_INITIALIZER, HEALTHY_SCALE = "lstm", "orthogonal", 1.0
#: Exercise 3's global-norm threshold.
CLIP_THRESHOLD = 1.0


def exercise_data(steps: int = 60, input_dim: int = 8, batch_size: int = 16):
    """The ``(x, y)`` batch the checks use: standard-normal sequences and targets (seed 7)."""
    return make_sequence_data(batch_size, steps, input_dim, seed=7)


@functools.lru_cache(maxsize=1)
def _engine() -> TimeGradientEngine:
    return TimeGradientEngine()  # the explorer's default network and batch


def _none_hint(err: BaseException) -> str:
    """A hint for the errors a ``None`` gradient causes in the ops after ``tape.gradient``."""
    text = str(err)
    if "None" in text and ("convert" in text or "not supported" in text):
        return " " + _("The gradient is None: x is a tensor, not a variable, so the tape follows it only after "
                       "tape.watch(x), inside the `with` block, before the model is called.")
    return ""


# ----------------------------------------------------------------------------- exercise 1
def check_step_norms(fn) -> CheckResult:
    """Exercise 1: ``fn(model, x, y)`` returns the norm of dLoss/d(input at step t), earliest first.

    Tried on a SimpleRNN over 60 steps whose earliest gradients are below 1e-19 per element,
    so a norm taken in float32 underflows to 0 there.
    """
    name = "step_norms"
    if not callable(fn):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    x, y = exercise_data()
    model = build_rnn("simple_rnn", 32, 8, recurrent_initializer="normal_0.5", seed=3)
    expected = time_report(model, x, y).time_step_norms
    try:
        got = fn(model, x, y)
    except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
        return CheckResult(name, False, join_sentences(_("your function raised {error}.").format(
            error=describe_error(err)), _none_hint(err)))
    if got is None:
        return CheckResult(name, False, _(
            "returned None: did you forget the return statement? Or is it tape.gradient(loss, x) that is None: x "
            "is a tensor, not a variable, so the tape follows it only after tape.watch(x)"))
    try:
        arr = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is not None and arr.shape == (16, 60):
        return CheckResult(name, False, _("shape (16, 60): one norm per example and step. Take each step's norm over "
                                          "the batch and the features together (axis=[0, 2])"))
    if arr is not None and arr.shape == (60, 16):
        return CheckResult(name, False, _("shape (60, 16): the norm must cover the whole batch at each step, not one "
                                          "example at a time"))
    if arr is not None and arr.shape == (60, 8):
        return CheckResult(name, False, _("shape (60, 8): one norm per step and feature (a reduction over the batch "
                                          "only). Take each step's norm over the batch and the features together "
                                          "(axis=[0, 2])"))
    if arr is not None and arr.shape == (16, 60, 8):
        return CheckResult(name, False, _("you returned the gradient itself: reduce it to one norm per step"))
    if arr is not None and arr.shape == expected.shape and np.all(np.isfinite(arr)):
        if np.allclose(arr, expected[::-1], rtol=1e-4):
            return CheckResult(name, False, _("the order is reversed: index 0 must be the earliest step"))
        if np.allclose(arr, expected**2, rtol=1e-3, atol=0.0) and not np.allclose(arr, expected, rtol=1e-4):
            return CheckResult(name, False, _("these are the squared norms: take the square root (tf.sqrt) of the sum "
                                              "of squares"))
        zeros = (arr == 0) & (expected > 0)
        if zeros.any() and np.allclose(arr[~zeros], expected[~zeros], rtol=1e-3):
            return CheckResult(name, False, _(
                "{n} early steps came out exactly 0 but are not: a float32 norm squares values below ~1e-19 to 0. "
                "Cast the gradient to float64 before tf.norm").format(n=int(zeros.sum())))
    result = check_array(name, got, expected, rtol=1e-4, atol=0.0)
    if result:
        return CheckResult(name, True, _("{n} norms from {first} (step 1) to {last} (step {n}), as gl.time_report "
                                         "measures").format(n=expected.size, first=f"{expected[0]:.3g}",
                                                            last=f"{expected[-1]:.3g}"))
    return result


# ----------------------------------------------------------------------------- exercise 2
def check_longest_healthy(answer) -> CheckResult:
    """Exercise 2: the most steps at which the explorer's LSTM (orthogonal, input ×1) is still healthy."""
    name = _("longest healthy LSTM sequence")
    if isinstance(getattr(answer, "status", None), str) and hasattr(answer, "ratio"):
        return CheckResult(name, False, _("got a {kind}: answer with the number of steps itself, the largest t "
                                          "whose report is healthy").format(kind=type(answer).__name__))
    steps, problem = as_int_answer(name, answer, _("a number of steps"), several_hint=_(
        "If these are the healthy lengths, the answer is the largest of them: max(...)"))
    if problem is not None:
        return problem
    engine = _engine()
    if not 2 <= steps <= engine.max_steps:  # the explorer's top, max_steps, is a length it shows
        return CheckResult(name, False, _("{steps} is outside 2..{top}").format(steps=steps, top=engine.max_steps))

    def report(t):
        return engine.report(HEALTHY_CELL, t, HEALTHY_INITIALIZER, HEALTHY_SCALE)

    r = report(steps)
    nums = _("ratio {ratio}, gain {gain} per step").format(ratio=f"{r.ratio:.3g}", gain=f"{r.gain:.3g}")
    if steps == engine.max_steps and r.status == "healthy":  # nothing longer to compare with
        return CheckResult(name, True, _("{steps} steps, the explorer's longest, is still healthy ({nums})").format(
            steps=steps, nums=nums))
    nxt = report(steps + 1) if steps < engine.max_steps else r
    if r.status == "healthy" and nxt.status != "healthy":
        return CheckResult(name, True, _(
            "{steps} steps: {nums}; at {next} the ratio is {next_ratio} and the verdict {status}: the per-step rule "
            "(gain < 0.95, ratio < 0.1)").format(steps=steps, nums=nums, next=steps + 1,
                                                 next_ratio=f"{nxt.ratio:.3g}", status=status_word(nxt.status)))
    if r.status != "healthy" and report(steps - 1).status == "healthy":
        return CheckResult(name, False, _(
            "{steps} is the first length whose verdict is {status} ({nums}): the task asks for the largest length "
            "that is still healthy, one step fewer").format(steps=steps, status=status_word(r.status), nums=nums))
    if r.status != "healthy":
        return CheckResult(name, False, _("at {steps} steps the verdict is already {status} ({nums}): try "
                                          "fewer").format(steps=steps, status=status_word(r.status), nums=nums))
    return CheckResult(name, False, _("{steps} steps is healthy ({nums}), but so is {next}: try more").format(
        steps=steps, nums=nums, next=steps + 1))


# ----------------------------------------------------------------------------- exercise 3
def _fresh():
    model = build_rnn("gru", 16, 8, seed=5)
    return model, keras.optimizers.SGD(0.1)


def _small_targets(x, y, norm: float):
    """Targets for which the fresh GRU's mean-squared-error gradient has global norm ``norm``.

    The MSE gradient is linear in the residual, so scaling the residual scales the norm exactly.
    """
    return targets_with_gradient_norm(lambda: build_rnn("gru", 16, 8, seed=5), x, y, norm)[0]


def _reference_weights(y_override=None, *, rescale_to: float | None = None, clip_one_layer: str | None = None,
                       **clip):
    """The weights after one SGD(0.1) step of the fresh GRU: Keras's own clipping when ``clip`` is
    given, the gradient always rescaled to norm ``rescale_to``, or (``clip_one_layer``: "recurrent"
    or "readout") only that layer's gradients clipped to :data:`CLIP_THRESHOLD` (wrong answers)."""
    x, y = exercise_data(steps=20)
    if y_override is not None:
        y = y_override
    model = build_rnn("gru", 16, 8, seed=5)
    opt = keras.optimizers.SGD(0.1, **clip)
    with tf.GradientTape() as tape:
        loss = mean_squared_error(y, model(x))
    grads = tape.gradient(loss, model.trainable_weights)
    if rescale_to is not None:
        norm = tf.cast(global_norm(grads), tf.float32)
        grads = [g * (rescale_to / norm) for g in grads]
    if clip_one_layer is not None:
        readout = {id(v) for v in model.layers[-1].trainable_weights}
        part = [i for i, v in enumerate(model.trainable_weights) if (id(v) in readout) == (clip_one_layer == "readout")]
        clipped, _norm = tf.clip_by_global_norm([grads[i] for i in part], CLIP_THRESHOLD)
        for i, g in zip(part, clipped, strict=True):
            grads[i] = g
    opt.apply_gradients(zip(grads, model.trainable_weights, strict=True))
    return [w.numpy() for w in model.trainable_weights]


_CLIP_OPTIONS = ("global_clipnorm", "clipnorm", "clipvalue")


def _own_clipping(optimizer) -> str | None:
    """The name of the optimizer's own clipping option the step switched on, if any."""
    for option in _CLIP_OPTIONS:
        if getattr(optimizer, option, None) is not None:
            return option
    return None


def _scaled_step_feedback(got, fresh, steps_taken: int) -> str:
    """What a step along the right direction with the wrong length says: element-wise clipping,
    a sign, applying twice, or another threshold or learning rate."""
    if all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, _reference_weights(clipvalue=CLIP_THRESHOLD),
                                                                     strict=True)):
        return _("you clipped each element to ±{c} (clipvalue, tf.clip_by_value), which changes the step's "
                 "direction: clip the global norm, tf.clip_by_global_norm").format(c=CLIP_THRESHOLD)
    if steps_taken > 1:
        return _("the optimizer took {n} steps in one call: apply the clipped gradients once").format(n=steps_taken)
    move = np.concatenate([(a - b).ravel() for a, b in zip(got, fresh, strict=True)]).astype(np.float64)
    right = np.concatenate([(a - b).ravel() for a, b in zip(_reference_weights(global_clipnorm=CLIP_THRESHOLD), fresh,
                                                            strict=True)]).astype(np.float64)
    factor = float(move @ right / (right @ right))
    if not np.allclose(move, factor * right, rtol=1e-3, atol=1e-7):
        return ""
    if factor < 0:
        return _("the step goes the wrong way ({f}× the clipped step): apply the gradients themselves, the "
                 "optimizer subtracts them").format(f=f"{factor:.3g}")
    return _("the step points the right way but is {f}× as long as the clipped one: clip to global norm {c} "
             "(CLIP_THRESHOLD) and let the optimizer passed in apply it, with its learning rate").format(
                 f=f"{factor:.3g}", c=CLIP_THRESHOLD)


def check_clipped_step(fn) -> CheckResult:
    """Exercise 3: ``fn(model, optimizer, x, y)`` takes one step clipped to global norm :data:`CLIP_THRESHOLD`.

    The weights after one SGD step must equal those of ``SGD(0.1, global_clipnorm=1.0)``, with
    the optimizer passed in (no clipping options of its own: the task is to clip in the step).
    The gradient's global norm is well above 1 here, so clipping changes the step; a second
    batch whose norm is 0.4 must pass unclipped (an always-rescaled or summed loss fails there).
    """
    name = "clipped_train_step"
    if not callable(fn):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    x, y = exercise_data(steps=20)
    model, opt = _fresh()
    try:
        fn(model, opt, x, y)
    except Exception as err:  # noqa: BLE001
        hint = ""
        if "Shapes of all inputs must match" in str(err) or "Pack" in str(err):
            hint = " " + _("Hint: tf.clip_by_global_norm returns a pair (clipped list, norm); zipping that pair with "
                           "the weights fails like this. Unpack it: clipped, norm = tf.clip_by_global_norm(...)")
        return CheckResult(name, False, join_sentences(_("your function raised {error}.").format(
            error=describe_error(err)), hint))
    option = _own_clipping(opt)
    if option is not None:
        return CheckResult(name, False, _(
            "the step sets the optimizer's own {option}: the task is to clip in the step itself, between "
            "tape.gradient and apply_gradients, with tf.clip_by_global_norm (the way a custom loop does when it "
            "logs the norm or clips after an all-reduce)").format(option=option))
    got = [w.numpy() for w in model.trainable_weights]
    steps_taken = int(opt.iterations.numpy())

    def same(a_list, ref):
        return all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(a_list, ref, strict=True))

    if same(got, _reference_weights(global_clipnorm=CLIP_THRESHOLD)):
        if steps_taken != 1:
            return CheckResult(name, False, _(
                "the weights are right, but the optimizer passed in took {n} steps, not 1: use it "
                "(optimizer.apply_gradients), do not build another one inside the step; a new optimizer each step "
                "loses its state (momentum, Adam's moments, the step count)").format(n=steps_taken))
        # a second batch whose gradient norm (0.4) is below the threshold: the step must not clip it
        y_small = _small_targets(x, y, 0.4 * CLIP_THRESHOLD)
        model2, opt2 = _fresh()
        try:
            fn(model2, opt2, x, y_small)
        except Exception as err:  # noqa: BLE001
            return CheckResult(name, False, _("on a batch with a small gradient your function raised "
                                              "{error}").format(error=describe_error(err)))
        got2 = [w.numpy() for w in model2.trainable_weights]
        if same(got2, _reference_weights(y_override=y_small)):
            return CheckResult(name, True, _(
                "the weights equal one step of SGD(0.1, global_clipnorm=1.0), and a small gradient (norm 0.4) "
                "passes unclipped"))
        if same(got2, _reference_weights(y_override=y_small, rescale_to=CLIP_THRESHOLD)):
            cause = _("the step has norm 1.0 although the gradient's is 0.4. Either the gradients are always "
                      "rescaled to norm 1.0, also when they are shorter (clipping only shortens, g * min(1, c / "
                      "norm), which is what tf.clip_by_global_norm does), or the loss is a sum, not the mean: its "
                      "gradient is then as many times longer as there are numbers averaged, and gets clipped")
        else:
            cause = _("a loss other than the mean squared error, or gradients changed below the threshold")
        return CheckResult(name, False, _(
            "right on a batch whose gradient norm is above 1.0, wrong on one whose norm is 0.4, below the "
            "threshold, where the step must not change the gradient: {cause}").format(cause=cause))
    fresh = [w.numpy() for w in _fresh()[0].trainable_weights]
    if same(got, fresh):
        return CheckResult(name, False, _("the weights did not change: apply the clipped gradients with "
                                          "optimizer.apply_gradients(zip(clipped, model.trainable_weights))"))
    if same(got, _reference_weights(clipnorm=CLIP_THRESHOLD)):
        return CheckResult(name, False, _("you clipped each tensor on its own (clipnorm, tf.clip_by_norm): use "
                                          "tf.clip_by_global_norm, one factor for all tensors"))
    if same(got, _reference_weights()):
        text = _("that is an unclipped step: clip the gradients with tf.clip_by_global_norm(grads, {c}) before "
                 "applying them").format(c=CLIP_THRESHOLD)
        if same(got, _reference_weights(clipvalue=CLIP_THRESHOLD)):
            text = join_sentences(end_sentence(text), _(
                "(Clipping each element to ±{c}, tf.clip_by_value, gives this too: every element of this gradient "
                "is below {c}, while their global norm is far above it.)").format(c=CLIP_THRESHOLD))
        return CheckResult(name, False, text)
    scaled = _scaled_step_feedback(got, fresh, steps_taken)
    if scaled:
        return CheckResult(name, False, scaled)
    for layer in ("recurrent", "readout"):
        if same(got, _reference_weights(clip_one_layer=layer)):
            return CheckResult(name, False, _(
                "you clipped only the {layer} layer's gradients: the global norm is over every trainable "
                "variable, the GRU's and the readout's together. Pass all of tape.gradient(loss, "
                "model.trainable_weights) to tf.clip_by_global_norm").format(
                    layer=_("recurrent") if layer == "recurrent" else _("readout")))
    return CheckResult(name, False, _("the weights match neither a clipped nor an unclipped SGD step: use the loss "
                                      "mean((model(x) - y)**2) and apply the gradients once"))
