"""Training loops and training steps built on the core (chapters 01, 03, 04 and 08).

Pure computation: TensorFlow and Keras in, NumPy numbers and small dataclasses out.

* :func:`train_steps` trains any Keras model on one batch for a few steps, watching every step
  (the loss, the global gradient norm, ``None`` gradients), and stops at the first NaN/inf.
  :func:`train_mlp` is its view for Dense stacks that records every layer's signal.
* :func:`make_train_step` builds the complete custom training step of chapter 03: one
  ``tf.function`` with global-norm clipping, a non-finite check that skips the update, and
  per-layer gradient norms, also under a ``tf.distribute`` strategy (chapter 08).

Both use :mod:`gradlab.core` for the inputs, the loss (``sample_weight`` included), loss
scaling, clipping, the update and the state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_int, check_positive
from ..i18n import _, join_list
from ..progress import Progress
from ..reports.gradients import dense_signal_pass
from ..reports.verdict import judge

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "TrainStep",
    "TrainingHistory",
    "TrainingRun",
    "layer_names",
    "make_train_step",
    "train_mlp",
    "train_steps",
]


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3g}"


# ----------------------------------------------------------------------------- short training runs
@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What :func:`train_steps` recorded, one entry per step taken (chapter 04)."""

    losses: tuple[float, ...]
    global_norms: tuple[float, ...]
    none_gradients: tuple[str, ...]
    stopped_at: int | None
    steps: int
    #: With ``monitor_signals``: each step's hidden-Dense signal norms, input side first.
    signal_norms: tuple = ()

    @property
    def final_loss(self) -> float:
        return self.losses[-1]

    def first_below(self, value: float) -> int | None:
        """The first step (1-based) whose loss is below ``value``, or ``None``."""
        for i, loss in enumerate(self.losses, 1):
            if loss < value:
                return i
        return None

    def __str__(self) -> str:
        finite = [g for g in self.global_norms if math.isfinite(g)]
        lines = [_("TrainingRun: {taken} of {steps} steps · loss {first} → {last} · largest gradient norm "
                   "{largest}").format(taken=len(self.losses), steps=self.steps, first=_fmt(self.losses[0]),
                                       last=_fmt(self.losses[-1]), largest=_fmt(max(finite)) if finite else "NaN")]
        if self.stopped_at is not None:
            lines.append(_("  stopped at step {step}: the loss or a gradient is NaN/inf").format(step=self.stopped_at))
        if self.none_gradients:
            lines.append(_("  None gradients (not trained): {paths}").format(paths=join_list(self.none_gradients)))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _progress_line(i: int, steps: int, loss: float, norm: float) -> str:
    done = int(20 * i / steps)
    return _("[{bar}] step {i:>4}/{steps}  loss {loss}  grad norm {norm}").format(
        bar="#" * done + "." * (20 - done), i=i, steps=steps, loss=f"{loss:.4g}", norm=f"{norm:.3g}")


