"""One-call inspection of a training step, and a short watched training run (chapter 04).

Pure computation: TensorFlow and Keras in, small dataclasses out. Nothing here imports
ipywidgets.

* :func:`inspect_training_step` runs the forward and backward pass of one training step
  under a ``GradientTape`` and returns a :class:`StepReport`: non-finite values and the first
  layer where they appear, per-layer forward and backward statistics with the diagnosis of
  :func:`gradlab.grads.diagnose` (chapter 01), ``None`` gradients and the variables they
  belong to (chapter 02), and, for a ``tf.function`` step, its tracing count (chapter 03).
  The report's :attr:`StepReport.problems` says, in plain words, what is wrong and what to do.
* :func:`train_steps` trains any Keras model for a few steps with one eager tape per step,
  recording the loss, the global gradient norm and the ``None`` gradients, and stops at the
  first non-finite loss or gradient. :func:`gradlab.check_trains` is built on it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import numpy as np

from ._env import quiet_import_tensorflow
from ._validate import check_int
from ._validate import check_positive as _check_positive
from .grads import diagnose

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "LayerStats",
    "Problem",
    "StepReport",
    "TrainingRun",
    "VariableStats",
    "inspect_training_step",
    "train_steps",
]

PROBLEM_KINDS: tuple[str, ...] = (
    "non-finite-weights",
    "non-finite-forward",
    "non-finite-loss",
    "non-finite-gradient",
    "none-gradient",
    "vanishing",
    "exploding",
    "large-gradient",
    "retracing",
)


# ----------------------------------------------------------------------------- validation
def _check_model(model) -> None:
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")


def _as_float_tensor(name: str, value):
    if value is None or isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{name} must be an array or tensor of numbers (one batch); got {value!r}")
    if isinstance(value, (dict, tuple)) or (isinstance(value, list) and value and hasattr(value[0], "shape")):
        raise ValueError(
            f"{name} must be a single array or tensor; got a {type(value).__name__} "
            "(models with several inputs or outputs are not supported)"
        )
    try:
        t = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array or tensor of numbers; got {type(value).__name__}") from err
    if t.shape.rank is None or t.shape.rank == 0:
        raise ValueError(f"{name} must have a batch axis; got a scalar")
    if t.dtype.is_integer or t.dtype == tf.bool:
        t = tf.cast(t, tf.float32)
    if not t.dtype.is_floating:
        raise ValueError(f"{name} must hold numbers; got dtype {t.dtype.name}")
    return t


def _prepare(model, x, y):
    """Validated float tensors ``x`` and ``y``, the model built, and its trainable variables."""
    x = _as_float_tensor("x", x)
    y = _as_float_tensor("y", y)
    if not model.built:
        model(x[:1])
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model {model.name!r} has no trainable variables: there is nothing to train")
    return x, y, variables


def _mse(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_true - y_pred))


def _loss_fn(loss_fn) -> Callable:
    if loss_fn is None:
        return _mse
    if not callable(loss_fn):
        raise ValueError(
            f"loss_fn must be None (mean squared error) or a callable (y_true, y_pred) -> scalar; "
            f"got {loss_fn!r}"
        )
    return loss_fn


def _scalar_loss(loss):
    loss = tf.convert_to_tensor(loss)
    if loss.shape.rank != 0:
        raise ValueError(
            f"loss_fn must return a scalar, it returned shape {tuple(loss.shape)}. "
            "tape.gradient would silently differentiate the sum of its elements (chapter 02); "
            "reduce it, e.g. with tf.reduce_mean"
        )
    return loss


def _check_shapes(x, y, y_pred, default_loss: bool) -> None:
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"x and y must hold the same number of examples; got {x.shape[0]} and {y.shape[0]}")
    if default_loss and tuple(y.shape) != tuple(y_pred.shape):
        raise ValueError(
            f"y has shape {tuple(y.shape)} but the model's output has shape {tuple(y_pred.shape)}; "
            "the default mean squared error would broadcast them into a wrong loss. "
            "Reshape y, or pass your own loss_fn"
        )


# ----------------------------------------------------------------------------- report parts
@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding of :func:`inspect_training_step`: what is wrong and what to do about it."""

    kind: str
    finding: str
    fix: str

    def __str__(self) -> str:
        return f"{self.finding} Fix: {self.fix}"

    def __repr__(self) -> str:
        return f"Problem({self.kind}: {self.finding})"


