"""One-call inspection of a training step, and a short watched training run (chapter 04).

Pure computation: TensorFlow and Keras in, small dataclasses out. Nothing here imports
ipywidgets.

* :func:`inspect_training_step` runs the forward and backward pass of one training step
  under a ``GradientTape`` and returns a :class:`StepReport`: non-finite values and the first
  layer where they appear, per-layer forward and backward statistics with the diagnosis of
  :func:`gradlab.grads.diagnose` (chapter 01), ``None`` gradients and the variables they
  belong to (chapter 02), and, for a ``tf.function`` step, its tracing count (chapter 03).
  The report's :attr:`StepReport.problems` says, in plain words, what is wrong and what to do.
* :func:`train_steps` trains any Keras model for a few steps, recording the loss, the global
  gradient norm and the ``None`` gradients, and stops at the first non-finite loss or
  gradient. :func:`gradlab.check_trains` and :func:`gradlab.train_mlp` are built on it.

Both run on :mod:`gradlab.core`: the same input coercion, loss, loss scaling, clipping and
per-layer taps as every other tool.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import numpy as np

from . import core
from ._env import quiet_import_tensorflow
from ._validate import check_int
from ._validate import check_positive as _check_positive
from .grads import dense_signal_pass, diagnose, per_layer_gain, true_norm

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
    "non-finite-data",
    "default-loss",
    "non-finite-weights",
    "non-finite-forward",
    "non-finite-loss",
    "non-finite-gradient",
    "none-gradient",
    "vanishing",
    "exploding",
    "vanishing-through-time",
    "exploding-through-time",
    "batchnorm-statistics",
    "loss-scale-overflow",
    "large-gradient",
    "retracing",
)


# ----------------------------------------------------------------------------- validation
def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


def _prepare(model, x, y):
    """Coerced ``x`` and ``y`` (:func:`gradlab.core.coerce_batch`), the model built, its variables."""
    core.check_model(model)
    x, y = core.coerce_batch(model, x, y)
    if not model.built:
        model(tf.nest.map_structure(lambda t: t[:1], x))
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model {model.name!r} has no trainable variables: there is nothing to train")
    return x, y, variables


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
    """Forward and backward numbers of one layer call, recorded while the model ran.

    One row per call of a layer (nested models expanded; a layer applied twice has a second row
    named ``"<name> (call 2)"``). ``signal`` is the norm of dLoss/d(pre-activation) for a
    ``Dense`` layer (as in chapter 01) and of dLoss/d(output) for every other layer (all its
    outputs together for a layer with several outputs; ``None`` when no output reaches the loss).
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
    #: For a model with a recurrent layer: the gradient norm of the loss with respect to each
    #: time step of the first recurrent layer's input, earliest first (``None`` otherwise).
    #: Steps masked as padding (``Embedding(mask_zero=True)``, ``Masking``) are left out.
    time_step_norms: np.ndarray | None = None
    time_step_layer: str | None = None
    #: The loss scale of a ``LossScaleOptimizer`` (mixed precision) the gradients were taken with.
    loss_scale: float | None = None
    #: What the loss is: ``"mean squared error + model.losses"``, the compiled loss, or ``loss_fn``.
    loss_description: str = ""
    training: bool = True
    #: The model's compute dtype as it ran (``float16`` under ``mixed_float16``).
    compute_dtype: str = "float32"
    #: NaN/inf found in ``x`` or ``y`` themselves.
    data_problems: tuple[str, ...] = ()

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
            if self.status == "n/a" and self.message:
                lines.append(f"  ({self.message})")
            lines.append(f"  {'variable':<{w}}  {'gradient norm':>13}")
            for v in self.variables:
                g = "None" if v.grad_norm is None else _fmt(v.grad_norm)
                lines.append(f"  {v.path:<{w}}  {g:>13}")
        if self.time_step_norms is not None and self.time_step_norms.size:
            t = self.time_step_norms
            lines.append(f"  time steps of {self.time_step_layer!r} (input side, earliest first): "
                         f"{t.size} steps, first {_fmt(t[0])}, last {_fmt(t[-1])}")
        if self.loss_scale is not None:
            lines.append(f"  mixed precision: compute {self.compute_dtype}, loss scale {self.loss_scale:g}")
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


