"""The verdict on per-layer (or per-time-step) gradient norms: what was measured, and why (chapters 01, 05, 07).

Pure computation: numbers in, a small typed :class:`Verdict` out. Every report in gradlab
(:class:`gradlab.GradientReport`, the explorers' reports, :class:`gradlab.TimeReport`,
:class:`gradlab.StepReport`) carries one, so that the *finding* (what the rule measured: the
total ratio, the per-layer gain, and against which threshold) is kept apart from the *advice*,
and the *kind of cause* is data (:data:`CAUSES`) that a caller can turn into advice fitted to
its own settings (the explorers never recommend what is already selected).

The rule (chapter 01 explains it beside a table of borderline cases), on the norms ``s``
ordered input side first, ``r = s[0] / s[-1]`` and the per-layer gain ``g = r ** (1/(n-1))``:

* **total**: ``r < vanish_below`` (1e-3) is ``"vanishing"``, ``r > explode_above`` (1e3) is
  ``"exploding"``, whatever the depth;
* **per layer**: a signal that shrinks by more than :data:`GAIN_TOLERANCE` (5 %) per layer
  *and* by more than :data:`MILD_RATIO` (10×) overall is ``"vanishing"``; the mirror image
  (``g > 1/0.95`` and ``r > 10``) is ``"exploding"``;
* otherwise ``"healthy"``: no rule fires. That is a statement about these thresholds, not a
  promise that every layer learns well: a gain within 5 % still compounds (1.04 per layer is
  40× over 100 layers), and the finding says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ..i18n import N_, _, join_sentences, tidy_spacing

__all__ = [
    "CAUSES",
    "GAIN_TOLERANCE",
    "MILD_RATIO",
    "RULES",
    "SATURATING_ACTIVATIONS",
    "STATUSES",
    "Verdict",
    "diagnose",
    "judge",
    "per_layer_gain",
    "status_word",
    "uneven",
]

STATUSES: tuple[str, ...] = ("healthy", "vanishing", "exploding", "non-finite", "uneven")
#: Which rule decided a :class:`Verdict`.
RULES: tuple[str, ...] = ("total", "per-layer", "middle", "none", "non-finite", "all-zero", "one-layer")
#: The kinds of cause a :class:`Verdict` names, most likely first in ``Verdict.causes``.
CAUSES: tuple[str, ...] = (
    "saturating-activation",  # sigmoid/tanh derivatives (at most 0.25 / 1) shrink the signal
    "initializer-scale",      # the weights' variance does not match the activation
    "underflow",              # some gradients are exactly 0 in the compute dtype
    "overflow",               # NaN/inf: the numbers overflowed
    "dead-units",             # every signal is 0: zero weights, or relu units that never fire
    "normalization",          # the change happens across BatchNorm/LayerNorm, which rescale it
    "residual-growth",        # unnormalized residual blocks add their branches' variance
    "batchnorm-statistics",   # BatchNorm over too few values (set by the inspector)
)

#: :func:`judge`'s per-layer rule: a signal that changes by more than this fraction per layer
#: (gain below 0.95 or above 1/0.95) *and* by more than :data:`MILD_RATIO` overall is flagged.
GAIN_TOLERANCE = 0.05
#: :func:`judge`'s per-layer rule also needs a total change of at least this factor (0.1 or 10).
MILD_RATIO = 10.0
#: Activations whose derivative is small away from 0 (a reason for vanishing on its own).
SATURATING_ACTIVATIONS = frozenset({"sigmoid", "tanh", "hard_sigmoid", "softsign", "hard_tanh", "softmax"})
_DEAD_ACTIVATIONS = frozenset({"relu", "relu6"})

_UNDERFLOW = {
    "float32": N_("float32 (TensorFlow's CPU kernels flush values below 1.18e-38 to 0)"),
    "float64": N_("float64"),
    "float16": N_("float16 (its smallest subnormal is 2^-24 ≈ 6e-8)"),
    "bfloat16": N_("bfloat16 (float32's exponent range, 8 bits of precision)"),
}

_ADVICE = {
    ("layer", "saturating-activation"): N_(
        "Try relu with he_normal, fewer layers, a residual connection or normalization."),
    ("layer", "initializer-scale", "vanishing"): N_(
        "Use an initializer matched to the activation (he_normal for relu, glorot_uniform for tanh), "
        "fewer layers, or normalization."),
    ("layer", "initializer-scale", "exploding"): N_(
        "Use a smaller-variance initializer matched to the activation (glorot, he); clipping bounds "
        "the step but not the cause."),
    ("layer", "underflow"): N_(
        "Gradients that are exactly 0 cannot be rescued later: in float16 use a loss scale; otherwise "
        "fix what shrinks the signal (the activation or the initializer)."),
    ("layer", "overflow"): N_(
        "Clipping cannot repair NaN; lower the weight scale or the learning rate, and find the first "
        "bad op with tf.debugging.check_numerics."),
    ("layer", "dead-units"): N_(
        "Zero weights or dead units (relu at 0) block it; use a random initializer such as he_normal, "
        "or leaky_relu."),
    ("layer", "normalization"): N_(
        "Normalization layers divide the gradient by the scale of their input, so this ratio is not a sign "
        "of badly scaled weights. Whether the early layers learn shows in training: watch the loss over a "
        "few steps."),
    ("layer", "residual-growth"): N_(
        "Each unnormalized residual block adds its branch's variance: add normalization (layer norm) or "
        "scale the branches down."),
    ("layer", "batchnorm-statistics"): N_(
        "The BatchNormalization statistics are the likely cause, not the scale of the weights: fix those "
        "first."),
    ("step", "saturating-activation"): N_(
        "The early inputs cannot teach the network. Smaller inputs (less tanh saturation), shorter "
        "sequences or a gated cell help; clipping does not."),
    ("step", "initializer-scale", "vanishing"): N_(
        "The early inputs cannot teach the network. Shorter sequences, a recurrent matrix with singular "
        "values near 1 (orthogonal, identity), smaller inputs (less tanh saturation) or a gated cell "
        "help; clipping does not."),
    ("step", "initializer-scale", "exploding"): N_(
        "Lower the recurrent matrix's scale; clipping bounds the step but not the cause."),
    ("step", "underflow"): N_(
        "Gradients that are exactly 0 cannot be rescued later: shorter sequences or a recurrent matrix "
        "with singular values near 1 keep them."),
    ("step", "overflow"): N_(
        "The recurrence overflowed. Lower the recurrent weights' scale or the learning rate; clipping "
        "cannot repair NaN."),
    ("step", "dead-units"): N_("Nothing flows back in time: check the recurrent weights and the inputs."),
}


#: The status words as a learner reads them (the statuses themselves stay English identifiers).
STATUS_WORDS = {"healthy": N_("healthy"), "vanishing": N_("vanishing"), "exploding": N_("exploding"),
                "non-finite": N_("non-finite"), "uneven": N_("uneven"), "dead-units": N_("dead units"),
                "loss-scale-overflow": N_("loss-scale overflow"), "n/a": N_("n/a"),
                # a training run's (gradlab.reports.training)
                "diverged": N_("diverged"), "not-learning": N_("not learning"), "saturated": N_("saturated"),
                "steps-too-large": N_("steps too large"), "stalled": N_("stalled"), "running": N_("running")}


def status_word(status: str) -> str:
    """``status`` in the current language (``"vanishing"`` -> ``"梯度消失"`` in Chinese)."""
    return _(STATUS_WORDS[status]) if status in STATUS_WORDS else status


def _advice(unit: str, cause: str | None, status: str) -> str:
    if cause is None:
        return ""
    text = _ADVICE.get((unit, cause, status)) or _ADVICE.get((unit, cause)) or _ADVICE.get(("layer", cause))
    return _(text) if text else ""


def per_layer_gain(signal_norms) -> float:
    """The geometric mean of the successive ratios ``s[l] / s[l+1]`` of per-layer norms.

    The product of the successive ratios telescopes to ``s[0] / s[-1]``, so the gain is
    ``(s[0] / s[-1]) ** (1 / (n - 1))``: the factor by which one layer multiplies the
    back-propagated signal on average (chapter 01). 0 when the first norm is exactly 0,
    ``inf`` when only the last is, ``nan`` for one layer or NaN/inf norms.
    """
    s = np.asarray(signal_norms, dtype=np.float64).ravel()
    if s.size < 2 or not np.all(np.isfinite(s)):
        return math.nan
    if s[0] == 0 and s[-1] == 0:
        return math.nan
    if s[0] == 0:
        return 0.0
    if s[-1] == 0:
        return math.inf
    return float(np.exp((np.log(s[0]) - np.log(s[-1])) / (s.size - 1)))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the rule found on a sequence of gradient norms (input side, or earliest step, first).

    ``status`` is one of :data:`STATUSES` (never translated: code compares it); ``finding``
    says what was measured and which rule decided, in the current language, with no advice
    in it; ``advice`` is a generic fix for :attr:`cause` (an explorer builds its own from
    ``causes`` and its settings); ``rule`` is one of :data:`RULES`; ``causes`` are kinds from
    :data:`CAUSES`, most likely first (empty when healthy).
    """

    status: str
    finding: str
    advice: str
    ratio: float
    gain: float
    depth: int
    rule: str
    causes: tuple[str, ...] = ()
    vanish_below: float = 1e-3
    explode_above: float = 1e3

    @property
    def cause(self) -> str | None:
        """The most likely kind of cause, or ``None`` (healthy)."""
        return self.causes[0] if self.causes else None

    @property
    def message(self) -> str:
        """The finding followed by the advice: what :func:`diagnose` returns as its message."""
        return join_sentences(self.finding, self.advice)

    def __str__(self) -> str:
        return _("{status}: {message}").format(status=status_word(self.status), message=self.message)


