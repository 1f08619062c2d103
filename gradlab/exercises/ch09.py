"""Self-checks for chapter 09's exercises (Transformers, warmup and long runs).

* exercise 1: :func:`check_block_norms`, each block's gradient norm measured with a tape;
* exercise 2: :func:`check_warmup_schedule`, Keras's ``CosineDecay`` as a linear warmup;
* exercise 3: :func:`check_clip_threshold`, the unclipped gradient norms of a run the learner
  trains (:func:`clip_exercise`) and the Tuning Playbook's clip threshold for it;
* exercise 4: :func:`check_flat_pre_ln`, the expected last-over-first gradient ratio of a
  24-block pre-LN stack for each embedding of :data:`FLAT_SETTINGS`.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer;
typical mistakes get feedback that says what is wrong.
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from ..engines.transformer import TransformerGradientEngine
from ..i18n import _, join_list
from ..models.transformer import block_paths, build_transformer, markov_tokens
from ..progress import Progress, check_progress
from ..reports.transformer import block_gradient_report
from ..train.warmup import TrainingRuns
from .answers import as_number_answer
from .compare import check_array
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CLIP_RUN",
    "FLAT_EXPECTED",
    "FLAT_SETTINGS",
    "WARMUP",
    "check_block_norms",
    "check_clip_threshold",
    "check_flat_pre_ln",
    "check_warmup_schedule",
    "clip_exercise",
    "exercise_model",
]

#: Exercise 2: the peak learning rate, the warmup steps and the length of the run.
WARMUP = {"learning_rate": 3e-3, "warmup_steps": 20, "total_steps": 200}

#: Exercise 3: the run whose unclipped gradient norms the learner logs (:func:`clip_exercise`):
#: a 2-block post-LN model trained with ``Adam(learning_rate)``, one step per batch.
CLIP_RUN = {"num_layers": 2, "norm_position": "post", "d_model": 16, "num_heads": 2, "vocab_size": 11,
            "seq_len": 8, "seed": 7, "steps": 40, "batch_size": 8, "learning_rate": 1e-2}

#: Exercise 4: the embedding settings to measure (chapter 09 measures each for one
#: initialization of a 12-block pre-LN model; the exercise asks for the expected gradient of 24).
FLAT_SETTINGS = {
    "a": {"embedding_initializer": "glorot_uniform", "scale_embedding": False},
    "b": {"embedding_initializer": "uniform", "scale_embedding": True},
    "c": {"embedding_initializer": "normal", "scale_embedding": False},
    "d": {"embedding_initializer": "normal", "scale_embedding": True},
}

#: Exercise 4: the depth and the initializations of the expected gradient, pre-LN, on the
#: engine's batch (``markov_tokens(8, 32, 64, seed=0)``, the chapter's ``x, y``).
FLAT_EXPECTED = {"num_layers": 24, "seeds": tuple(range(8))}


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


@functools.lru_cache(maxsize=4)
def _variable_norms(norm_position: str, from_logits: bool = True) -> tuple:
    """Each block's per-variable gradient norms (float64), for the loss on logits or, by slip, on probabilities."""
    model, x, y, __ = _exercise_case(norm_position)
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    paths = [core.variable_path(v) for v in model.trainable_variables]
    return tuple(np.array([float(core.global_norm([g])) for p, g in zip(paths, grads, strict=True) if p.startswith(b)])
                 for b in block_paths(model))


def _norms_without_from_logits(norm_position: str) -> np.ndarray:
    """A typical wrong answer to exercise 1: the loss taken as if the logits were probabilities."""
    return np.array([math.sqrt(float(np.sum(n**2))) for n in _variable_norms(norm_position, from_logits=False)])


