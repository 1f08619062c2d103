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

__all__ = ["CLOSE_FACTOR", "INITIALIZER_FAMILIES", "Advice", "FLOAT16_MAX", "PresetComparison", "Suggestion", "compare_with_paper",
           "gradient_advice", "initializer_variance", "matched_initializers", "time_advice"]

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


#: Each initializer's family: two initializers of one family (he_normal, he_uniform) have the same
#: variance and differ only in the shape of the distribution, which the signal's scale does not see.
INITIALIZER_FAMILIES = {
    "zeros": "zeros", "small_normal": "small_normal", "large_normal": "large_normal",
    "glorot_uniform": "glorot", "glorot_normal": "glorot", "he_normal": "he", "he_uniform": "he",
    "lecun_normal": "lecun", "lecun_uniform": "lecun", "orthogonal": "orthogonal",
    "standard_uniform": "standard_uniform",
}
#: ``n · Var W`` of a square hidden layer (fan_in = fan_out = n) for the families that scale with
#: ``n``: He 2, LeCun, Glorot and orthogonal 1, Glorot & Bengio's "standard" U[±1/√n] 1/3.
_SCALED_VARIANCE = {"he": 2.0, "lecun": 1.0, "glorot": 1.0, "orthogonal": 1.0, "standard_uniform": 1.0 / 3.0}
#: ``Var W`` of the families with a fixed scale (zeros, RandomNormal σ=0.01 and σ=1).
_FIXED_VARIANCE = {"zeros": 0.0, "small_normal": 1e-4, "large_normal": 1.0}
#: A step down in variance to a family not matched to the activation: the first of these that
#: has the largest variance below the selected one.
_STEP_DOWN = ("lecun_normal", "glorot_uniform", "orthogonal", "standard_uniform", "small_normal")


def initializer_variance(name: str, width: int = 64) -> float:
    """``n · Var W`` of initializer ``name`` in a square hidden layer of ``width`` units (chapter 01's
    variance argument): the number that decides whether the signal grows or shrinks per layer."""
    family = INITIALIZER_FAMILIES.get(name)
    if family is None:
        raise ValueError(f"initializer must be one of {', '.join(INITIALIZER_FAMILIES)}; got {name!r}")
    if family in _FIXED_VARIANCE:
        return _FIXED_VARIANCE[family] * width
    return _SCALED_VARIANCE[family]


@dataclasses.dataclass(frozen=True)
class Suggestion:
    """Set control ``control`` to ``value`` (shown as ``label``, the dropdown's own text).

    ``claim`` says what the advice claims the change does, where that is checkable: for an
    initializer ``"smaller-variance"``, ``"larger-variance"``, ``"isometry"`` (orthogonal: every
    singular value 1) or ``"random"`` (any random initializer instead of zeros); for an activation
    ``"critical"`` (ReLU with the selected He initializer: the signal keeps its size); ``""`` otherwise.
    """

    control: str
    value: object
    label: str
    claim: str = ""


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

    def add(self, control: str, value, claim: str = "") -> bool:
        if control not in self.shown or self.settings.get(control) == value:
            return False
        if any(s.control == control for s in self.items):
            return False
        self.items.append(Suggestion(control, value, self.label(control, value), claim))
        return True

    def label(self, control: str, value) -> str:
        return self.labels.get(control, {}).get(value, str(value))

    def first(self, control: str, values, claim: str = "") -> bool:
        return any(self.add(control, v, claim) for v in values)

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


@dataclasses.dataclass
class _Case:
    """What every stage of :func:`gradient_advice` reads: the settings, the report's numbers."""

    report: object
    settings: Mapping
    labels: Mapping
    pick: _Picker
    scales: list
    finding: str
    status: str
    causes: tuple

    def get(self, name, default=None):
        return self.settings.get(name, default)

    @property
    def signal(self) -> np.ndarray:
        return np.asarray(self.report.signal_norms, dtype=np.float64)

    @property
    def scale(self) -> float:
        return float(self.settings.get("loss_scale", 1.0))

    @property
    def width(self) -> int:
        return int(self.settings.get("width", 64))

    def variance(self, init) -> float:
        return initializer_variance(init, self.width) if init in INITIALIZER_FAMILIES else math.nan

    def advice(self, lines) -> Advice:
        return Advice(self.status, self.finding, join_sentences(lines), tuple(self.pick.items))


