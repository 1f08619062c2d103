"""Self-checks for chapter 09's exercises (Transformers, warmup and long runs).

* exercise 1: :func:`check_block_norms`, each block's gradient norm measured with a tape;
* exercise 2: :func:`check_warmup_schedule`, Keras's ``CosineDecay`` as a linear warmup;
* exercise 3: :func:`check_clip_threshold`, the Tuning Playbook's clip threshold for a run;
* exercise 4: :func:`check_flat_pre_ln`, the embedding that makes pre-LN's per-block norms flat.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer;
typical mistakes get feedback that says what is wrong.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from ..i18n import _
from ..models.transformer import block_paths, build_transformer, markov_tokens
from ..reports.transformer import block_gradient_report
from .answers import as_number_answer
from .compare import check_array
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "FLAT_SETTINGS",
    "WARMUP",
    "check_block_norms",
    "check_clip_threshold",
    "check_flat_pre_ln",
    "check_warmup_schedule",
    "exercise_model",
    "exercise_norms",
]

#: Exercise 2: the peak learning rate, the warmup steps and the length of the run.
WARMUP = {"learning_rate": 3e-3, "warmup_steps": 20, "total_steps": 200}

#: Exercise 4: the embedding settings to choose from (chapter 09 measures each on a 12-block
#: pre-LN model: the last block's gradient norm over the first's, batch 8).
FLAT_SETTINGS = {
    "a": {"embedding_initializer": "glorot_uniform", "scale_embedding": False},
    "b": {"embedding_initializer": "uniform", "scale_embedding": True},
    "c": {"embedding_initializer": "normal", "scale_embedding": False},
    "d": {"embedding_initializer": "normal", "scale_embedding": True},
}


def exercise_model(norm_position: str = "post"):
    """Exercise 1's model and batch: 3 blocks, d_model 16, 11 tokens, sequences of 8 (seed 5)."""
    model = build_transformer(3, d_model=16, num_heads=2, vocab_size=11, seq_len=8, norm_position=norm_position,
                              seed=5)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, markov_tokens(4, 8, 11, seed=5)


@functools.lru_cache(maxsize=2)
def _exercise_case(norm_position: str):
    """Exercise 1's model, batch and reference report, built once per process (a few seconds)."""
    model, (x, y) = exercise_model(norm_position)
    return model, x, y, block_gradient_report(model, x, y)