@dataclasses.dataclass(frozen=True)
class LayerStats:
    """Forward and backward numbers of one layer, for a ``Sequential`` or functional model.

    ``signal`` is the norm of dLoss/d(pre-activation) for a ``Dense`` layer of a
    ``Sequential`` model (as in chapter 01) and of dLoss/d(output) for every other layer.
    ``weight_grad`` is the joint norm of the gradients of all the layer's trainable variables
    (kernel and bias together for a ``Dense`` layer, so it is larger than chapter 01's
    kernel-only norms; ``None`` when it has none, or all its gradients are ``None``). The
    printed table labels this column ``grad (all weights)``.
    """

    name: str
    kind: str
    output_std: float
    output_finite: bool
    signal: float | None
    weight_grad: float | None
    has_weights: bool


@dataclasses.dataclass(frozen=True)
class VariableStats:
    """The gradient of one trainable variable (``grad_norm`` is ``None`` for a ``None`` gradient)."""

    path: str
    layer: str
    shape: tuple[int, ...]
    grad_norm: float | None
    grad_finite: bool
    value_finite: bool


GRAD_HEADER = "grad (all weights)"  # kernel and bias together, unlike chapter 01's kernel-only norms


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}"


@dataclasses.dataclass(frozen=True)
class StepReport:
    """What :func:`inspect_training_step` found in one training step (chapter 04).

    Print it (or let the notebook show it) for a table; read :attr:`problems` for the
    findings in plain words, each with its fix. ``status`` is :func:`gradlab.grads.diagnose`'s
    word for the back-propagated signal (``healthy``, ``vanishing``, ``exploding``,
    ``non-finite``), or ``"n/a"`` when the model gave no per-layer signal; ``message`` is its
    explanation, with the layers named as in the table (not numbered).
    ``first_nonfinite_layer`` is the first layer whose *output* is NaN/inf (forward overflow);
    ``first_nonfinite_gradient_layer`` is the layer where the *backward* pass first goes NaN/inf,
    which also catches an op with an infinite derivative (``sqrt`` or ``log`` at 0) whose forward
    values are finite. ``looks_untrained`` is ``True`` when every bias is still exactly 0, as
    Keras initializes them (no training step has run), ``False`` when some bias is not, and
    ``None`` when the model has no biases; the fixes suggested for overflow depend on it.
    ``tracing_count_before`` is the tracing count before this call ran ``step_fn``.
    """

    loss: float
    layers: tuple[LayerStats, ...]
    variables: tuple[VariableStats, ...]
    status: str
    message: str
    diagnosed_layers: tuple[str, ...]
    global_norm: float
    first_nonfinite_layer: str | None
    first_nonfinite_gradient_layer: str | None
    tracing_count: int | None = None
    traced_this_call: bool | None = None
    step_loss: float | None = None
    looks_untrained: bool | None = None
    tracing_count_before: int | None = None
    problems: tuple[Problem, ...] = ()

    # ---------------------------------------------------------------- convenience views
    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def problem_kinds(self) -> tuple[str, ...]:
        return tuple(p.kind for p in self.problems)

    @property
    def none_gradients(self) -> tuple[str, ...]:
        """Paths of the variables whose gradient is ``None``."""
        return tuple(v.path for v in self.variables if v.grad_norm is None)

    @property
    def nonfinite_gradients(self) -> tuple[str, ...]:
        return tuple(v.path for v in self.variables if not v.grad_finite)

    @property
    def nonfinite_weights(self) -> tuple[str, ...]:
        return tuple(v.path for v in self.variables if not v.value_finite)

    @property
    def signal_norms(self) -> np.ndarray:
        """The signals that were diagnosed, input side first."""
        by_name = {layer.name: layer.signal for layer in self.layers}
        return np.array([by_name[n] for n in self.diagnosed_layers], dtype=np.float64)

    def summary(self) -> str:
        n = len(self.problems)
        return (f"loss {_fmt(self.loss)} · gradient norm {_fmt(self.global_norm)} · "
                f"status {self.status} · {n} problem{'' if n == 1 else 's'}")

    def __str__(self) -> str:
        lines = [f"StepReport: {self.summary()}"]
        if self.layers:
            w = max(5, *(len(layer.name) for layer in self.layers))
            k = max(4, *(len(layer.kind) for layer in self.layers))
            lines.append(f"  {'layer':<{w}}  {'kind':<{k}}  {'output std':>10}  {'signal':>9}  {GRAD_HEADER:>18}")
            for layer in self.layers:
                std = _fmt(layer.output_std) if layer.output_finite else "NaN/inf"
                wg = _fmt(layer.weight_grad) if layer.has_weights else ""
                if layer.has_weights and layer.weight_grad is None:
                    wg = "None"
                lines.append(f"  {layer.name:<{w}}  {layer.kind:<{k}}  {std:>10}  "
                             f"{_fmt(layer.signal):>9}  {wg:>18}")
        else:
            w = max(8, *(len(v.path) for v in self.variables))
            lines.append(f"  {'variable':<{w}}  {'gradient norm':>13}")
            for v in self.variables:
                g = "None" if v.grad_norm is None else _fmt(v.grad_norm)
                lines.append(f"  {v.path:<{w}}  {g:>13}")
        if self.status != "n/a":
            lines.append(f"  diagnosis: {self.status}: {self.message}")
        if self.tracing_count is not None:
            now = "this call traced" if self.traced_this_call else "this call did not trace"
            lines.append(f"  step_fn: traced {self.tracing_count} time{'' if self.tracing_count == 1 else 's'}"
                         f" ({now})")
        if self.problems:
            lines.append("  problems:")
            lines += [f"  {i}. {p}" for i, p in enumerate(self.problems, 1)]
        else:
            lines.append("  no problems found")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"StepReport({self.summary()})"

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(repr(self) if cycle else str(self))


