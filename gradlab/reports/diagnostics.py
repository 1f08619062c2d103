"""One-call inspection of a training step (chapters 04 and 06).

Pure computation: TensorFlow and Keras in, a :class:`gradlab.reports.report.StepReport` out. Nothing
here imports ipywidgets or matplotlib.

:func:`inspect_training_step` runs the forward and backward pass of one training step under a
``GradientTape`` (the core's inputs, loss, loss scaling, norms and per-layer taps), measures
every layer call and variable, gives the verdict on the back-propagated signal
(:func:`gradlab.reports.verdict.judge`, knowing where normalization layers sit), asks
:mod:`gradlab.reports.causes` why gradients are ``None`` or NaN, and lets the rules of
:mod:`gradlab.reports.rules` turn all of it into problems with fixes. Everything the pass touches is
put back afterwards (:func:`gradlab.core.snapshot`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_positive, renamed_keywords
from ..i18n import _, ngettext
from ..topics.tracing import TraceCounter, tracing_count
from .causes import (
    explain_none_gradients,
    find_nonfinite_source,
    lossless_head_causes,
    lossless_outputs,
)
from .report import LayerStats, StepReport, VariableStats
from .rules import StepContext, problems, report_status, step_status
from .units import dead_fractions
from .verdict import GAIN_TOLERANCE, MILD_RATIO, Verdict, judge

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "BN_TINY_VALUES",
    "inspect_training_step",
    "normalization_crossings",
]

#: BatchNormalization over this few values per channel gives statistics that are mostly noise.
BN_TINY_VALUES = 16


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


# ----------------------------------------------------------------------------- measurements
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
        where = (_("batch {batch} × {spatial} feature map") if spatial else _("batch {batch}")).format(
            batch=batch, spatial=spatial)
        out.append(ngettext(
            "{count} BatchNormalization layer normalizes each channel over at most {limit} values (fewest: "
            "{name!r}, {n} values = {where}), so its batch statistics are mostly noise and the gradient through "
            "it is erratic",
            "{count} BatchNormalization layers normalize each channel over at most {limit} values (fewest: "
            "{name!r}, {n} values = {where}), so their batch statistics are mostly noise and the gradient "
            "through them is erratic", len(tiny)).format(count=len(tiny), limit=BN_TINY_VALUES, name=name, n=n,
                                                         where=where))
    if untrained:
        out.append(ngettext(
            "{count} BatchNormalization layer ({first!r}) still holds its initial moving statistics (mean 0, "
            "variance 1), so with training=False it does not normalize anything",
            "{count} BatchNormalization layers (first: {first!r}) still hold their initial moving statistics "
            "(mean 0, variance 1), so with training=False they do not normalize anything",
            len(untrained)).format(count=len(untrained), first=untrained[0]))
    return out


def _normalizing(layer, training: bool) -> list:
    """The layers inside ``layer`` that normalize by their input's statistics in this pass: a
    BatchNormalization in inference mode applies fixed moving statistics, so it does not."""
    return [n for n in core.normalization_inside(layer)
            if training or not isinstance(n, keras.layers.BatchNormalization)]


def normalization_crossings(calls, positions, signals, training: bool = True) -> tuple[float, list[str]]:
    """How much of the signal's change happens across normalization layers.

    ``positions`` are the call positions of the compared layers (input side first, in call
    order) and ``signals`` their signal norms. Going back from layer ``b`` to the layer ``a``
    before it passes the backward pass of every call in ``(a, b]``; a segment with a
    normalization call there (one that normalizes by its input's statistics in this pass)
    crosses it. Returns ``(log_rest, names)``: the natural log of the total ratio left after
    removing the crossing segments, and the normalization layers the segments cross.
    """
    norm_positions = []
    for c in calls:
        inner = _normalizing(c.layer, training)
        norm_positions += [(c.position, c.name if n is c.layer else f"{c.name}/{n.name}") for n in inner]
    log_rest, names = 0.0, []
    pairs = list(zip(positions, signals, strict=True))
    for (a, sa), (b, sb) in zip(pairs, pairs[1:], strict=False):
        if not (sa and sb and math.isfinite(sa) and math.isfinite(sb)):
            return math.nan, []
        crossed = [name for p, name in norm_positions if a < p <= b]
        if crossed:
            names.extend(n for n in crossed if n not in names)
        else:
            log_rest += math.log(sa / sb)
    return log_rest, names


def _explained_by_normalization(verdict: Verdict, calls, positions, signals, training: bool) -> list[str]:
    """The normalization layers that carry a vanishing/exploding change: the rest of the chain,
    with the crossing segments removed, would not fire the rule in the verdict's direction."""
    if verdict.status not in ("vanishing", "exploding") or len(positions) < 2:
        return []
    log_rest, names = normalization_crossings(calls, positions, signals, training)
    if not names or not math.isfinite(log_rest):
        return []
    segments = len(positions) - 1
    rest = math.exp(log_rest)
    crossing = sum(1 for a, b in zip(positions, positions[1:], strict=False)
                   if any(a < c.position <= b and _normalizing(c.layer, training) for c in calls))
    plain = max(segments - crossing, 1)
    gain = rest ** (1.0 / plain)
    low, high = 1.0 - GAIN_TOLERANCE, 1.0 / (1.0 - GAIN_TOLERANCE)
    if verdict.status == "vanishing":  # would the rest alone still be vanishing?
        fires = rest < verdict.vanish_below or (gain < low and rest < 1.0 / MILD_RATIO)
    else:
        fires = rest > verdict.explode_above or (gain > high and rest > MILD_RATIO)
    return [] if fires else names


def _main_activation(calls, names) -> str | None:
    wanted = set(names)
    acts = [getattr(c.layer.activation, "__name__", None) for c in calls
            if c.name in wanted and isinstance(c.layer, keras.layers.Dense)]
    acts += [c.layer.get_config().get("activation") for c in calls if isinstance(c.layer, keras.layers.Activation)]
    acts = [a for a in acts if a and a != "linear"]
    return collections.Counter(acts).most_common(1)[0][0] if acts else None


def _looks_untrained(model) -> bool | None:
    """True when every bias is exactly 0 (Keras's initial value), None without biases."""
    biases = [v for v in model.trainable_variables if core.variable_path(v).split("/")[-1].startswith("bias")]
    if not biases:
        return None
    return all(not bool(tf.reduce_any(tf.not_equal(tf.convert_to_tensor(b), 0)).numpy()) for b in biases)


def _causes(loss_closure, variables, none_idx: bool, nonfinite: bool):
    """Ask gradlab.reports.causes why gradients are None / where NaN is born; ``({}, None)`` on failure."""
    reasons, source = {}, None
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


def _joint_norm(grads) -> float | None:
    present = [g for g in grads if g is not None]
    return core.true_global_norm(present) if present else None


# ----------------------------------------------------------------------------- stage 1: validation
@dataclasses.dataclass
class _Inputs:
    """The validated arguments of :func:`inspect_training_step`, as every stage reads them."""

    model: object
    x: object
    y: object
    sw: object
    loss: core.Loss
    variables: list
    optimizer: object
    scale: object
    data: tuple
    training: bool
    vanish_below: float
    explode_above: float
    huge_above: float


def _validate(model, x, y, loss, sample_weight, step_fn, training, optimizer, vanish_below, explode_above,
              huge_above) -> _Inputs:
    """Every argument checked, the batch converted, the model built (nothing else changes)."""
    core.check_model(model)
    loss = core.resolve_loss(model, loss)
    if step_fn is not None and not callable(step_fn):
        raise ValueError(f"step_fn must be None or a callable step_fn(x, y); got {type(step_fn).__name__}")
    _check_flag("training", training)
    vanish_below = check_positive("vanish_below", vanish_below)
    explode_above = check_positive("explode_above", explode_above)
    huge_above = check_positive("huge_above", huge_above)
    if not vanish_below < explode_above:
        raise ValueError(f"need vanish_below < explode_above; got {vanish_below} and {explode_above}")
    if optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be None or a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    if not model.built:
        saved = core.snapshot(model, False, weights=False)
        model(tf.nest.map_structure(lambda t: t[:1], x))
        core.restore(saved)
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model {model.name!r} has no trainable variables: there is nothing to train")
    opt = core.measuring_optimizer(model, optimizer)  # mixed_float16 without one: what compile would add
    scale = core.loss_scale(opt) if opt is not None else None
    return _Inputs(model, x, y, sw, loss, variables, opt, scale, tuple(core.data_problems(x, y, sw)), training,
                   vanish_below, explode_above, huge_above)


# ----------------------------------------------------------------------------- stage 2: the tapped pass
@dataclasses.dataclass
class _Tapped:
    """The tapped forward and backward pass: the loss, each call's signal gradients, the variables'."""

    loss: object
    calls: list
    signal_targets: list
    grads: list
    flat_grads: list
    recurrent: object
    time_norms: np.ndarray | None
    #: ``variable index -> Cause`` for the variables that feed only an output compiled without a loss.
    no_loss: dict = dataclasses.field(default_factory=dict)
    #: Where the scaled float16 gradients overflowed at the optimizer's loss scale: the halved
    #: scale the gradients above were taken at (:func:`gradlab.core.settle_loss_scale`), else ``None``.
    settled_scale: float | None = None


def _settled_scale(inp: _Inputs, p, grads) -> float | None:
    """The loss scale a LossScaleOptimizer halves down to on this batch when the scaled float16
    gradients of the variables (``grads``, at its scale) overflow, from the same pass (``None``:
    they do not overflow, or no halving makes them finite)."""
    if inp.scale is None or bool(core.all_finite(grads).numpy()) or not math.isfinite(float(p.loss.numpy())):
        return None
    settled = core.settle_loss_scale(lambda s: p.gradients(inp.variables, scale=s), float(inp.scale.numpy()))
    return None if settled is None else settled[0]


def _tapped_pass(inp: _Inputs) -> _Tapped:
    """The core's forward and loss with every leaf layer tapped; gradients of the loss (scaled by
    the optimizer's loss scale, then unscaled, as ``fit`` takes them) for the variables, each
    call's pre-activation (or outputs) and the first recurrent layer's input. Where that scale
    overflows float16, the gradients are taken at the scale the optimizer halves it down to."""
    p = core.forward_loss(inp.model, inp.x, inp.y, loss=inp.loss, training=inp.training, sample_weight=inp.sw,
                          taps=True, persistent=True)
    calls = p.calls
    signal_targets = [[c.pre_activation] if c.pre_activation is not None else list(c.outputs) for c in calls]
    recurrent = next((c for c in calls if core.is_recurrent(c.layer)), None)
    rnn_inputs = [t for t in tf.nest.flatten(recurrent.inputs)
                  if isinstance(t, tf.Tensor) and t.dtype.is_floating][:1] if recurrent else []
    flat = [t for ts in signal_targets for t in ts]
    n = len(inp.variables)
    all_grads = p.gradients(inp.variables + flat + rnn_inputs, inp.optimizer if inp.scale is not None else None)
    settled = _settled_scale(inp, p, all_grads[:n])
    if settled is not None:  # the gradients the optimizer applies once it has halved its scale
        all_grads = p.gradients(inp.variables + flat + rnn_inputs, scale=settled)
    heads = lossless_outputs(inp.model) if inp.loss.kind == "compiled" else []
    no_loss = lossless_head_causes(p.tape, p.y_pred, inp.variables, all_grads[:n], heads) if heads else {}
    del p.tape
    rnn_grad = all_grads[n + len(flat):]
    time_norms = None
    if recurrent is not None and rnn_grad and rnn_grad[0] is not None and rnn_grad[0].shape.rank >= 2:
        time_norms = core.step_norms(rnn_grad[0], recurrent.mask)
    return _Tapped(p.loss, calls, signal_targets, all_grads[:n], all_grads[n:n + len(flat)], recurrent, time_norms,
                   no_loss, settled)


# ----------------------------------------------------------------------------- stage 3: statistics
def _variable_stats(inp: _Inputs, grads) -> tuple:
    owner = core.variable_layers(inp.model)
    return tuple(
        VariableStats(
            path=core.variable_path(v),
            layer=owner.get(id(v), "?"),
            shape=tuple(int(d) for d in v.shape),
            grad_norm=None if g is None else core.true_norm(g),
            grad_finite=True if g is None else bool(core.all_finite([g]).numpy()),
            value_finite=core.is_finite(v),
        )
        for v, g in zip(inp.variables, grads, strict=True)
    )


def _layer_stats(inp: _Inputs, tp: _Tapped, var_stats) -> list:
    """One row per layer call: output std and finiteness, signal, the layer's weight-gradient norm."""
    stats_by_var = {id(v): vs for v, vs in zip(inp.variables, var_stats, strict=True)}
    layer_stats, i = [], 0
    for c, ts in zip(tp.calls, tp.signal_targets, strict=True):
        gs = tp.flat_grads[i: i + len(ts)]
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
            output_finite=all(core.is_finite(o) for o in c.outputs),
            signal=_joint_norm(gs),
            weight_grad=(math.sqrt(sum(n * n for n in norms)) if norms else None) if first_call else None,
            has_weights=bool(own) and first_call,
        ))
    return layer_stats