def _block_norm_hints(norm_position: str) -> list:
    """Hints for per-variable norms combined otherwise than as the root of the sum of their squares."""
    per_block = _variable_norms(norm_position)
    return [(np.array([n.sum() for n in per_block]), _(
                "each block's value is the sum of its variables' norms: a global norm is the square root of the sum "
                "of their squared norms (tf.linalg.global_norm, or tf.sqrt of tf.add_n of the squares)")),
            (np.array([n.mean() for n in per_block]), _(
                "each block's value is the mean of its variables' norms: combine them as the square root of the sum "
                "of their squared norms")),
            (np.array([n.max() for n in per_block]), _(
                "each block's value is its largest variable norm: combine all of its variables, the square root of "
                "the sum of their squared norms"))]


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
        values=join_list(f"{v:.3g}" for v in want)))


def _reads_names_not_paths(fn) -> bool:
    """Whether ``fn``'s source reads ``.name`` and never ``.path`` (Keras 2's full names are Keras 3's paths)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return ".name" in source and ".path" not in source


def _check_block_norms_on(name: str, fn, model, x, y, expected) -> CheckResult:
    try:
        got = fn(model, x, y)
    except Exception as err:  # noqa: BLE001 - an error in the learner's code is feedback
        text = str(err)
        if ("at least one Tensor" in text or "add_n" in text) and _reads_names_not_paths(fn):
            return CheckResult(name, False, _("your function raised {error}. A block with no variables gives tf.add_n "
                                              "an empty list, and here every block has none: in Keras 3 a "
                                              "variable's name is only its last part ('kernel', 'gamma'); the block "
                                              "is in its path ('block_0/...'). Group the variables by "
                                              "v.path").format(error=describe_error(err)))
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
    result = check_array(name, arr if arr is not None else got, want, rtol=1e-3, atol=0.0,
                         hints=_block_norm_hints(expected.norm_position))
    if (not result and arr is not None and arr.size == 3
            and np.allclose(arr, _norms_without_from_logits(expected.norm_position), rtol=1e-3)):
        return CheckResult(name, False, _("the model returns logits, not probabilities: compute the loss with "
                                          "from_logits=True (as the chapter's loss_fn does)"))
    if not result and expected.norm_position == "pre" and arr is not None and arr.size == 3:
        return CheckResult(name, False, _("right on the post-LN model, wrong on the pre-LN one ({got}, expected "
                                          "{want}): measure the model you are given; do not return fixed "
                                          "numbers").format(got=join_list(f"{v:.4g}" for v in arr),
                                                            want=join_list(f"{v:.4g}" for v in want)))
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
    if got[0] > 1e-6 * lr and got[1] <= got[0]:
        return CheckResult(name, False, _(
            "the rate starts at {first} at step 0 and does not rise: there is no warmup. CosineDecay ramps from "
            "initial_learning_rate (set it to 0.0) to warmup_target over warmup_steps").format(first=f"{got[0]:.3g}"))
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
def clip_exercise():
    """Exercise 3's run: ``(model, batches)``, a fresh model and its 40 batches ``[(x, y), ...]``.

    The model is :func:`build_transformer` ``(2, norm_position="post", d_model=16, ...)`` of
    :data:`CLIP_RUN`, not compiled; each call builds a fresh one (the learner trains it). The
    batches are int32 tokens of shape ``(8, 8)``: the stream of
    :class:`~gradlab.train.warmup.TrainingRuns` with the same settings, which the check trains
    on the same weights as its reference.
    """
    kw = CLIP_RUN
    model = build_transformer(kw["num_layers"], d_model=kw["d_model"], num_heads=kw["num_heads"],
                              vocab_size=kw["vocab_size"], seq_len=kw["seq_len"], norm_position=kw["norm_position"],
                              seed=kw["seed"])
    steps, batch, seq = kw["steps"], kw["batch_size"], kw["seq_len"]
    x, y = markov_tokens(steps * batch, seq, kw["vocab_size"], seed=kw["seed"] + 1)
    return model, [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]) for i in range(steps)]


@functools.lru_cache(maxsize=1)
def _clip_runs() -> TrainingRuns:
    kw = CLIP_RUN
    return TrainingRuns(kw["num_layers"], kw["norm_position"], steps=kw["steps"], batch_size=kw["batch_size"],
                        seed=kw["seed"], d_model=kw["d_model"], num_heads=kw["num_heads"],
                        vocab_size=kw["vocab_size"], seq_len=kw["seq_len"])


def _clip_norms(learning_rate: float) -> np.ndarray:
    """The unclipped global norm of every step of the exercise's run at ``learning_rate`` (cached)."""
    return _clip_runs().run(learning_rate, 0).grad_norms  # a bar in a notebook: the first run takes seconds