def train_steps(
    model,
    x,
    y,
    *,
    optimizer,
    steps: int = 100,
    loss_fn: Callable | None = None,
    sample_weight=None,
    clip_global_norm: float | None = None,
    clip=None,
    stop_on_nonfinite: bool = True,
    stop_on_none: bool = False,
    monitor_signals: bool = False,
    progress: bool | Progress = False,
    progress_every: int | None = None,
) -> TrainingRun:
    """Train ``model`` on the batch ``(x, y)`` for ``steps`` steps, watching every step (chapter 04).

    The one monitored training loop of gradlab (:func:`train_mlp` is a view of it). The loss
    is ``loss_fn(y, y_pred)``, else the model's compiled loss, else the mean squared error in
    the model's dtype, plus ``model.losses`` (:func:`gradlab.core.resolve_loss`);
    ``sample_weight`` weighs the examples as ``fit`` does. ``x`` and ``y`` may be NumPy arrays of
    any float dtype (converted as ``fit`` converts them); NaN/inf in the data is a ``ValueError``
    about the data. An eager tape first finds the variables whose gradient is ``None``; they are
    left out of the updates (with ``stop_on_none`` the run stops there). That probe is a
    training-mode pass, so everything it touches is put back: ``steps=n`` moves BatchNorm
    statistics, dropout seeds and trackers exactly as ``n`` steps of ``fit``. An optimizer
    already built for another model's variables is a ``ValueError``.
    Each step clips (``clip_global_norm=t`` is ``clip=("global_norm", t)``; any mode of
    :func:`gradlab.clip_gradients` works) and, with ``stop_on_nonfinite``, stops at the first
    NaN/inf loss or gradient *without* applying that step. A ``mixed_float16`` model trains as
    in ``fit``: its optimizer is wrapped in a ``LossScaleOptimizer`` unless it is one, the loss
    is scaled and a step whose scaled float16 gradients overflow is skipped by the optimizer
    (which lowers its scale) instead of stopping the run. Each step's loss (before its update)
    and global gradient norm (before clipping, float64, unscaled) are recorded.

    ``progress=True`` prints a line every ``progress_every`` steps; a :class:`gradlab.progress.Progress`
    is updated once per step instead (the caller owns and closes it).

    The steps run as one ``tf.function``; with ``monitor_signals`` they run eagerly through
    :func:`gradlab.reports.gradients.dense_signal_pass` and record every hidden Dense layer's signal norm
    (Dense models only). The model is trained in place; build a fresh optimizer for each model.
    """
    core.check_model(model)
    loss = core.resolve_loss(model, loss_fn)
    optimizer = core.fit_optimizer(model, optimizer)
    steps = check_int("steps", steps, 1, 100_000)
    clip = core.check_clip(clip)
    bar, progress = (progress, False) if isinstance(progress, Progress) else (None, progress)
    if clip_global_norm is not None:
        clip_global_norm = check_positive("clip_global_norm", clip_global_norm)
        if clip is not None:
            raise ValueError("give clip_global_norm or clip, not both")
        clip = ("global_norm", clip_global_norm)
    for flag_name, flag in (("stop_on_nonfinite", stop_on_nonfinite), ("stop_on_none", stop_on_none),
                            ("monitor_signals", monitor_signals), ("progress", progress)):
        _check_flag(flag_name, flag)
    if progress_every is not None:
        progress_every = check_int("progress_every", progress_every, 1)
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    if not model.built:
        model(tf.nest.map_structure(lambda t: t[:1], x))
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model {model.name!r} has no trainable variables: there is nothing to train")
    data = core.data_problems(x, y)
    if data:
        raise ValueError("the data is not finite: " + "; ".join(data) +
                         ". Clean the batch first (this is a data problem, not a model problem)")
    scaled = core.loss_scale(optimizer) is not None
    core.check_optimizer(optimizer, variables)
    # The probe that finds the None gradients is a training-mode pass: put everything back
    # (BatchNorm moving statistics, dropout seed, trackers), so that n steps here are n of fit.
    saved = core.snapshot(model, optimizer)
    try:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss.check(y, y_pred, sw)
            first_loss = loss(x, y, y_pred, True, sw)
        grads = core.compute_gradients(tape, first_loss, variables, optimizer)
    finally:
        core.restore(saved)
    none = tuple(core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None)
    trainable = [v for v, g in zip(variables, grads, strict=True) if g is not None]
    if (stop_on_none and none) or not trainable:
        gnorm = float(core.global_norm(grads).numpy())
        return TrainingRun((float(first_loss.numpy()),), (gnorm,), none, None, int(steps))
    if not optimizer.built:
        optimizer.build(trainable)

    @tf.function
    def step(x, y, sw):
        with tf.GradientTape() as tape:
            value = loss(x, y, model(x, training=True), True, sw)
        grads = core.compute_gradients(tape, value, trainable, optimizer)
        out = core.apply_update(optimizer, grads, trainable, clip=clip, check_finite=stop_on_nonfinite)
        return value, out["global_norm"]

    def monitored(x, y, sw):
        p = dense_signal_pass(model, x, y, loss=loss, training=True, optimizer=optimizer, sample_weight=sw)
        index = {id(v): i for i, v in enumerate(p.variables)}
        grads = [p.grads[index[id(v)]] for v in trainable]
        signal = np.array([core.true_norm(g) if g is not None else 0.0 for g in p.signals], dtype=np.float64)
        norm = core.global_norm(grads)
        if stop_on_nonfinite and not scaled and not (
                math.isfinite(float(p.loss.numpy())) and math.isfinite(float(norm.numpy()))):
            return p.loss, norm, signal
        core.apply_update(optimizer, grads, trainable, clip=clip, check_finite=stop_on_nonfinite)
        return p.loss, norm, signal

    every = progress_every or max(1, steps // 5)
    losses: list[float] = []
    norms: list[float] = []
    signals: list[np.ndarray] = []
    stopped = None
    for i in range(1, int(steps) + 1):
        if monitor_signals:
            value, gnorm, signal = monitored(x, y, sw)
            signals.append(signal)
        else:
            value, gnorm = step(x, y, sw)
        losses.append(float(value.numpy()))
        norms.append(float(gnorm.numpy()))
        finite = math.isfinite(losses[-1]) and (math.isfinite(norms[-1]) or scaled)
        if bar is not None:
            bar.update()
        if progress and (i % every == 0 or i == steps or not finite):
            print(_progress_line(i, steps, losses[-1], norms[-1]))
        if stop_on_nonfinite and not finite:
            stopped = i
            if progress:
                print(_("stopped at step {step}: the loss or a gradient is not finite").format(step=i))
            break
    return TrainingRun(tuple(losses), tuple(norms), none, stopped, int(steps), tuple(signals))


@dataclasses.dataclass
class TrainingHistory:
    """What :func:`train_mlp` recorded: one entry per step (chapter 01)."""

    losses: list[float]
    signal_norms: list[np.ndarray]
    statuses: list[str]
    global_norms: list[float]
    stopped_at: int | None = None

    @property
    def signal_matrix(self) -> np.ndarray:
        """``[steps, layers]`` array of the per-layer signal norms."""
        return np.vstack(self.signal_norms)


def train_mlp(model, x, y, *, optimizer, steps: int = 50, clip=None, stop_on_nonfinite: bool = True,
              progress: bool = True, progress_every: int | None = None, sample_weight=None) -> TrainingHistory:
    """A short training run that monitors every Dense layer's gradient signal (chapter 01).

    A thin view of :func:`train_steps` with ``monitor_signals=True``: each step takes one tape
    over the whole batch (the pass of :func:`gradlab.gradient_report`), records the loss, the
    per-layer signal norms and the global gradient norm, clips the gradients with ``clip`` and
    applies them with ``optimizer`` (a mixed-precision model gets its loss scaled, as in
    ``fit``). A non-finite loss or gradient stops the run (``stop_on_nonfinite``) before that
    step is applied, because clipping cannot repair NaN. With ``progress`` a text progress bar
    is printed a few times during the run; ``sample_weight`` weighs the examples as ``fit`` does.
    """
    run = train_steps(model, x, y, optimizer=optimizer, steps=steps, clip=clip,
                      stop_on_nonfinite=stop_on_nonfinite, monitor_signals=True,
                      progress=progress, progress_every=progress_every, sample_weight=sample_weight)
    return TrainingHistory(
        losses=list(run.losses),
        signal_norms=[np.asarray(s, dtype=np.float64) for s in run.signal_norms],
        statuses=[judge(s).status for s in run.signal_norms],
        global_norms=list(run.global_norms),
        stopped_at=run.stopped_at,
    )


# ----------------------------------------------------------------------------- custom training step
def _check_model_for_step(model) -> None:
    core.check_model(model, built=True)
    if not model.trainable_variables:
        raise ValueError(f"model {model.name!r} has no trainable variables")


def layer_names(model) -> list[str]:
    """Names of the layers whose gradient norms the chapter-03 tools report, in order."""
    _check_model_for_step(model)
    return [name for name, _idx in core.layer_groups(model)]


class TrainStep:
    """What :func:`make_train_step` returns: ``step(x, y, sample_weight=None)`` converts its
    arguments as ``fit`` does (NumPy float64 to float32, shapes checked against the model) and
    calls the ``tf.function`` :attr:`function`. ``experimental_get_tracing_count()`` is the
    function's."""

    def __init__(self, model, call, function, python_function, loss=None):
        self.model = model
        self._call = call
        self.function = function
        self.python_function = python_function
        self._loss = loss
        self._checked: set = set()

    def __call__(self, x, y, sample_weight=None):
        if not isinstance(x, tf.distribute.DistributedValues):
            x, y = core.coerce_batch(self.model, x, y)
            sample_weight = core.coerce_sample_weight(sample_weight, y)
            key = tuple(tuple(t.shape[1:]) for t in tf.nest.flatten((x, y))) + (sample_weight is None,)
            if self._loss is not None and key not in self._checked:
                self._check_eagerly(x, y, sample_weight)
                self._checked.add(key)
        return self._call(x, y, sample_weight)

    def _check_eagerly(self, x, y, sample_weight) -> None:
        """Run the step's loss and gradients once eagerly, before the ``tf.function`` traces, so
        that a mistake is a short ``ValueError`` (not one wrapped in an "in user code" traceback):
        a ``y`` that would broadcast or does not fit the loss, a ``loss_fn`` that returns one
        value per example, a variable whose gradient is ``None``. Everything is put back."""
        model = self.model
        n = core.example_count(x)
        if model.distribute_strategy.num_replicas_in_sync > 1:
            # one example in inference mode (no state changes): the shape checks only
            saved = core.snapshot(model, weights=False)
            try:
                pred = model(tf.nest.map_structure(lambda t: t[:1], x), training=False)
            finally:
                core.restore(saved)
            self._loss.check(y, tf.nest.map_structure(
                lambda p: tf.TensorSpec([n, *p.shape[1:]], p.dtype), pred), sample_weight)
            return
        variables = list(model.trainable_variables)
        saved = core.snapshot(model)
        try:
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                self._loss.check(y, pred, sample_weight)
                value = self._loss(x, y, pred, True, sample_weight)
            grads = tape.gradient(value, variables)
        finally:
            core.restore(saved)
        missing = [core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None]
        if missing:
            raise ValueError(
                f"the loss does not depend on {', '.join(missing)} (its gradient is None), and "
                "make_train_step updates every trainable variable: connect it to the output, or "
                "freeze it (layer.trainable = False) before make_train_step; gl.inspect_training_step "
                "names the cause"
            )

    def experimental_get_tracing_count(self) -> int:
        return self.function.experimental_get_tracing_count()

    def __repr__(self) -> str:
        return f"TrainStep({self.model.name}: traced {self.experimental_get_tracing_count()} times)"


def make_train_step(
    model,
    optimizer,
    *,
    loss_fn: Callable | None = None,
    clip_global_norm: float | None = None,
    check_finite: bool = True,
    jit_compile: bool = False,
    reduce_retracing: bool = False,
):
    """One ``tf.function`` training step with clipping, a non-finite check and per-layer norms (chapter 03).

    ``step(x, y)`` (or ``step(x, y, sample_weight)``) runs the model on ``x`` under a
    ``GradientTape``, takes the gradient of the loss (``loss_fn(y, y_pred)``, else the
    model's compiled loss, else the mean squared error, plus ``model.losses``; ``sample_weight``
    weighs the examples as ``fit`` does), rescales the gradients together when their global
    norm exceeds ``clip_global_norm``, and applies them with ``optimizer``. With
    ``check_finite=True`` a step whose gradients hold NaN or inf is skipped (the weights stay as
    they were) instead of poisoning the weights. The check is a tensor computed in the graph,
    so it also works under ``jit_compile=True``, where ``tf.debugging.check_numerics`` and
    ``assert_all_finite`` are silently dropped.

    Returns a dict of tensors: ``loss``, ``global_norm`` (before clipping), ``clipped_norm``
    (what was applied), ``finite``, ``applied`` and ``grad_norms`` (per layer name, before
    clipping). The model must be built first; the optimizer is built here, so that no variable
    is created inside the function. Every call returns a *new* ``tf.function``, so a new model
    needs a new step (a step traced for one model keeps using that model's variables).

    Before the first trace for a new input shape, ``step(x, y)`` runs the loss and the
    gradients once eagerly (everything put back afterwards), so that a mistake is a short
    ``ValueError`` naming the argument instead of an error wrapped in the ``tf.function``'s
    "in user code" traceback: a ``y`` that does not fit the loss (one-hot ``y`` for a
    ``SparseCategoricalCrossentropy``, labels outside the classes, a shape that would
    broadcast), a ``loss_fn`` that returns one value per example, a variable whose gradient is
    ``None``. An optimizer built for another model's variables is a ``ValueError`` here.

    A model built under a ``tf.distribute`` strategy with several replicas (chapter 08) gets a
    step that runs on every replica (``strategy.run``): a whole global batch is split evenly
    over the replicas (or pass values already distributed by the strategy), each replica's loss
    is its share of the global-batch loss (divided by the number of replicas, as Keras's losses
    are), and the gradients are summed across replicas *before* the norms, the clipping and the
    finite check, so the update equals a single-device step on the whole batch. ``loss`` is
    then the global-batch loss.
    """
    _check_model_for_step(model)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer, got {type(optimizer).__name__}")
    loss = core.resolve_loss(model, loss_fn)
    clip_global_norm = check_positive("clip_global_norm", clip_global_norm, allow_none=True)
    clip = None if clip_global_norm is None else ("global_norm", clip_global_norm)
    for name, flag in (("check_finite", check_finite), ("jit_compile", jit_compile),
                       ("reduce_retracing", reduce_retracing)):
        _check_flag(name, flag)
    optimizer = core.fit_optimizer(model, optimizer)  # mixed_float16: a LossScaleOptimizer, as compile
    variables = list(model.trainable_variables)
    core.check_optimizer(optimizer, variables)  # built for another model: a clear ValueError now
    strategy = model.distribute_strategy  # chapter 08: the strategy the model was built under
    replicas = strategy.num_replicas_in_sync
    if not optimizer.built:
        with strategy.scope():
            optimizer.build(variables)
    groups = core.layer_groups(model)

    def train_step(x, y, sample_weight=None):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss.check(y, y_pred)  # at trace time: a y that would broadcast is a ValueError
            # Under a strategy each replica's value is its share of the global-batch loss (the
            # core's losses divide by the replicas, as Keras's do): their sum is the global mean.
            value = loss(x, y, y_pred, True, sample_weight)
        grads = core.compute_gradients(tape, value, variables, optimizer)  # loss scaled, unscaled
        if any(g is None for g in grads):
            missing = [core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None]
            raise ValueError(f"the loss does not depend on these variables: {missing}")
        out = core.apply_update(optimizer, grads, variables, clip=clip, check_finite=check_finite)
        out["loss"] = value
        out["grad_norms"] = core.group_norms(out.pop("grads"), groups)
        return out

    if replicas == 1:
        fn = tf.function(train_step, jit_compile=jit_compile, reduce_retracing=reduce_retracing)
        return TrainStep(model, fn, fn, train_step, loss)

    def distributed_step(x, y, sample_weight=None):
        args = (x, y) if sample_weight is None else (x, y, sample_weight)
        per_replica = strategy.run(train_step, args=args)
        out = tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], per_replica)
        out["loss"] = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica["loss"], axis=None)
        return out

    step = tf.function(distributed_step, jit_compile=jit_compile, reduce_retracing=reduce_retracing)

    def split_and_step(x, y, sample_weight=None):
        """Split a whole global batch evenly over the replicas, then run the step."""
        if not isinstance(x, tf.distribute.DistributedValues):
            parts = core.split_batch(strategy, x, y, sample_weight)
            return step(*parts)
        return step(x, y, sample_weight)

    return TrainStep(model, split_and_step, step, train_step, loss)
