"""Gradients across devices and workers with ``tf.distribute`` (chapter 08).

Pure computation: TensorFlow and Keras in, NumPy numbers and small dataclasses out.

* :func:`mirrored_strategy` builds a ``MirroredStrategy`` over logical CPU devices. They exist
  only if the environment variable ``GRADLAB_LOGICAL_CPUS`` was set before ``import gradlab``
  (TensorFlow fixes its devices at the first op, and ``import gradlab`` runs one).
* :func:`split_batch` (the core's) hands each replica its slice of one global batch.
* :func:`replica_gradients` / :func:`single_device_gradients` measure the gradient a step
  applies, per replica and summed, under a per-replica mean loss or a global-batch loss.
* :func:`compare_loss_scaling`, :func:`compare_clipping`, :func:`compare_fit` and
  :func:`compare_accumulation` put a distributed run next to a single-device run.
* :func:`train_toy` is the small training run that :func:`run_workers` starts in two real
  ``MultiWorkerMirroredStrategy`` worker processes (``gradlab/train/distribute_worker.py``)
  on 127.0.0.1, and that :func:`reference_run` repeats in this process on one device.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from .. import core
from .._env import LOGICAL_CPUS_ENV, quiet_import_tensorflow
from .._validate import check_choice, check_int, check_positive, renamed_keywords
from ..core import split_batch
from ..i18n import _, pad
from ..progress import Progress, check_progress
from ..topics.tracing import error_summary
from .steps import make_train_step

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "ClipPlacement",
    "clip_placement",
    "AccumulationComparison",
    "ClippingComparison",
    "FitComparison",
    "LossScalingComparison",
    "MultiWorkerRun",
    "compare_accumulation",
    "compare_clipping",
    "compare_fit",
    "compare_loss_scaling",
    "free_ports",
    "max_abs_difference",
    "mirrored_strategy",
    "reference_run",
    "replica_gradients",
    "rounding_bound",
    "run_workers",
    "single_device_gradients",
    "toy_data",
    "toy_model",
    "train_toy",
]

LOSS_REDUCTIONS = ("global", "per_replica")


# ----------------------------------------------------------------------------- set-up
def mirrored_strategy(num_replicas: int = 2) -> tf.distribute.MirroredStrategy:
    """A ``MirroredStrategy`` over the first ``num_replicas`` logical CPU devices (chapter 08).

    The devices must exist before TensorFlow runs its first op: set
    ``os.environ["GRADLAB_LOGICAL_CPUS"] = "2"`` before ``import gradlab``.
    """
    num_replicas = check_int("num_replicas", num_replicas, 1, 64)
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) < num_replicas:
        raise ValueError(
            f"num_replicas must be at most the {len(cpus)} logical CPU device(s) of this process; "
            f"got {num_replicas}. Set os.environ['{LOGICAL_CPUS_ENV}'] = '{num_replicas}' before "
            "the first `import gradlab` (restart the kernel if gradlab is already imported)."
        )
    return tf.distribute.MirroredStrategy([d.name for d in cpus[:num_replicas]])


def toy_data(n: int = 32, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A small regression batch ``(x, y)`` as float32 NumPy arrays, the same in every process (chapter 08).

    ``y = sin(x @ w)`` for a fixed ``w``, plus noise; stateless random ops, so each worker
    process draws exactly the same data from the same ``seed``.
    """
    n = check_int("n", n, 1, 1_000_000)
    features = check_int("features", features, 1, 10_000)
    seed = check_int("seed", seed, 0)
    x = tf.random.stateless_normal([n, features], seed=[seed, 11])
    w = tf.random.stateless_normal([features, 1], seed=[seed, 12])
    noise = 0.1 * tf.random.stateless_normal([n, 1], seed=[seed, 13])
    y = tf.sin(x @ w) + noise
    return x.numpy(), y.numpy()


def toy_model(features: int = 4, width: int = 16, seed: int = 0) -> keras.Sequential:
    """A built two-layer MLP with seeded initial weights, the same in every process (chapter 08).

    Create it inside ``strategy.scope()`` to get mirrored variables.
    """
    features = check_int("features", features, 1, 10_000)
    width = check_int("width", width, 1, 10_000)
    seed = check_int("seed", seed, 0)
    return keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(width, activation="tanh", name="hidden",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=seed)),
            keras.layers.Dense(1, name="out",
                               kernel_initializer=keras.initializers.GlorotUniform(seed=seed + 1)),
        ],
        name="toy",
    )