@functools.lru_cache(maxsize=1)
def _clip_frozen_norms() -> np.ndarray:
    """A typical wrong answer: every batch's gradient norm at the initial weights (nothing trained)."""
    runs = _clip_runs()

    @tf.function
    def norm(x, y):
        with tf.GradientTape() as tape:
            loss = runs.loss(x, y)
        return core.global_norm(tape.gradient(loss, runs.variables))

    return np.array([float(norm(runs.x[i], runs.y[i])) for i in range(CLIP_RUN["steps"])])


@functools.lru_cache(maxsize=1)
def _clip_first_step_gradients() -> tuple:
    """Step 1 (the initial weights, the first batch): each variable's true gradient norm, and the
    global norm of ``tf.linalg.global_norm``, which squares an ``IndexedSlices``' values as they
    are (a token that occurs twice in the batch has two rows, not their sum)."""
    model, batches = clip_exercise()
    x, y = batches[0]
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    return np.array([core.true_norm(g) for g in grads]), float(tf.linalg.global_norm(grads))


@functools.lru_cache(maxsize=1)
def _clip_first_step_norm_without_logits() -> float:
    """Step 1's true global norm with a loss that forgot ``from_logits=True`` (a typical wrong answer)."""
    model, batches = clip_exercise()
    x, y = batches[0]
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x))
    return core.true_global_norm(tape.gradient(loss, model.trainable_variables))


def _clip_first_step_variable_norms() -> np.ndarray:
    return _clip_first_step_gradients()[0]


def _as_norms(norms):
    """``(array, None)`` for a flat list/array/tensor of numbers, else ``(None, problem text)``."""
    if norms is None:
        return None, _("pass the norms you logged first: ch09.check_clip_threshold(my_norms, my_threshold), "
                       "with one global gradient norm per step")
    if isinstance(norms, (str, bytes, dict)) or np.isscalar(norms):
        return None, _("the norms should be a list or array of numbers, one per step; got {kind}").format(
            kind=type(norms).__name__)
    try:
        arr = np.asarray(norms.numpy() if hasattr(norms, "numpy") else norms, dtype=np.float64)
    except Exception:  # noqa: BLE001 - a list of tensors, a ragged list
        try:
            arr = np.array([float(v) for v in norms], dtype=np.float64)
        except Exception as err:  # noqa: BLE001
            return None, _("could not read the norms as numbers ({error}): expected one number per step").format(
                error=describe_error(err, 80))
    return arr, None