# ----------------------------------------------------------------------------- stage 4: first non-finite
def _first_nonfinite(layer_stats, var_stats) -> tuple[str | None, str | None]:
    """The first layer whose output is NaN/inf, and the first (backward order) whose gradient is."""
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
    return first_bad, first_bad_grad


# ----------------------------------------------------------------------------- stage 5: the verdict
@dataclasses.dataclass
class _Finding:
    """The verdict stage's result."""

    status: str
    message: str
    names: list
    verdict: Verdict | None = None
    normalizers: list = dataclasses.field(default_factory=list)
    batchnorm: list = dataclasses.field(default_factory=list)
    time_verdict: Verdict | None = None


def _signal_verdict(inp: _Inputs, calls, layer_stats) -> _Finding:
    """The verdict on the signal of every layer with weights but the last."""
    weighted = [(c, ls) for c, ls in zip(calls, layer_stats, strict=True) if ls.has_weights and ls.signal is not None]
    diagnosed = weighted[:-1] if len(weighted) > 1 else weighted
    names = [ls.name for _c, ls in diagnosed]
    if inp.data:
        return _Finding("n/a", _("the data holds NaN/inf: fix the data first"), [])
    if len(diagnosed) == 1:
        ls = diagnosed[0][1]
        finite = math.isfinite(ls.signal)
        return _Finding("healthy" if finite else "non-finite",
                        _("one hidden layer: no depth for the signal to vanish or explode over") if finite
                        else _("the signal of {name!r} is NaN/inf").format(name=ls.name), names)
    if not diagnosed:
        return _Finding("n/a", _("no layer call could be tapped (the model's call runs inside a tf.function, or "
                                 "reads its weights directly): per-variable view"), names)
    signals = [ls.signal for _c, ls in diagnosed]
    positions = [c.position for c, _ls in diagnosed]
    kwargs = dict(names=[repr(n) for n in names], activation=_main_activation(calls, names),
                  residual=any(isinstance(c.layer, keras.layers.Add) for c in calls)
                  and not any(core.normalization_inside(c.layer) for c in calls),
                  dtype=str(getattr(inp.model, "compute_dtype", "float32")),
                  vanish_below=inp.vanish_below, explode_above=inp.explode_above)
    verdict = judge(signals, **kwargs)
    normalizers: list[str] = []
    # BatchNorm statistics that are mostly noise explain a finding first; otherwise a change
    # carried across normalization layers is their rescaling, not the weights' scale
    if not _batchnorm_findings(calls, inp.training):
        normalizers = _explained_by_normalization(verdict, calls, positions, signals, inp.training)
    if normalizers:
        verdict = judge(signals, normalized=True, **kwargs)
    return _Finding(verdict.status, verdict.message, names, verdict, normalizers)


