"""What :func:`gradlab.inspect_training_step` returns: the report of one training step (chapter 04).

Pure data: small frozen dataclasses and their printed form. The measurements come from
:mod:`gradlab.reports.diagnostics`, the problems from the rules of :mod:`gradlab.reports.rules`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..i18n import _, ngettext, pad
from .verdict import Verdict, status_word

__all__ = ["PROBLEM_KINDS", "LayerStats", "Problem", "StepReport", "VariableStats"]

#: Every kind of :class:`Problem` the inspector reports.
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
    "dead-units",
    "loss-scale-overflow",
    "large-gradient",
    "retracing",
)


@dataclasses.dataclass(frozen=True)
class Problem:
    """One finding of :func:`inspect_training_step`: what is wrong (``finding``) and what to do
    about it (``fix``), both in the current language; ``kind`` is one of :data:`PROBLEM_KINDS`."""

    kind: str
    finding: str
    fix: str

    def __str__(self) -> str:
        return _("{finding} Fix: {fix}").format(finding=self.finding, fix=self.fix)

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


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}"


@dataclasses.dataclass(frozen=True)
class StepReport:
    """What :func:`inspect_training_step` found in one training step (chapter 04).

    Print it (or let the notebook show it) for a table; read :attr:`problems` for the
    findings in plain words, each with its fix. ``status`` is the word of the first problem that
    has one (:data:`gradlab.reports.rules.STATUS_OF_PROBLEM`: ``"non-finite"``, ``"dead-units"`` when
    a ReLU layer has dead units, ``"vanishing"``/``"exploding"`` for the signal, over time, or a huge
    global norm, ``"loss-scale-overflow"`` when the scaled float16 gradients overflow and nothing
    else is wrong), else the verdict's word for the back-propagated signal (``healthy``, or ``uneven``
    when normalization layers carry the change), or ``"n/a"`` when the model gave no per-layer
    signal; ``message`` is its explanation, with the layers named as in the table; ``verdict`` is the :class:`gradlab.reports.verdict.Verdict` itself
    (finding, advice, ratio, gain and the kind of cause apart), ``None`` for ``"n/a"``.
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
    #: When the scaled float16 gradients overflow at ``loss_scale``: the halved scale the optimizer
    #: settles on for this batch (one skipped step per halving), which the reported gradients were
    #: taken at and unscaled from (:func:`gradlab.core.settle_loss_scale`); ``None`` otherwise.
    settled_loss_scale: float | None = None
    #: What the loss is: ``"mean squared error + model.losses"``, the compiled loss, or ``loss_fn``.
    loss_description: str = ""
    training: bool = True
    #: The model overrides ``train_step``: the loss measured may not be the one it trains on
    #: (``__str__`` then prints :attr:`loss_description`).
    custom_train_step: bool = False
    #: The model's compute dtype as it ran (``float16`` under ``mixed_float16``).
    compute_dtype: str = "float32"
    #: NaN/inf found in ``x`` or ``y`` themselves.
    data_problems: tuple[str, ...] = ()
    verdict: Verdict | None = None
    #: The verdict on ``time_step_norms`` (over time), when there are any.
    time_verdict: Verdict | None = None

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
        return ngettext("loss {loss} · gradient norm {norm} · status {status} · {n} problem",
                        "loss {loss} · gradient norm {norm} · status {status} · {n} problems", n).format(
            loss=_fmt(self.loss), norm=_fmt(self.global_norm), status=status_word(self.status), n=n)

    def __str__(self) -> str:
        lines = [_("StepReport: {summary}").format(summary=self.summary())]
        grad_header = _("grad (all weights)")  # kernel and bias together, unlike chapter 01's kernel-only norms
        if self.layers:
            w = max(5, *(len(layer.name) for layer in self.layers))
            k = max(4, *(len(layer.kind) for layer in self.layers))
            layer_h, kind_h, std_h, signal_h = _("layer"), _("kind"), _("output std"), _("signal")
            lines.append(f"  {pad(layer_h, w)}  {pad(kind_h, k)}  {pad(std_h, 10, '>')}  {pad(signal_h, 9, '>')}  {pad(grad_header, 18, '>')}")
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
            variable_h, norm_h = _("variable"), _("gradient norm")
            lines.append(f"  {pad(variable_h, w)}  {pad(norm_h, 13, '>')}")
            for v in self.variables:
                g = "None" if v.grad_norm is None else _fmt(v.grad_norm)
                lines.append(f"  {v.path:<{w}}  {g:>13}")
        if self.time_step_norms is not None and self.time_step_norms.size:
            t = self.time_step_norms
            lines.append(_("  time steps of {layer!r} (input side, earliest first): {n} steps, first {first}, "
                           "last {last}").format(layer=self.time_step_layer, n=t.size, first=_fmt(t[0]),
                                                 last=_fmt(t[-1])))
        if self.custom_train_step:
            lines.append(_("  loss: {description}").format(description=self.loss_description))
        if self.loss_scale is not None and self.settled_loss_scale is not None:
            lines.append(_("  mixed precision: compute {dtype}, loss scale {scale} overflows float16; the gradients "
                           "above are unscaled from the loss scale {settled}").format(
                dtype=self.compute_dtype, scale=f"{self.loss_scale:g}", settled=f"{self.settled_loss_scale:g}"))
        elif self.loss_scale is not None:
            lines.append(_("  mixed precision: compute {dtype}, loss scale {scale}").format(
                dtype=self.compute_dtype, scale=f"{self.loss_scale:g}"))
        if self.status != "n/a":
            lines.append(_("  diagnosis: {status}: {message}").format(status=status_word(self.status),
                                                                     message=self.message))
        if self.tracing_count is not None:
            now = _("this call traced") if self.traced_this_call else _("this call did not trace")
            lines.append(ngettext("  step_fn: traced {count} time ({now})", "  step_fn: traced {count} times ({now})",
                                  self.tracing_count).format(count=self.tracing_count, now=now))
        if self.problems:
            lines.append(_("  problems:"))
            lines += [f"  {i}. {p}" for i, p in enumerate(self.problems, 1)]
        else:
            lines.append(_("  no problems found"))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"StepReport({self.summary()})"

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(repr(self) if cycle else str(self))
