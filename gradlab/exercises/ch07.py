"""Self-checks for chapter 07's exercises (gradients through time).

* exercise 1: :func:`check_step_norms`, per-time-step gradient norms measured with a tape;
* exercise 2: :func:`check_longest_healthy`, the longest sequence over which a freshly
  initialized LSTM's gradient is still diagnosed ``healthy``;
* exercise 3: :func:`check_clipped_step`, a custom training step that clips by the global
  norm, compared with Keras's ``global_clipnorm``.

Every check returns a :class:`~gradlab.checks.CheckResult` and never raises on a wrong
answer; typical mistakes (norms per example, the latest step first, float32 norms that
underflow, per-tensor clipping) get feedback that says what is wrong.
"""

from __future__ import annotations

import functools

import numpy as np

from .._env import quiet_import_tensorflow
from ..checks import CheckResult, as_int_answer, check_array
from ..recurrent import TimeGradientEngine, build_rnn, make_sequence_data, time_report

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


# ----------------------------------------------------------------------------- exercise 1
def check_step_norms(fn) -> CheckResult:
    """Exercise 1: ``fn(model, x, y)`` returns the norm of dLoss/d(input at step t), earliest first.

    Tried on a SimpleRNN over 60 steps whose earliest gradients are below 1e-19 per element,
    so a norm taken in float32 underflows to 0 there.
    """
    name = "step_norms"
    if not callable(fn):
        return CheckResult(name, False, f"expected a function, got {type(fn).__name__}")
    x, y = exercise_data()
    model = build_rnn("simple_rnn", 32, 8, recurrent_initializer="small_normal", seed=3)
    expected = time_report(model, x, y).time_step_norms
    try:
        got = fn(model, x, y)
    except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
        return CheckResult(name, False, f"your function raised {type(err).__name__}: {err}")
    if got is None:
        return CheckResult(name, False, (
            "returned None: did you forget the return statement? Or is it tape.gradient(loss, x) that is None: "
            "x is a tensor, not a variable, so the tape follows it only after tape.watch(x)"))
    try:
        arr = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is not None and arr.shape == (16, 60):
        return CheckResult(name, False, "shape (16, 60): one norm per example and step. Take each step's "
                                        "norm over the batch and the features together (axis=[0, 2])")
    if arr is not None and arr.shape == (60, 16):
        return CheckResult(name, False, "shape (60, 16): the norm must cover the whole batch at each step, "
                                        "not one example at a time")
    if arr is not None and arr.shape == (16, 60, 8):
        return CheckResult(name, False, "you returned the gradient itself: reduce it to one norm per step")
    if arr is not None and arr.shape == expected.shape:
        if np.allclose(arr, expected[::-1], rtol=1e-4):
            return CheckResult(name, False, "the order is reversed: index 0 must be the earliest step")
        if np.allclose(arr, expected**2, rtol=1e-3, atol=0.0) and not np.allclose(arr, expected, rtol=1e-4):
            return CheckResult(name, False, "these are the squared norms: take the square root (tf.sqrt) of the "
                                            "sum of squares")
        zeros = (arr == 0) & (expected > 0)
        if zeros.any() and np.allclose(arr[~zeros], expected[~zeros], rtol=1e-3):
            return CheckResult(
                name, False,
                f"{int(zeros.sum())} early steps came out exactly 0 but are not: a float32 norm squares "
                "values below ~1e-19 to 0. Cast the gradient to float64 before tf.norm")
    result = check_array(name, got, expected, rtol=1e-4, atol=0.0)
    if result:
        return CheckResult(name, True, f"{expected.size} norms from {expected[0]:.3g} (step 1) to "
                                       f"{expected[-1]:.3g} (step {expected.size}), as gl.time_report measures")
    return result


# ----------------------------------------------------------------------------- exercise 2
def check_longest_healthy(answer) -> CheckResult:
    """Exercise 2: the most steps at which the explorer's LSTM (orthogonal, input ×1) is still healthy."""
    name = "longest healthy LSTM sequence"
    steps, problem = as_int_answer(name, answer, "a number of steps")
    if problem is not None:
        return problem
    engine = _engine()
    if not 2 <= steps < engine.max_steps:
        return CheckResult(name, False, f"{steps} is outside 2..{engine.max_steps - 1}")

    def report(t):
        return engine.report(HEALTHY_CELL, t, HEALTHY_INITIALIZER, HEALTHY_SCALE)

    r, nxt = report(steps), report(steps + 1)
    nums = f"ratio {r.ratio:.3g}, gain {r.gain:.3g} per step"
    if r.status == "healthy" and nxt.status != "healthy":
        return CheckResult(name, True, f"{steps} steps: {nums}; at {steps + 1} the ratio is {nxt.ratio:.3g} "
                                       f"and the verdict {nxt.status}: the per-step rule (gain < 0.95, ratio < 0.1)")
    if r.status != "healthy":
        return CheckResult(name, False, f"at {steps} steps the verdict is already {r.status} ({nums}): try fewer")
    return CheckResult(name, False, f"{steps} steps is healthy ({nums}), but so is {steps + 1}: try more")