def _check_strategy(strategy) -> None:
    if not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(f"strategy must be a tf.distribute.Strategy, got {type(strategy).__name__}")


def _mse(model, y, y_pred, *, per_example: bool = False):
    """The core's mean squared error, ``y`` checked against the output's shape first."""
    core.Loss(model, "mse").check(y, y_pred)
    return core.mean_squared_error(y, y_pred, per_example=per_example)


#: Differences below this are float rounding, and their digits change from one CPU to another.
ROUNDING = 1e-6


def rounding_bound(value: float) -> str:
    """A difference as the reports print it: ``"< 1e-6"`` when it is float rounding (its digits would
    change from one CPU to another), else two significant digits (chapter 08)."""
    if value != value:  # NaN
        return "nan"
    return "< 1e-6" if abs(value) < ROUNDING else f"{value:.2g}"


def max_abs_difference(a: Sequence, b: Sequence) -> float:
    """Largest absolute difference between two lists of arrays of the same shapes (chapter 08)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a and b must hold the same number of arrays; got {len(a)} and {len(b)}")
    out = 0.0
    for u, v in zip(a, b, strict=True):
        u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
        if u.shape != v.shape:
            raise ValueError(f"a and b must hold arrays of the same shapes; got {u.shape} and {v.shape}")
        out = max(out, float(np.max(np.abs(u - v))) if u.size else 0.0)
    return out


def _global_norm(arrays) -> float:
    """The float64 global norm of a list of arrays (the core's, what a learner reads)."""
    return core.true_global_norm([tf.constant(np.asarray(a)) for a in arrays])


def _one_line(err: BaseException) -> str:
    """The line of a TensorFlow error that says what went wrong (ANSI colours removed)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    for line in text.splitlines():
        if "merge_call" in line:  # the real reason behind Keras' "calling Cond.call()"
            return f"{type(err).__name__}: {line.strip().split('. ')[0]}"
    return error_summary(err)


# ----------------------------------------------------------------------------- gradients
def single_device_gradients(model, x, y, sample_weight=None) -> list[np.ndarray]:
    """The gradient of the mean squared error over the whole batch, on one device (chapter 08);
    ``sample_weight`` weighs the examples as Keras does (``sum(w·l) / B``)."""
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        core.Loss(model, "mse").check(y, pred, sw)
        loss = core.mean_squared_error(y, pred, sw)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def replica_gradients(strategy, model, x, y, *, loss_reduction: str = "global", sample_weight=None):
    """Each replica's gradient and their sum, for one global batch ``(x, y)`` (chapter 08).

    ``loss_reduction="global"`` divides each replica's summed per-example loss by the *global*
    batch size (``tf.nn.compute_average_loss(..., global_batch_size=B)``); ``"per_replica"``
    takes each replica's own mean (``tf.reduce_mean``), the classic bug. Returns
    ``(local, summed)``: ``local`` a list (one per replica in this process) of gradient lists,
    ``summed`` the all-reduced (summed) gradient list an optimizer would apply. ``sample_weight``
    weighs each example's loss before either reduction (Keras's meaning).
    """
    _check_strategy(strategy)
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    if sw is None:
        sw = tf.ones([int(x.shape[0])], y.dtype if y.dtype.is_floating else tf.float32)
    check_choice("loss_reduction", loss_reduction, LOSS_REDUCTIONS)
    global_batch = int(x.shape[0])
    variables = model.trainable_variables

    def replica_fn(xr, yr, wr):
        with tf.GradientTape() as tape:
            per_example = _mse(model, yr, model(xr, training=True), per_example=True)
            per_example = per_example * tf.cast(tf.reshape(wr, [-1]), per_example.dtype)
            if loss_reduction == "global":
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            else:
                loss = tf.reduce_mean(per_example)
        grads = tape.gradient(loss, variables)
        summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        return grads, summed

    @tf.function
    def run(dist_x, dist_y, dist_w):
        return strategy.run(replica_fn, args=(dist_x, dist_y, dist_w))

    local, summed = run(*split_batch(strategy, x, y, sw))
    local = [[t.numpy() for t in r] for r in zip(*[strategy.experimental_local_results(g) for g in local], strict=True)]
    summed = [strategy.experimental_local_results(g)[0].numpy() for g in summed]
    return local, summed


@dataclasses.dataclass(frozen=True)
class LossScalingComparison:
    """Global norms of one step's gradient on one device and across replicas (chapter 08)."""

    num_replicas: int
    single_norm: float
    global_loss_norm: float
    per_replica_mean_norm: float
    global_loss_error: float
    per_replica_mean_error: float

    @property
    def ratio(self) -> float:
        """Per-replica-mean norm over single-device norm: the number of replicas."""
        return self.per_replica_mean_norm / self.single_norm

    def __str__(self) -> str:
        return "\n".join([
            _("{n} replicas, global norm of the applied gradient:").format(n=self.num_replicas),
            _("  one device, mean over the batch:         {norm}").format(norm=f"{self.single_norm:.4g}"),
            _("  compute_average_loss(global_batch_size): {norm}  (max abs error {error})").format(
                norm=f"{self.global_loss_norm:.4g}", error=rounding_bound(self.global_loss_error)),
            _("  reduce_mean on each replica:             {norm}  ({ratio}x too large)").format(
                norm=f"{self.per_replica_mean_norm:.4g}", ratio=f"{self.ratio:.4g}"),
        ])