# ----------------------------------------------------------------------------- forward passes
def _is_functional(model) -> bool:
    from keras.src.models.functional import Functional

    return isinstance(model, Functional) and not isinstance(model, keras.Sequential)


def _dense_pre_activation(layer, h):
    """``(z, out)`` for a plain Dense layer on a 2-D input, else ``None``."""
    if not isinstance(layer, keras.layers.Dense) or h.shape.rank != 2 or getattr(layer, "lora_enabled", False):
        return None
    if getattr(layer, "quantization_mode", None):
        return None
    z = tf.matmul(h, tf.convert_to_tensor(layer.kernel))
    if layer.use_bias:
        z = z + tf.convert_to_tensor(layer.bias)
    return z


def _forward(model, x, tape, training: bool):
    """``(y_pred, [(layer, out, watched)])``: per-layer outputs recorded on ``tape``.

    Sequential models run layer by layer (Dense layers through their pre-activation, which is
    watched, as in chapter 01); functional models with one input and one output run through a
    model that returns every layer's output. Other models return an empty list.
    """
    if isinstance(model, keras.Sequential):
        h, rows = x, []
        for layer in model.layers:
            z = _dense_pre_activation(layer, h)
            if z is not None:
                tape.watch(z)
                out = layer.activation(z)
                rows.append((layer, out, z))
            else:
                out = layer(h, training=training)
                tape.watch(out)
                rows.append((layer, out, out))
            h = out
        return h, rows
    if _is_functional(model) and len(model.inputs) == 1 and len(model.outputs) == 1:
        layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
        try:
            outputs = [layer.output for layer in layers]
        except (AttributeError, ValueError):  # a shared layer has several outputs
            outputs = None
        if outputs is not None:
            final = model.outputs[0]
            idx = next((i for i, o in enumerate(outputs) if o is final), None)
            if idx is not None:
                extractor = keras.Model(model.inputs, outputs)
                outs = extractor(x, training=training)
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                for o in outs:
                    tape.watch(o)
                return outs[idx], list(zip(layers, outs, outs, strict=True))
    return model(x, training=training), []


def _norm(t) -> float:
    return float(tf.norm(tf.cast(t, tf.float64)).numpy())


def _all_finite(t) -> bool:
    return bool(tf.reduce_all(tf.math.is_finite(t)).numpy())


def _variable_layers(model) -> dict[int, str]:
    """id(variable) -> name of the innermost layer that owns it."""
    owner: dict[int, str] = {}

    def walk(layer):
        subs = getattr(layer, "layers", None)
        if subs:
            for sub in subs:
                walk(sub)
        for v in layer.trainable_weights:
            owner.setdefault(id(v), layer.name)

    for layer in model.layers:
        walk(layer)
    return owner