def _check_norms(signal_norms) -> np.ndarray:
    if isinstance(signal_norms, (list, tuple)) and any(v is None for v in signal_norms):
        raise ValueError(
            "signal_norms holds None: a layer whose gradient is None is not connected to the "
            "loss (chapter 02); leave it out or fix the connection"
        )
    try:
        s = np.asarray(signal_norms, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"signal_norms must be a 1-D sequence of numbers; got {signal_norms!r}") from err
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"signal_norms must be a non-empty 1-D sequence; got shape {s.shape}")
    if np.any(s < 0):
        raise ValueError("signal_norms are norms and cannot be negative")
    return s


#: A norm below this, next to an exact 0, is evidence that the 0 is an underflow in that dtype (its
#: elements sit near the smallest subnormal: 1.4e-45 in float32, 6e-8 in float16).
UNDERFLOW_NEAR = {"float32": 1e-30, "bfloat16": 1e-30, "float64": 1e-290, "float16": 1e-4}


def underflow_evidence(s, dtype: str) -> bool:
    """Whether an exact 0 among the norms ``s`` can be an underflow: some non-zero norm is within a
    few decades of the dtype's smallest numbers, or a zero's neighbour, shrinking by its own factor
    once more, would be. ``[0, 1e-3, 1e-2, 1]`` has none: its 0 is zero
    weights or units that never fire, not an underflow."""
    s = np.asarray(s, dtype=np.float64)
    near = UNDERFLOW_NEAR.get(dtype, UNDERFLOW_NEAR["float32"])
    nonzero = s[(s > 0) & np.isfinite(s)]
    if nonzero.size and float(nonzero.min()) < near:
        return True
    for i in np.flatnonzero(s == 0):  # the neighbour's own shrink, carried one layer on, reaches down there
        for step in (-1, 1):
            n1, n2 = i + step, i + 2 * step
            if 0 <= n2 < s.size and s[n1] > 0 and s[n2] > 0 and s[n1] * min(s[n1] / s[n2], 1.0) < near:
                return True
    return False


