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
from .._validate import check_int, renamed_keywords
from ..i18n import _, join_list
from ..progress import Progress, check_progress
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


@renamed_keywords(loss_fn="loss", clip_global_norm="clip", progress_every="progress")
def train_steps(
    model,
    x,
    y,
    *,
    optimizer,
    steps: int = 100,
    loss: Callable | None = None,
    sample_weight=None,
    clip=None,
    stop_on_nonfinite: bool = True,
    stop_on_none: bool = False,
    monitor_signals: bool = False,
    progress: bool | Progress | None = None,
) -> TrainingRun:
    """Train ``model`` on the batch ``(x, y)`` for ``steps`` steps, watching every step (chapter 04).

    The one monitored training loop of gradlab (:func:`train_mlp` is a view of it); each step
    is the core's step (:func:`gradlab.core.train_step`). The loss is ``loss(y, y_pred)``, else
    the model's compiled loss, else the mean squared error in the model's dtype, plus
    ``model.losses`` (:func:`gradlab.core.resolve_loss`); ``sample_weight`` weighs the examples
    as ``fit`` does. ``x`` and ``y`` may be NumPy arrays of any float dtype (converted as ``fit``
    converts them); NaN/inf in the data is a ``ValueError`` about the data. An eager tape first
    finds the variables whose gradient is ``None``; they are left out of the updates (with
    ``stop_on_none`` the run stops there). That probe is a training-mode pass, so everything it
    touches is put back: ``steps=n`` moves BatchNorm statistics, dropout seeds and trackers
    exactly as ``n`` steps of ``fit``. An optimizer already built for another model's variables
    is a ``ValueError``. Each step clips with ``clip`` (a number ``t`` clips the global norm at
    ``t``; any ``(mode, t)`` of :func:`gradlab.clip_gradients` works) and, with
    ``stop_on_nonfinite``, stops at the first NaN/inf loss or gradient *without* applying that
    step. A ``mixed_float16`` model trains as in ``fit``: its optimizer is wrapped in a
    ``LossScaleOptimizer`` unless it is one, the loss is scaled and a step whose scaled float16
    gradients overflow is skipped by the optimizer (which lowers its scale) instead of stopping
    the run. Each step's loss (before its update) and global gradient norm (before clipping,
    float64, unscaled) are recorded. ``progress`` (``None``: on in a notebook) shows a bar
    ``step k/n`` (:class:`gradlab.progress.Progress`).

    A :class:`gradlab.progress.Progress` given as ``progress`` is updated once per step instead
    (the caller owns and closes it: a self-check that trains shows its own bar).

    The steps run as one ``tf.function``; with ``monitor_signals`` they run eagerly through
    :func:`gradlab.reports.gradients.dense_signal_pass` and record every hidden Dense layer's signal norm
    (Dense models only). The model is trained in place; build a fresh optimizer for each model.
    """
    setup = _setup_run(model, x, y, optimizer=optimizer, steps=steps, loss=loss, sample_weight=sample_weight,
                       clip=clip, flags=dict(stop_on_nonfinite=stop_on_nonfinite, stop_on_none=stop_on_none,
                                             monitor_signals=monitor_signals), progress=progress)
    first_loss, grads = _probe_gradients(setup)
    variables = setup.variables
    none = tuple(core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None)
    trainable = [v for v, g in zip(variables, grads, strict=True) if g is not None]
    if (stop_on_none and none) or not trainable:
        gnorm = float(core.global_norm(grads).numpy())
        return TrainingRun((float(first_loss.numpy()),), (gnorm,), none, None, setup.steps)
    if not setup.optimizer.built:
        setup.optimizer.build(trainable)
    make = _monitored_step if monitor_signals else _compiled_step
    losses, norms, signals, stopped = _run_loop(setup, make(setup, trainable))
    return TrainingRun(tuple(losses), tuple(norms), none, stopped, setup.steps, tuple(signals))


@dataclasses.dataclass
class _Run:
    """What :func:`train_steps` validated: the inputs every stage of the run uses."""

    model: object
    x: object
    y: object
    sw: object
    loss: core.Loss
    optimizer: object
    steps: int
    clip: tuple | None
    variables: list
    stop_on_nonfinite: bool
    progress: bool | Progress

    @property
    def scaled(self) -> bool:
        return core.loss_scale(self.optimizer) is not None


