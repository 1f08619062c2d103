"""tf.function tracing helpers, training steps and gradient-norm callbacks (chapter 03).

Pure computation: TensorFlow and Keras in, NumPy numbers and small dataclasses out. Nothing
here imports ipywidgets (the live :class:`~gradlab.widgets.tracing.TracingLab` does).

* :class:`TraceCounter` wraps a Python function in ``tf.function`` and counts, with a
  Python side effect, how often it is traced, and what it was traced for.
* :func:`time_step` times a step function: the first call (tracing, compiling) apart from
  the steady state.
* :func:`make_train_step` builds the complete custom training step of chapter 03: one
  ``tf.function`` with global-norm clipping, a non-finite check that skips the update, and
  per-layer gradient norms.
* :class:`GradNormTrainStep` is the same logic as a Keras ``Model.train_step`` override, so
  that ``model.fit`` uses it; :class:`GradNormSequential` is a ready Sequential with it.
* :class:`GradNormLogger` is a Keras callback that records per-layer gradient norms during
  ``fit`` and plots them.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import numpy as np

from . import core
from ._env import quiet_import_tensorflow
from ._validate import check_positive as _check_positive_float

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "GradNormLogger",
    "GradNormSequential",
    "GradNormTrainStep",
    "StepTiming",
    "TraceCounter",
    "error_summary",
    "format_timings",
    "layer_names",
    "make_train_step",
    "time_step",
    "tracing_count",
]


# ----------------------------------------------------------------------------- validation
def _check_count(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an int >= {lo}; got {value!r}")
    return int(value)


def _check_model(model) -> None:
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    if not model.built:
        raise ValueError(
            "model must be built before its training step is traced, so that no variable is "
            "created inside tf.function; call model.build(input_shape) or model(x) once first"
        )
    if not model.trainable_variables:
        raise ValueError(f"model {model.name!r} has no trainable variables")


# ----------------------------------------------------------------------------- tracing
def tracing_count(fn) -> int:
    """How many times the ``tf.function`` ``fn`` has been traced (chapter 03).

    A thin, checked wrapper around ``fn.experimental_get_tracing_count()``; a
    :class:`TraceCounter` is accepted too.
    """
    if isinstance(fn, TraceCounter):
        fn = fn.function
    getter = getattr(fn, "experimental_get_tracing_count", None)
    if getter is None:
        raise ValueError(
            f"fn must be a tf.function (or a TraceCounter); got {type(fn).__name__}. "
            "A plain Python function is never traced."
        )
    return int(getter())


def _describe(value) -> str:
    """A short description of one argument, as a trace sees it."""
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "shape") and hasattr(value, "dtype"):
        shape = "[" + ", ".join("None" if d is None else str(d) for d in value.shape) + "]"
        return f"{value.dtype.name if hasattr(value.dtype, 'name') else value.dtype}{shape}"
    if isinstance(value, float):
        return f"python float {value:.6g}"
    return f"python {type(value).__name__} {value!r}"[:60]


class TraceCounter:
    """A ``tf.function`` that counts its own traces with a Python side effect (chapter 03).

    ``TraceCounter(fn, **tf_function_kwargs)`` wraps ``fn`` in ``tf.function``. Python code in
    ``fn`` runs only while TensorFlow traces it, so a counter incremented there counts traces,
    not calls: :attr:`count` grows only when a call retraces, and :attr:`log` says which
    arguments each trace was made for. :attr:`calls` counts every call.

    >>> tc = TraceCounter(lambda x, a: x * a)
    >>> _ = tc(tf.constant(1.0), 0.5); _ = tc(tf.constant(1.0), 0.6)
    >>> tc.count   # two Python floats -> two traces
    2
    """

    def __init__(self, fn: Callable, **function_kwargs):
        if not callable(fn) or hasattr(fn, "experimental_get_tracing_count"):
            raise ValueError(
                "fn must be a plain Python function (TraceCounter applies tf.function itself); "
                f"got {type(fn).__name__}"
            )
        self.python_function = fn
        self.count = 0
        self.calls = 0
        self.log: list[str] = []

        @functools.wraps(fn)
        def traced(*args, **kwargs):
            self.count += 1
            parts = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
            self.log.append(", ".join(parts))
            return fn(*args, **kwargs)

        self.function = tf.function(traced, **function_kwargs)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)

    @property
    def tracing_count(self) -> int:
        """TensorFlow's own count, ``experimental_get_tracing_count()``; equals :attr:`count`."""
        return int(self.function.experimental_get_tracing_count())

    def __repr__(self) -> str:
        name = getattr(self.python_function, "__name__", "fn")
        calls = f"{self.calls} call{'' if self.calls == 1 else 's'}"
        return f"TraceCounter({name}: {calls}, {self.count} trace{'' if self.count == 1 else 's'})"