def _loss_scale_worked(c: _Case) -> None:
    """A loss scale that kept every float16 gradient above 0: said, and underflow is no cause."""
    s = c.signal
    if c.get("dtype", "float32") == "float16" and c.scale > 1 and s.size and np.all(np.isfinite(s)) and np.all(s > 0):
        c.finding = join_sentences(c.finding, _(
            "The loss scale {scale} worked: no layer's float16 gradient underflowed to 0 "
            "(the plot shows the gradients divided by the scale again).").format(
                scale=_scale_label(c.labels, c.scale)))
        c.causes = tuple(k for k in c.causes if k != "underflow")
        if c.status == "vanishing" and not c.causes:
            c.causes = ("saturating-activation",) if c.get("activation") in _SATURATING else ("initializer-scale",)


def _overflowing_loss_scale(c: _Case) -> Advice:
    """float16 gradients past 65504 because of the loss scale: a smaller one."""
    s = c.signal
    c.finding = _(
        "{n} of {depth} layers have NaN/inf gradients: the loss scale {scale} pushes the "
        "float16 gradients past float16's largest value, 65504.").format(
            n=int(np.sum(~np.isfinite(s))), depth=s.size, scale=_scale_label(c.labels, c.scale))
    smaller = [v for v in c.scales if v < c.scale]
    target = [v for v in smaller if v <= FIRST_LOSS_SCALE and report_loss(c.report) * v < FLOAT16_MAX]
    choice = max(target) if target else (max(smaller) if smaller else None)
    lines = []
    if choice is not None and c.pick.add("loss_scale", choice):
        lines.append(_("Pick a smaller loss scale: {labels}.").format(labels=c.pick.names("loss_scale")))
    return c.advice(lines)


def _underflow_lines(c: _Case) -> list[str]:
    """float16 gradients below its range: a (larger) loss scale, or bfloat16."""
    lines, pick = [], c.pick
    if c.scale == 1:
        pick.add("loss_scale", FIRST_LOSS_SCALE)
        if pick.has("loss_scale"):
            lines.append(_("A loss scale shifts the gradients up into range: try {labels}.")
                         .format(labels=pick.names("loss_scale")))
    else:
        c.finding = join_sentences(c.finding, _("The loss scale {scale} is not enough for these gradients.")
                                   .format(scale=_scale_label(c.labels, c.scale)))
        larger = [v for v in c.scales if v > c.scale and report_loss(c.report) * v < FLOAT16_MAX]
        if larger and pick.add("loss_scale", larger[min(len(larger) - 1, 3)]):
            lines.append(_("Try a larger loss scale: {labels}.").format(labels=pick.names("loss_scale")))
    if pick.add("dtype", "bfloat16"):
        lines.append(_("Or compute in {label}, which has float32's exponent range.").format(
            label=pick.names("dtype")))
    return lines


def _ratio_text(ratio: float) -> str:
    """A variance ratio as printed: ``2``, ``156``; below 1 a fraction where it is one (``1/2``, ``1/64``)."""
    if ratio >= 1:
        return f"{ratio:.3g}"
    inverse = 1 / ratio
    return f"1/{round(inverse)}" if abs(inverse - round(inverse)) < 1e-6 * inverse else f"{ratio:.2g}"


def _variance_sentence(c: _Case, value, template: str) -> str:
    """``template`` with the suggested labels and the variance ratio to the selected initializer
    (not named: the advice never names what is selected)."""
    ratio = c.variance(value) / c.variance(c.get("initializer"))
    return template.format(labels=c.pick.names("initializer"), ratio=_ratio_text(ratio))


def _zero_weights_sentence(c: _Case) -> str:
    return _("Zero weights pass no signal: use a random initializer such as {labels}.").format(
        labels=c.pick.names("initializer"))


def _vanishing_initializer(c: _Case) -> str | None:
    """A matched initializer with a larger variance than the selected one (a twin with the same
    variance changes nothing), or orthogonal weights for a linear stack; the sentence, or None."""
    act, init = c.get("activation"), c.get("initializer")
    if c.variance(init) == 0 and c.pick.first("initializer", matched_initializers(act), "random"):
        return _zero_weights_sentence(c)
    larger = [v for v in matched_initializers(act) if c.variance(v) > c.variance(init)]
    if c.pick.first("initializer", larger, "larger-variance"):
        value = c.pick.items[-1].value
        return _variance_sentence(c, value, _(
            "Try a larger-variance initializer matched to the activation: {labels} ({ratio}× the current "
            "variance)."))
    if (act == "linear" and INITIALIZER_FAMILIES.get(init) != "orthogonal"
            and c.pick.add("initializer", "orthogonal", "isometry")):
        return _("Orthogonal weights ({labels}) keep every singular value of a layer at 1, so the product of "
                 "the layers keeps the gradient's norm exactly.").format(labels=c.pick.names("initializer"))
    return None


