"""Advice from the current settings: what to try next, never what is already selected (chapters 01, 05, 07).

Pure computation: no widgets, no matplotlib. A report's verdict says what was measured (its
``finding``) and which kinds of cause fit (``causes``, most likely first; see
:mod:`gradlab.reports.verdict`). The explorers know more: the settings that produced the report and the
labels their dropdowns show. :func:`gradient_advice` (the GradientExplorer) and
:func:`time_advice` (the TimeExplorer) turn the causes into :class:`Suggestion` s, concrete
values of the explorer's own controls, and drop every suggestion that is already selected or
that the explorer does not show. The fix sentence names each option by its dropdown label.

Two cases the generic verdict cannot see: a loss scale that pushes float16 past its largest
value (the advice names the loss scale and a smaller one), and a loss scale that worked (the
advice says so, and that plotted values are unscaled).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from ..i18n import _, join_list, join_sentences

__all__ = ["Advice", "FLOAT16_MAX", "PresetComparison", "Suggestion", "compare_with_paper",
           "gradient_advice", "matched_initializers", "time_advice"]

#: The largest finite float16 number.
FLOAT16_MAX = 65504.0
#: The loss scale the advice proposes first in float16 (Micikevicius et al. 2018 used up to 2^15).
FIRST_LOSS_SCALE = 2.0**15

#: Initializers matched to an activation, best first (He for the ReLU family, LeCun for SELU,
#: Glorot or orthogonal for tanh, sigmoid and linear).
_MATCHED = {
    "relu": ("he_normal", "he_uniform"),
    "leaky_relu": ("he_normal", "he_uniform"),
    "elu": ("he_normal", "he_uniform"),
    "gelu": ("he_normal", "he_uniform"),
    "selu": ("lecun_normal", "lecun_uniform"),
    "tanh": ("glorot_uniform", "orthogonal", "glorot_normal"),
    "sigmoid": ("glorot_uniform", "glorot_normal"),
    "linear": ("orthogonal", "glorot_uniform"),
}
_SATURATING = ("sigmoid", "tanh")


def matched_initializers(activation: str) -> tuple[str, ...]:
    """The initializers whose variance suits ``activation``, best first."""
    return _MATCHED.get(activation, ("glorot_uniform",))


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """Set control ``control`` to ``value`` (shown as ``label``, the dropdown's own text)."""

    control: str
    value: object
    label: str


@dataclasses.dataclass(frozen=True)
class Advice:
    """What the verdict measured, and what to try next given the current settings.

    ``finding`` may name current settings (e.g. the loss scale that overflows); ``fix`` names
    only options that are not selected, by their dropdown labels, and ``suggestions`` holds
    them as data. ``fix`` is empty when nothing needs fixing.
    """

    status: str
    finding: str
    fix: str
    suggestions: tuple[Suggestion, ...] = ()

    @property
    def text(self) -> str:
        return join_sentences(self.finding, self.fix)


class _Picker:
    """Collects suggestions for the controls an explorer shows, skipping the selected values."""

    def __init__(self, settings: Mapping, labels: Mapping, shown):
        self.settings, self.labels, self.shown = settings, labels, set(shown)
        self.items: list[Suggestion] = []

    def add(self, control: str, value) -> bool:
        if control not in self.shown or self.settings.get(control) == value:
            return False
        if any(s.control == control for s in self.items):
            return False
        label = self.labels.get(control, {}).get(value, str(value))
        self.items.append(Suggestion(control, value, label))
        return True

    def first(self, control: str, values) -> bool:
        return any(self.add(control, v) for v in values)

    def names(self, control: str) -> str:
        return join_list(s.label for s in self.items if s.control == control)

    def has(self, control: str) -> bool:
        return any(s.control == control for s in self.items)


def _finding(report) -> str:
    return report.verdict.finding


def _causes(report) -> tuple[str, ...]:
    return tuple(report.verdict.causes)


def _scale_label(labels: Mapping, scale: float) -> str:
    label = labels.get("loss_scale", {}).get(scale)
    if label:
        return label
    k = math.log2(scale)
    return f"2^{k:g}" if k == int(k) else f"{scale:g}"


def gradient_advice(report, settings: Mapping, labels: Mapping | None = None,
                    shown=None, loss_scales=None) -> Advice:
    """Advice for the GradientExplorer's ``report`` under ``settings`` (chapters 01 and 05).

    ``settings`` maps control names (``depth``, ``activation``, ``initializer``, ``clip_mode``,
    ``residual``, ``norm``, ``dtype``, ``loss_scale``) to their values; ``labels`` maps a
    control to ``{value: dropdown label}``; ``shown`` lists the controls the explorer shows
    (default: every key of ``settings``); ``loss_scales`` the loss scales it offers.
    """
    labels = labels or {}
    shown = tuple(settings) if shown is None else tuple(shown)
    pick = _Picker(settings, labels, shown)
    act, init = settings.get("activation"), settings.get("initializer")
    dtype, scale = settings.get("dtype", "float32"), float(settings.get("loss_scale", 1.0))
    scales = sorted(loss_scales or [2.0**k for k in range(25)])
    s = np.asarray(report.signal_norms, dtype=np.float64)
    finding = _finding(report)
    status = report.status
    causes = _causes(report)
    if dtype == "float16" and scale > 1 and s.size and np.all(np.isfinite(s)) and np.all(s > 0):
        finding = join_sentences(finding, _(
            "The loss scale {scale} worked: no layer's float16 gradient underflowed to 0 "
            "(the plot shows the gradients divided by the scale again).").format(
                scale=_scale_label(labels, scale)))
        causes = tuple(c for c in causes if c != "underflow")
        if status == "vanishing" and not causes:
            causes = ("saturating-activation",) if act in _SATURATING else ("initializer-scale",)
    if status == "healthy":
        return Advice(status, finding, "")
    overflow = status == "non-finite" or "overflow" in causes
    lines: list[str] = []
    if overflow and dtype == "float16" and scale > 1:
        finding = _(
            "{n} of {depth} layers have NaN/inf gradients: the loss scale {scale} pushes the "
            "float16 gradients past float16's largest value, 65504.").format(
                n=int(np.sum(~np.isfinite(s))), depth=s.size, scale=_scale_label(labels, scale))
        smaller = [v for v in scales if v < scale]
        target = [v for v in smaller if v <= FIRST_LOSS_SCALE and report_loss(report) * v < FLOAT16_MAX]
        choice = max(target) if target else (max(smaller) if smaller else None)
        if choice is not None and pick.add("loss_scale", choice):
            lines.append(_("Pick a smaller loss scale: {labels}.").format(labels=pick.names("loss_scale")))
        return Advice(status, finding, join_sentences(lines), tuple(pick.items))
    if np.size(s) and np.any(s == 0) and init == "zeros":
        pick.first("initializer", matched_initializers(act))
        lines.append(_("Zero weights pass no signal: use a random initializer such as {labels}.").format(
            labels=pick.names("initializer")))
        return Advice(status, finding, join_sentences(lines), tuple(pick.items))
    if "underflow" in causes and dtype == "float16":
        if scale == 1:
            pick.add("loss_scale", FIRST_LOSS_SCALE)
            if pick.has("loss_scale"):
                lines.append(_("A loss scale shifts the gradients up into range: try {labels}.")
                             .format(labels=pick.names("loss_scale")))
        else:
            finding = join_sentences(finding, _("The loss scale {scale} is not enough for these gradients.")
                                     .format(scale=_scale_label(labels, scale)))
            larger = [v for v in scales if v > scale and report_loss(report) * v < FLOAT16_MAX]
            if larger and pick.add("loss_scale", larger[min(len(larger) - 1, 3)]):
                lines.append(_("Try a larger loss scale: {labels}.").format(labels=pick.names("loss_scale")))
        if pick.add("dtype", "bfloat16"):
            lines.append(_("Or compute in {label}, which has float32's exponent range.").format(
                label=pick.names("dtype")))
        if lines:
            return Advice(status, finding, join_sentences(lines), tuple(pick.items))
    if status == "vanishing":
        if act in _SATURATING or "saturating-activation" in causes:
            if pick.add("activation", "relu"):
                pick.first("initializer", matched_initializers("relu"))
                if pick.has("initializer"):
                    lines.append(_("Try {act} with {init}.").format(
                        act=pick.names("activation"), init=pick.names("initializer")))
                else:
                    lines.append(_("Try {act}.").format(act=pick.names("activation")))
        elif pick.first("initializer", matched_initializers(act)):
            lines.append(_("Try an initializer matched to the activation: {labels}.").format(
                labels=pick.names("initializer")))
        elif act in ("relu",) and pick.add("activation", "leaky_relu"):
            lines.append(_("Dead ReLU units pass no gradient: try {labels}.").format(
                labels=pick.names("activation")))
        if pick.add("residual", True):
            lines.append(_("A residual connection ({label}) carries the gradient past every layer.").format(
                label=pick.names("residual")))
        if pick.first("norm", ("layer", "batch")):
            lines.append(_("Normalization ({labels}) keeps each layer's input at unit scale.").format(
                labels=pick.names("norm")))
        lines.append(_("Fewer layers shorten the product."))
    else:  # exploding or non-finite in float32 / bfloat16, or float16 without a loss scale
        if dtype == "float16" and status == "non-finite" and pick.add("dtype", "bfloat16"):
            finding = join_sentences(finding, _("float16 overflows above 65504."))
            lines.append(_("{label} has float32's range.").format(label=pick.names("dtype")))
        matched = [v for v in matched_initializers(act) if v != init]
        if pick.first("initializer", matched):
            lines.append(_("Use a smaller-variance initializer matched to the activation: {labels}.").format(
                labels=pick.names("initializer")))
        if settings.get("residual") and pick.first("norm", ("layer", "batch")):
            lines.append(_("Residual branches add up: normalization ({labels}) keeps them in scale.")
                         .format(labels=pick.names("norm")))
        if status == "non-finite":
            lines.append(_("Clipping cannot repair NaN; find the first bad op with "
                           "tf.debugging.check_numerics."))
        elif settings.get("clip_mode") == "off" and pick.add("clip_mode", "global_norm"):
            lines.append(_("Clipping ({labels}) bounds the step, not the cause.").format(
                labels=pick.names("clip_mode")))
        lines.append(_("Fewer layers shorten the product."))
    return Advice(status, finding, join_sentences(lines), tuple(pick.items))


def report_loss(report) -> float:
    """The report's loss as a float (inf when it is not finite)."""
    loss = float(getattr(report, "loss", math.nan))
    return loss if math.isfinite(loss) else math.inf


def time_advice(report, settings: Mapping, labels: Mapping | None = None, shown=None) -> Advice:
    """Advice for the TimeExplorer's ``report`` under ``settings`` (chapter 07).

    ``settings`` maps ``cell``, ``steps``, ``recurrent_initializer``, ``input_scale`` and
    ``clip_mode`` to their values; ``labels`` and ``shown`` as in :func:`gradient_advice`.
    """
    labels = labels or {}
    shown = tuple(settings) if shown is None else tuple(shown)
    pick = _Picker(settings, labels, shown)
    finding = _finding(report)
    status = report.status
    if status == "healthy":
        return Advice(status, finding, "")
    lines: list[str] = []
    cell, init = settings.get("cell"), settings.get("recurrent_initializer")
    scale = float(settings.get("input_scale", 1.0))
    if status == "vanishing":
        if cell == "simple_rnn" and pick.first("cell", ("lstm", "gru")):
            lines.append(_("A gated cell ({labels}) can learn to keep the gradient.").format(
                labels=pick.names("cell")))
        if init not in ("orthogonal", "identity") and pick.first("recurrent_initializer",
                                                                ("orthogonal", "identity")):
            lines.append(_("A recurrent matrix with singular values near 1 ({labels}) keeps its size.")
                         .format(labels=pick.names("recurrent_initializer")))
        if scale > 0.1:
            lines.append(_("Smaller inputs (input scale below {scale}) saturate tanh less.").format(
                scale=f"{scale:.3g}"))
        lines.append(_("Shorter sequences give the gradient fewer steps to shrink over; clipping does not help."))
    else:
        if pick.first("recurrent_initializer", [v for v in ("orthogonal", "glorot_uniform") if v != init]):
            lines.append(_("Lower the recurrent matrix's scale: try {labels}.").format(
                labels=pick.names("recurrent_initializer")))
        if status == "non-finite":
            lines.append(_("Clipping cannot repair NaN."))
        elif settings.get("clip_mode") == "off" and pick.add("clip_mode", "global_norm"):
            lines.append(_("Clipping ({labels}) bounds the step, not the cause.").format(
                labels=pick.names("clip_mode")))
    return Advice(status, finding, join_sentences(lines), tuple(pick.items))


# ----------------------------------------------------------------------------- paper presets
#: How close a measurement must be to a preset's paper value to read as agreement, per
#: quantity: a factor for ratios (ours are width-64 nets on random data, so the order of
#: magnitude is what can agree), a relative difference for a per-layer gain and a std.
RATIO_FACTOR = 10.0
RELATIVE = {"gain": 0.3, "std_last": 0.1}


@dataclasses.dataclass(frozen=True)
class PresetComparison:
    """A preset's paper value against the measured one, in words (chapter 05)."""

    agrees: bool
    paper: str
    measured: str
    verdict: str

    @property
    def text(self) -> str:
        return _("paper {paper}, measured {measured}: {verdict}").format(
            paper=self.paper, measured=self.measured, verdict=self.verdict)


def compare_with_paper(result) -> PresetComparison:
    """Whether ``result`` (a :class:`gradlab.engines.presets.PresetResult`) agrees with its paper, in words.

    ``zero_layers`` presets make a yes/no claim (some layer underflows to 0, or none does):
    5 zero layers where the paper says "at least one" agrees. A ratio agrees within a factor
    of :data:`RATIO_FACTOR`, a gain or a forward std within :data:`RELATIVE`.
    """
    p, m = float(result.preset.paper_value), float(result.measured)
    quantity = result.preset.quantity
    if quantity == "zero_layers":
        claim = p >= 1
        agrees = (m >= 1) == claim
        paper = _("some layers underflow to exactly 0") if claim else _("no layer underflows to 0")
        measured = _("{n} layers are exactly 0").format(n=int(m))
        verdict = _("agrees") if agrees else _("differs")
        return PresetComparison(agrees, paper, measured, verdict)
    paper, measured = f"{p:.3g}", f"{m:.3g}"
    if not (math.isfinite(m) and m > 0 and p > 0):
        return PresetComparison(False, paper, measured, _("differs (the measurement is not a positive number)"))
    factor = max(m / p, p / m)
    if quantity == "ratio":
        agrees = factor <= RATIO_FACTOR
    else:
        agrees = abs(m / p - 1) <= RELATIVE.get(quantity, 0.1)
    if factor < 1.05:
        verdict = _("agrees")
    elif agrees:
        verdict = _("agrees within a factor of {factor}").format(factor=f"{factor:.2g}")
    else:
        verdict = _("differs by a factor of {factor}").format(factor=f"{factor:.2g}")
    return PresetComparison(agrees, paper, measured, verdict)