# ----------------------------------------------------------------------------- problems
def _name_layers(message: str, names: list[str]) -> str:
    """``diagnose``'s message with "layer 3" replaced by the third diagnosed layer's name."""

    def name(match):
        i = int(match.group(1))
        return f"{names[i - 1]!r}" if 1 <= i <= len(names) else match.group(0)

    return re.sub(r"\blayer (\d+)\b", name, message)


def _looks_untrained(model) -> bool | None:
    """True when every bias is exactly 0 (Keras's initial value), None without biases."""
    biases = [v for v in model.trainable_variables if getattr(v, "path", v.name).split("/")[-1].startswith("bias")]
    if not biases:
        return None
    return all(not bool(tf.reduce_any(tf.not_equal(tf.convert_to_tensor(b), 0)).numpy()) for b in biases)


def _ratio_text(r: dict) -> str:
    names = r["diagnosed_layers"]
    by_name = {layer.name: layer.signal for layer in r["layers"]}
    first, last = by_name[names[0]], by_name[names[-1]]
    if first == 0:
        return f"the signal at {names[0]!r} underflowed to exactly 0 ({names[-1]!r}: {last:.3g})"
    return f"the signal at {names[0]!r} is {first / last:.2g}× the signal at {names[-1]!r}"


def _problems(report_args: dict, *, huge_above: float) -> list[Problem]:
    r = report_args
    variables: tuple[VariableStats, ...] = r["variables"]
    out: list[Problem] = []
    bad_w = [v.path for v in variables if not v.value_finite]
    if bad_w:
        out.append(Problem(
            "non-finite-weights",
            f"The weights themselves hold NaN/inf ({', '.join(bad_w[:3])}{' …' if len(bad_w) > 3 else ''}): "
            "an earlier update wrote them.",
            "rebuild or restore the model; then find why a step went non-finite (learning rate, "
            "initializer) and skip such steps (check_finite in gl.make_train_step).",
        ))
    if r["first_nonfinite_layer"] is not None and not bad_w:
        out.append(Problem(
            "non-finite-forward",
            f"The forward pass overflows: layer {r['first_nonfinite_layer']!r} is the first whose output "
            "holds NaN/inf.",
            _overflow_fix(r["looks_untrained"]),
        ))
    if not math.isfinite(r["loss"]) and r["first_nonfinite_layer"] is None and not bad_w:
        out.append(Problem(
            "non-finite-loss",
            f"The loss is {r['loss']} although every layer's output is finite: the loss itself overflows "
            "(e.g. log(0), exp of a large number).",
            "compute the loss from logits with a stable Keras loss (from_logits=True), or add a "
            "small epsilon inside log/sqrt.",
        ))
    bad_g = [v.path for v in variables if not v.grad_finite]
    if bad_g and math.isfinite(r["loss"]) and r["first_nonfinite_layer"] is None and not bad_w:
        where = r["first_nonfinite_gradient_layer"]
        out.append(Problem(
            "non-finite-gradient",
            f"The loss is finite but {len(bad_g)} gradient{'s are' if len(bad_g) > 1 else ' is'} NaN/inf"
            + (f"; the backward pass first goes non-finite at layer {where!r}" if where else "")
            + ": an op with an infinite derivative (sqrt or norm at 0, log near 0).",
            "add an epsilon (tf.sqrt(x + 1e-12)) or use a safe op; clipping cannot repair NaN.",
        ))
    none = [v.path for v in variables if v.grad_norm is None]
    if none:
        out.append(Problem(
            "none-gradient",
            f"No gradient (None) for {', '.join(none)}: the loss does not depend on "
            f"{'these variables' if len(none) > 1 else 'this variable'} through recorded operations.",
            "check that the layer's output really uses it (a forgotten term, a wrong return value, "
            "a NumPy round-trip, work outside the tape); chapter 02 lists seven causes.",
        ))
    status = r["status"]
    if status == "vanishing":
        out.append(Problem(
            "vanishing",
            f"Vanishing gradients: {_ratio_text(r)}, so the early layers barely learn.",
            "use relu with he_normal (or leaky_relu), fewer layers, or normalization; try the "
            "combination in gl.GradientExplorer first.",
        ))
    elif status == "exploding":
        out.append(Problem(
            "exploding",
            f"Exploding gradients: {_ratio_text(r)}, so the early layers get huge updates.",
            "use an initializer matched to the activation (glorot, he) and clip the global norm.",
        ))
    g = r["global_norm"]
    if math.isfinite(g) and g > huge_above:
        out.append(Problem(
            "large-gradient",
            f"The global gradient norm is {g:.3g}: one SGD step moves the weights by the learning "
            "rate times this.",
            "clip it (tf.clip_by_global_norm, or global_clipnorm= in the optimizer) and/or lower "
            "the learning rate.",
        ))
    count = r["tracing_count"]
    if count is not None and count > 1:
        out.append(_retracing_problem(count, r["tracing_count_before"], r["traced_this_call"]))
    return out