def _norms_problem(arr: np.ndarray) -> str:
    """What is wrong with the logged norms, or ``""`` if they are the run's (in any order)."""
    steps, want = CLIP_RUN["steps"], _clip_norms(CLIP_RUN["learning_rate"])
    n_vars = _clip_first_step_variable_norms().size
    if arr.ndim > 1 or arr.size == steps * n_vars:
        return _("got {size} values (shape {shape}): one norm per variable and step. The Playbook logs one global "
                 "norm per step: the square root of the sum of every variable's squared norm").format(
            size=arr.size, shape=tuple(arr.shape))
    if arr.size != steps:
        if arr.size == steps - 1 and np.allclose(arr, want[1:], rtol=1e-3):
            return _("39 norms for 40 steps: the first step is missing, and it has the largest norm of the run "
                     "(Adam's first steps). Log every step, the first one included")
        if arr.size == steps - 1 and np.allclose(arr, want[:-1], rtol=1e-3):
            return _("39 norms for 40 steps: the last step is missing. Log one norm for every batch")
        return _("{n} norms for {steps} batches: log exactly one norm per training step").format(n=arr.size,
                                                                                                steps=steps)
    if not np.all(np.isfinite(arr)):
        step = int(np.argmax(~np.isfinite(arr)))
        return _("the norm of step {step} is {value}: expected a finite number").format(step=step + 1,
                                                                                        value=arr[step])
    if np.allclose(np.sort(arr), np.sort(want), rtol=1e-3):   # in any order: the percentile ignores it
        return ""
    if np.allclose(arr, want**2, rtol=1e-3):
        return _("these are squared norms: take the square root of the sum of squares")
    tokens, batch = CLIP_RUN["batch_size"] * CLIP_RUN["seq_len"], CLIP_RUN["batch_size"]
    k = float(arr[0] / want[0])
    if abs(k - tokens) < 1e-3 * tokens or abs(k - batch) < 1e-3 * batch:   # step 1: the same weights, any loss
        return _("your step-1 norm is {k}× the expected one: your loss sums over the tokens of a batch instead of "
                 "averaging them ({tokens} = {batch} sequences × {seq} tokens). Use the mean, as loss_fn "
                 "does").format(k=f"{k:.3g}", tokens=tokens, batch=batch, seq=CLIP_RUN["seq_len"])
    factor = arr / want
    if np.all(factor > 0) and np.allclose(factor, np.median(factor), rtol=1e-2) and abs(np.median(factor) - 1) > 0.01:
        return _("every norm is {k}× the expected one: the loss is scaled. Use the mean sparse cross-entropy "
                 "of the logits (loss_fn)").format(k=f"{np.median(factor):.3g}")
    if np.isclose(arr[0], want[0], rtol=1e-3):
        return _trained_differently(arr, want)
    return _first_step_problem(arr[0], want[0])


def _trained_differently(arr: np.ndarray, want: np.ndarray) -> str:
    """The first step's norm is right, so the norm is measured right; the training is not."""
    if np.allclose(arr, _clip_frozen_norms(), rtol=1e-3):
        return _("every step is measured at the initial weights: the model never trained. After logging a "
                 "step's norm, apply its gradients (optimizer.apply_gradients)")
    if np.allclose(arr, _clip_norms(1e-3), rtol=1e-3):
        return _("these are the norms of a run at learning rate 0.001, Keras's default for Adam: the exercise "
                 "trains with keras.optimizers.Adam(1e-2)")
    step = int(np.argmax(~np.isclose(arr, want, rtol=1e-3)))
    return _("step 1 is right, so the norm is measured right, but step {step} is not ({got}, expected {want}): "
             "the training differs. Train the model you were given with keras.optimizers.Adam(1e-2), one step "
             "per batch in order, and log the norm before any clipping").format(
        step=step + 1, got=f"{arr[step]:.4g}", want=f"{want[step]:.4g}")


def _first_step_problem(got: float, want: float) -> str:
    per_variable, slices_norm = _clip_first_step_gradients()
    if np.isclose(got, slices_norm, rtol=1e-3):
        return _("at step 1 your norm is {got}, tf.linalg.global_norm's, not the gradient's ({want}): the "
                 "embeddings' gradients are tf.IndexedSlices with one row per token of the batch, and "
                 "tf.linalg.global_norm (like tf.clip_by_global_norm) squares those rows without first adding the "
                 "rows of a token that occurs twice. Convert them with tf.convert_to_tensor, or use "
                 "gl.true_global_norm").format(got=f"{got:.4g}", want=f"{want:.4g}")
    if np.isclose(got, per_variable.sum(), rtol=1e-3):
        return _("at step 1 your norm is the sum of the variables' norms: the global norm is the square root of "
                 "the sum of their squares (gl.true_global_norm)")
    if np.isclose(got, per_variable.mean(), rtol=1e-3):
        return _("at step 1 your norm is the mean of the variables' norms: the global norm is the square root "
                 "of the sum of their squares (gl.true_global_norm)")
    if np.isclose(got, per_variable.max(), rtol=1e-3) or np.any(np.isclose(got, per_variable, rtol=1e-3)):
        return _("at step 1 your norm is one variable's: take the global norm over every trainable variable")
    if np.isclose(got, _clip_first_step_norm_without_logits(), rtol=1e-3):
        return _("at step 1 your norm is {got}, expected {want}: the loss treats the model's outputs as "
                 "probabilities. The model returns logits: use SparseCategoricalCrossentropy(from_logits=True), "
                 "as loss_fn does").format(got=f"{got:.4g}", want=f"{want:.4g}")
    return _("step 1's norm is {got}, expected {want}: the global norm of the gradient of loss_fn over every "
             "trainable variable, at the initial weights. Start from a fresh ch09.clip_exercise() (a model "
             "trained once already starts elsewhere)").format(got=f"{got:.4g}", want=f"{want:.4g}")