# ----------------------------------------------------------------------------- measurements
def _all_finite(t) -> bool:
    return bool(tf.reduce_all(tf.math.is_finite(t)).numpy())


def _joint_norm(grads) -> float | None:
    norms = [true_norm(g) for g in grads if g is not None]
    return math.sqrt(sum(n * n for n in norms)) if norms else None


def _time_step_norms(grad, mask=None) -> np.ndarray:
    """Per-time-step norms of a ``(batch, time, ...)`` gradient, earliest first, in float64.

    With a Keras ``mask`` of shape ``(batch, time)`` (padding from ``Embedding(mask_zero=True)``)
    the masked steps are left out: the recurrent layer skips them, so their gradient is 0 by
    construction, not because it vanished. A step masked in every example is dropped; a step
    masked in some examples is the norm over the examples where it counts, scaled by
    ``sqrt(batch / count)`` so that it compares with the fully used steps.
    """
    g = tf.cast(grad, tf.float64)
    axes = [a for a in range(g.shape.rank) if a not in (0, 1)]
    per = tf.reduce_sum(tf.square(g), axis=axes).numpy() if axes else tf.square(g).numpy()
    if mask is not None:
        m = np.asarray(tf.convert_to_tensor(mask).numpy()).astype(bool)
        if m.shape == per.shape:
            count = m.sum(axis=0)
            keep = count > 0
            sums = (per * m).sum(axis=0)
            return np.sqrt(sums[keep] * (per.shape[0] / count[keep]))
    return np.sqrt(per.sum(axis=0))


def _time_change_text(t: np.ndarray) -> str:
    """How the gradient changes from the last time step to the first, without "inf×"."""
    if t[0] == 0:
        return "underflowed to 0 at the first step"
    if t[-1] == 0:
        return f"is exactly 0 at the last step and {t[0]:.3g} at the first"
    return (f"changes {per_layer_gain(t):.3g}× per step, {t[0] / t[-1]:.2g}× from the last "
            "time step to the first")


#: Layers that normalize their input: after them, per-layer gradient ratios measure the
#: normalization's rescaling, not the initializer.
NORMALIZATION_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                        keras.layers.GroupNormalization)


def _normalized_layers(calls, diagnosed_names) -> tuple[list[str], int]:
    """The diagnosed weighted layers whose output goes straight into a normalization layer,
    and how many diagnosed non-normalization layers there are."""
    norm_inputs = set()
    for c in calls:
        if isinstance(c.layer, NORMALIZATION_LAYERS):
            norm_inputs.update(id(t) for t in tf.nest.flatten(c.inputs))
    names = set(diagnosed_names)
    candidates = [c for c in calls if c.name in names and not isinstance(c.layer, NORMALIZATION_LAYERS)]
    followed = [c.name for c in candidates if any(id(t) in norm_inputs for t in c.outputs)]
    return followed, len(candidates)


#: BatchNormalization over this few values per channel gives statistics that are mostly noise.
BN_TINY_VALUES = 16


def _batchnorm_findings(calls, training: bool) -> list[str]:
    """What is wrong with the BatchNorm statistics of this pass, in plain words."""
    tiny, untrained = [], []
    for c in calls:
        layer = c.layer
        if not isinstance(layer, keras.layers.BatchNormalization) or c.inputs is None:
            continue
        shape = tuple(int(d) for d in tf.nest.flatten(c.inputs)[0].shape)
        axis = layer.axis if isinstance(layer.axis, int) else layer.axis[0]
        per_channel = int(np.prod([d for i, d in enumerate(shape) if i != axis % len(shape)]))
        if training and per_channel <= BN_TINY_VALUES:
            spatial = "×".join(str(d) for i, d in enumerate(shape[1:], 1) if i != axis % len(shape))
            tiny.append((c.name, per_channel, shape[0], spatial))
        if not training:
            mean = tf.convert_to_tensor(layer.moving_mean)
            var = tf.convert_to_tensor(layer.moving_variance)
            if not bool(tf.reduce_any(mean != 0).numpy()) and not bool(tf.reduce_any(var != 1).numpy()):
                untrained.append(c.name)
    out = []
    if tiny:
        name, n, batch, spatial = min(tiny, key=lambda t: t[1])
        where = f"batch {batch} × {spatial} feature map" if spatial else f"batch {batch}"
        out.append(f"{len(tiny)} BatchNormalization layer{'s' if len(tiny) > 1 else ''} normalize each "
                   f"channel over at most {BN_TINY_VALUES} values (fewest: {name!r}, {n} values = {where}), "
                   "so their batch statistics are mostly noise and the gradient through them is erratic")
    if untrained:
        out.append(f"{len(untrained)} BatchNormalization layer{'s' if len(untrained) > 1 else ''} (first: "
                   f"{untrained[0]!r}) still hold their initial moving statistics (mean 0, variance 1), so "
                   "with training=False they do not normalize anything")
    return out