def _overflow_fix(untrained: bool | None) -> str:
    numerics = "tf.debugging.enable_check_numerics() names the op."
    if untrained:
        return ("the model has not been trained yet (every bias is still 0), so its initial weights are "
                "too large for its depth: use an initializer matched to the activation (glorot_uniform "
                "for tanh or linear layers, he_normal for relu) or fewer layers; " + numerics)
    if untrained is False:
        return ("the biases are no longer 0, so training steps have run: a learning rate too large for "
                "the gradients made the weights grow. Rebuild the model, then lower the learning rate "
                "or clip the global norm; " + numerics)
    return ("if the model is freshly built, its initial weights are too large: use an initializer "
            "matched to the activation; if it has been trained, the learning rate made the weights "
            "grow: rebuild it and lower the rate or clip; " + numerics)


def _retracing_problem(count: int, before: int | None, traced_now: bool | None) -> Problem:
    shapes_fix = ("pass tensors instead of Python numbers, and give varying batch sizes an "
                  "input_signature (None in the batch axis) or reduce_retracing=True.")
    if traced_now and before == 0:
        return Problem(
            "retracing",
            f"step_fn traced {count} times during its first call: it traced again because variables "
            "(model weights, optimizer slots) were created inside it.",
            "build the model and the optimizer (optimizer.build(model.trainable_variables)) before "
            "the first call.",
        )
    if traced_now:
        return Problem(
            "retracing",
            f"step_fn traced again during this call ({count} traces in all): the arguments of this call "
            "differ from earlier calls' in shape or dtype (such as a new batch size), or a Python "
            "argument has a new value.",
            shapes_fix,
        )
    return Problem(
        "retracing",
        f"step_fn has traced {count} times, on earlier calls (this call reused a trace): earlier calls "
        "passed new shapes, dtypes or Python values, or created variables on the first call.",
        "build the model and optimizer before the first call; " + shapes_fix,
    )