def _vanishing_lines(c: _Case) -> list[str]:
    lines, pick = [], c.pick
    act, init = c.get("activation"), c.get("initializer")
    if act in _SATURATING or "saturating-activation" in c.causes:
        if pick.add("activation", "relu"):
            # an initializer of the same variance as the selected one would change nothing
            different = [v for v in matched_initializers("relu") if c.variance(v) != c.variance(init)]
            if pick.first("initializer", different):
                lines.append(_("Try {act} with {init}.").format(act=pick.names("activation"),
                                                                init=pick.names("initializer")))
            else:
                lines.append(_("Try {act}.").format(act=pick.names("activation")))
    elif (sentence := _vanishing_initializer(c)) is not None:
        lines.append(sentence)
    elif act in ("relu",) and pick.add("activation", "leaky_relu"):
        lines.append(_("Dead ReLU units pass no gradient: try {labels}.").format(labels=pick.names("activation")))
    elif (act not in ("relu", "leaky_relu") and INITIALIZER_FAMILIES.get(init) == "he"
          and pick.add("activation", "relu", "critical")):
        # He's variance is matched to ReLU exactly (½·n·Var W = 1); gelu's derivative is smaller on average
        lines.append(_("The He initializer in use is matched to ReLU exactly (½·n·Var W = 1), and this activation "
                       "passes less of the gradient per layer: try {labels} with it.").format(
            labels=pick.names("activation")))
    if pick.add("residual", True):
        lines.append(_("A residual connection ({label}) carries the gradient past every layer.").format(
            label=pick.names("residual")))
    if pick.first("norm", ("layer", "batch")):
        lines.append(_("Normalization ({labels}) keeps each layer's input at unit scale.").format(
            labels=pick.names("norm")))
    lines.append(_("Fewer layers shorten the product."))
    return lines


def _smaller_variance(c: _Case) -> tuple[list, bool]:
    """Initializers with a strictly smaller variance than the selected one: the matched ones, else
    the step down to the largest smaller variance (zeros never); and whether they are matched."""
    act, init = c.get("activation"), c.get("initializer")
    current = c.variance(init)
    matched = [v for v in matched_initializers(act) if c.variance(v) < current]
    if matched:
        return matched, True
    below = [v for v in _STEP_DOWN if c.variance(v) < current]
    if not below:
        return [], False
    top = max(c.variance(v) for v in below)
    return [v for v in below if c.variance(v) == top], False


def _exploding_lines(c: _Case) -> list[str]:
    lines, pick = [], c.pick
    if c.get("dtype", "float32") == "float16" and c.status == "non-finite" and pick.add("dtype", "bfloat16"):
        c.finding = join_sentences(c.finding, _("float16 overflows above 65504."))
        lines.append(_("{label} has float32's range.").format(label=pick.names("dtype")))
    smaller, matched = _smaller_variance(c)
    if pick.first("initializer", smaller, "smaller-variance"):
        template = (_("Use a smaller-variance initializer matched to the activation: {labels} ({ratio} of the "
                      "current variance).") if matched else
                    _("Use a smaller-variance initializer: {labels} ({ratio} of the current variance)."))
        lines.append(_variance_sentence(c, pick.items[-1].value, template))
    if c.get("residual") and pick.first("norm", ("layer", "batch")):
        lines.append(_("Residual branches add up: normalization ({labels}) keeps them in scale.")
                     .format(labels=pick.names("norm")))
    if c.status == "non-finite":
        lines.append(_("Clipping cannot repair NaN; find the first bad op with tf.debugging.check_numerics."))
    elif c.get("clip_mode") == "off" and pick.add("clip_mode", "global_norm"):
        lines.append(_("Clipping ({labels}) bounds the step, not the cause.").format(labels=pick.names("clip_mode")))
    lines.append(_("Fewer layers shorten the product."))
    return lines