def _causes(loss_closure, variables, none_idx: bool, nonfinite: bool):
    """Ask gradlab.causes why gradients are None / where NaN is born; ``({}, None)`` on failure."""
    reasons, source = {}, None
    try:
        from .causes import explain_none_gradients, find_nonfinite_source
    except ImportError:  # pragma: no cover - causes.py is part of the package
        return reasons, source
    try:
        if none_idx:
            reasons = dict(explain_none_gradients(loss_closure, variables) or {})
    except Exception:  # noqa: BLE001 - the generic text stays when the explanation fails
        reasons = {}
    try:
        if nonfinite:
            source = find_nonfinite_source(loss_closure, variables)
    except Exception:  # noqa: BLE001
        source = None
    return reasons, source


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


def _none_causes_text(causes: dict) -> str:
    """The causes of ``None`` gradients, variables that share a cause named together."""
    groups: dict[str, list[str]] = {}
    for path, cause in causes.items():
        groups.setdefault(cause, []).append(path)
    if len(groups) == 1:
        return f": {next(iter(groups))}."
    return " (" + "; ".join(f"{', '.join(ps)}: {c}" for c, ps in groups.items()) + ")."


_NONE_FIXES = (
    (("stop_gradient", "StopGradient"),
     "if the stop is deliberate, freeze what sits behind it (layer.trainable = False) so nothing "
     "expects a gradient; otherwise take tf.stop_gradient off the path"),
    (("ArgMax", "ArgMin", "Round", "Floor", "Ceil", "Cast", "comparison", "numpy_function"),
     "that op has no gradient: use a differentiable stand-in (softmax instead of argmax, a "
     "straight-through estimator with tf.custom_gradient for round or sign, float instead of "
     "integer casts; chapter 06)"),
    (("never read", "discarded", "not used"),
     "use the layer's output in call (or remove the layer, or set trainable = False)"),
    (("NumPy",), "keep the computation in TensorFlow ops: .numpy() and np.* leave the tape"),
    (("integer",), "make the variable a float variable; integers never get gradients"),
)


def _none_fix(causes: dict) -> str:
    """A fix that matches the named causes; the generic checklist when none matches."""
    fixes = [fix for keys, fix in _NONE_FIXES
             if any(k in cause for cause in causes.values() for k in keys)]
    if fixes:
        return "; ".join(dict.fromkeys(fixes)) + "."
    return ("check that the layer's output really uses it (a forgotten term, a wrong return value, "
            "a NumPy round-trip, work outside the tape); chapter 02 lists seven causes.")