def compare_loss_scaling(strategy, model, x, y, sample_weight=None) -> LossScalingComparison:
    """The loss-scaling bug in numbers: per-replica mean vs global-batch loss vs one device (chapter 08)."""
    single = single_device_gradients(model, x, y, sample_weight)
    _local, good = replica_gradients(strategy, model, x, y, loss_reduction="global", sample_weight=sample_weight)
    _local, bad = replica_gradients(strategy, model, x, y, loss_reduction="per_replica", sample_weight=sample_weight)
    return LossScalingComparison(
        num_replicas=strategy.num_replicas_in_sync,
        single_norm=_global_norm(single),
        global_loss_norm=_global_norm(good),
        per_replica_mean_norm=_global_norm(bad),
        global_loss_error=max_abs_difference(good, single),
        per_replica_mean_error=max_abs_difference(bad, single),
    )


def _clip(grads, clip_norm: float) -> list[np.ndarray]:
    """Global-norm clipping by the core (float64 norm), as ``tf.clip_by_global_norm`` does it."""
    clipped = core.clip_gradients([tf.constant(np.asarray(g, np.float64)) for g in grads],
                                  ("global_norm", clip_norm))
    return [g.numpy() for g in clipped]


def _global_norm_threshold(clip) -> float:
    """``clip`` (a number or ``("global_norm", t)``) as its threshold ``t``; any other mode is a ValueError."""
    checked = core.check_clip(clip)
    if checked is None or checked[0] != "global_norm":
        raise ValueError(f"clip must be a global-norm threshold (a number > 0 or ('global_norm', t)); got {clip!r}")
    return checked[1]


@dataclasses.dataclass(frozen=True)
class ClippingComparison:
    """Clipping each replica's gradient before the all-reduce vs clipping the sum (chapter 08)."""

    clip_norm: float
    single_norm: float
    replica_norms: tuple[float, ...]
    summed_norm: float
    clip_after_norm: float
    clip_before_norm: float
    clip_after_error: float
    clip_before_error: float

    def __str__(self) -> str:
        replicas = ", ".join(f"{n:.4g}" for n in self.replica_norms)
        return "\n".join([
            _("global norm on one device: {single}; of the summed replica gradients: {summed}; of each replica's "
              "own: {replicas}").format(single=f"{self.single_norm:.4g}", summed=f"{self.summed_norm:.4g}",
                                        replicas=replicas),
            _("clip={clip}, norm of the applied gradient (one device: {one}):").format(
                clip=f"{self.clip_norm:g}", one=f"{min(self.single_norm, self.clip_norm):.4g}"),
            _("  clip after the all-reduce:  {norm}  (max abs error vs one device {error})").format(
                norm=f"{self.clip_after_norm:.4g}", error=rounding_bound(self.clip_after_error)),
            _("  clip before the all-reduce: {norm}  (max abs error vs one device {error})").format(
                norm=f"{self.clip_before_norm:.4g}", error=rounding_bound(self.clip_before_error)),
        ])