def check_clip_threshold(norms, threshold=None) -> CheckResult:
    """Exercise 3: the unclipped norms of the run of :func:`clip_exercise`, and their 90th percentile.

    ``norms``: one global gradient norm per step (before the update, float64 or float32), from
    training the model with ``keras.optimizers.Adam(1e-2)`` on the batches in order. They are
    compared with :class:`~gradlab.train.warmup.TrainingRuns`' run of the same model (in any
    order: the percentile does not depend on it). ``threshold``: the Tuning Playbook's starting
    clip threshold for them, their 90th percentile (any of NumPy's percentile methods, or the
    value rounded to 3 digits).
    """
    name = _("clip threshold")
    if np.ndim(norms) == 0 and norms is not None and threshold is not None and np.ndim(threshold) == 1:
        return CheckResult(name, False, _("the arguments are swapped: the norms come first, "
                                          "ch09.check_clip_threshold(my_norms, my_threshold)"))
    arr, problem = _as_norms(norms)
    if problem:
        return CheckResult(name, False, problem)
    problem = _norms_problem(arr)
    if problem:
        return CheckResult(name, False, problem)
    value, problem = as_number_answer(name, threshold, _("the threshold"))
    if problem is not None:
        return problem
    want_norms = _clip_norms(CLIP_RUN["learning_rate"])
    want = float(np.percentile(want_norms, 90))
    share = float(np.mean(want_norms > value))
    methods = [float(np.percentile(want_norms, 90, method=m)) for m in ("lower", "higher", "nearest", "midpoint")]
    clipped = np.flatnonzero(want_norms > want) + 1
    steps = join_list(str(int(s)) for s in clipped)
    if abs(value - want) <= 1e-3 * want or any(abs(value - m) <= 1e-3 * m for m in methods) \
            or f"{value:.3g}" == f"{want:.3g}":
        return CheckResult(name, True, _("{t}, the 90th percentile of the {n} unclipped norms you logged: it clips "
                                         "steps {steps}. The largest norms come first, before Adam's moments have "
                                         "seen many gradients: the steps that warmup keeps small").format(
            t=f"{want:.3g}", n=want_norms.size, steps=steps))
    if np.array_equal(np.flatnonzero(want_norms > value) + 1, clipped):
        return CheckResult(name, True, _("{t} clips the same steps as the 90th percentile ({want}): steps {steps}. "
                                         "In code, take np.percentile(norms, 90) itself").format(
            t=f"{value:.3g}", want=f"{want:.3g}", steps=steps))
    if abs(value - float(np.percentile(want_norms, 0.9))) <= 1e-3 * abs(value):
        return CheckResult(name, False, _("that is np.percentile(norms, 0.9), the 0.9th percentile: np.percentile "
                                          "takes 0 to 100 (np.quantile takes 0.9)"))
    if share > 0.5:
        return CheckResult(name, False, _("{p}% of the steps would be clipped: the Playbook calls more than half "
                                          "'extremely aggressive', a strange way of lowering the learning rate. "
                                          "Take the 90th percentile").format(p=f"{100 * share:.0f}"))
    if value >= float(np.max(want_norms)) * (1 - 1e-6):
        return CheckResult(name, False, _("that is the largest norm or above: nothing would ever be clipped. Take "
                                          "the 90th percentile"))
    if abs(value - float(np.mean(want_norms))) <= 1e-3 * value:
        return CheckResult(name, False, _("that is the mean, which the first steps pull up: take the 90th "
                                          "percentile (np.percentile(norms, 90))"))
    return CheckResult(name, False, _("{t} clips {p}% of the steps; the 90th percentile clips 10%").format(
        t=f"{value:.3g}", p=f"{100 * share:.0f}"))