def error_summary(err: BaseException) -> str:
    """``"TypeName: the one line that says what went wrong"`` for a TensorFlow error (chapter 03).

    TensorFlow errors raised from inside a ``tf.function`` carry file paths and graph node
    names around the message. This keeps the message line, so a notebook can print a stable,
    readable summary of an error it catches.
    """
    if not isinstance(err, BaseException):
        raise ValueError(f"err must be an exception, got {type(err).__name__}")
    name = type(err).__name__
    for raw in str(err).splitlines():
        line = raw.strip()
        if (
            not line
            or line in ("in user code:", "Graph execution error:")
            or line.startswith(("File ", "Detected at node", "[[{{node", "See https"))
            or raw.startswith("        ")  # source lines quoted under a File line
        ):
            continue
        if line.startswith(f"{name}: "):
            line = line[len(name) + 2:]
        line = line.split(" [Op:")[0].split(" See https")[0].strip()
        return f"{name}: {line}"
    return name


# ----------------------------------------------------------------------------- timing
@dataclasses.dataclass(frozen=True)
class StepTiming:
    """Wall-clock times of one step function, in seconds (chapter 03).

    ``first_s`` is the first call (for a ``tf.function``: tracing, graph building and, with
    ``jit_compile=True``, XLA compilation, plus one run). ``steady_s`` is the median of the
    ``times_s`` measured after the warm-up calls.
    """

    name: str
    first_s: float
    steady_s: float
    times_s: np.ndarray

    @property
    def first_ms(self) -> float:
        return 1e3 * self.first_s

    @property
    def steady_ms(self) -> float:
        return 1e3 * self.steady_s

    def __repr__(self) -> str:
        return f"StepTiming({self.name}: first {self.first_ms:.3g} ms, steady {self.steady_ms:.3g} ms)"


def _block(out) -> None:
    """Wait for every tensor in ``out`` (copy it to the host), so a timing includes the work."""
    for t in tf.nest.flatten(out):
        if hasattr(t, "numpy"):
            t.numpy()