@functools.lru_cache(maxsize=2)
def _norms_without_from_logits(norm_position: str) -> np.ndarray:
    """A typical wrong answer to exercise 1: the loss taken as if the logits were probabilities."""
    model, x, y, __ = _exercise_case(norm_position)
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=False)(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    paths = [core.variable_path(v) for v in model.trainable_variables]
    return np.array([float(core.global_norm([g for p, g in zip(paths, grads, strict=True) if p.startswith(b)]))
                     for b in block_paths(model)])


# ----------------------------------------------------------------------------- exercise 1
def check_block_norms(fn) -> CheckResult:
    """Exercise 1: ``fn(model, x, y)`` returns each block's gradient norm, earliest block first.

    The norm of a block is the global norm over all of its variables (paths ``block_<i>/...``)
    of the gradient of the mean sparse cross-entropy, taken in float64.
    """
    name = _("per-block gradient norms")
    if not callable(fn):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    print(_("checking on a 3-block post-LN and a 3-block pre-LN model…"), flush=True)
    for position in ("post", "pre"):
        result = _check_block_norms_on(name, fn, *_exercise_case(position))
        if not result:
            return result
    want = _exercise_case("post")[3].layer_grad_norms
    return CheckResult(name, True, _("{values}: the post-LN model's blocks (and the pre-LN model's too), as "
                                     "gl.reports.transformer.block_gradient_report measures them").format(
        values=", ".join(f"{v:.3g}" for v in want)))


def _check_block_norms_on(name: str, fn, model, x, y, expected) -> CheckResult:
    try:
        got = fn(model, x, y)
    except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
        text = str(err)
        if "at least one Tensor" in text or "add_n" in text:
            return CheckResult(name, False, _("your function raised {error}. A block with no variables gives tf.add_n "
                                              "an empty list: the exercise model has 3 blocks (block_0 to block_2), "
                                              "so count the blocks from the variable paths instead of writing a "
                                              "fixed number").format(error=describe_error(err)))
        return CheckResult(name, False, _("your function raised {error}.").format(error=describe_error(err)))
    if got is None:
        return CheckResult(name, False, _("returned None: did you forget the return statement?"))
    try:
        arr = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64).ravel()
    except Exception:  # noqa: BLE001
        arr = None
    want = expected.layer_grad_norms
    if arr is not None and arr.size == 1 and np.ndim(got) == 0:
        return CheckResult(name, False, _("got one number: expected 3 norms, one per block (a list or an array), "
                                          "earliest block first"))
    if arr is not None and arr.size == 3 and np.all(np.isfinite(arr)):
        if np.allclose(arr, want[::-1], rtol=1e-3):
            return CheckResult(name, False, _("the order is reversed: index 0 must be block_0, nearest the input"))
        if np.allclose(arr, want**2, rtol=1e-3):
            return CheckResult(name, False, _("these are squared norms: take the square root of the sum of squares"))
        if np.allclose(arr, expected.ffn_grad_norms, rtol=1e-3):
            return CheckResult(name, False, _("these are the norms of each block's second FFN kernel only: take "
                                              "every variable whose path starts with block_<i>/"))
    if arr is not None and arr.size == 16 * 3:
        return CheckResult(name, False, _("48 values: one norm per variable. Combine the 16 variables of each block "
                                          "into one norm: the square root of the sum of their squared norms"))
    result = check_array(name, arr if arr is not None else got, want, rtol=1e-3, atol=0.0)
    if (not result and arr is not None and arr.size == 3
            and np.allclose(arr, _norms_without_from_logits(expected.norm_position), rtol=1e-3)):
        return CheckResult(name, False, _("the model returns logits, not probabilities: compute the loss with "
                                          "from_logits=True (as the chapter's loss_fn does)"))
    if not result and expected.norm_position == "pre" and arr is not None and arr.size == 3:
        return CheckResult(name, False, _("right on the post-LN model, wrong on the pre-LN one ({got}, expected "
                                          "{want}): measure the model you are given; do not return fixed "
                                          "numbers").format(got=", ".join(f"{v:.4g}" for v in arr),
                                                            want=", ".join(f"{v:.4g}" for v in want)))
    return result