def _setup_run(model, x, y, *, optimizer, steps, loss, sample_weight, clip, flags, progress) -> _Run:
    """Validation: every argument checked, the batch converted, the model built (stage 1)."""
    core.check_model(model)
    loss = core.resolve_loss(model, loss)
    optimizer = core.fit_optimizer(model, optimizer)
    steps = check_int("steps", steps, 1, 100_000)
    clip = core.check_clip(clip)
    for flag_name, flag in flags.items():
        _check_flag(flag_name, flag)
    progress = progress if isinstance(progress, Progress) else check_progress(progress)
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
    core.check_optimizer(optimizer, variables)
    return _Run(model, x, y, sw, loss, optimizer, steps, clip, variables, flags["stop_on_nonfinite"], progress)


def _probe_gradients(run: _Run):
    """The eager probe that finds the ``None`` gradients (stage 2). It is a training-mode pass,
    so everything is put back (BatchNorm moving statistics, dropout seed, trackers): n steps
    here are n of ``fit``."""
    saved = core.snapshot(run.model, run.optimizer)
    try:
        return core.loss_and_gradients(run.model, run.x, run.y, loss=run.loss, variables=run.variables,
                                       optimizer=run.optimizer, training=True, sample_weight=run.sw)
    finally:
        core.restore(saved)


def _compiled_step(run: _Run, trainable: list):
    """One ``tf.function`` of the core's whole step; returns ``(loss, global norm, ())``."""

    @tf.function
    def step(x, y, sw):
        out = core.train_step(run.model, run.optimizer, x, y, loss=run.loss, variables=trainable, clip=run.clip,
                              check_finite=run.stop_on_nonfinite, sample_weight=sw)
        return out["loss"], out["global_norm"]

    def call():
        value, norm = step(run.x, run.y, run.sw)
        return value, norm, None

    return call


def _monitored_step(run: _Run, trainable: list):
    """The eager step through :func:`dense_signal_pass`, recording each hidden Dense layer's signal."""

    def call():
        p = dense_signal_pass(run.model, run.x, run.y, loss=run.loss, training=True, optimizer=run.optimizer,
                              sample_weight=run.sw)
        index = {id(v): i for i, v in enumerate(p.variables)}
        grads = [p.grads[index[id(v)]] for v in trainable]
        signal = np.array([core.true_norm(g) if g is not None else 0.0 for g in p.signals], dtype=np.float64)
        norm = core.global_norm(grads)
        if run.stop_on_nonfinite and not run.scaled and not (
                math.isfinite(float(p.loss.numpy())) and math.isfinite(float(norm.numpy()))):
            return p.loss, norm, signal
        core.apply_update(run.optimizer, grads, trainable, clip=run.clip, check_finite=run.stop_on_nonfinite)
        return p.loss, norm, signal

    return call


def _run_loop(run: _Run, step):
    """Take the steps, record each one's loss and norm, stop at the first non-finite one (stage 3)."""
    losses: list[float] = []
    norms: list[float] = []
    signals: list[np.ndarray] = []
    stopped = None
    scaled = run.scaled
    own = not isinstance(run.progress, Progress)
    bar = Progress(run.steps, _("training steps"), enabled=run.progress) if own else run.progress
    for i in range(1, run.steps + 1):
        value, gnorm, signal = step()
        if signal is not None:
            signals.append(signal)
        losses.append(float(value.numpy()))
        norms.append(float(gnorm.numpy()))
        bar.update()
        finite = math.isfinite(losses[-1]) and (math.isfinite(norms[-1]) or scaled)
        if run.stop_on_nonfinite and not finite:
            stopped = i
            if own:
                bar.close(_("stopped at step {step}: the loss or a gradient is not finite").format(step=i))
            break
    if own:
        bar.close()
    return losses, norms, signals, stopped


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


