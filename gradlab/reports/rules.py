"""The inspector's rules: a table of small functions over one typed context (chapters 04 and 06).

:func:`gradlab.inspect_training_step` measures one training step and fills a
:class:`StepContext`; :func:`problems` runs every rule of :data:`RULES` on it, in order, and
returns the :class:`gradlab.reports.report.Problem` each one finds (a finding and its fix, in the
current language). A rule reads only the context; adding a check is adding one function and
one row.

:func:`step_status` gives the verdict the word the rule on norms cannot see, ``"uneven"`` for a
change that normalization layers carry (:func:`gradlab.reports.verdict.uneven`); then
:func:`report_status` makes the inspector's status follow its first problem that has a word
(:data:`STATUS_OF_PROBLEM`): ``"dead-units"`` for a ReLU layer whose units never fire
(:mod:`gradlab.reports.units`), which is never called healthy, ``"exploding"`` for a huge global
norm, ``"non-finite"`` for NaN/inf, ``"loss-scale-overflow"`` when the only trouble is scaled
float16 gradients that overflow at the optimizer's loss scale (the step a LossScaleOptimizer skips).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from ..i18n import N_, _, end_sentence, join_clauses, join_list, join_sentences, ngettext
from .report import LayerStats, Problem, VariableStats
from .units import DeadUnits, dead_layers
from .verdict import Verdict, uneven

__all__ = ["GIVES_WAY", "RULES", "STATUS_OF_PROBLEM", "StepContext", "problems", "report_status", "step_status"]


@dataclasses.dataclass(frozen=True)
class StepContext:
    """Everything the rules read about one inspected training step."""

    loss: float
    variables: tuple[VariableStats, ...]
    layers: tuple[LayerStats, ...]
    diagnosed_layers: tuple[str, ...]
    global_norm: float
    first_nonfinite_layer: str | None
    first_nonfinite_gradient_layer: str | None
    looks_untrained: bool | None
    training: bool
    huge_above: float
    data_problems: tuple[str, ...] = ()
    #: The verdict on the layers' signals (``None`` when there was nothing to diagnose).
    verdict: Verdict | None = None
    #: The verdict over time for a model with a recurrent layer.
    time_verdict: Verdict | None = None
    time_step_norms: np.ndarray | None = None
    time_step_layer: str | None = None
    recurrent_kind: str | None = None
    loss_scale: float | None = None
    #: The scaled float16 gradients overflowed at ``loss_scale`` while a halved scale gives finite ones.
    loss_scale_overflow: bool = False
    #: The halved loss scale the gradients were taken at when ``loss_scale`` overflowed (else ``None``).
    settled_loss_scale: float | None = None
    #: Plain-words findings about the BatchNormalization statistics of this pass.
    batchnorm: tuple[str, ...] = ()
    #: Normalization layers across which the signal changes size (the verdict's cause).
    normalizers: tuple[str, ...] = ()
    #: The model has its own train_step and no compiled loss: the MSE default stands in.
    default_loss: bool = False
    #: ``variable path -> cause`` of its ``None`` gradient (:mod:`gradlab.reports.causes`).
    none_causes: dict = dataclasses.field(default_factory=dict)
    #: Where a NaN/inf is born (:func:`gradlab.find_nonfinite_source`), or ``None``.
    nonfinite_source: str | None = None
    tracing_count: int | None = None
    tracing_count_before: int | None = None
    traced_this_call: bool | None = None
    #: Every ReLU-family layer call's dead units (:func:`gradlab.reports.units.dead_fractions`).
    dead_units: tuple[DeadUnits, ...] = ()

    @property
    def bad_weights(self) -> list[str]:
        return [v.path for v in self.variables if not v.value_finite]

    @property
    def bad_gradients(self) -> list[str]:
        return [v.path for v in self.variables if not v.grad_finite]


# ----------------------------------------------------------------------------- the rules
def _default_loss(c: StepContext) -> Problem | None:
    if not c.default_loss:
        return None
    return Problem(
        "default-loss",
        _("The model has its own train_step and is not compiled with a loss, so this report measures "
          "the mean squared error (the default), which may not be the loss your train_step uses."),
        _("pass your loss as loss= (loss(y_true, y_pred) -> scalar), or compile the model with it."),
    )


def _data(c: StepContext) -> Problem | None:
    if not c.data_problems:
        return None
    return Problem(
        "non-finite-data",
        _("The data itself is not finite: {problems}. Every number computed from it is NaN too, so nothing "
          "here says anything about the model.").format(problems=join_clauses(c.data_problems)),
        _("clean the batch (drop or impute the rows, check the loading and any division or log in the "
          "preprocessing), e.g. find them with np.isfinite(x).all(axis=1)."),
    )


def _weights(c: StepContext) -> Problem | None:
    bad = c.bad_weights
    if not bad:
        return None
    return Problem(
        "non-finite-weights",
        _("The weights themselves hold NaN/inf ({paths}): an earlier update wrote them.").format(
            paths=join_list(bad[:3]) + (" …" if len(bad) > 3 else "")),
        _("rebuild or restore the model; then find why a step went non-finite (learning rate, weight "
          "scale) and skip such steps (check_finite in gl.make_train_step)."),
    )


def _overflow_fix(untrained: bool | None) -> str:
    if untrained:
        return _("the model has not been trained yet (every bias is still 0), so its initial weights are too "
                 "large for its depth: use an initializer matched to the activation (glorot_uniform for tanh "
                 "or linear layers, he_normal for relu) or fewer layers; tf.debugging.enable_check_numerics() "
                 "names the op.")
    if untrained is False:
        return _("the biases are no longer 0, so training steps have run: a learning rate too large for the "
                 "gradients made the weights grow. Rebuild the model, then lower the learning rate or clip the "
                 "global norm; tf.debugging.enable_check_numerics() names the op.")
    return _("if the model is freshly built, its initial weights are too large: use an initializer matched to "
             "the activation; if it has been trained, the learning rate made the weights grow: rebuild it and "
             "lower the rate or clip; tf.debugging.enable_check_numerics() names the op.")


def _forward(c: StepContext) -> Problem | None:
    if c.first_nonfinite_layer is None or c.bad_weights:
        return None
    return Problem(
        "non-finite-forward",
        _("The forward pass overflows: layer {layer!r} is the first whose output holds NaN/inf.").format(
            layer=c.first_nonfinite_layer),
        _overflow_fix(c.looks_untrained),
    )


def _loss(c: StepContext) -> Problem | None:
    if math.isfinite(c.loss) or c.first_nonfinite_layer is not None or c.bad_weights:
        return None
    return Problem(
        "non-finite-loss",
        _("The loss is {loss} although every layer's output is finite: the loss itself overflows (e.g. "
          "log(0), exp of a large number).").format(loss=c.loss),
        _("compute the loss from logits with a stable Keras loss (from_logits=True), or add a small epsilon "
          "inside log/sqrt."),
    )


def _gradient(c: StepContext) -> Problem | None:
    bad = c.bad_gradients
    if not bad or not math.isfinite(c.loss) or c.first_nonfinite_layer is not None or c.bad_weights:
        return None
    if c.loss_scale_overflow:
        return None
    n, layer, source = len(bad), c.first_nonfinite_gradient_layer, c.nonfinite_source
    # find_nonfinite_source's finding and fix apart (a plain str from elsewhere is all finding)
    source_finding, source_fix = getattr(source, "finding", source), getattr(source, "fix", "")
    fix = (_("{fix}; clipping cannot repair NaN.").format(fix=source_fix) if source_fix else
           _("add an epsilon (tf.sqrt(x + 1e-12)) or use a safe op; clipping cannot repair NaN."))
    if layer and source:
        text = join_sentences(ngettext(
            "The loss is finite but {n} gradient is NaN/inf; the backward pass first goes non-finite at layer "
            "{layer!r}.",
            "The loss is finite but {n} gradients are NaN/inf; the backward pass first goes non-finite at layer "
            "{layer!r}.", n).format(n=n, layer=layer), source_finding)
        return Problem("non-finite-gradient", text, fix)
    if layer:
        text = ngettext("The loss is finite but {n} gradient is NaN/inf; the backward pass first goes non-finite at "
                        "layer {layer!r}: an op with an infinite derivative (sqrt or norm at 0, log near 0).",
                        "The loss is finite but {n} gradients are NaN/inf; the backward pass first goes non-finite "
                        "at layer {layer!r}: an op with an infinite derivative (sqrt or norm at 0, log near 0).", n)
    elif source:
        text = join_sentences(ngettext("The loss is finite but {n} gradient is NaN/inf.",
                                       "The loss is finite but {n} gradients are NaN/inf.", n).format(n=n),
                              source_finding)
        return Problem("non-finite-gradient", text, fix)
    else:
        text = ngettext("The loss is finite but {n} gradient is NaN/inf: an op with an infinite derivative (sqrt or "
                        "norm at 0, log near 0).",
                        "The loss is finite but {n} gradients are NaN/inf: an op with an infinite derivative (sqrt "
                        "or norm at 0, log near 0).", n)
    return Problem("non-finite-gradient", text.format(n=n, layer=layer), fix)


def _none_finding(paths: list[str], causes: dict) -> str:
    """The finding of ``None`` gradients with their causes, variables that share a cause named together."""
    n, shown = len(paths), join_list(paths)
    groups: dict[str, list[str]] = {}
    for path, cause in causes.items():
        groups.setdefault(cause, []).append(path)
    if not groups:
        return ngettext("No gradient (None) for {paths}: the loss does not depend on this variable through recorded "
                        "operations.", "No gradient (None) for {paths}: the loss does not depend on these variables "
                        "through recorded operations.", n).format(paths=shown)
    if len(groups) == 1:
        return ngettext("No gradient (None) for {paths}: the loss does not depend on this variable through recorded "
                        "operations. The cause: {cause}.", "No gradient (None) for {paths}: the loss does not depend "
                        "on these variables through recorded operations. The cause: {cause}.", n).format(
            paths=shown, cause=next(iter(groups)))
    named = join_clauses(_("for {paths}, {cause}").format(paths=join_list(ps), cause=cause)
                         for cause, ps in groups.items())
    return _("No gradient (None) for {paths}: the loss does not depend on these variables through recorded "
             "operations. The causes: {causes}.").format(paths=shown, causes=named)


#: ``(kinds of cause (gradlab.reports.causes.CAUSE_KINDS), the fix that matches them)``.
_NONE_FIXES = (
    (("stop-gradient",),
     N_("if the stop is deliberate, freeze what sits behind it (layer.trainable = False) so nothing expects a "
        "gradient; otherwise take tf.stop_gradient off the path")),
    (("no-gradient-op", "integer-cast", "comparison"),
     N_("use a differentiable stand-in for that op, which has no gradient (softmax instead of argmax, a "
        "straight-through estimator with tf.custom_gradient for round or sign, float instead of integer casts; "
        "chapter 06)")),
    (("never-read", "discarded"),
     N_("use the layer's output in call (or remove the layer, or set trainable = False)")),
    (("numpy",), N_("keep the computation in TensorFlow ops: .numpy() and np.* leave the tape")),
    (("integer-variable",), N_("make the variable a float variable; integers never get gradients")),
    (("no-loss",),
     N_("give that output a loss in compile (with a small loss_weights entry if it should count less), drop it "
        "from the model's outputs, or freeze its layers (trainable = False) if it is not to learn")),
)


def _none_fix(causes: dict) -> str:
    """A fix that matches the kinds of the named causes; the generic checklist when none matches."""
    kinds = {k for cause in causes.values() for k in getattr(cause, "kinds", ())}
    fixes = [_(fix) for keys, fix in _NONE_FIXES if kinds & set(keys)]
    if fixes:
        return end_sentence(join_clauses(dict.fromkeys(fixes)))
    return _("check that the layer's output really uses it (a forgotten term, a wrong return value, a NumPy "
             "round-trip, work outside the tape); chapter 02 lists seven causes.")


def _none(c: StepContext) -> Problem | None:
    none = [v.path for v in c.variables if v.grad_norm is None]
    if not none:
        return None
    return Problem("none-gradient", _none_finding(none, c.none_causes), _none_fix(c.none_causes))


def _loss_scale_overflow(c: StepContext) -> Problem | None:
    if not c.loss_scale_overflow:
        return None
    scale, settled = c.loss_scale, c.settled_loss_scale
    halvings = round(math.log2(scale / settled)) if scale and settled else 1
    settles = ngettext(
        "On this batch it skips {n} step and settles on the loss scale {settled}; the gradients in this report are "
        "the unscaled gradients taken at that scale.",
        "On this batch it skips {n} steps and settles on the loss scale {settled}; the gradients in this report "
        "are the unscaled gradients taken at that scale.", halvings).format(n=halvings, settled=f"{settled:g}")
    return Problem(
        "loss-scale-overflow",
        join_sentences(
            _("With the loss scale {scale} the scaled float16 gradients overflow (float16's largest value is 65504): "
              "a LossScaleOptimizer skips this step and halves the scale, which is normal in the first steps of "
              "mixed-precision training.").format(scale=f"{scale:g}"),
            settles),
        _("nothing to do: the optimizer finds a scale that fits by itself. If the scale keeps falling during "
          "training (watch optimizer.dynamic_scale), the gradients are large: a large loss (unnormalized targets, "
          "a sum instead of a mean) or layers whose float16 outputs are huge; normalize those, or keep such "
          "layers in float32 (dtype='float32')."),
    )


def _batchnorm(c: StepContext) -> Problem | None:
    if not c.batchnorm:
        return None
    return Problem(
        "batchnorm-statistics",
        _("BatchNormalization statistics are the likely cause of the gradient sizes below: {findings}.").format(
            findings=join_clauses(c.batchnorm)),
        _("use a larger batch, or a larger input so the last feature maps are bigger than 1×1; or replace "
          "BatchNormalization by GroupNormalization/LayerNormalization; for a trained model, freeze its "
          "BatchNorm layers (layer.trainable = False runs them in inference mode).") if c.training else
        _("inspect with training=True (the batch statistics fit trains with), or train the model first so that "
          "its moving statistics describe the data."),
    )


def _dead_finding(layers: tuple[DeadUnits, ...]) -> str:
    """The finding of the layers with dead units (:func:`gradlab.reports.units.dead_layers`), worst first."""
    d = layers[0]
    if len(layers) == 1 and not d.symmetric:
        text = _("Dead units: {dead} of {units} units of {layer!r} ({activation}) pass no gradient on this batch: "
                 "their pre-activation is so far below 0 at every example that {activation}'s derivative rounds to "
                 "exactly 0 in float32.").format(dead=d.dead, units=d.units, layer=d.layer, activation=d.activation)
    elif len(layers) == 1 and d.at_top == d.dead:
        text = _("Dead ReLU units: {dead} of {units} units of {layer!r} ({activation}) pass no gradient on this batch: "
                 "their output is stuck at the cap (6 for relu6) for every example, where {activation}'s derivative is "
                 "0 as it is below 0; a large positive bias or pre-activation pushed them there.").format(
            dead=d.dead, units=d.units, layer=d.layer, activation=d.activation)
    elif len(layers) == 1:
        text = _("Dead ReLU units: {dead} of {units} units of {layer!r} ({activation}) are never active on this batch "
                 "(their output is exactly 0 for every example), while {always} are always active; by chance, a "
                 "freshly initialized layer has about as many of each.").format(dead=d.dead, units=d.units, layer=d.layer,
                                                    activation=d.activation, always=d.always_active)
    else:
        shown = join_list(_("{layer!r} {dead} of {units}").format(layer=x.layer, dead=x.dead, units=x.units)
                          for x in layers[:4]) + (" …" if len(layers) > 4 else "")
        text = _("Dead ReLU units in {count} layers ({layers}): never active on this batch (their output is exactly "
                 "0 for every example), far more than are always active; by chance, a freshly initialized layer has "
                 "about as many of each.").format(count=len(layers), layers=shown)
    more = _("A unit that never fires passes no gradient: its weights get none, so training cannot bring it back.")
    whole = [x.layer for x in layers if x.dead == x.units]
    if whole:
        more = join_sentences(more, ngettext(
            "Layer {layers} is dead as a whole: no layer before it gets a gradient through it.",
            "Layers {layers} are dead as a whole: no layer before them gets a gradient through them.",
            len(whole)).format(layers=join_list(repr(n) for n in whole)))
    return join_sentences(text, more)


def _dead_units(c: StepContext) -> Problem | None:
    layers = dead_layers(c.dead_units)
    if not layers:
        return None
    if c.batchnorm:  # a BatchNormalization that normalizes nothing can leave the ReLU after it below 0
        return Problem("dead-units", _dead_finding(layers), _(
            "the BatchNormalization statistics (see above) first: a BatchNormalization layer that does not "
            "normalize can hold the ReLU after it below 0 for every example. Inspect again once they are fixed; "
            "units still dead then need the usual fixes (LeakyReLU or ELU, He initialization)."))
    if any(not d.symmetric for d in layers):
        return Problem("dead-units", _dead_finding(layers), _(
            "look for what pushed the pre-activations that far down (a large negative bias, a huge learning-rate "
            "step, unnormalized inputs); normalize the layer's input (BatchNormalization, LayerNormalization) or "
            "use LeakyReLU, whose derivative is never 0; re-initialize the dead layer, since its units get no "
            "gradient to recover."))
    return Problem(
        "dead-units", _dead_finding(layers),
        _("use LeakyReLU or ELU (they pass a gradient for negative inputs), He initialization (he_normal) with "
          "biases that are not negative (Keras's zeros), and a lower learning rate if training killed the units (a "
          "large step can push a unit's weights to where it never fires); re-initialize the dead layer, since its "
          "units get no gradient to recover."),
    )


def _signal_finding(c: StepContext, vanishing: bool, normalized: bool) -> str:
    """The finding of a vanishing/exploding signal, as one sentence per case."""
    names = c.diagnosed_layers
    by_name = {layer.name: layer.signal for layer in c.layers}
    first, last = by_name[names[0]], by_name[names[-1]]
    fields = dict(first=names[0], last=names[-1], value=f"{last:.3g}",
                  ratio=f"{first / last:.2g}" if last else "inf",
                  layers=join_list(repr(n) for n in c.normalizers[:3]) + (" …" if len(c.normalizers) > 3 else ""))
    if normalized:
        text = (_("Vanishing gradient ratio: the signal at {first!r} is {ratio}× the signal at {last!r}. The change "
                  "happens across normalization layers ({layers}), which divide the gradient by the scale of their "
                  "input: the ratio measures that rescaling (and the skip connections), not the scale of the weights.")
                if vanishing else
                _("Exploding gradient ratio: the signal at {first!r} is {ratio}× the signal at {last!r}. The change "
                  "happens across normalization layers ({layers}), which divide the gradient by the scale of their "
                  "input: the ratio measures that rescaling (and the skip connections), not the scale of the weights."))
    elif first == 0 and c.verdict is not None and "underflow" not in c.verdict.causes:
        text = _("Vanishing gradients: the signal at {first!r} is exactly 0 ({last!r}: {value}), with nothing small "
                 "enough near it for an underflow: zero weights or units that never fire block it, so the early "
                 "layers do not learn.")
    elif first == 0:
        text = _("Vanishing gradients: the signal at {first!r} underflowed to exactly 0 ({last!r}: {value}), so the "
                 "early layers barely learn.")
    elif vanishing:
        text = _("Vanishing gradients: the signal at {first!r} is {ratio}× the signal at {last!r}, so the early "
                 "layers barely learn.")
    else:
        text = _("Exploding gradients: the signal at {first!r} is {ratio}× the signal at {last!r}, so the early "
                 "layers get huge updates.")
    return text.format(**fields)


def _signal(c: StepContext) -> Problem | None:
    v = c.verdict
    if v is None or v.status not in ("vanishing", "exploding") or not c.diagnosed_layers:
        return None
    vanishing = v.status == "vanishing"
    if v.cause == "normalization":
        return Problem(
            v.status, _signal_finding(c, vanishing, True),
            _("leave the weights' scale alone because of this ratio. Whether the early layers learn shows in "
              "training: run a few steps (gl.train_steps, or fit) and watch the loss, and compare each layer's "
              "gradient with its weights; clip the global norm if the steps are unstable."),
        )
    if c.batchnorm:
        fix = (_("the BatchNormalization statistics (see above), not the weights' scale: fix those first.")
               if vanishing else
               _("the BatchNormalization statistics (see above), not the weights' scale: fix those first, and "
                 "clip the global norm."))
    elif vanishing:
        fix = v.advice
    else:
        fix = _("{advice} Clip the global norm too.").format(advice=v.advice).strip()
    return Problem(v.status, _signal_finding(c, vanishing, False), fix)


def _through_time(c: StepContext) -> Problem | None:
    v = c.time_verdict
    if v is None or v.status not in ("vanishing", "exploding"):
        return None
    t = c.time_step_norms
    fields = dict(layer=c.time_step_layer, n=t.size, first=f"{t[0]:.3g}",
                  ratio=f"{t[0] / t[-1]:.2g}" if t[-1] else "inf")
    if v.status == "exploding":
        text = (_("Exploding gradients through time in {layer!r}: over {n} steps the gradient at the first time step "
                  "is {first} while the gradient at the last step is 0, so early inputs get huge updates.")
                if t[-1] == 0 else
                _("Exploding gradients through time in {layer!r}: over {n} steps the gradient at the first time step "
                  "is {ratio}× the gradient at the last step, so early inputs get huge updates."))
        return Problem("exploding-through-time", text.format(**fields),
                       _("clip the global norm (clipnorm=1.0), lower the learning rate, or shorten the sequences."))
    if c.recurrent_kind in ("SimpleRNN", "RNN"):
        fix = _("if the target depends on early inputs, use LSTM or GRU instead of {kind}, or attention over the "
                "sequence; shorter sequences help only if the target does not need the early inputs (truncated "
                "backpropagation drops their gradient altogether).").format(kind=c.recurrent_kind)
    else:
        fix = _("a gated layer forgets early inputs while its gates are untrained; if the target depends on them, "
                "train longer, or add attention over the sequence (Bidirectional helps when the end of the "
                "sequence matters less).")
    text = (_("Vanishing gradients through time in {layer!r}: over {n} steps the gradient at the first time step "
              "underflowed to 0, so the model cannot learn from early inputs.") if t[0] == 0 else
            _("Vanishing gradients through time in {layer!r}: over {n} steps the gradient at the first time step "
              "is {ratio}× the gradient at the last step, so the model cannot learn from early inputs."))
    return Problem("vanishing-through-time", text.format(**fields), fix)


def _large(c: StepContext) -> Problem | None:
    g = c.global_norm
    if not (math.isfinite(g) and g > c.huge_above):
        return None
    return Problem(
        "large-gradient",
        _("The global gradient norm is {norm}: one SGD step moves the weights by the learning rate times "
          "this.").format(norm=f"{g:.3g}"),
        _("clip it (tf.clip_by_global_norm, or global_clipnorm= in the optimizer) and/or lower the learning "
          "rate."),
    )


def _retracing(c: StepContext) -> Problem | None:
    count = c.tracing_count
    if count is None or count <= 1:
        return None
    shapes_fix = _("pass tensors instead of Python numbers, and give varying batch sizes an input_signature "
                   "(None in the batch axis) or reduce_retracing=True.")
    if c.traced_this_call and c.tracing_count_before == 0:
        return Problem(
            "retracing",
            _("step_fn traced {count} times during its first call: it traced again because variables (model "
              "weights, optimizer slots) were created inside it.").format(count=count),
            _("build the model and the optimizer (optimizer.build(model.trainable_variables)) before the first "
              "call."),
        )
    if c.traced_this_call:
        return Problem(
            "retracing",
            _("step_fn traced again during this call ({count} traces in all): the arguments of this call differ "
              "from earlier calls' in shape or dtype (such as a new batch size), or a Python argument has a new "
              "value.").format(count=count),
            shapes_fix,
        )
    return Problem(
        "retracing",
        _("step_fn has traced {count} times, on earlier calls (this call reused a trace): earlier calls passed "
          "new shapes, dtypes or Python values, or created variables on the first call.").format(count=count),
        _("build the model and optimizer before the first call; {rest}").format(rest=shapes_fix),
    )


#: ``(kind, rule, stops)``: every rule in the order its problems are listed; a rule with
#: ``stops`` ends the list when it fires (NaN in the data makes every later number meaningless).
RULES: tuple[tuple[str, Callable[[StepContext], Problem | None], bool], ...] = (
    ("default-loss", _default_loss, False),
    ("non-finite-data", _data, True),
    ("non-finite-weights", _weights, False),
    ("non-finite-forward", _forward, False),
    ("non-finite-loss", _loss, False),
    ("non-finite-gradient", _gradient, False),
    ("none-gradient", _none, False),
    ("loss-scale-overflow", _loss_scale_overflow, False),
    ("batchnorm-statistics", _batchnorm, False),
    ("dead-units", _dead_units, False),
    ("signal", _signal, False),
    ("through-time", _through_time, False),
    ("large-gradient", _large, False),
    ("retracing", _retracing, False),
)


def problems(context: StepContext) -> list[Problem]:
    """The problems every rule of :data:`RULES` finds in ``context``, in table order."""
    out = []
    for _kind, rule, stops in RULES:
        found = rule(context)
        if found is not None:
            out.append(found)
            if stops:
                break
    return out


#: The status word a problem gives the whole report, by kind; the kinds not listed (a None gradient,
#: retracing, ...) say nothing about the size of the gradients and leave the verdict's word.
STATUS_OF_PROBLEM = {
    "non-finite-weights": "non-finite", "non-finite-forward": "non-finite", "non-finite-loss": "non-finite",
    "non-finite-gradient": "non-finite", "dead-units": "dead-units", "vanishing": "vanishing",
    "exploding": "exploding", "vanishing-through-time": "vanishing", "exploding-through-time": "exploding",
    "large-gradient": "exploding", "loss-scale-overflow": "loss-scale-overflow",
}

#: The problems whose word gives way to any other problem's: a loss-scale overflow is normal and
#: the optimizer handles it, so a real problem found at the settled scale names the status.
GIVES_WAY = ("loss-scale-overflow",)


def step_status(verdict: Verdict | None, status: str, message: str, *,
                normalizers=()) -> tuple[Verdict | None, str, str]:
    """The verdict's ``(verdict, status, message)`` with the word the rule on norms cannot give.

    A vanishing or exploding verdict that ``normalizers`` (the normalization layers that carry the
    change) explain becomes ``"uneven"`` (:func:`gradlab.reports.verdict.uneven`), which is no
    problem. :func:`report_status` then lets the problems have the last word.
    """
    if verdict is not None and normalizers and verdict.status in ("vanishing", "exploding") \
            and status == verdict.status:
        verdict = uneven(verdict, tuple(normalizers))
        status, message = verdict.status, verdict.message
    return verdict, status, message


def report_status(found, status: str, message: str) -> tuple[str, str]:
    """The report's ``(status, message)``: the word of its first problem that has one (:data:`STATUS_OF_PROBLEM`).

    The problems are listed in :data:`RULES` order, the most basic first (NaN before dead units,
    dead units before the ratio they cause, the ratio before the global norm), so the status never
    contradicts the first problem a learner reads: a whole dead layer reads ``"dead-units"``, not
    the ``"vanishing"`` its zeros give the rule on norms, and a huge global norm reads
    ``"exploding"`` even where normalization layers make the ratio merely ``"uneven"``. When that
    word is the verdict's own, the verdict's message stays; otherwise the message is the problem's
    finding. With no such problem the verdict's word (``healthy``, ``uneven``, ``n/a``) stays.
    A problem of :data:`GIVES_WAY` names the status only when no other problem has a word: a
    loss-scale overflow alone reads ``"loss-scale-overflow"``, not the ``"non-finite"`` its
    skipped step's gradients would give, nor the verdict's word on the settled scale's gradients.
    """
    for p in sorted(found, key=lambda p: p.kind in GIVES_WAY):
        word = STATUS_OF_PROBLEM.get(p.kind)
        if word is not None:
            return (status, message) if word == status else (word, p.finding)
    return status, message