def _with_batchnorm(inp: _Inputs, calls, f: _Finding) -> _Finding:
    """BatchNorm statistics are reported only when they explain a vanishing or exploding verdict."""
    bn = [] if inp.data else _batchnorm_findings(calls, inp.training)
    v = f.verdict
    if v is not None and f.status in ("vanishing", "exploding") and bn and not f.normalizers:
        f.verdict = Verdict(v.status, v.finding,
                            _("The BatchNormalization statistics (see the problems) are the likely cause, "
                              "not the scale of the weights."),
                            v.ratio, v.gain, v.depth, v.rule, ("batchnorm-statistics", *v.causes), v.vanish_below,
                            v.explode_above)
        f.message = f.verdict.message
    elif f.status not in ("vanishing", "exploding") or f.normalizers:
        bn = []
    f.batchnorm = bn
    return f


def _with_time_verdict(inp: _Inputs, tp: _Tapped, f: _Finding) -> _Finding:
    """For a recurrent model, the verdict through time; it speaks when the layers' verdict has nothing."""
    if tp.time_norms is None or tp.time_norms.size <= 1 or inp.data:
        return f
    f.time_verdict = judge(tp.time_norms, unit="step", vanish_below=inp.vanish_below,
                           explode_above=inp.explode_above)
    if f.time_verdict.status != "healthy" and f.status in ("healthy", "n/a"):
        f.status = f.time_verdict.status
        f.message = _("Through time in {layer!r}: {finding} {advice}").format(
            layer=tp.recurrent.name, finding=f.time_verdict.finding, advice=f.time_verdict.advice).strip()
    return f