def _problems(report_args: dict, *, huge_above: float, extra: dict | None = None) -> list[Problem]:
    r = report_args
    extra = extra or {}
    variables: tuple[VariableStats, ...] = r["variables"]
    out: list[Problem] = []
    if extra.get("default_loss"):
        out.append(Problem(
            "default-loss",
            "The model has its own train_step and is not compiled with a loss, so this report measures "
            "the mean squared error (the default), which may not be the loss your train_step uses.",
            "pass your loss as loss_fn (loss_fn(y_true, y_pred) -> scalar), or compile the model with it.",
        ))
    if r["data_problems"]:
        out.append(Problem(
            "non-finite-data",
            f"The data itself is not finite: {'; '.join(r['data_problems'])}. Every number computed "
            "from it is NaN too, so nothing here says anything about the model.",
            "clean the batch (drop or impute the rows, check the loading and any division or log in "
            "the preprocessing), e.g. find them with np.isfinite(x).all(axis=1).",
        ))
        return out
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
            + (f": {extra['nonfinite_source']}" if extra.get("nonfinite_source")
               else ": an op with an infinite derivative (sqrt or norm at 0, log near 0)."),
            "the fix named above; clipping cannot repair NaN." if extra.get("nonfinite_source")
            else "add an epsilon (tf.sqrt(x + 1e-12)) or use a safe op; clipping cannot repair NaN.",
        ))
    none = [v.path for v in variables if v.grad_norm is None]
    if none:
        out.append(Problem(
            "none-gradient",
            f"No gradient (None) for {', '.join(none)}: the loss does not depend on "
            f"{'these variables' if len(none) > 1 else 'this variable'} through recorded operations"
            + (_none_causes_text(extra["none_causes"]) if extra.get("none_causes") else "."),
            _none_fix(extra.get("none_causes") or {}),
        ))
    if extra.get("loss_scale_overflow"):
        out.append(Problem(
            "loss-scale-overflow",
            f"With the loss scale {r['loss_scale']:g} the float16 gradients overflow: a "
            "LossScaleOptimizer skips this step and halves the scale (normal in the first steps of "
            "mixed-precision training; the unscaled gradients are what this report shows).",
            "nothing to do if it happens only in the first steps; if every step overflows, look for "
            "layers whose float16 outputs are huge, or keep them in float32 (dtype='float32').",
        ))
    bn = extra.get("batchnorm") or []
    if bn:
        out.append(Problem(
            "batchnorm-statistics",
            "BatchNormalization statistics are the likely cause of the gradient sizes below: "
            + "; ".join(bn) + ".",
            ("use a larger batch, or a larger input so the last feature maps are bigger than 1×1; or "
             "replace BatchNormalization by GroupNormalization/LayerNormalization; for a trained model, "
             "freeze its BatchNorm layers (layer.trainable = False runs them in inference mode)."
             if r["training"] else
             "inspect with training=True (the batch statistics fit trains with), or train the model "
             "first so that its moving statistics describe the data."),
        ))
    cause_bn = "the BatchNormalization statistics (see above), not the initializer: "
    status = extra.get("layer_status", r["status"])
    normalized = extra.get("normalized") or []
    if status in ("vanishing", "exploding") and r["diagnosed_layers"] and normalized and not bn:
        shown = ", ".join(repr(n) for n in normalized[:3]) + (" …" if len(normalized) > 3 else "")
        out.append(Problem(
            status,
            f"{'Vanishing' if status == 'vanishing' else 'Exploding'} gradient ratio: {_ratio_text(r)}. "
            f"But {len(normalized)} of the layers compared feed a normalization layer ({shown}), which "
            "divides the gradient by the scale of its input: in such a network the layer-to-layer ratio "
            "measures that rescaling (and the skip connections), not the initializer.",
            "do not change the initializer because of this ratio. Whether the early layers learn shows in "
            "training: run a few steps (gl.train_steps, or fit) and watch the loss, and compare each "
            "layer's gradient with its weights; clip the global norm if the steps are unstable.",
        ))
    elif status == "vanishing" and r["diagnosed_layers"]:
        out.append(Problem(
            "vanishing",
            f"Vanishing gradients: {_ratio_text(r)}, so the early layers barely learn.",
            (cause_bn + "fix those first." if bn else
             "use relu with he_normal (or leaky_relu), fewer layers, or normalization; try the "
             "combination in gl.GradientExplorer first."),
        ))
    elif status == "exploding" and r["diagnosed_layers"]:
        out.append(Problem(
            "exploding",
            f"Exploding gradients: {_ratio_text(r)}, so the early layers get huge updates.",
            (cause_bn + "fix those first, and clip the global norm." if bn else
             "use an initializer matched to the activation (glorot, he) and clip the global norm."),
        ))
    time_status = extra.get("time_status")
    if time_status in ("vanishing", "exploding"):
        t = r["time_step_norms"]
        ratio = ("underflowed to 0" if t[0] == 0 else f"is {t[0]:.3g} while the gradient at the last step is 0"
                 if t[-1] == 0 else f"is {t[0] / t[-1]:.2g}× the gradient at the last step")
        grows = time_status == "exploding"
        out.append(Problem(
            f"{time_status}-through-time",
            f"{'Exploding' if grows else 'Vanishing'} gradients through time in {r['time_step_layer']!r}: "
            f"over {t.size} steps the gradient at the first time step {ratio}, so "
            + ("early inputs get huge updates." if grows else "the model cannot learn from early inputs."),
            ("clip the global norm (clipnorm=1.0), lower the learning rate, or shorten the sequences."
             if grows else
             ("if the target depends on early inputs, use LSTM or GRU instead of "
              f"{extra.get('recurrent_kind')}, shorter sequences (or truncated backpropagation), or "
              "attention over the sequence."
              if extra.get("recurrent_kind") in ("SimpleRNN", "RNN") else
              "a gated layer forgets early inputs while its gates are untrained; if the target depends "
              "on them, train longer, shorten the sequences, or add attention over the sequence "
              "(Bidirectional helps when the end of the sequence matters less).")),
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
    optimizer=None,
    vanish_below: float = 1e-3,
    explode_above: float = 1e3,
    huge_above: float = 1e3,
) -> StepReport:
    """Run one training step's forward and backward pass under a tape and report (chapter 04).

    Works on any Keras model (Sequential, functional, nested, subclassed; layers with several
    outputs, shared layers, recurrent layers, mixed precision): its leaf layers are tapped while
    the model runs its own call (:func:`gradlab.core.tap_layers`). The loss is ``loss_fn(y,
    y_pred)`` when given, else the model's compiled loss (``model.compute_loss``) when it is
    compiled with one, else the mean squared error; ``model.losses`` (regularizers) are added.

    ``training=True`` (the default) runs the pass as ``fit`` runs a training step: dropout is
    on and BatchNormalization normalizes with the batch's statistics. The model is **not
    changed**: every variable, trainable or not (BatchNorm moving statistics, dropout seeds),
    is put back bit for bit afterwards, so two calls give the same report. ``training=False``
    inspects inference mode (what ``evaluate`` and ``predict`` run).

    ``optimizer`` (default: the compiled optimizer, if any): with a ``LossScaleOptimizer`` the
    gradients are taken of the scaled loss and unscaled, as ``fit`` takes them, and the loss
    scale is shown; a ``mixed_float16`` model without one gets the scale ``compile`` would give it.

    The report holds

    * the loss; one row per layer call: the output's standard deviation, whether it is finite,
      the back-propagated signal and the layer's weight-gradient norm; the first layer whose
      output is NaN/inf;
    * :func:`gradlab.grads.diagnose`'s verdict on the signal of every layer with weights but the
      last (for a stack of Dense layers these are the numbers of :func:`gradlab.gradient_report`),
      and for a model with a recurrent layer ``time_step_norms`` (padded steps left out), with a
      verdict through time. When most layers compared feed a normalization layer (BatchNorm,
      LayerNorm, GroupNorm), a vanishing or exploding ratio is reported as what it is, the
      normalization's rescaling, without initializer advice; BatchNorm statistics are named
      only when they explain a vanishing or exploding verdict;
    * every trainable variable's gradient norm, ``None`` gradients by variable path (with their
      cause from :mod:`gradlab.causes`), and variables whose values are already NaN/inf;
    * NaN/inf in ``x`` or ``y`` themselves, reported as a data problem;
    * with ``step_fn`` (your training step, called as ``step_fn(x, y)`` once, *after* the
      inspection, so it does update the weights): how often it has traced if it is a
      ``tf.function`` (or a :class:`gradlab.TraceCounter`), and whether this call traced.

    :attr:`StepReport.problems` lists the findings in plain words, each with a fix.
    """
    core.check_model(model)
    loss = core.resolve_loss(model, loss_fn)
    if step_fn is not None and not callable(step_fn):
        raise ValueError(f"step_fn must be None or a callable step_fn(x, y); got {type(step_fn).__name__}")
    _check_flag("training", training)
    vanish_below = _check_positive("vanish_below", vanish_below)
    explode_above = _check_positive("explode_above", explode_above)
    huge_above = _check_positive("huge_above", huge_above)
    if not vanish_below < explode_above:
        raise ValueError(f"need vanish_below < explode_above; got {vanish_below} and {explode_above}")
    if optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be None or a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    x, y, variables = _prepare(model, x, y)
    opt = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if opt is None and getattr(model.dtype_policy, "name", "") == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())  # what compile would add
    scale = core.loss_scale(opt) if opt is not None else None
    data = tuple(core.data_problems(x, y))

    saved = core.snapshot(model)
    try:
        with tf.GradientTape(persistent=True) as tape:
            with core.tap_layers(model, tape) as taps:
                y_pred = model(x, training=training)
            loss.check(y, y_pred)
            loss_value = loss(x, y, y_pred, training)
            target = loss_value if scale is None else loss_value * scale
        calls = taps.calls
        signal_targets = [[c.pre_activation] if c.pre_activation is not None else list(c.outputs)
                          for c in calls]
        recurrent = next((c for c in calls if core.is_recurrent(c.layer)), None)
        rnn_inputs = [t for t in tf.nest.flatten(recurrent.inputs)
                      if isinstance(t, tf.Tensor) and t.dtype.is_floating][:1] if recurrent else []
        flat = [t for ts in signal_targets for t in ts]
        all_grads = tape.gradient(target, variables + flat + rnn_inputs)
        del tape
        if scale is not None:
            all_grads = [None if g is None else (g / tf.cast(scale, g.dtype)) for g in all_grads]
        grads = all_grads[: len(variables)]
        flat_grads = all_grads[len(variables): len(variables) + len(flat)]
        rnn_grad = all_grads[len(variables) + len(flat):]
        time_norms = None
        if recurrent is not None and rnn_grad and rnn_grad[0] is not None and rnn_grad[0].shape.rank >= 2:
            time_norms = _time_step_norms(rnn_grad[0], recurrent.mask)

        owner = core.variable_layers(model)
        var_stats = tuple(
            VariableStats(
                path=core.variable_path(v),
                layer=owner.get(id(v), "?"),
                shape=tuple(int(d) for d in v.shape),
                grad_norm=None if g is None else true_norm(g),
                grad_finite=True if g is None else core.all_finite([g]).numpy().item(),
                value_finite=_all_finite(v),
            )
            for v, g in zip(variables, grads, strict=True)
        )
        global_norm = float(core.global_norm(grads).numpy())

        stats_by_var = {id(v): vs for v, vs in zip(variables, var_stats, strict=True)}
        layer_stats, i = [], 0
        for c, ts in zip(calls, signal_targets, strict=True):
            gs = flat_grads[i: i + len(ts)]
            i += len(ts)
            first_call = c.index == 0
            own = [stats_by_var[id(v)] for v in c.layer.trainable_weights if id(v) in stats_by_var]
            norms = [vs.grad_norm for vs in own if vs.grad_norm is not None]
            out0 = c.outputs[0] if c.outputs else None
            layer_stats.append(LayerStats(
                name=c.name,
                kind=type(c.layer).__name__,
                output_std=float(tf.math.reduce_std(tf.cast(out0, tf.float64)).numpy()) if out0 is not None
                else math.nan,
                output_finite=all(_all_finite(o) for o in c.outputs),
                signal=_joint_norm(gs),
                weight_grad=(math.sqrt(sum(n * n for n in norms)) if norms else None) if first_call else None,
                has_weights=bool(own) and first_call,
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
        if data:
            status, message = "n/a", "the data holds NaN/inf: fix the data first"
            diagnosed = []
        elif len(diagnosed) == 1:
            finite = diagnosed[0].signal is not None and math.isfinite(diagnosed[0].signal)
            status = "healthy" if finite else "non-finite"
            message = ("one hidden layer: no depth for the signal to vanish or explode over" if finite
                       else f"the signal of {diagnosed[0].name!r} is NaN/inf")
        elif diagnosed:
            status, message = diagnose([ls.signal for ls in diagnosed], vanish_below=vanish_below,
                                       explode_above=explode_above)
            message = _name_layers(message, [ls.name for ls in diagnosed])
        else:
            status, message = "n/a", ("no layer call could be tapped (the model's call runs inside a "
                                      "tf.function, or reads its weights directly): per-variable view")
        layer_status = status
        bn = [] if data else _batchnorm_findings(calls, training)
        normalized, candidates = _normalized_layers(calls, [ls.name for ls in diagnosed])
        normalized = normalized if candidates and 2 * len(normalized) >= candidates else []
        if status in ("vanishing", "exploding"):
            if bn:
                message = message.split(". ")[0] + (". The likely cause is the BatchNormalization statistics "
                                                    "(see the problems), not the initializer.")
            elif normalized:
                first, last = diagnosed[0], diagnosed[-1]
                if first.signal == 0:
                    head = f"the signal at {first.name!r} underflowed to exactly 0"
                elif last.signal == 0:
                    head = f"the signal at {first.name!r} is {first.signal:.3g} and exactly 0 at {last.name!r}"
                else:
                    head = (f"the signal at {first.name!r} is {first.signal / last.signal:.2g}× the signal at "
                            f"{last.name!r}")
                message = (f"{head}, but {len(normalized)} of the "
                           f"{candidates} layers diagnosed feed a normalization layer, which rescales the "
                           "gradient by the scale of its input: this ratio is not a statement about the "
                           "initializer (see the problems).")
        else:
            bn = []  # BatchNorm statistics are reported only when they explain a finding
        time_status = None
        if time_norms is not None and time_norms.size > 1 and not data:
            with np.errstate(divide="ignore", invalid="ignore"):
                time_status, _ = diagnose(time_norms, vanish_below=vanish_below, explode_above=explode_above)
            if time_status != "healthy" and status in ("healthy", "n/a"):
                t = time_norms
                change = _time_change_text(t)
                status, message = time_status, (
                    f"through time in {recurrent.name!r}: the gradient with respect to its input {change} "
                    f"({t.size} steps), so {'early inputs barely count' if time_status == 'vanishing' else 'early inputs get huge updates'}.")

        extra = {"time_status": time_status, "batchnorm": bn, "layer_status": layer_status,
                 "normalized": normalized, "default_loss": loss.default_for_custom_step,
                 "recurrent_kind": None if recurrent is None else type(recurrent.layer).__name__}
        if scale is not None and not all(vs.grad_finite for vs in var_stats) and math.isfinite(
                float(loss_value.numpy())):
            # overflow of the *scaled* float16 gradients: check whether the unscaled ones are finite
            with tf.GradientTape() as tape2:
                y2 = model(x, training=training)
                l2 = loss(x, y, y2, training)
            plain = tape2.gradient(l2, variables)
            core.restore(saved)
            extra["loss_scale_overflow"] = bool(core.all_finite(plain).numpy())
        none_idx = [k for k, g in enumerate(grads) if g is None]
        nonfinite = any(not vs.grad_finite for vs in var_stats) and not extra.get("loss_scale_overflow")
        if (none_idx or nonfinite) and not data:
            def loss_closure():
                return loss(x, y, model(x, training=training), training)

            reasons, source = _causes(loss_closure, variables, bool(none_idx), nonfinite)
            core.restore(saved)
            extra["none_causes"] = {core.variable_path(variables[k]): c for k, c in reasons.items()
                                    if 0 <= k < len(variables)}
            extra["nonfinite_source"] = source
    finally:
        core.restore(saved)

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
        loss=float(loss_value.numpy()),
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
        time_step_norms=time_norms,
        time_step_layer=None if recurrent is None else recurrent.name,
        loss_scale=None if scale is None else float(scale.numpy()),
        loss_description=loss.description,
        training=training,
        compute_dtype=str(getattr(model, "compute_dtype", "float32")),
        data_problems=data,
    )
    problems = _problems(args, huge_above=huge_above, extra=extra)
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
    clip=None,
    stop_on_nonfinite: bool = True,
    stop_on_none: bool = False,
    monitor_signals: bool = False,
    progress: bool = False,
    progress_every: int | None = None,
) -> TrainingRun:
    """Train ``model`` on the batch ``(x, y)`` for ``steps`` steps, watching every step (chapter 04).

    The one monitored training loop of gradlab (:func:`gradlab.train_mlp` is a view of it). The
    loss is ``loss_fn(y, y_pred)``, else the model's compiled loss, else the mean squared error,
    plus ``model.losses`` (:func:`gradlab.core.resolve_loss`). ``x`` and ``y`` may be NumPy
    arrays of any float dtype (converted as ``fit`` converts them); NaN/inf in the data is a
    ``ValueError`` about the data. An eager tape first finds the variables whose gradient is
    ``None``; they are left out of the updates (with ``stop_on_none`` the run stops there). That
    probe is a training-mode pass, so every variable is put back after it: ``steps=n`` moves
    BatchNorm statistics and dropout seeds exactly as ``n`` steps of ``fit``. An optimizer
    already built for another model's variables is a ``ValueError``.
    Each step clips (``clip_global_norm=t`` is ``clip=("global_norm", t)``; any mode of
    :func:`gradlab.clip_gradients` works) and, with ``stop_on_nonfinite``, stops at the first
    NaN/inf loss or gradient *without* applying that step. A ``mixed_float16`` model trains as
    in ``fit``: its optimizer is wrapped in a ``LossScaleOptimizer`` unless it is one, the loss
    is scaled and a step whose scaled float16 gradients overflow is skipped by the optimizer
    (which lowers its scale) instead of stopping the run. Each step's loss (before its update)
    and global gradient norm (before clipping, float64, unscaled) are recorded.

    The steps run as one ``tf.function``; with ``monitor_signals`` they run eagerly through
    :func:`gradlab.grads.dense_signal_pass` and record every hidden Dense layer's signal norm
    (Dense models only). The model is trained in place; build a fresh optimizer for each model.
    """
    core.check_model(model)
    loss = core.resolve_loss(model, loss_fn)
    optimizer = core.fit_optimizer(model, optimizer)
    steps = check_int("steps", steps, 1, 100_000)
    clip = core.check_clip(clip)
    if clip_global_norm is not None:
        clip_global_norm = _check_positive("clip_global_norm", clip_global_norm)
        if clip is not None:
            raise ValueError("give clip_global_norm or clip, not both")
        clip = ("global_norm", clip_global_norm)
    for flag_name, flag in (("stop_on_nonfinite", stop_on_nonfinite), ("stop_on_none", stop_on_none),
                            ("monitor_signals", monitor_signals), ("progress", progress)):
        _check_flag(flag_name, flag)
    if progress_every is not None:
        progress_every = check_int("progress_every", progress_every, 1)
    x, y, variables = _prepare(model, x, y)
    data = core.data_problems(x, y)
    if data:
        raise ValueError("the data is not finite: " + "; ".join(data) +
                         ". Clean the batch first (this is a data problem, not a model problem)")
    scaled = core.loss_scale(optimizer) is not None
    core.check_optimizer(optimizer, variables)
    # The probe that finds the None gradients is a training-mode pass: put every variable back
    # (BatchNorm moving statistics, dropout seed), so that n steps here are n steps of fit.
    saved = core.snapshot(model)
    try:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss.check(y, y_pred)
            first_loss = loss(x, y, y_pred, True)
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
    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(x, y, model(x, training=True), True)
        grads = core.compute_gradients(tape, value, trainable, optimizer)
        out = core.apply_update(optimizer, grads, trainable, clip=clip, check_finite=stop_on_nonfinite)
        return value, out["global_norm"]

    def monitored(x, y):
        p = dense_signal_pass(model, x, y, loss=loss, training=True, optimizer=optimizer)
        index = {id(v): i for i, v in enumerate(p.variables)}
        grads = [p.grads[index[id(v)]] for v in trainable]
        signal = np.array([true_norm(g) if g is not None else 0.0 for g in p.signals], dtype=np.float64)
        norm = core.global_norm(grads)
        if stop_on_nonfinite and not (math.isfinite(float(p.loss.numpy())) and math.isfinite(float(norm.numpy()))) \
                and not scaled:
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
            value, gnorm, signal = monitored(x, y)
            signals.append(signal)
        else:
            value, gnorm = step(x, y)
        losses.append(float(value.numpy()))
        norms.append(float(gnorm.numpy()))
        finite_loss = math.isfinite(losses[-1])
        finite = finite_loss and (math.isfinite(norms[-1]) or scaled)
        if progress and (i % every == 0 or i == steps or not finite):
            done = int(20 * i / steps)
            print(f"[{'#' * done}{'.' * (20 - done)}] step {i:>4}/{steps}  loss {losses[-1]:.4g}"
                  f"  grad norm {norms[-1]:.3g}")
        if stop_on_nonfinite and not finite:
            stopped = i
            if progress:
                print(f"stopped at step {i}: the loss or a gradient is not finite")
            break
    return TrainingRun(tuple(losses), tuple(norms), none, stopped, int(steps), tuple(signals))