@renamed_keywords(clip_norm="clip")
def compare_clipping(strategy, model, x, y, clip, sample_weight=None) -> ClippingComparison:
    """Where to clip in a custom loop, in numbers (chapter 08).

    ``clip`` is the global-norm threshold (a number ``t``, or ``("global_norm", t)``: gradlab's one
    clip keyword, see :func:`gradlab.clip_gradients`). Clipping the summed (all-reduced) gradient
    reproduces single-device clipping; clipping each replica's gradient first does not (each
    replica's norm is a different number, and the clipped pieces add up to a longer vector than
    the threshold).
    """
    clip_norm = _global_norm_threshold(clip)
    single = single_device_gradients(model, x, y, sample_weight)
    local, summed = replica_gradients(strategy, model, x, y, loss_reduction="global", sample_weight=sample_weight)
    reference = _clip(single, clip_norm)
    after = _clip(summed, clip_norm)
    clipped = [_clip(r, clip_norm) for r in local]
    before = [sum(parts) for parts in zip(*clipped, strict=True)]
    return ClippingComparison(
        clip_norm=clip_norm,
        single_norm=_global_norm(single),
        replica_norms=tuple(_global_norm(r) for r in local),
        summed_norm=_global_norm(summed),
        clip_after_norm=_global_norm(after),
        clip_before_norm=_global_norm(before),
        clip_after_error=max_abs_difference(after, reference),
        clip_before_error=max_abs_difference(before, reference),
    )


# ----------------------------------------------------------------------------- fit
@dataclasses.dataclass(frozen=True)
class ClipPlacement:
    """Chapter 08's finding as vectors: each replica's gradient, their sum (one device), the sum
    clipped (after the all-reduce) and the sum of the clipped replica gradients (before), each
    flattened to one float64 vector, and the plane that holds them (:func:`clip_placement`)."""

    clip_norm: float
    parts: tuple
    total: np.ndarray
    after: np.ndarray
    before: np.ndarray
    e1: np.ndarray
    e2: np.ndarray

    def xy(self, v) -> tuple[float, float]:
        """``v``'s coordinates in the plane: along the one-device gradient, and across it."""
        return float(v @ self.e1), float(v @ self.e2)

    @staticmethod
    def norm(v) -> float:
        """The (float64) length of one of the vectors."""
        return float(np.linalg.norm(v))

    @property
    def ratio(self) -> float:
        """How much longer the step clipped before the sum is than the one-device step."""
        return float(np.linalg.norm(self.before) / np.linalg.norm(self.after))

    @property
    def cosine(self) -> float:
        """The cosine between the step clipped before the sum and the one-device gradient."""
        return float(self.before @ self.total / (np.linalg.norm(self.before) * np.linalg.norm(self.total)))


def clip_placement(replica_grads: Sequence[Sequence], clip) -> ClipPlacement:
    """Global-norm clipping before versus after the all-reduce, as vectors (chapter 08).

    ``replica_grads`` holds one list of gradient arrays per replica (each replica's share of the
    global loss, so their sum is the one-device gradient); ``clip`` is the global-norm threshold
    (a number, or ``("global_norm", t)``). Each list is clipped by the core
    (:func:`gradlab.clip_gradients`, float64), then flattened. The plane is the one through the
    sum and the sum of the clipped replica gradients, which for two replicas contains every
    vector, so lengths and angles drawn in it are true. :func:`gradlab.plots.replicas.plot_clip_placement`
    draws it.
    """
    if len(replica_grads) < 2:
        raise ValueError(f"replica_grads must hold the gradients of at least 2 replicas; got {len(replica_grads)}")
    threshold = _global_norm_threshold(clip)
    lists = [[np.asarray(g, dtype=np.float64) for g in r] for r in replica_grads]
    parts = [np.concatenate([g.ravel() for g in r]) for r in lists]
    if len({p.size for p in parts}) != 1:
        raise ValueError("every replica's gradient list must have the same shapes")
    summed = [sum(gs) for gs in zip(*lists, strict=True)]

    def flat(grads):
        return np.concatenate([np.ravel(g) for g in grads])

    total = flat(summed)
    after = flat(_clip(summed, threshold))
    before = np.sum([flat(_clip(r, threshold)) for r in lists], axis=0)
    e1 = total / np.linalg.norm(total)
    rest = before - (before @ e1) * e1
    if np.linalg.norm(rest) < 1e-12 * np.linalg.norm(before):  # before is parallel to the sum: use a replica
        rest = parts[0] - (parts[0] @ e1) * e1
    e2 = rest / np.linalg.norm(rest) if np.linalg.norm(rest) > 0 else np.zeros_like(e1)
    return ClipPlacement(threshold, tuple(parts), total, after, before, e1, e2)