def _verdict(inp: _Inputs, tp: _Tapped, layer_stats) -> _Finding:
    f = _signal_verdict(inp, tp.calls, layer_stats)
    return _with_time_verdict(inp, tp, _with_batchnorm(inp, tp.calls, f))


# ----------------------------------------------------------------------------- stage 6: causes
def _explain(inp: _Inputs, grads, var_stats, overflow: bool, saved, no_loss=None) -> tuple[dict, str | None]:
    """Why gradients are ``None`` and where a NaN is born (:mod:`gradlab.reports.causes`); ``no_loss``
    (an output compiled without a loss, :func:`gradlab.reports.causes.lossless_head_causes`) names the
    cause first where it applies."""
    none_idx = [k for k, g in enumerate(grads) if g is None]
    nonfinite = any(not vs.grad_finite for vs in var_stats) and not overflow
    if not (none_idx or nonfinite) or inp.data:
        return {}, None

    def loss_closure():
        return core.compute_loss(inp.model, inp.x, inp.y, loss=inp.loss, training=inp.training,
                                 sample_weight=inp.sw)[1]

    reasons, source = _causes(loss_closure, inp.variables, bool(none_idx), nonfinite)
    reasons.update(no_loss or {})
    core.restore(saved)
    causes = {core.variable_path(inp.variables[k]): c for k, c in reasons.items() if 0 <= k < len(inp.variables)}
    return causes, source