# ----------------------------------------------------------------------------- exercise 4
@functools.lru_cache(maxsize=2)
def _flat_measurements(num_layers: int) -> dict:
    """``{key: (block norms, FFN kernel norms, stream rms)}``, each stacked over the seeds (seeds, ...)."""
    engine = _flat_engine()  # the chapter's engine has the same configuration: its reports are shared
    seeds = FLAT_EXPECTED["seeds"]
    out = {}
    with Progress(len(FLAT_SETTINGS) * len(seeds), _("{n}-block pre-LN stacks").format(n=num_layers),
                  enabled=check_progress(None)) as bar:
        for key, setting in FLAT_SETTINGS.items():
            reports = []
            for s in seeds:
                reports.append(engine.report(num_layers, "pre", seed=s, **setting))
                bar.update(note=key)
            out[key] = tuple(np.array([getattr(r, f) for r in reports])
                             for f in ("layer_grad_norms", "ffn_grad_norms", "stream_rms"))
    return out


@functools.lru_cache(maxsize=1)
def _flat_engine() -> TransformerGradientEngine:
    return TransformerGradientEngine(max_layers=FLAT_EXPECTED["num_layers"])


def _ratio_of_means(norms: np.ndarray) -> float:
    mean = norms.mean(axis=0)
    return float(mean[-1] / mean[0])


def _flat_expected() -> dict:
    """Exercise 4's answer: ``{key: last block's mean norm / first block's}``, pre-LN, 24 blocks, seeds 0-7."""
    return {k: _ratio_of_means(m[0]) for k, m in _flat_measurements(FLAT_EXPECTED["num_layers"]).items()}


def _flat_variants():
    """``(values, feedback, atol)`` of typical wrong answers, computed lazily, most likely first.

    ``atol`` 0.006 for numbers the chapter printed with two decimals (copied from the page).
    """
    deep = lambda: _flat_measurements(FLAT_EXPECTED["num_layers"])  # noqa: E731
    shallow = lambda: _flat_measurements(12)  # noqa: E731
    yield (lambda: {k: float(m[0][0, -1] / m[0][0, 0]) for k, m in deep().items()},
           _("these are one initialization's ratios (seed 0): the expected gradient averages each block's norm "
             "over the 8 seeds first, then divides the last block's mean by the first's"), 0.0)
    yield (lambda: {k: 1.0 / _ratio_of_means(m[0]) for k, m in deep().items()},
           _("inverted: that is the first block over the last. Divide the last block's mean norm by the first's"), 0.0)
    yield (lambda: {k: _ratio_of_means(m[1]) for k, m in deep().items()},
           _("these are the second FFN kernel's norms (ffn_grad_norms): use layer_grad_norms, every variable of "
             "a block"), 0.0)
    yield (lambda: {k: float(m[0].mean(axis=0)[-2] / m[0].mean(axis=0)[0]) for k, m in deep().items()},
           _("off by one: that divides the next-to-last block (index -2) by the first. The last block is index "
             "-1 (23 of 0..23)"), 0.0)
    yield (lambda: {k: float(m[0].mean(axis=0)[-1] / m[0].mean(axis=0)[1]) for k, m in deep().items()},
           _("off by one: that divides the last block by the second (index 1). The first block is index 0"), 0.0)
    yield (lambda: {k: float(m[0].mean(axis=1)[-1] / m[0].mean(axis=1)[0]) for k, m in deep().items()},
           _("you averaged over the blocks, not over the seeds: with the norms stacked as (seeds, blocks), the "
             "mean over axis 0 keeps one mean per block"), 0.0)
    yield (lambda: {k: float(m[2][:, -1].mean() / m[2][:, 0].mean()) for k, m in deep().items()},
           _("these are the residual stream's growth (stream_rms, last over first), not the gradient's ratio: use "
             "layer_grad_norms"), 0.0)
    yield (lambda: {k: float(m[0][0, -1] / m[0][0, 0]) for k, m in shallow().items()},
           _("these are 12 blocks and one initialization, the numbers the chapter printed: the exercise asks for "
             "24 blocks, each block's norm averaged over seeds 0 to 7"), 0.006)
    yield (lambda: {k: _ratio_of_means(m[0]) for k, m in shallow().items()},
           _("these are 12 blocks: measure the 24-block stack, engine.report(24, \"pre\", ...)"), 0.0)