def _causes(status: str, s: np.ndarray, *, activation, normalized, residual, dtype) -> tuple[str, ...]:
    if status == "non-finite":
        return ("overflow",)
    if status == "healthy":
        return ()
    if s[0] == 0 and s[-1] == 0:
        return ("dead-units",) if activation in _DEAD_ACTIVATIONS or activation is None else ("initializer-scale",)
    if normalized:
        base = ["normalization"]
    elif status == "exploding" and residual:
        base = ["residual-growth"]
    elif status == "vanishing" and activation in SATURATING_ACTIVATIONS:
        base = ["saturating-activation"]
    else:
        base = ["initializer-scale"]
    if np.any(s == 0) and not underflow_evidence(s, dtype):  # an exact 0 with nothing tiny behind it
        base = ["dead-units"]
    elif np.any(s == 0):
        if dtype in ("float16", "bfloat16"):
            base.insert(0, "underflow")
        else:
            base.append("underflow")
    return tuple(base)


def _check_thresholds(unit: str, vanish_below, explode_above) -> None:
    if unit not in ("layer", "step"):
        raise ValueError(f"unit must be 'layer' or 'step'; got {unit!r}")
    if not (isinstance(vanish_below, (int, float)) and isinstance(explode_above, (int, float))) \
            or isinstance(vanish_below, bool) or isinstance(explode_above, bool):
        raise ValueError("vanish_below and explode_above must be numbers")
    if not (0 < vanish_below < explode_above):
        raise ValueError(
            f"need 0 < vanish_below < explode_above; got vanish_below={vanish_below}, "
            f"explode_above={explode_above}"
        )