def time_step(fn: Callable, args: Sequence = (), *, warmup: int = 3, repeats: int = 20,
              name: str | None = None) -> StepTiming:
    """Time ``fn(*args)``: the first call on its own, then the median of ``repeats`` calls (chapter 03).

    Call it on a function that has not run yet, so the first call includes tracing. Between
    the first call and the timed ones, ``warmup`` untimed calls let caches settle. Every call's
    outputs are copied to the host, so the time includes the computation, not just its launch.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args must be a tuple or list of arguments, got {type(args).__name__}")
    warmup = _check_count("warmup", warmup, 0)
    repeats = _check_count("repeats", repeats, 1)
    t0 = time.perf_counter()
    _block(fn(*args))
    first = time.perf_counter() - t0
    for _ in range(warmup):
        _block(fn(*args))
    times = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        _block(fn(*args))
        times[i] = time.perf_counter() - t0
    label = name or getattr(fn, "__name__", None) or type(fn).__name__
    return StepTiming(str(label), first, float(np.median(times)), times)


def format_timings(timings: Sequence[StepTiming], baseline: str | None = None) -> str:
    """A plain-text table of step times and speed-ups against ``baseline`` (chapter 03).

    ``baseline`` is the ``name`` of one timing (default: the first). Speed-up is the
    baseline's steady-state time divided by each row's.
    """
    timings = list(timings)
    if not timings or not all(isinstance(t, StepTiming) for t in timings):
        raise ValueError("timings must be a non-empty list of StepTiming (from time_step)")
    names = [t.name for t in timings]
    base_name = names[0] if baseline is None else baseline
    if base_name not in names:
        raise ValueError(f"baseline must be one of {names}; got {baseline!r}")
    base = timings[names.index(base_name)]
    width = max(8, *(len(n) for n in names))
    rows = [f"{'mode':<{width}}  {'first call':>11}  {'steady step':>11}  {'speed-up':>8}  {'first/steady':>12}"]
    for t in timings:
        rows.append(
            f"{t.name:<{width}}  {t.first_ms:>8.3g} ms  {t.steady_ms:>8.3g} ms  "
            f"{base.steady_s / t.steady_s:>7.3g}x  {t.first_s / t.steady_s:>11.3g}x"
        )
    return "\n".join(rows)


# ----------------------------------------------------------------------------- per-layer grouping
def _layer_groups(model) -> list[tuple[str, list[int]]]:
    """``(layer name, indices into model.trainable_variables)`` for each layer with weights."""
    index = {id(v): i for i, v in enumerate(model.trainable_variables)}
    groups, seen = [], set()
    for layer in core.leaf_layers(model):  # the one layer walker: nested models expanded
        idx = [index[id(v)] for v in layer.trainable_weights if id(v) in index and id(v) not in seen]
        if idx:
            seen.update(id(model.trainable_variables[i]) for i in idx)
            groups.append((layer.name, idx))
    rest = [i for i, v in enumerate(model.trainable_variables) if id(v) not in seen]
    if rest:
        groups.append(("other", rest))
    return groups


def layer_names(model) -> list[str]:
    """Names of the layers whose gradient norms the chapter-03 tools report, in order."""
    _check_model(model)
    return [name for name, _ in _layer_groups(model)]


def _group_norms(grads, groups) -> dict:
    """Per-layer gradient norms (float64, ``None`` gradients skipped, ``IndexedSlices`` summed per row)."""
    return {name: core.global_norm([grads[i] for i in idx]) for name, idx in groups}


class TrainStep:
    """What :func:`make_train_step` returns: ``step(x, y)`` converts ``x`` and ``y`` as ``fit``
    does (NumPy float64 to float32, shapes checked against the model) and calls the
    ``tf.function`` :attr:`function`. ``experimental_get_tracing_count()`` is the function's."""

    def __init__(self, model, call, function, python_function, loss=None):
        self.model = model
        self._call = call
        self.function = function
        self.python_function = python_function
        self._loss = loss
        self._checked: set = set()

    def __call__(self, x, y):
        if not isinstance(x, tf.distribute.DistributedValues):
            x, y = core.coerce_batch(self.model, x, y)
            key = tuple(tuple(t.shape[1:]) for t in tf.nest.flatten((x, y)))
            if self._loss is not None and key not in self._checked:
                self._check_eagerly(x, y)
                self._checked.add(key)
        return self._call(x, y)

    def _check_eagerly(self, x, y) -> None:
        """Run the step's loss and gradients once eagerly, before the ``tf.function`` traces, so
        that a mistake is a short ``ValueError`` (not one wrapped in an "in user code" traceback):
        a ``y`` that would broadcast or does not fit the loss, a ``loss_fn`` that returns one
        value per example, a variable whose gradient is ``None``. Every variable is put back."""
        model = self.model
        n = int(tf.nest.flatten(x)[0].shape[0])
        if model.distribute_strategy.num_replicas_in_sync > 1:
            # one example in inference mode (no state changes): the shape checks only
            pred = model(tf.nest.map_structure(lambda t: t[:1], x), training=False)
            self._loss.check(y, tf.nest.map_structure(
                lambda p: tf.TensorSpec([n, *p.shape[1:]], p.dtype), pred))
            return
        variables = list(model.trainable_variables)
        saved = core.snapshot(model)
        try:
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                self._loss.check(y, pred)
                value = self._loss(x, y, pred, True)
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