# ----------------------------------------------------------------------------- exercise 2
def check_warmup_schedule(schedule) -> CheckResult:
    """Exercise 2: a Keras schedule that ramps linearly from 0 to 3e-3 over 20 steps, then stays there.

    Compared at every step of a 200-step run with the closed form ``3e-3 * min(step / 20, 1)``.
    """
    name = _("warmup schedule")
    lr, warm, total = WARMUP["learning_rate"], WARMUP["warmup_steps"], WARMUP["total_steps"]
    if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
        return CheckResult(name, False, _("a number is a constant learning rate: build a "
                                          "keras.optimizers.schedules.CosineDecay with warmup_target and warmup_steps"))
    schedule_class = keras.optimizers.schedules.LearningRateSchedule
    if isinstance(schedule, type) and issubclass(schedule, schedule_class):
        return CheckResult(name, False, _("that is the class {kind} itself: create a schedule from it, e.g. "
                                          "CosineDecay(0.0, decay_steps=..., alpha=1.0, warmup_target=..., "
                                          "warmup_steps=...)").format(kind=schedule.__name__))
    if callable(schedule) and not isinstance(schedule, schedule_class):
        return CheckResult(name, False, _("a plain function is not a schedule to Keras: an optimizer calls it "
                                          "without the step. Build a keras.optimizers.schedules.CosineDecay (or "
                                          "subclass LearningRateSchedule)"))
    if not isinstance(schedule, schedule_class):
        return CheckResult(name, False, _("expected a keras.optimizers.schedules.LearningRateSchedule, got {kind}")
                           .format(kind=type(schedule).__name__))
    got = np.full(total, np.nan)
    for step in range(total):
        try:
            value = schedule(step)
        except Exception as err:  # noqa: BLE001
            return CheckResult(name, False, _("calling the schedule with a step raised {error}.").format(
                error=describe_error(err)))
        try:
            got[step] = float(value)
        except Exception:  # noqa: BLE001
            return CheckResult(name, False, _("the schedule returned {kind} at step {step}, expected a number").format(
                kind="None" if value is None else type(value).__name__, step=step))
    if not np.all(np.isfinite(got)):
        step = int(np.argmax(~np.isfinite(got)))
        return CheckResult(name, False, _("the schedule returned {value} at step {step}").format(
            value=f"{got[step]}", step=step))
    want = lr * np.minimum(np.arange(total) / warm, 1.0)
    if np.allclose(got, want, rtol=1e-5, atol=1e-9):
        return CheckResult(name, True, _("0 at step 0, {lr} from step {warm} on, a straight line between").format(
            lr=f"{lr:g}", warm=warm))
    if np.allclose(got, lr, rtol=1e-5):
        return CheckResult(name, False, _("the rate is {lr} from the first step: there is no warmup. CosineDecay "
                                          "ramps from initial_learning_rate (set it to 0.0) to warmup_target").format(
            lr=f"{lr:g}"))
    if np.allclose(got[: warm + 1], want[: warm + 1], rtol=1e-5, atol=1e-9) and got[-1] < 0.5 * lr:
        return CheckResult(name, False, _("the warmup is right, but afterwards the rate decays towards 0: "
                                          "alpha=1.0 keeps it constant after the warmup"))
    ramp = _ramp_feedback(got, lr, warm)
    if ramp:
        return CheckResult(name, False, ramp)
    step = int(np.argmax(~np.isclose(got, want, rtol=1e-5, atol=1e-9)))
    return CheckResult(name, False, _("at step {step} the rate is {got}, expected {want}").format(
        step=step, got=f"{got[step]:.3g}", want=f"{want[step]:.3g}"))


def _ramp_feedback(got: np.ndarray, lr: float, warm: int) -> str:
    """Which setting a wrong ramp points at: its length (warmup_steps), its top (warmup_target), or both.

    The ramp ends where the rate stops rising; it should end at step ``warm`` at ``lr``.
    """
    rising = np.diff(got) > 1e-9 * lr
    end = int(np.argmin(rising)) if not rising.all() else got.size - 1
    top = float(got[end])
    right_top, right_end = bool(np.isclose(top, lr, rtol=1e-3)), end == warm
    numbers = dict(lr=f"{lr:g}", end=end, warm=warm, top=f"{top:.3g}", last=got.size - 1)
    if right_top and right_end:
        return ""
    if right_top:
        return _("the rate reaches {lr} at step {end}, not at step {warm}: check warmup_steps").format(**numbers)
    if right_end:
        return _("the ramp ends at step {warm} as it should, but at {top}, expected a peak of {lr}: check "
                 "warmup_target").format(**numbers)
    if end == got.size - 1 and np.isclose(got[1] - got[0], lr / warm, rtol=1e-3):
        return _("the rate rises at the right pace ({lr} / {warm} per step) but is still rising at step {last} "
                 "({top}): the warmup lasts longer than {warm} steps. Check warmup_steps").format(**numbers)
    if end == got.size - 1:
        return _("the rate is still rising at step {last} ({top}): the warmup lasts longer than {warm} steps. Check "
                 "warmup_steps (the ramp's length), then warmup_target (its top, {lr})").format(**numbers)
    return _("the ramp ends at step {end} at {top}, expected step {warm} at {lr}: check warmup_steps (the ramp's "
             "length) and warmup_target (its top)").format(**numbers)