def _names(names, n: int, unit: str) -> list[str]:
    if names is None:
        return [(_("layer {index}") if unit == "layer" else _("step {index}")).format(index=i + 1)
                for i in range(n)]
    if len(names) != n:
        raise ValueError(f"names must hold one name per norm ({n}); got {len(names)}")
    return [str(name) for name in names]


#: The per-layer band's upper edge as printed: 1/0.95 = 1.0526 (not "1.05", which is below the edge used).
_HIGH_TEXT = f"{1.0 / (1.0 - GAIN_TOLERANCE):.5g}"


def _gain_text(gain: float) -> str:
    """The per-layer gain with 3 significant digits, or more where 3 would put it on the other side of
    (or on) an edge of the band it is judged against: 1.051 reads within 0.95–1.0526, 1.053 above it."""
    edges = ((1.0 - GAIN_TOLERANCE, f"{1.0 - GAIN_TOLERANCE:g}"), (1.0 / (1.0 - GAIN_TOLERANCE), _HIGH_TEXT))
    text = f"{gain:.3g}"
    for digits in range(3, 10):
        text = f"{gain:.{digits}g}"
        if all((gain < edge) == (float(text) < float(shown)) and (gain > edge) == (float(text) > float(shown))
               or gain == edge for edge, shown in edges):
            break
    return text


def _fields(s: np.ndarray, names: list[str], ratio: float, gain: float, vanish_below, explode_above,
            dtype: str) -> dict:
    """The numbers every finding may name, formatted once."""
    return dict(n=s.size, first=names[0], last=names[-1], ratio=f"{ratio:.2g}", gain=_gain_text(gain),
                low=f"{1.0 - GAIN_TOLERANCE:g}", high=_HIGH_TEXT,
                vanish=f"{vanish_below:g}", explode=f"{explode_above:g}", mild_low=f"{1 / MILD_RATIO:g}",
                mild_high=f"{MILD_RATIO:g}", dtype=_(_UNDERFLOW[dtype if dtype in _UNDERFLOW else "float32"]),
                raw_dtype=dtype)


def _by_unit(unit: str, layer_text: str, step_text: str) -> str:
    return layer_text if unit == "layer" else step_text