# ----------------------------------------------------------------------------- exercise 3
def _fresh():
    model = build_rnn("gru", 16, 8, seed=5)
    return model, keras.optimizers.SGD(0.1)


def _small_targets(x, y, norm: float):
    """Targets for which the fresh GRU's mean-squared-error gradient has global norm ``norm``.

    The MSE gradient is linear in the residual, so scaling the residual scales the norm exactly.
    """
    model = build_rnn("gru", 16, 8, seed=5)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    raw = float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_weights)))
    pred = model(x)
    return pred + (norm / raw) * (y - pred)


def _reference_weights(y_override=None, **clip):
    x, y = exercise_data(steps=20)
    if y_override is not None:
        y = y_override
    model = build_rnn("gru", 16, 8, seed=5)
    opt = keras.optimizers.SGD(0.1, **clip)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_weights)
    opt.apply_gradients(zip(grads, model.trainable_weights, strict=True))
    return [w.numpy() for w in model.trainable_weights]


def check_clipped_step(fn) -> CheckResult:
    """Exercise 3: ``fn(model, optimizer, x, y)`` takes one step clipped to global norm :data:`CLIP_THRESHOLD`.

    The weights after one SGD step must equal those of ``SGD(0.1, global_clipnorm=1.0)``.
    The gradient's global norm is well above 1 here, so clipping changes the step.
    """
    name = "clipped_train_step"
    if not callable(fn):
        return CheckResult(name, False, f"expected a function, got {type(fn).__name__}")
    x, y = exercise_data(steps=20)
    model, opt = _fresh()
    try:
        fn(model, opt, x, y)
    except Exception as err:  # noqa: BLE001
        hint = ""
        if "Shapes of all inputs must match" in str(err) or "Pack" in str(err):
            hint = (" Hint: tf.clip_by_global_norm returns a pair (clipped list, norm); zipping that pair "
                    "with the weights fails like this. Unpack it: clipped, _ = tf.clip_by_global_norm(...)")
        return CheckResult(name, False, f"your function raised {type(err).__name__}: {str(err).strip()[:300]}{hint}")
    got = [w.numpy() for w in model.trainable_weights]
    steps_taken = int(opt.iterations.numpy())

    def same(ref):
        return all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, ref, strict=True))

    if same(_reference_weights(global_clipnorm=CLIP_THRESHOLD)):
        if steps_taken != 1:
            return CheckResult(name, False, (
                f"the weights are right, but the optimizer passed in took {steps_taken} steps, not 1: use "
                "it (optimizer.apply_gradients), do not build another one inside the step; a new optimizer "
                "each step loses its state (momentum, Adam's moments, the step count)"))
        # a second batch whose gradient norm (0.4) is below the threshold: the step must not clip it
        y_small = _small_targets(x, y, 0.4 * CLIP_THRESHOLD)
        model2, opt2 = _fresh()
        try:
            fn(model2, opt2, x, y_small)
        except Exception as err:  # noqa: BLE001
            return CheckResult(name, False, f"on a batch with a small gradient your function raised "
                                            f"{type(err).__name__}: {str(err).strip()[:200]}")
        got2 = [w.numpy() for w in model2.trainable_weights]
        want2 = _reference_weights(y_override=y_small)
        if not all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got2, want2, strict=True)):
            return CheckResult(name, False, (
                "right on a batch whose gradient norm is above 1.0, wrong on one whose norm is 0.4, below the "
                "threshold, where the step must not change the gradient. Two usual causes: the loss is "
                "a sum, not the mean (clipping hides the factor when the norm is large), or the gradients "
                "are always rescaled to norm 1.0 instead of only when they are longer"))
        return CheckResult(name, True, "the weights equal one step of SGD(0.1, global_clipnorm=1.0), and a "
                                       "small gradient (norm 0.4) passes unclipped")
    fresh = [w.numpy() for w in _fresh()[0].trainable_weights]
    if same(fresh):
        return CheckResult(name, False, "the weights did not change: apply the clipped gradients with "
                                        "optimizer.apply_gradients(zip(clipped, model.trainable_weights))")
    if same(_reference_weights(clipnorm=CLIP_THRESHOLD)):
        return CheckResult(name, False, "you clipped each tensor on its own (clipnorm, tf.clip_by_norm): use "
                                        "tf.clip_by_global_norm, one factor for all tensors")
    if same(_reference_weights()):
        return CheckResult(name, False, "that is an unclipped step: clip the gradients with "
                                        f"tf.clip_by_global_norm(grads, {CLIP_THRESHOLD}) before applying them")
    return CheckResult(name, False, "the weights match neither a clipped nor an unclipped SGD step: use the "
                                    "loss mean((model(x) - y)**2) and apply the gradients once")