def _fit_weights(x, y, *, strategy, make_model: Callable, optimizer: Callable, batch_size: int,
                 epochs: int, loss: str = "mse") -> list[np.ndarray]:
    with strategy.scope():
        model = make_model()
        model.compile(optimizer=optimizer(), loss=loss)
    model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    return [v.numpy() for v in model.trainable_variables]


@dataclasses.dataclass(frozen=True)
class FitComparison:
    """Weights after ``fit`` on one device and under a strategy (chapter 08)."""

    label: str
    max_abs_difference: float
    weight_norm: float
    error: str | None = None

    def __str__(self) -> str:
        if self.error:
            return _("{label} fails: {error}").format(label=pad(self.label, 34), error=self.error)
        return _("{label} max |w_one_device - w_distributed| = {difference}  (weight norm {norm})").format(
            label=pad(self.label, 34), difference=rounding_bound(self.max_abs_difference), norm=f"{self.weight_norm:.3g}")


def compare_fit(strategy, x, y, optimizer: Callable, *, label: str = "", make_model: Callable | None = None,
                batch_size: int = 16, epochs: int = 2) -> FitComparison:
    """``model.fit`` on one device and under ``strategy``, same data, same start (chapter 08).

    ``optimizer`` is a function returning a new Keras optimizer (one per run), e.g.
    ``lambda: keras.optimizers.SGD(0.1, global_clipnorm=0.5)``; ``make_model`` a function
    returning a new model (default :func:`toy_model`). A run that raises is reported in
    :attr:`FitComparison.error` (its one-line summary) instead of raising.
    """
    _check_strategy(strategy)
    if not callable(optimizer):
        raise ValueError(f"optimizer must be a function returning a Keras optimizer, got {optimizer!r}")
    make_model = make_model or (lambda: toy_model(features=int(np.shape(x)[1])))
    batch_size = check_int("batch_size", batch_size, 1)
    epochs = check_int("epochs", epochs, 1)
    kwargs = dict(make_model=make_model, optimizer=optimizer, batch_size=batch_size, epochs=epochs)
    single = _fit_weights(x, y, strategy=tf.distribute.get_strategy(), **kwargs)
    try:
        distributed = _fit_weights(x, y, strategy=strategy, **kwargs)
    except Exception as err:  # noqa: BLE001 - shown to the learner as a result
        return FitComparison(label, float("nan"), _global_norm(single), _one_line(err))
    return FitComparison(label, max_abs_difference(single, distributed), _global_norm(single))


@dataclasses.dataclass(frozen=True)
class AccumulationComparison:
    """One step on a batch of ``steps * micro_batch`` vs ``steps`` accumulated micro-batches (chapter 08)."""

    steps: int
    micro_batch: int
    max_abs_difference: float
    update_norm: float
    error: str | None = None

    def __str__(self) -> str:
        if self.error:
            return _("gradient_accumulation_steps={steps} fails: {error}").format(steps=self.steps, error=self.error)
        return _("1 step on {n} examples vs gradient_accumulation_steps={steps} on {steps} x {micro}: max |dw| "
                 "difference {difference} (update size {norm})").format(
            n=self.steps * self.micro_batch, steps=self.steps, micro=self.micro_batch,
            difference=rounding_bound(self.max_abs_difference), norm=f"{self.update_norm:.3g}")