def _degenerate(s: np.ndarray, names, unit: str, f: dict):
    """NaN/inf, all zero, or one entry: ``(status, rule, finding)``, or ``None``."""
    bad = ~np.isfinite(s)
    if bad.any():
        f.update(count=int(bad.sum()), bad=str(names[int(np.argmax(bad))]))
        return "non-finite", "non-finite", _by_unit(
            unit, _("{count} of {n} layers have NaN/inf gradients (the first is {bad}): the numbers overflowed."),
            _("{count} of {n} steps have NaN/inf gradients (the first is {bad}): the recurrence overflowed.")
        ).format(**f)
    if s[0] == 0 and s[-1] == 0:
        return "vanishing", "all-zero", _by_unit(
            unit, _("Every layer's gradient signal is exactly 0: nothing reaches the network."),
            _("The gradient is exactly 0 at every step: nothing flows back in time.")).format(**f)
    if s.size == 1:
        return "healthy", "one-layer", _by_unit(
            unit, _("One layer: no depth for the signal to vanish or explode over."),
            _("One step: no time for the gradient to vanish or explode over."))
    return None


def _vanishing(s: np.ndarray, ratio: float, gain: float, unit: str, f: dict, vanish_below):
    """The total and per-layer rules towards 0: ``(status, rule, finding)``, or ``None``."""
    if not (ratio < vanish_below or (gain < 1.0 - GAIN_TOLERANCE and ratio < 1.0 / MILD_RATIO)):
        return None
    if s[0] == 0 and not underflow_evidence(s, f["raw_dtype"]):
        return "vanishing", "total", _(
            "The gradient at {first} is exactly 0, while {last} still gets one; no norm comes near the "
            "smallest numbers of {dtype}, so this is no underflow: zero weights or units that never fire "
            "block it. The ratio 0 is below the threshold {vanish}.").format(**f)
    if s[0] == 0:
        return "vanishing", "total", _(
            "The gradient at {first} is exactly 0: every element underflowed in {dtype}, while "
            "{last} still gets one; the ratio 0 is below the threshold {vanish}.").format(**f)
    if ratio < vanish_below:
        return "vanishing", "total", _by_unit(
            unit, _("The signal at {first} is {ratio}× the signal at {last} ({gain}× per layer over {n} layers): "
                    "below the threshold {vanish} for the total ratio."),
            _("The gradient at {first} is {ratio}× the gradient at {last} ({gain}× per step over {n} "
              "steps): below the threshold {vanish} for the total ratio.")).format(**f)
    return "vanishing", "per-layer", _by_unit(
        unit, _("The signal shrinks {gain}× per layer over {n} layers (below {low}) and is {ratio}× at {first} "
                "what it is at {last} (below {mild_low}): the per-layer rule."),
        _("The gradient shrinks {gain}× per step over {n} steps (below {low}) and is {ratio}× at {first} "
          "what it is at {last} (below {mild_low}): the per-step rule.")).format(**f)


def _exploding(ratio: float, gain: float, unit: str, f: dict, explode_above):
    """The total and per-layer rules towards infinity: ``(status, rule, finding)``, or ``None``."""
    if not (ratio > explode_above or (gain > 1.0 / (1.0 - GAIN_TOLERANCE) and ratio > MILD_RATIO)):
        return None
    if ratio > explode_above:
        return "exploding", "total", _by_unit(
            unit, _("The signal at {first} is {ratio}× the signal at {last} ({gain}× per layer over {n} layers): "
                    "above the threshold {explode} for the total ratio."),
            _("The gradient at {first} is {ratio}× the gradient at {last} ({gain}× per step over {n} "
              "steps): above the threshold {explode} for the total ratio.")).format(**f)
    return "exploding", "per-layer", _by_unit(
        unit, _("The signal grows {gain}× per layer over {n} layers (above {high}) and is {ratio}× at {first} "
                "what it is at {last} (above {mild_high}): the per-layer rule."),
        _("The gradient grows {gain}× per step over {n} steps (above {high}) and is {ratio}× at {first} "
          "what it is at {last} (above {mild_high}): the per-step rule.")).format(**f)