def check_flat_pre_ln(ratios) -> CheckResult:
    """Exercise 4: ``{key: ratio}`` for every key of :data:`FLAT_SETTINGS`, the expected gradient's last/first.

    For each embedding setting: each block's gradient norm (``layer_grad_norms``) of a 24-block
    pre-LN stack, averaged over the initializations (seeds 0 to 7), and the last block's mean
    over the first block's. Compared to 5e-4 (the mean of the eight per-seed ratios, within
    0.2% of it for pre-LN, is accepted too).
    """
    name = _("flat pre-LN gradients")
    keys = sorted(FLAT_SETTINGS)
    if not isinstance(ratios, dict):
        return CheckResult(name, False, _("answer with a dict {{key: ratio}}, one entry for each of 'a', 'b', 'c', "
                                          "'d' (the keys of ch09.FLAT_SETTINGS); got {kind}").format(
            kind=type(ratios).__name__))
    got_keys = {k.strip().lower() if isinstance(k, str) else k: v for k, v in ratios.items()}
    missing = [k for k in keys if k not in got_keys]
    extra = [repr(k) for k in got_keys if k not in FLAT_SETTINGS]
    if missing or extra:
        return CheckResult(name, False, _("the dict needs exactly the keys 'a', 'b', 'c', 'd'; missing: {missing}; "
                                          "unknown: {extra}").format(missing=join_list(missing) or "-",
                                                                     extra=join_list(extra) or "-"))
    got = {}
    for k in keys:
        value, problem = as_number_answer(name, got_keys[k], _("the ratio of setting {key}").format(key=repr(k)))
        if problem is not None:
            return problem
        got[k] = value
    values = np.array([got[k] for k in keys])
    want = _flat_expected()
    deep = _flat_measurements(FLAT_EXPECTED["num_layers"])
    mean_of_ratios = {k: float(np.mean(m[0][:, -1] / m[0][:, 0])) for k, m in deep.items()}
    for right in (want, mean_of_ratios):
        if np.allclose(values, [right[k] for k in keys], rtol=5e-4, atol=0.0):
            stream = deep["d"][2].mean(axis=0)
            others = [want[k] for k in keys if k != "d"]
            return CheckResult(name, True, _(
                "{values}. Only d stays near flat on average: its residual stream starts at about √d_model "
                "({s0}) and grows only to {s1} over 24 blocks, so every block's LayerNorm divides by nearly the "
                "same number; the others fall to {low}–{high}. Even d is less flat than one 12-block model "
                "suggested: the stream still grows, a little, with every block").format(
                values=join_list(f"{k} {want[k]:.3g}" for k in keys), s0=f"{stream[0]:.3g}", s1=f"{stream[-1]:.3g}",
                low=f"{min(others):.2f}", high=f"{max(others):.2f}"))
    if np.allclose(values, values[0], rtol=1e-6):
        return CheckResult(name, False, _("every setting got the same number ({v}): measure each one with its own "
                                          "embedding, engine.report(..., **FLAT_SETTINGS[key])").format(
            v=f"{values[0]:.3g}"))
    for variant, feedback, atol in _flat_variants():
        candidate = variant()
        if np.allclose(values, [candidate[k] for k in keys], rtol=1e-3, atol=atol):
            return CheckResult(name, False, feedback)
    wrong = [k for k in keys if not np.isclose(got[k], want[k], rtol=5e-4)]
    return CheckResult(name, False, _("not yet right for {keys}: for each setting, average every block's "
                                      "layer_grad_norms over seeds 0 to 7 (engine.report(24, \"pre\", seed=s, "
                                      "**setting)), then divide the last block's mean by the first's").format(
        keys=join_list(wrong)))