# ----------------------------------------------------------------------------- custom loop
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

    ``step(x, y)`` runs the model on ``x`` under a ``GradientTape``, takes the gradient of
    ``loss_fn(y, y_pred)`` (default: mean squared error, as in the source text), rescales the
    gradients together when their global norm exceeds ``clip_global_norm``, and applies them
    with ``optimizer``. With ``check_finite=True`` a step whose gradients hold NaN or inf is
    skipped (the weights stay as they were) instead of poisoning the weights. The check is a
    tensor computed in the graph, so it also works under ``jit_compile=True``, where
    ``tf.debugging.check_numerics`` and ``assert_all_finite`` are silently dropped.

    Returns a dict of tensors: ``loss``, ``global_norm`` (before clipping), ``clipped_norm``
    (what was applied), ``finite``, ``applied`` and ``grad_norms`` (per layer name, before
    clipping). The model must be built first; the optimizer is built here, so that no variable
    is created inside the function. Every call returns a *new* ``tf.function``, so a new model
    needs a new step (a step traced for one model keeps using that model's variables).

    Before the first trace for a new input shape, ``step(x, y)`` runs the loss and the
    gradients once eagerly (every variable put back afterwards), so that a mistake is a short
    ``ValueError`` naming the argument instead of an error wrapped in the ``tf.function``'s
    "in user code" traceback: a ``y`` that does not fit the loss (one-hot ``y`` for a
    ``SparseCategoricalCrossentropy``, labels outside the classes, a shape that would
    broadcast), a ``loss_fn`` that returns one value per example, a variable whose gradient is
    ``None``. An optimizer built for another model's variables is a ``ValueError`` here.

    A model built under a ``tf.distribute`` strategy with several replicas (chapter 08) gets a
    step that runs on every replica (``strategy.run``): a whole global batch is split evenly
    over the replicas (or pass values already distributed by the strategy), each replica's loss
    is divided by the number of replicas, and the gradients are summed across replicas
    *before* the norms, the clipping and the finite check, so the update equals a
    single-device step on the whole batch. ``loss`` is then the global-batch loss.
    """
    _check_model(model)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer, got {type(optimizer).__name__}")
    loss = core.resolve_loss(model, loss_fn)
    clip_global_norm = _check_positive_float("clip_global_norm", clip_global_norm, allow_none=True)
    clip = None if clip_global_norm is None else ("global_norm", clip_global_norm)
    for name, flag in (("check_finite", check_finite), ("jit_compile", jit_compile),
                       ("reduce_retracing", reduce_retracing)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    optimizer = core.fit_optimizer(model, optimizer)  # mixed_float16: a LossScaleOptimizer, as compile
    variables = list(model.trainable_variables)
    core.check_optimizer(optimizer, variables)  # built for another model: a clear ValueError now
    strategy = model.distribute_strategy  # chapter 08: the strategy the model was built under
    replicas = strategy.num_replicas_in_sync
    if not optimizer.built:
        with strategy.scope():
            optimizer.build(variables)
    groups = _layer_groups(model)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss.check(y, y_pred)  # at trace time: a y that would broadcast is a ValueError
            # Each replica's mean over its share of the batch, divided by the number of
            # replicas (as Keras 3 does): the replicas' sum is the global-batch mean.
            value = loss(x, y, y_pred, True) / replicas
        grads = core.compute_gradients(tape, value, variables, optimizer)  # loss scaled, unscaled
        if any(g is None for g in grads):
            missing = [core.variable_path(v) for v, g in zip(variables, grads, strict=True) if g is None]
            raise ValueError(f"the loss does not depend on these variables: {missing}")
        out = core.apply_update(optimizer, grads, variables, clip=clip, check_finite=check_finite)
        out["loss"] = value
        out["grad_norms"] = _group_norms(out.pop("grads"), groups)
        return out

    if replicas == 1:
        fn = tf.function(train_step, jit_compile=jit_compile, reduce_retracing=reduce_retracing)
        return TrainStep(model, fn, fn, train_step, loss)

    def distributed_step(x, y):
        per_replica = strategy.run(train_step, args=(x, y))
        out = tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0], per_replica)
        out["loss"] = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica["loss"], axis=None)
        return out

    step = tf.function(distributed_step, jit_compile=jit_compile, reduce_retracing=reduce_retracing)

    def split_and_step(x, y):
        """Split a whole global batch evenly over the replicas, then run the step."""
        if not isinstance(x, tf.distribute.DistributedValues):
            from .distribute import split_batch

            x, y = split_batch(strategy, x, y)
        return step(x, y)

    return TrainStep(model, split_and_step, step, train_step, loss)



# ----------------------------------------------------------------------------- Keras fit
class GradNormTrainStep:
    """Mixin for ``keras.Model`` subclasses: a ``train_step`` with clipping, a non-finite check
    and per-layer gradient norms in the logs (chapter 03).

    Put it first in the bases, e.g. ``class MyModel(GradNormTrainStep, keras.Sequential)``.
    Extra constructor keywords: ``clip_global_norm`` (``None`` = no clipping) and
    ``check_finite`` (skip steps whose gradients hold NaN or inf). ``fit`` then logs, besides
    the loss and compiled metrics, ``grad_norm`` (global, before clipping), ``grad_norm/<layer>``
    for each layer and ``skipped_steps`` (non-finite steps skipped so far this epoch). These are values of
    the batch, not running means: at the end of an epoch the logs hold the last batch's.
    """

    def __init__(self, *args, clip_global_norm: float | None = None, check_finite: bool = True,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_global_norm = _check_positive_float("clip_global_norm", clip_global_norm,
                                                      allow_none=True)
        if not isinstance(check_finite, bool):
            raise ValueError(f"check_finite must be True or False, got {check_finite!r}")
        self.check_finite = check_finite
        # A Keras metric, so fit tracks it, resets it each epoch and reports it in the logs.
        self.skipped_steps = keras.metrics.Sum(name="skipped_steps")

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                     training=True)
        variables = self.trainable_variables
        # As fit does: a LossScaleOptimizer's scale multiplies the loss (mixed precision).
        grads = core.compute_gradients(tape, loss, variables, self.optimizer)
        clip = None if self.clip_global_norm is None else ("global_norm", self.clip_global_norm)
        out = core.apply_update(self.optimizer, grads, variables, clip=clip,
                                check_finite=self.check_finite)
        # Under a strategy (chapter 08) Keras 3 divides each replica's loss by the number of
        # replicas, and a metric reads the mean of its replicas' values: undo the division.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        self.skipped_steps.update_state(tf.cast(tf.logical_not(out["applied"]), tf.float32))
        for metric in self.metrics:  # the documented Keras 3 way to feed the loss tracker
            if metric.name == "loss":
                metric.update_state(loss * replicas)
        logs = dict(self.compute_metrics(x, y, y_pred, sample_weight=sample_weight))
        logs["grad_norm"] = out["global_norm"]
        for name, norm in _group_norms(out["grads"], _layer_groups(self)).items():
            logs[f"grad_norm/{name}"] = norm
        return logs


class GradNormSequential(GradNormTrainStep, keras.Sequential):
    """A ``keras.Sequential`` whose ``fit`` clips, skips non-finite steps and logs per-layer
    gradient norms (chapter 03). ``GradNormSequential(layers, clip_global_norm=1.0)``."""


class GradNormLogger(keras.callbacks.Callback):
    """A Keras callback that records per-layer gradient norms during ``fit`` (chapter 03).

    Two sources, chosen by ``probe``:

    * ``probe=(x, y)``: every ``every_n`` epochs (``every="epoch"``) or batches
      (``every="batch"``), one ``GradientTape`` on this fixed batch measures the gradient of the
      model's compiled loss plus ``model.losses`` (inference mode, so dropout does not add
      noise), scaled and unscaled by the optimizer's loss scale under mixed precision, as ``fit``
      takes it. A model compiled without a loss is measured with the mean squared error; a model
      with its own ``train_step`` must then be compiled with the loss it trains with (its real
      loss is unknown here), else the probe raises a ``ValueError``. ``y`` is required.
    * ``probe=None``: reads the ``grad_norm/<layer>`` entries that a :class:`GradNormTrainStep`
      model puts in the logs (the norms of the training batch itself).

    :attr:`history` maps each layer name to its list of norms, :attr:`steps` holds the epoch
    (1-based) or global batch number of each entry, and :meth:`plot` draws them.
    """

    def __init__(self, probe=None, *, every: str = "epoch", every_n: int = 1):
        super().__init__()
        if every not in ("epoch", "batch"):
            raise ValueError(f"every must be 'epoch' or 'batch'; got {every!r}")
        self.every = every
        self.every_n = _check_count("every_n", every_n, 1)
        if probe is not None:
            if not isinstance(probe, (tuple, list)) or len(probe) != 2:
                raise ValueError(f"probe must be None or an (x, y) pair; got {type(probe).__name__}")
        self.probe = probe  # converted against the model (as fit converts) when training begins
        self.history: dict[str, list[float]] = {}
        self.steps: list[int] = []
        self._batches = 0
        self._probe_fn = None
        self._probe_data = None

    # ------------------------------------------------------------------ Keras hooks
    def on_train_begin(self, logs=None):
        self._probe_fn = None
        if self.probe is not None:
            self._probe_data = core.coerce_batch(self.model, *self.probe)

    def on_epoch_end(self, epoch, logs=None):
        if self.every == "epoch" and (epoch + 1) % self.every_n == 0:
            self._record(epoch + 1, logs)

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self.every == "batch" and self._batches % self.every_n == 0:
            self._record(self._batches, logs)

    # ------------------------------------------------------------------ internals
    def _make_probe_fn(self):
        model = self.model
        if not model.built or not model.trainable_variables:
            raise ValueError(
                f"GradNormLogger: model {model.name!r} has no trainable variables to measure (is it "
                "built? give it a keras.Input, or call it on a batch before fit)"
            )
        groups = _layer_groups(model)
        variables = model.trainable_variables
        loss = core.resolve_loss(model)
        if loss.default_for_custom_step:
            raise ValueError(
                f"GradNormLogger(probe=...): model {model.name!r} has its own train_step and no compiled "
                "loss, so the probe cannot know the loss it trains with; compile it with that loss "
                "(model.compile(optimizer, loss=...)), or log from a GradNormTrainStep model (probe=None)"
            )
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None and getattr(model.dtype_policy, "name", "") == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())  # what compile adds

        @tf.function
        def probe_norms(x, y):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=False)
                value = loss(x, y, y_pred, False)
            # mixed precision: the loss scaled by the optimizer's loss scale, the gradients
            # unscaled, so float16 gradients do not underflow (as fit takes them)
            return _group_norms(core.compute_gradients(tape, value, variables, optimizer), groups)

        x, y = self._probe_data
        # eagerly first: a y that does not fit the loss, or a loss that is not a scalar, is a
        # short ValueError here instead of one wrapped in the tf.function's traceback
        loss.check(y, model(x, training=False))
        loss(x, y, model(x, training=False), False)
        return probe_norms

    def _record(self, step: int, logs) -> None:
        if self.probe is not None:
            if self._probe_fn is None:  # built lazily: a model without an Input is built by fit
                self._probe_fn = self._make_probe_fn()
            norms = {k: float(v) for k, v in self._probe_fn(*self._probe_data).items()}
        else:
            logs = logs or {}
            norms = {k[len("grad_norm/"):]: float(v) for k, v in logs.items()
                     if k.startswith("grad_norm/")}
            if not norms:
                raise ValueError(
                    "GradNormLogger found no 'grad_norm/<layer>' entries in the logs: pass "
                    "probe=(x, y), or train a model with GradNormTrainStep (gl.GradNormSequential)"
                )
        if not norms:
            raise ValueError(f"GradNormLogger: model {self.model.name!r} has no layer with trainable weights")
        for name, value in norms.items():
            self.history.setdefault(name, []).append(value)
        self.steps.append(step)

    def plot(self, ax=None, *, title: str | None = None):
        """Plot :attr:`history` on a log scale; returns the figure."""
        from .plots.tracing import plot_grad_norm_history

        return plot_grad_norm_history(self.history, steps=self.steps, xlabel=self.every,
                                      ax=ax, title=title)