# ----------------------------------------------------------------------------- main entry
def inspect_training_step(
    model,
    x,
    y,
    loss_fn: Callable | None = None,
    *,
    step_fn: Callable | None = None,
    training: bool = True,
    vanish_below: float = 1e-3,
    explode_above: float = 1e3,
    huge_above: float = 1e3,
) -> StepReport:
    """Run one training step's forward and backward pass under a tape and report (chapter 04).

    ``loss_fn(y_true, y_pred)`` must return a scalar; the default is the mean squared error.
    The weights are **not** updated: the report describes the step the model is about to take.
    It holds

    * the loss, and for a ``Sequential`` or single-input functional model one row per layer:
      the output's standard deviation, whether it is finite, the back-propagated signal and the
      layer's weight-gradient norm; the first layer whose output is NaN/inf;
    * :func:`gradlab.grads.diagnose`'s verdict on the signal of every layer with weights but the
      last (for a stack of Dense layers these are the numbers of :func:`gradlab.gradient_report`);
    * every trainable variable's gradient norm, ``None`` gradients by variable path, and
      variables whose values are already NaN/inf;
    * with ``step_fn`` (your training step, called as ``step_fn(x, y)`` once, *after* the
      inspection, so it does update the weights): how often it has traced if it is a
      ``tf.function`` (or a :class:`gradlab.TraceCounter`), and whether this call traced.

    :attr:`StepReport.problems` lists the findings in plain words, each with a fix.
    """
    _check_model(model)
    loss_fn_ = _loss_fn(loss_fn)
    if step_fn is not None and not callable(step_fn):
        raise ValueError(f"step_fn must be None or a callable step_fn(x, y); got {type(step_fn).__name__}")
    if not isinstance(training, bool):
        raise ValueError(f"training must be True or False; got {training!r}")
    vanish_below = _check_positive("vanish_below", vanish_below)
    explode_above = _check_positive("explode_above", explode_above)
    huge_above = _check_positive("huge_above", huge_above)
    if not vanish_below < explode_above:
        raise ValueError(f"need vanish_below < explode_above; got {vanish_below} and {explode_above}")
    x, y, variables = _prepare(model, x, y)

    with tf.GradientTape(persistent=True) as tape:
        y_pred, rows = _forward(model, x, tape, training)
        _check_shapes(x, y, y_pred, loss_fn is None)
        loss = _scalar_loss(loss_fn_(y, y_pred))
    watched = [w for _, _, w in rows]
    grads = tape.gradient(loss, variables)
    signals = tape.gradient(loss, watched) if watched else []
    del tape

    owner = _variable_layers(model)
    var_stats = tuple(
        VariableStats(
            path=getattr(v, "path", v.name),
            layer=owner.get(id(v), "?"),
            shape=tuple(int(d) for d in v.shape),
            grad_norm=None if g is None else _norm(g),
            grad_finite=True if g is None else _all_finite(g),
            value_finite=_all_finite(v),
        )
        for v, g in zip(variables, grads, strict=True)
    )
    present = [g for g in grads if g is not None]
    global_norm = _norm(tf.stack([tf.norm(tf.cast(g, tf.float64)) for g in present])) if present else 0.0

    layer_stats = []
    for (layer, out, _), s in zip(rows, signals, strict=True):
        own = [vs for v, vs in zip(variables, var_stats, strict=True)
               if owner.get(id(v)) is not None and any(v is w for w in layer.trainable_weights)]
        norms = [vs.grad_norm for vs in own if vs.grad_norm is not None]
        layer_stats.append(LayerStats(
            name=layer.name,
            kind=type(layer).__name__,
            output_std=float(tf.math.reduce_std(tf.cast(out, tf.float64)).numpy()),
            output_finite=_all_finite(out),
            signal=None if s is None else _norm(s),
            weight_grad=math.sqrt(sum(n * n for n in norms)) if norms else None,
            has_weights=bool(layer.trainable_weights),
        ))
    first_bad = next((ls.name for ls in layer_stats if not ls.output_finite), None)
    first_bad_grad = None
    for ls in reversed(layer_stats):  # the backward pass runs from the output to the input
        if (ls.signal is not None and not math.isfinite(ls.signal)) or (
            ls.weight_grad is not None and not math.isfinite(ls.weight_grad)
        ):
            first_bad_grad = ls.name
            break
    if first_bad_grad is None and not layer_stats:
        bad = [vs.layer for vs in var_stats if not vs.grad_finite]
        first_bad_grad = bad[-1] if bad else None

    weighted = [ls for ls in layer_stats if ls.has_weights and ls.signal is not None]
    diagnosed = weighted[:-1] if len(weighted) > 1 else weighted
    if len(diagnosed) == 1:
        finite = diagnosed[0].signal is not None and math.isfinite(diagnosed[0].signal)
        status = "healthy" if finite else "non-finite"
        message = ("one hidden layer: no depth for the signal to vanish or explode over" if finite
                   else f"the signal of {diagnosed[0].name!r} is NaN/inf")
    elif diagnosed:
        status, message = diagnose([ls.signal for ls in diagnosed], vanish_below=vanish_below,
                                   explode_above=explode_above)
        message = _name_layers(message, [ls.name for ls in diagnosed])
    else:
        status, message = "n/a", "no per-layer signal for this kind of model"

    untrained = _looks_untrained(model)  # before step_fn trains it
    count = traced = step_loss = before = None
    if step_fn is not None:
        from .tracing import TraceCounter, tracing_count

        is_traced = isinstance(step_fn, TraceCounter) or hasattr(step_fn, "experimental_get_tracing_count")
        before = tracing_count(step_fn) if is_traced else None
        out = step_fn(x, y)
        if is_traced:
            count = tracing_count(step_fn)
            traced = count > before
        if isinstance(out, dict):
            out = out.get("loss")
        if out is not None and hasattr(out, "shape") and tuple(out.shape) == ():
            step_loss = float(out)

    args = dict(
        loss=float(loss.numpy()),
        layers=tuple(layer_stats),
        variables=var_stats,
        status=status,
        message=message,
        diagnosed_layers=tuple(ls.name for ls in diagnosed),
        global_norm=global_norm,
        first_nonfinite_layer=first_bad,
        first_nonfinite_gradient_layer=first_bad_grad,
        tracing_count=count,
        traced_this_call=traced,
        step_loss=step_loss,
        looks_untrained=untrained,
        tracing_count_before=before,
    )
    problems = _problems(args, huge_above=huge_above)
    return StepReport(**args, problems=tuple(problems))