@renamed_keywords(progress_every="progress")
def train_mlp(model, x, y, *, optimizer, steps: int = 50, clip=None, stop_on_nonfinite: bool = True,
              progress: bool | None = None, sample_weight=None) -> TrainingHistory:
    """A short training run that monitors every Dense layer's gradient signal (chapter 01).

    A thin view of :func:`train_steps` with ``monitor_signals=True``: each step takes one tape
    over the whole batch (the pass of :func:`gradlab.gradient_report`), records the loss, the
    per-layer signal norms and the global gradient norm, clips the gradients with ``clip`` and
    applies them with ``optimizer`` (a mixed-precision model gets its loss scaled, as in
    ``fit``). A non-finite loss or gradient stops the run (``stop_on_nonfinite``) before that
    step is applied, because clipping cannot repair NaN. ``progress`` (``None``: on in a
    notebook) shows a bar ``step k/n``; ``sample_weight`` weighs the examples as ``fit`` does.
    """
    run = train_steps(model, x, y, optimizer=optimizer, steps=steps, clip=clip,
                      stop_on_nonfinite=stop_on_nonfinite, monitor_signals=True,
                      progress=progress, sample_weight=sample_weight)
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
        a ``y`` that would broadcast or does not fit the loss, a ``loss`` that returns one
        value per example, a variable whose gradient is ``None``. Everything is put back."""
        model = self.model
        if model.distribute_strategy.num_replicas_in_sync > 1:  # the shape checks only
            core.check_batch(model, x, y, loss=self._loss, sample_weight=sample_weight)
            return
        variables = list(model.trainable_variables)
        saved = core.snapshot(model)
        try:
            _value, grads = core.loss_and_gradients(model, x, y, loss=self._loss, variables=variables,
                                                    training=True, sample_weight=sample_weight)
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


@renamed_keywords(loss_fn="loss", clip_global_norm="clip")
def make_train_step(
    model,
    optimizer,
    *,
    loss: Callable | None = None,
    clip=None,
    check_finite: bool = True,
    jit_compile: bool = False,
    reduce_retracing: bool = False,
):
    """One ``tf.function`` training step with clipping, a non-finite check and per-layer norms (chapter 03).

    ``step(x, y)`` (or ``step(x, y, sample_weight)``) is the core's step
    (:func:`gradlab.core.train_step`'s parts): it runs the model on ``x`` under a
    ``GradientTape``, takes the gradient of the loss (``loss(y, y_pred)``, else the model's
    compiled loss, else the mean squared error, plus ``model.losses``; ``sample_weight`` weighs
    the examples as ``fit`` does), clips with ``clip`` (a number ``t`` rescales the gradients
    together when their global norm exceeds ``t``; or any ``(mode, t)`` of
    :func:`gradlab.clip_gradients`), and applies them with ``optimizer``. With
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
    broadcast), a ``loss`` that returns one value per example, a variable whose gradient is
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
    loss = core.resolve_loss(model, loss)
    clip = core.check_clip(clip)
    for name, flag in (("check_finite", check_finite), ("jit_compile", jit_compile),
                       ("reduce_retracing", reduce_retracing)):
        _check_flag(name, flag)
    optimizer = core.fit_optimizer(model, optimizer)  # mixed_float16: a LossScaleOptimizer, as compile
    variables = list(model.trainable_variables)
    core.check_optimizer(optimizer, variables)  # built for another model: a clear ValueError now
    strategy = model.distribute_strategy  # chapter 08: the strategy the model was built under
    if not optimizer.built:
        with strategy.scope():
            optimizer.build(variables)
    train_step = _step_function(model, optimizer, loss, variables, clip, check_finite)
    options = dict(jit_compile=jit_compile, reduce_retracing=reduce_retracing)
    if strategy.num_replicas_in_sync == 1:
        fn = tf.function(train_step, **options)
        return TrainStep(model, fn, fn, train_step, loss)
    step, split_and_step = _distributed(strategy, train_step, options)
    return TrainStep(model, split_and_step, step, train_step, loss)


def _step_function(model, optimizer, loss, variables, clip, check_finite):
    """The Python step :func:`make_train_step` traces: the core's parts, with a ``None`` check
    between the gradients and the update."""
    groups = core.layer_groups(model)

    def train_step(x, y, sample_weight=None):
        # Under a strategy each replica's value is its share of the global-batch loss (the
        # core's losses divide by the replicas, as Keras's do): their sum is the global mean.
        value, grads = core.loss_and_gradients(model, x, y, loss=loss, variables=variables, optimizer=optimizer,
                                               training=True, sample_weight=sample_weight)
        if any(g is None for g in grads):
            missing = [core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None]
            raise ValueError(f"the loss does not depend on these variables: {missing}")
        out = core.apply_update(optimizer, grads, variables, clip=clip, check_finite=check_finite)
        out["loss"] = value
        out["grad_norms"] = core.group_norms(out.pop("grads"), groups)
        return out

    return train_step


def _distributed(strategy, train_step, options):
    """The step on every replica (``strategy.run``), and the call that splits a global batch first."""

    def distributed_step(x, y, sample_weight=None):
        args = (x, y) if sample_weight is None else (x, y, sample_weight)
        per_replica = strategy.run(train_step, args=args)
        out = tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], per_replica)
        out["loss"] = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica["loss"], axis=None)
        return out

    step = tf.function(distributed_step, **options)

    def split_and_step(x, y, sample_weight=None):
        """Split a whole global batch evenly over the replicas, then run the step."""
        if not isinstance(x, tf.distribute.DistributedValues):
            parts = core.split_batch(strategy, x, y, sample_weight)
            return step(*parts)
        return step(x, y, sample_weight)

    return step, split_and_step