def compare_accumulation(x, y, optimizer: Callable, *, steps: int = 2, strategy=None,
                         make_model: Callable | None = None) -> AccumulationComparison:
    """Keras 3 ``gradient_accumulation_steps`` against one larger batch (chapter 08).

    ``optimizer(**kwargs)`` returns a new optimizer; it is called once plainly, for one
    ``fit`` epoch with ``batch_size=len(x)``, and once with ``gradient_accumulation_steps=steps``
    for one epoch with ``batch_size=len(x) // steps``, so both make exactly one update.
    ``strategy`` (default: none) runs the accumulating model under a strategy; a run that
    raises (as it does under ``MirroredStrategy`` in Keras 3.15) is reported in
    :attr:`AccumulationComparison.error`.
    """
    if not callable(optimizer):
        raise ValueError(f"optimizer must be a function returning a Keras optimizer, got {optimizer!r}")
    steps = check_int("steps", steps, 2, 1024)
    n = int(np.shape(x)[0])
    if n % steps:
        raise ValueError(f"steps must divide the {n} examples of x; got {steps}")
    make_model = make_model or (lambda: toy_model(features=int(np.shape(x)[1])))
    start = [v.numpy() for v in make_model().trainable_variables]
    big = _fit_weights(x, y, strategy=tf.distribute.get_strategy(), make_model=make_model,
                       optimizer=optimizer, batch_size=n, epochs=1)
    update = _global_norm([b - s for b, s in zip(big, start, strict=True)])
    try:
        accumulated = _fit_weights(
            x, y, strategy=strategy or tf.distribute.get_strategy(), make_model=make_model,
            optimizer=lambda: optimizer(gradient_accumulation_steps=steps), batch_size=n // steps,
            epochs=1)
    except Exception as err:  # noqa: BLE001 - shown to the learner as a result
        return AccumulationComparison(steps, n // steps, float("nan"), update, _one_line(err))
    return AccumulationComparison(steps, n // steps, max_abs_difference(big, accumulated), update)


# ----------------------------------------------------------------------------- workers
@renamed_keywords(clip_norm="clip")
def train_toy(strategy=None, *, steps: int = 3, batch: int = 16, learning_rate: float = 0.1,
              clip=0.5, seed: int = 0) -> dict:
    """A few steps of :func:`gradlab.make_train_step` on :func:`toy_data` (chapter 08).

    The same function runs in each ``MultiWorkerMirroredStrategy`` worker and, with
    ``strategy=None``, on one device in one process. ``clip`` is gradlab's one clip keyword (default:
    the global norm at 0.5; ``None`` does not clip; any ``(mode, t)`` of :func:`gradlab.clip_gradients`).
    Returns plain Python numbers:
    ``weights`` (lists), ``losses`` and ``grad_norms`` (global norm before clipping, per step)
    and ``replicas``.
    """
    steps = check_int("steps", steps, 1, 1000)
    batch = check_int("batch", batch, 1)
    learning_rate = check_positive("learning_rate", learning_rate)
    clip = core.check_clip(clip)
    strategy = strategy or tf.distribute.get_strategy()
    _check_strategy(strategy)
    x, y = toy_data(n=batch * steps, seed=seed)
    with strategy.scope():
        model = toy_model(seed=seed)
        optimizer = keras.optimizers.SGD(learning_rate)
    step = make_train_step(model, optimizer, clip=clip)
    losses, norms = [], []
    for i in range(steps):
        out = step(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
        losses.append(float(out["loss"]))
        norms.append(float(out["global_norm"]))
    return {
        "replicas": int(strategy.num_replicas_in_sync),
        "losses": losses,
        "grad_norms": norms,
        "weights": [v.numpy().tolist() for v in model.trainable_variables],
    }


def reference_run(**kwargs) -> dict:
    """:func:`train_toy` on one device in this process: what the workers must reproduce (chapter 08)."""
    return train_toy(None, **kwargs)


def free_ports(n: int = 2) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that are free right now (chapter 08)."""
    n = check_int("n", n, 1, 64)
    sockets = []
    try:
        for _unused in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclasses.dataclass(frozen=True)
class MultiWorkerRun:
    """What each worker process reported, and the single-process run it is compared with (chapter 08)."""

    workers: list
    reference: dict
    seconds: float

    @property
    def max_abs_difference(self) -> float:
        """Largest weight difference between any worker and the single-process run."""
        ref = [np.asarray(w) for w in self.reference["weights"]]
        return max(max_abs_difference([np.asarray(w) for w in r["weights"]], ref) for r in self.workers)

    @property
    def workers_agree(self) -> bool:
        """Whether all workers hold bit-identical weights (they apply the same all-reduced sum)."""
        first = self.workers[0]["weights"]
        return all(r["weights"] == first for r in self.workers[1:])

    def __str__(self) -> str:
        run_h, replicas_h, losses_h, norms_h = _("run"), _("replicas"), _("losses per step"), _("grad norms")
        rows = [f"{pad(run_h, 22)} {pad(replicas_h, 8, '>')}  {pad(losses_h, 28)} {norms_h}"]
        named = [(_("worker {i}").format(i=i), r) for i, r in enumerate(self.workers)]
        for name, r in [*named, (_("one process"), self.reference)]:
            losses = ", ".join(f"{v:.4g}" for v in r["losses"])
            norms = ", ".join(f"{v:.4g}" for v in r["grad_norms"])
            rows.append(f"{pad(name, 22)} {r['replicas']:>8}  {losses:<28} {norms}")
        rows.append(_("workers hold identical weights: {agree}; max |w_worker - w_one_process| = {difference}").format(
            agree=self.workers_agree, difference=rounding_bound(self.max_abs_difference)))
        return "\n".join(rows)


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a killed process always exits
            pass


def _worker_command(kwargs: dict) -> tuple[list[str], dict, str]:
    """The command line, base environment and folder that start one worker process."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gradlab/
    root = os.path.dirname(package)  # the folder that holds the gradlab package
    env = {k: v for k, v in os.environ.items() if k != LOGICAL_CPUS_ENV}
    # CPU only: on a GPU machine two workers would otherwise both claim every GPU.
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distribute_worker.py")
    return [sys.executable, worker, json.dumps(kwargs)], env, root


def _worker_result(i: int, p: subprocess.Popen, left: float, timeout: float) -> dict:
    """Worker ``i``'s JSON result, waiting at most ``left`` seconds; a RuntimeError says what went wrong."""
    try:
        out, err = p.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"worker {i} did not finish within timeout={timeout:g} s") from None
    if p.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-5:])
        raise RuntimeError(f"worker {i} exited with code {p.returncode}:\n{tail}")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"worker {i} printed no JSON result; stdout: {out[-300:]!r}")
    return json.loads(lines[-1])