def _middle(s: np.ndarray, names: list[str], unit: str, f: dict, vanish_below, explode_above):
    """A dip or a spike between the end layers that the end-to-end ratio cannot see ([1, 1e-5, 1]):
    a middle entry below ``vanish_below`` times the smaller end, or above ``explode_above`` times the
    larger one. ``(status, rule, finding)``, or ``None``."""
    if s.size < 3:
        return None
    mid = s[1:-1]
    low_end, high_end = min(s[0], s[-1]), max(s[0], s[-1])
    k_low, k_high = int(np.argmin(mid)) + 1, int(np.argmax(mid)) + 1
    if low_end > 0 and s[k_low] < vanish_below * low_end:
        return "vanishing", "middle", _by_unit(
            unit, _("The signal at {where} is {factor}× the smaller of the end layers' ({first}, {last}): below the "
                    "threshold {vanish}. The end-to-end ratio {ratio}× hides this dip in the middle layers."),
            _("The gradient at {where} is {factor}× the smaller of the end steps' ({first}, {last}): below the "
              "threshold {vanish}. The end-to-end ratio {ratio}× hides this dip.")).format(
            where=names[k_low], factor=f"{s[k_low] / low_end:.2g}", **f)
    if s[k_high] > explode_above * high_end:
        return "exploding", "middle", _by_unit(
            unit, _("The signal at {where} is {factor}× the larger of the end layers' ({first}, {last}): above the "
                    "threshold {explode}. The end-to-end ratio {ratio}× hides this spike in the middle layers."),
            _("The gradient at {where} is {factor}× the larger of the end steps' ({first}, {last}): above the "
              "threshold {explode}. The end-to-end ratio {ratio}× hides this spike.")).format(
            where=names[k_high], factor=f"{s[k_high] / high_end:.2g}", **f)
    return None


def _no_rule(ratio: float, gain: float, unit: str, f: dict):
    """Why no rule fires, and whether a small per-layer change still compounds: ``(status, rule, finding)``."""
    if not 1.0 - GAIN_TOLERANCE <= gain <= 1.0 / (1.0 - GAIN_TOLERANCE):  # a clear per-layer change, too small in all
        return "healthy", "none", _by_unit(
            unit, _("No rule fires: the signal changes {gain}× per layer (outside {low}–{high}), but it is only "
                    "{ratio}× at {first} what it is at {last} (within {mild_low}–{mild_high}), and the per-layer "
                    "rule needs both."),
            _("No rule fires: the gradient changes {gain}× per step (outside {low}–{high}), but it is only "
              "{ratio}× at {first} what it is at {last} (within {mild_low}–{mild_high}), and the per-step rule "
              "needs both.")).format(**f)
    text = _by_unit(unit, _("No rule fires: the signal changes {gain}× per layer (within {low}–{high}) and is {ratio}× "
                            "at {first} what it is at {last} (within {vanish}–{explode})."),
                    _("No rule fires: the gradient changes {gain}× per step (within {low}–{high}) and is {ratio}× "
                      "at {first} what it is at {last} (within {vanish}–{explode}).")).format(**f)
    if not 1.0 / MILD_RATIO <= ratio <= MILD_RATIO:
        more = _by_unit(unit, _("The per-layer change is within 5 %, yet it compounds to {ratio}× over {n} layers."),
                        _("The per-step change is within 5 %, yet it compounds to {ratio}× over {n} steps."))
        text = join_sentences(text, more.format(**f))
    return "healthy", "none", text