# ----------------------------------------------------------------------------- exercise 3
def exercise_norms() -> np.ndarray:
    """Exercise 3's gradient norms: 300 steps of a run, log-normal around 1 with a few spikes (seed 9)."""
    rng = np.random.default_rng(9)
    norms = np.exp(rng.normal(0.0, 0.35, 300))
    spikes = rng.choice(300, 6, replace=False)
    norms[spikes] *= rng.uniform(8, 30, 6)
    return norms


def check_clip_threshold(threshold) -> CheckResult:
    """Exercise 3: the Tuning Playbook's starting clip threshold for :func:`exercise_norms`: their 90th percentile."""
    name = _("clip threshold")
    value, problem = as_number_answer(name, threshold, _("the threshold"))
    if problem is not None:
        return problem
    norms = exercise_norms()
    want = float(np.percentile(norms, 90))
    share = float(np.mean(norms > value))
    if abs(value - want) <= 1e-3 * want:
        return CheckResult(name, True, _("{t}: {p}% of the steps would be clipped, the spikes among them").format(
            t=f"{want:.3g}", p=f"{100 * share:.0f}"))
    if f"{value:.3g}" == f"{want:.3g}":   # typed in from a printout of 3 digits
        return CheckResult(name, True, _("{t} is the 90th percentile ({want}) rounded: close enough for a clip "
                                         "threshold; in code, pass np.percentile(norms, 90) itself").format(
            t=f"{value:.3g}", want=f"{want:.4g}"))
    if abs(value - float(np.percentile(norms, 0.9))) <= 1e-3 * abs(value):
        return CheckResult(name, False, _("that is np.percentile(norms, 0.9), the 0.9th percentile: np.percentile "
                                          "takes 0 to 100 (np.quantile takes 0.9)"))
    if share > 0.5:
        return CheckResult(name, False, _("{p}% of the steps would be clipped: the Playbook calls more than half "
                                          "'extremely aggressive', a strange way of lowering the learning rate. "
                                          "Take the 90th percentile").format(p=f"{100 * share:.0f}"))
    if abs(value - float(np.max(norms))) <= 1e-6 * value:
        return CheckResult(name, False, _("that is the largest norm: nothing would ever be clipped. Take the 90th "
                                          "percentile"))
    if abs(value - float(np.mean(norms))) <= 1e-3 * value:
        return CheckResult(name, False, _("that is the mean, which the spikes pull up: take the 90th percentile "
                                          "(np.percentile(norms, 90))"))
    return CheckResult(name, False, _("{t} clips {p}% of the steps; the 90th percentile clips 10%").format(
        t=f"{value:.3g}", p=f"{100 * share:.0f}"))


# ----------------------------------------------------------------------------- exercise 4
def check_flat_pre_ln(answer) -> CheckResult:
    """Exercise 4: which of :data:`FLAT_SETTINGS` makes a pre-LN stack's per-block norms flat at initialization."""
    name = _("flat pre-LN gradients")
    if isinstance(answer, dict):
        matches = [k for k, v in FLAT_SETTINGS.items() if v == answer]
        key = matches[0] if matches else None
    else:
        key = answer.strip().lower() if isinstance(answer, str) else None
    if key not in FLAT_SETTINGS:
        return CheckResult(name, False, _("answer with one of 'a', 'b', 'c', 'd' (or the settings dict itself)"))
    if key == "d":
        return CheckResult(name, True, _("N(0, 1) times √d_model: the residual stream starts at a scale of about "
                                         "√d_model, each block adds little to it, so every block's LayerNorm divides "
                                         "by nearly the same number"))
    return CheckResult(name, False, _("with this embedding the residual stream starts small or near 1 and grows "
                                      "block by block, so each LayerNorm divides by a larger number than the one "
                                      "before it: the per-block norms fall. Which setting makes the stream large "
                                      "from the start?"))