@renamed_keywords(clip_norm="clip")
def run_workers(num_workers: int = 2, *, steps: int = 3, batch: int = 16, learning_rate: float = 0.1,
                clip=0.5, seed: int = 0, timeout: float = 120.0, progress: bool | None = None) -> MultiWorkerRun:
    """Start ``num_workers`` real ``MultiWorkerMirroredStrategy`` processes on 127.0.0.1 (chapter 08).

    Each worker is ``python gradlab/train/distribute_worker.py`` with its own ``TF_CONFIG``
    (the cluster of free local ports, its task index). They run :func:`train_toy` together,
    each on its slice of every global batch, and print their results as one JSON line. The
    workers are killed when they exceed ``timeout`` seconds or anything fails; the result
    holds every worker's report and :func:`reference_run` in this process. ``clip`` is
    :func:`train_toy`'s. ``progress`` (``None``: on in a notebook) shows a bar with one stage per
    worker that has reported and one for the run in this process (``2 workers started``,
    ``worker 0``, ..., ``one process``).
    """
    num_workers = check_int("num_workers", num_workers, 1, 8)
    timeout = check_positive("timeout", timeout)
    progress = check_progress(progress)
    kwargs = dict(steps=steps, batch=batch, learning_rate=learning_rate, clip=core.check_clip(clip), seed=seed)
    if batch % num_workers:
        raise ValueError(f"batch must be divisible by num_workers={num_workers}; got {batch}")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(num_workers)]}
    command, env_base, root = _worker_command(kwargs)
    procs = []
    with Progress(num_workers + 1, _("multi-worker training"), enabled=progress) as bar:
        start = time.perf_counter()
        try:
            for i in range(num_workers):
                task = {"cluster": cluster, "task": {"type": "worker", "index": i}}
                procs.append(subprocess.Popen(command, env=dict(env_base, TF_CONFIG=json.dumps(task)),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root))
            bar.update(0, note=_("{n} workers started").format(n=num_workers))
            outputs = []
            for i, p in enumerate(procs):
                left = max(1.0, timeout - (time.perf_counter() - start))
                outputs.append(_worker_result(i, p, left, timeout))
                bar.update(note=_("worker {i}").format(i=i))
        finally:
            _stop(procs)
        seconds = time.perf_counter() - start
        reference = reference_run(**kwargs)
        bar.update(note=_("one process"))
    return MultiWorkerRun(outputs, reference, seconds)