def judge(
    signal_norms,
    *,
    names: Sequence[str] | None = None,
    unit: str = "layer",
    activation: str | None = None,
    normalized: bool = False,
    residual: bool = False,
    dtype: str = "float32",
    vanish_below: float = 1e-3,
    explode_above: float = 1e3,
) -> Verdict:
    """The :class:`Verdict` on per-layer (``unit="layer"``) or per-time-step (``"step"``) norms.

    ``signal_norms`` runs input side (earliest step) first. ``names`` labels each entry in the
    finding (default ``layer 1``, ``layer 2``, ... or ``step 1``, ...). ``activation``,
    ``normalized`` (the change happens across normalization layers), ``residual`` and
    ``dtype`` (the compute dtype) describe the network; they only rank the causes and choose
    the words, never the status.

    The stages: check the arguments; measure (ratio, gain); the degenerate cases (NaN/inf, all
    zero, one entry); the vanishing rules; the exploding rules; otherwise why no rule fires;
    then the causes and their advice.
    """
    _check_thresholds(unit, vanish_below, explode_above)
    s = _check_norms(signal_norms)
    labels = _names(names, s.size, unit)
    gain = per_layer_gain(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(s[0] / s[-1])
    f = _fields(s, labels, ratio, gain, vanish_below, explode_above, dtype)
    status, rule, finding = (_degenerate(s, labels, unit, f) or _vanishing(s, ratio, gain, unit, f, vanish_below)
                             or _exploding(ratio, gain, unit, f, explode_above)
                             or _middle(s, labels, unit, f, vanish_below, explode_above)
                             or _no_rule(ratio, gain, unit, f))
    causes = _causes(status, s, activation=activation, normalized=normalized, residual=residual, dtype=dtype)
    return Verdict(status, tidy_spacing(finding), _advice(unit, causes[0] if causes else None, status), ratio,
                   gain, s.size,
                   rule, causes, float(vanish_below), float(explode_above))


def uneven(verdict: Verdict, layers: Sequence[str] = ()) -> Verdict:
    """``verdict`` reworded for a change of size that normalization layers carry: ``"uneven"``.

    :func:`gradlab.inspect_training_step` calls it when the ratio fires the vanishing or exploding
    rule, the change happens across normalization layers (``layers``: BatchNorm, LayerNorm, ...)
    and the rest of the chain, with those segments removed, fires no rule. A normalization layer
    divides the gradient by the scale of its input, so a small input before it (a Transformer's
    embedding, U(-0.05, 0.05), before its first LayerNorm) makes the signal on its input side
    about 30× the signal after it, at initialization and at any depth: the signal is uneven, and
    that is expected, not a sign of exploding or vanishing weights. The numbers (ratio, gain,
    rule) stay; the status is ``"uneven"``; the finding says why. Other verdicts come back
    unchanged.
    """
    if verdict.status not in ("vanishing", "exploding"):
        return verdict
    shown = ", ".join(repr(name) for name in layers[:3]) + (" …" if len(layers) > 3 else "")
    reason = (_("The change happens across normalization layers ({layers}): the signal is uneven, not {status}, "
                "since the rest of the network changes it by less than the rule's thresholds.") if shown else
              _("The change happens across normalization layers: the signal is uneven, not {status}, since the "
                "rest of the network changes it by less than the rule's thresholds."))
    causes = verdict.causes if "normalization" in verdict.causes else ("normalization", *verdict.causes)
    return dataclasses.replace(
        verdict, status="uneven", causes=causes,
        finding=tidy_spacing(join_sentences(verdict.finding, reason.format(layers=shown,
                                                                           status=status_word(verdict.status)))),
        advice=_advice("layer", "normalization", "uneven"))


def diagnose(signal_norms, *, vanish_below: float = 1e-3, explode_above: float = 1e3):
    """Return ``(status, message)`` for per-layer back-propagated signal norms (chapter 01).

    ``signal_norms`` runs input side first; the rule is the module's (total ratio and
    per-layer gain against their thresholds). ``message`` says what the rule measured, then
    a generic fix. :func:`judge` returns the same as a :class:`Verdict`, with the finding and
    the kind of cause apart.

    Why the signal (dLoss/d pre-activation) and not the weight gradients: a weight gradient
    is the product of the forward activation and the backward signal. When the forward
    activations grow as fast as the signal shrinks (or the other way round), the weight
    gradients look flat across layers while the signal vanishes or explodes. Glorot & Bengio
    (2010) point this out; chapter 01 shows a case.
    """
    v = judge(signal_norms, vanish_below=vanish_below, explode_above=explode_above)
    return v.status, v.message