def gradient_advice(report, settings: Mapping, labels: Mapping | None = None,
                    shown=None, loss_scales=None) -> Advice:
    """Advice for the GradientExplorer's ``report`` under ``settings`` (chapters 01 and 05).

    ``settings`` maps control names (``depth``, ``activation``, ``initializer``, ``clip_mode``,
    ``residual``, ``norm``, ``dtype``, ``loss_scale``; ``width``, 64 by default) to their values;
    ``labels`` maps a control to ``{value: dropdown label}``; ``shown`` lists the controls the
    explorer shows (default: every key of ``settings``); ``loss_scales`` the loss scales it offers.
    An initializer is suggested only where its variance (:func:`initializer_variance`) moves the
    way the advice says (smaller for an exploding signal, larger for a vanishing one): never the
    same-variance twin of the selected one (he_uniform for he_normal).
    """
    shown = tuple(settings) if shown is None else tuple(shown)
    c = _Case(report, settings, labels or {}, _Picker(settings, labels or {}, shown),
              sorted(loss_scales or [2.0**k for k in range(25)]), _finding(report), report.status, _causes(report))
    _loss_scale_worked(c)
    if c.status == "healthy":
        return Advice(c.status, c.finding, "")
    dtype = c.get("dtype", "float32")
    if (c.status == "non-finite" or "overflow" in c.causes) and dtype == "float16" and c.scale > 1:
        return _overflowing_loss_scale(c)
    if np.size(c.signal) and np.any(c.signal == 0) and c.get("initializer") == "zeros":
        c.pick.first("initializer", matched_initializers(c.get("activation")), "random")
        return c.advice([_zero_weights_sentence(c)])
    if "underflow" in c.causes and dtype == "float16":
        lines = _underflow_lines(c)
        if lines:
            return c.advice(lines)
    return c.advice(_vanishing_lines(c) if c.status == "vanishing" else _exploding_lines(c))


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
#: Within these factors a measurement *agrees closely*: a ratio over the whole stack within 2×,
#: a per-layer gain or a std within 1.25× (over 30 layers a factor of 2 is 2.3% per layer).
CLOSE_FACTOR = {"ratio": 2.0, "gain": 1.25, "std_last": 1.25}
#: Below this factor the measurement simply agrees.
SAME_FACTOR = 1.05


@dataclasses.dataclass(frozen=True)
class PresetComparison:
    """A preset's paper value against the measured one, in words (chapter 05).

    ``closeness`` is ``"same"`` (within 5%), ``"close"`` (within :data:`CLOSE_FACTOR`),
    ``"tolerance"`` (agrees only within the preset's tolerance: the same order of magnitude for
    a ratio) or ``"differs"``; ``agrees`` is True for the first three.
    """

    agrees: bool
    paper: str
    measured: str
    verdict: str
    closeness: str = ""

    @property
    def text(self) -> str:
        return _("paper {paper}, measured {measured}: {verdict}").format(
            paper=self.paper, measured=self.measured, verdict=self.verdict)


def _closeness(quantity: str, paper: float, measured: float) -> tuple[str, float]:
    """How far ``measured`` is from ``paper`` (the factor, ≥ 1) and which band that falls in."""
    factor = max(measured / paper, paper / measured)
    if quantity == "ratio":
        within = factor <= RATIO_FACTOR
    else:
        within = abs(measured / paper - 1) <= RELATIVE.get(quantity, 0.1)
    if factor < SAME_FACTOR:
        return "same", factor
    if within and factor <= CLOSE_FACTOR.get(quantity, SAME_FACTOR):
        return "close", factor
    return ("tolerance" if within else "differs"), factor


def compare_with_paper(result) -> PresetComparison:
    """Whether ``result`` (a :class:`gradlab.engines.presets.PresetResult`) agrees with its paper, in words.

    ``zero_layers`` presets make a yes/no claim (some layer underflows to 0, or none does):
    5 zero layers where the paper says "at least one" agrees. A ratio agrees within a factor
    of :data:`RATIO_FACTOR`, a gain or a forward std within :data:`RELATIVE`; the verdict tells
    close agreement (:data:`CLOSE_FACTOR`: "agrees closely (×1.5)") apart from agreement within
    that tolerance only ("same order of magnitude (×9.4)" for a ratio).
    """
    p, m = float(result.preset.paper_value), float(result.measured)
    quantity = result.preset.quantity
    if quantity == "zero_layers":
        claim = p >= 1
        agrees = (m >= 1) == claim
        paper = _("some layers underflow to exactly 0") if claim else _("no layer underflows to 0")
        measured = _("{n} layers are exactly 0").format(n=int(m))
        verdict = _("agrees") if agrees else _("differs")
        return PresetComparison(agrees, paper, measured, verdict, "same" if agrees else "differs")
    paper, measured = f"{p:.3g}", f"{m:.3g}"
    if not (math.isfinite(m) and m > 0 and p > 0):
        return PresetComparison(False, paper, measured, _("differs (the measurement is not a positive number)"),
                                "differs")
    closeness, factor = _closeness(quantity, p, m)
    f = f"{factor:.2g}"
    if closeness == "same":
        verdict = _("agrees")
    elif closeness == "close":
        verdict = _("agrees closely (×{factor})").format(factor=f)
    elif closeness == "tolerance" and quantity == "ratio":
        verdict = _("same order of magnitude (×{factor}), not close").format(factor=f)
    elif closeness == "tolerance":
        verdict = _("within ±{pct}% (×{factor}), not close").format(
            factor=f, pct=f"{100 * RELATIVE.get(quantity, 0.1):g}")
    else:
        verdict = _("differs by a factor of {factor}").format(factor=f)
    return PresetComparison(closeness != "differs", paper, measured, verdict, closeness)