def _run_step_fn(step_fn, x, y) -> tuple:
    """``(count, traced, step_loss, before)`` of the learner's ``step_fn`` called once (it trains)."""
    if step_fn is None:
        return None, None, None, None
    count = traced = step_loss = None
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
    return count, traced, step_loss, before


# ----------------------------------------------------------------------------- main entry
@renamed_keywords(loss_fn="loss")
def inspect_training_step(
    model,
    x,
    y,
    loss: Callable | None = None,
    *,
    sample_weight=None,
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
    the model runs its own call (:func:`gradlab.core.tap_layers`). The loss is ``loss(y,
    y_pred)`` when given, else the model's compiled loss (``model.compute_loss``) when it is
    compiled with one, else the mean squared error in the model's dtype; ``model.losses``
    (regularizers) are added; ``sample_weight`` weighs the examples as ``fit`` does.

    ``training=True`` (the default) runs the pass as ``fit`` runs a training step: dropout is
    on and BatchNormalization normalizes with the batch's statistics. The model is **not
    changed**: every variable, trainable or not (BatchNorm moving statistics, dropout seeds),
    the states of stateful recurrent layers and the compiled model's loss trackers are put
    back bit for bit afterwards, so two calls give the same report. ``training=False``
    inspects inference mode (what ``evaluate`` and ``predict`` run).

    ``optimizer`` (default: the compiled optimizer, if any): with a ``LossScaleOptimizer`` the
    gradients are taken of the scaled loss and unscaled, as ``fit`` takes them, and the loss
    scale is shown; a ``mixed_float16`` model without one gets the scale ``compile`` would give it.
    Where the scaled float16 gradients overflow at that scale (a fresh model with a large loss at
    Keras's initial 32768), the optimizer skips the step and halves its scale: the report says so
    (status ``"loss-scale-overflow"``) and shows the unscaled gradients at the scale it halves
    down to on this batch (``settled_loss_scale``).

    The report holds

    * the loss; one row per layer call: the output's standard deviation, whether it is finite,
      the back-propagated signal and the layer's weight-gradient norm; the first layer whose
      output is NaN/inf;
    * the verdict (:class:`gradlab.reports.verdict.Verdict`) on the signal of every layer with weights
      but the last (for a stack of Dense layers these are the numbers of
      :func:`gradlab.gradient_report`), and for a model with a recurrent layer
      ``time_step_norms`` (padded steps left out), with a verdict through time. A change of
      size that happens across normalization layers (BatchNorm, LayerNorm, GroupNorm), such as
      a small embedding before a pre-LN Transformer's first LayerNorm, is reported as what it
      is, the normalization's rescaling, with no advice about the weights' initialization;
      BatchNorm statistics are named only when they explain a vanishing or exploding verdict;
    * every trainable variable's gradient norm, ``None`` gradients by variable path (with their
      cause from :mod:`gradlab.reports.causes`), and variables whose values are already NaN/inf;
    * NaN/inf in ``x`` or ``y`` themselves, reported as a data problem;
    * with ``step_fn`` (your training step, called as ``step_fn(x, y)`` once, *after* the
      inspection, so it does update the weights): how often it has traced if it is a
      ``tf.function`` (or a :class:`gradlab.TraceCounter`), and whether this call traced.

    :attr:`StepReport.problems` lists the findings in plain words, each with a fix.
    """
    inp = _validate(model, x, y, loss, sample_weight, step_fn, training, optimizer, vanish_below, explode_above,
                    huge_above)
    saved = core.snapshot(model, False)
    try:
        tp = _tapped_pass(inp)
        var_stats = _variable_stats(inp, tp.grads)
        layer_stats = _layer_stats(inp, tp, var_stats)
        finding = _verdict(inp, tp, layer_stats)
        overflow = tp.settled_scale is not None
        none_causes, source = _explain(inp, tp.grads, var_stats, overflow, saved, tp.no_loss)
    finally:
        core.restore(saved)
    untrained = _looks_untrained(model)  # before step_fn trains it
    count, traced, step_loss, before = _run_step_fn(step_fn, inp.x, inp.y)
    first_bad, first_bad_grad = _first_nonfinite(layer_stats, var_stats)
    # dead ReLU units (gradlab.reports.units) and the word for a change normalization carries
    dead = () if inp.data else dead_fractions(tp.calls)
    v, s, msg = step_status(finding.verdict, finding.status, finding.message, normalizers=finding.normalizers)
    context = StepContext(
        dead_units=dead,
        loss=float(tp.loss.numpy()), variables=var_stats, layers=tuple(layer_stats),
        diagnosed_layers=tuple(finding.names), global_norm=float(core.global_norm(tp.grads).numpy()),
        first_nonfinite_layer=first_bad, first_nonfinite_gradient_layer=first_bad_grad, looks_untrained=untrained,
        training=training, huge_above=inp.huge_above, data_problems=inp.data, verdict=v,
        time_verdict=finding.time_verdict, time_step_norms=tp.time_norms,
        time_step_layer=None if tp.recurrent is None else tp.recurrent.name,
        recurrent_kind=None if tp.recurrent is None else type(tp.recurrent.layer).__name__,
        loss_scale=None if inp.scale is None else float(inp.scale.numpy()), loss_scale_overflow=overflow,
        settled_loss_scale=tp.settled_scale,
        batchnorm=tuple(finding.batchnorm), normalizers=tuple(finding.normalizers),
        default_loss=inp.loss.default_for_custom_step, none_causes=none_causes, nonfinite_source=source,
        tracing_count=count, tracing_count_before=before, traced_this_call=traced,
    )
    found = tuple(problems(context))
    s, msg = report_status(found, s, msg)  # the status follows the first problem that has a word
    return _report(inp, context, dataclasses.replace(finding, verdict=v, status=s, message=msg), step_loss, found)


def _report(inp: _Inputs, context: StepContext, finding: _Finding, step_loss, found) -> StepReport:
    """The :class:`StepReport` of the stages' results, with the rules' problems (``found``)."""
    return StepReport(
        loss=context.loss,
        layers=context.layers,
        variables=context.variables,
        status=finding.status,
        message=finding.message,
        diagnosed_layers=context.diagnosed_layers,
        global_norm=context.global_norm,
        first_nonfinite_layer=context.first_nonfinite_layer,
        first_nonfinite_gradient_layer=context.first_nonfinite_gradient_layer,
        tracing_count=context.tracing_count,
        traced_this_call=context.traced_this_call,
        step_loss=step_loss,
        looks_untrained=context.looks_untrained,
        tracing_count_before=context.tracing_count_before,
        problems=found,
        time_step_norms=context.time_step_norms,
        time_step_layer=context.time_step_layer,
        loss_scale=context.loss_scale,
        settled_loss_scale=context.settled_loss_scale,
        loss_description=inp.loss.description,
        training=inp.training,
        custom_train_step=inp.loss.kind != "given" and core.has_custom_train_step(inp.model),
        compute_dtype=str(getattr(inp.model, "compute_dtype", "float32")),
        data_problems=inp.data,
        verdict=finding.verdict,
        time_verdict=finding.time_verdict,
    )