# ----------------------------------------------------------------------------- short training runs
@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """What :func:`train_steps` recorded, one entry per step taken (chapter 04)."""

    losses: tuple[float, ...]
    global_norms: tuple[float, ...]
    none_gradients: tuple[str, ...]
    stopped_at: int | None
    steps: int

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
        taken = len(self.losses)
        head = f"TrainingRun: {taken} of {self.steps} steps · loss {_fmt(self.losses[0])} → {_fmt(self.losses[-1])}"
        finite = [g for g in self.global_norms if math.isfinite(g)]
        head += f" · largest gradient norm {_fmt(max(finite)) if finite else 'NaN'}"
        lines = [head]
        if self.stopped_at is not None:
            lines.append(f"  stopped at step {self.stopped_at}: the loss or a gradient is NaN/inf")
        if self.none_gradients:
            lines.append(f"  None gradients (not trained): {', '.join(self.none_gradients)}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def train_steps(
    model,
    x,
    y,
    *,
    optimizer,
    steps: int = 100,
    loss_fn: Callable | None = None,
    clip_global_norm: float | None = None,
    stop_on_nonfinite: bool = True,
    stop_on_none: bool = False,
) -> TrainingRun:
    """Train ``model`` on the batch ``(x, y)`` for ``steps`` steps, watching every step (chapter 04).

    The loss is ``loss_fn(y, y_pred)`` (default: mean squared error). An eager tape first finds
    the variables whose gradient is ``None``; they are left out of the updates (with
    ``stop_on_none`` the run stops there). The steps themselves run as one ``tf.function``
    built like chapter 03's :func:`gradlab.make_train_step`: global-norm clipping when
    ``clip_global_norm`` is set, and a finite check, so that with ``stop_on_nonfinite`` the
    run stops at the first NaN/inf loss or gradient *without* applying that step. Each step's
    loss (before its update) and global gradient norm (before clipping) are recorded. The model
    is trained in place; build a fresh optimizer for each model.
    """
    from .tracing import _clip_and_apply

    _check_model(model)
    loss_fn_ = _loss_fn(loss_fn)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    steps = check_int("steps", steps, 1, 100_000)
    if clip_global_norm is not None:
        clip_global_norm = _check_positive("clip_global_norm", clip_global_norm)
    for flag_name, flag in (("stop_on_nonfinite", stop_on_nonfinite), ("stop_on_none", stop_on_none)):
        if not isinstance(flag, bool):
            raise ValueError(f"{flag_name} must be True or False; got {flag!r}")
    x, y, variables = _prepare(model, x, y)
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        _check_shapes(x, y, y_pred, loss_fn is None)
        loss = _scalar_loss(loss_fn_(y, y_pred))
    grads = tape.gradient(loss, variables)
    none = tuple(getattr(v, "path", v.name) for v, g in zip(variables, grads, strict=True) if g is None)
    trainable = [v for v, g in zip(variables, grads, strict=True) if g is not None]
    if (stop_on_none and none) or not trainable:
        gnorm = float(tf.linalg.global_norm([g for g in grads if g is not None]).numpy()) if trainable else 0.0
        return TrainingRun((float(loss.numpy()),), (gnorm,), none, None, int(steps))
    if not optimizer.built:
        optimizer.build(trainable)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn_(y, model(x, training=True))
        grads = tape.gradient(loss, trainable)
        out = _clip_and_apply(optimizer, grads, trainable, clip_global_norm, stop_on_nonfinite)
        return loss, out["global_norm"]

    losses: list[float] = []
    norms: list[float] = []
    stopped = None
    for i in range(1, int(steps) + 1):
        loss, gnorm = step(x, y)
        losses.append(float(loss.numpy()))
        norms.append(float(gnorm.numpy()))
        if stop_on_nonfinite and not (math.isfinite(losses[-1]) and math.isfinite(norms[-1])):
            stopped = i
            break
    return TrainingRun(tuple(losses), tuple(norms), none, stopped, int(steps))
