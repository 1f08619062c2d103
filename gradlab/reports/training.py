"""What happened over a training run, per step and per layer, and the rules that say it in words (chapter 11).

Pure computation: NumPy arrays in a small frozen dataclass, :class:`TrainingReport`, filled by
the built-in run (:mod:`gradlab.engines.training`) and by the run on a learner's own model
(:func:`gradlab.train.watch.watch_training`). For each step ``t`` (0-based) and each layer ``l``
with trainable weights (input side first):

* ``loss[t]``: the loss before step ``t``'s update;
* ``grad_norms[t, l]``: the float64 norm of the layer's gradient (all its weights together),
  before clipping;
* ``update_ratios[t, l]``: ``‖θ_l(t+1) − θ_l(t)‖ / ‖θ_l(t)‖``, the size of the step the
  optimizer took relative to the weights (Karpathy's update-to-data ratio);
* ``dead_fraction[t, l]``: the fraction of the layer's units that are *inactive on the whole
  batch* (:func:`inactive_units`), ``NaN`` where the layer has no activation;
* histograms of each layer's outputs (``act_hist``, fixed edges per layer, ``act_edges``) and of
  ``log10 |g|`` of its gradient's elements (``grad_hist``, the fixed edges :data:`GRAD_LOG_EDGES`;
  exact zeros counted apart in ``grad_zeros``).

:func:`findings` runs the rule set :data:`TRAINING_RULES` over a report; each rule returns a
:class:`TrainingFinding` (what happened, in the current language, and what to do) or ``None``.
:attr:`TrainingReport.status` is the first finding's kind, :attr:`TrainingReport.status_line`
its words.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_sentences

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "ACT_RANGES",
    "FROZEN_RATIO",
    "GRAD_LOG_EDGES",
    "HIST_BINS",
    "LARGE_RATIO",
    "RATIO_GUIDE",
    "TRAINING_RULES",
    "SATURATION",
    "TrainingFinding",
    "TrainingReport",
    "act_edges",
    "derivative_threshold",
    "findings",
    "activation_derivative",
    "histogram_counts",
    "inactive_from_derivative",
    "inactive_units",
]

#: Bins of every histogram.
HIST_BINS = 32
#: Edges of the gradient histograms, over ``log10 |g|`` (values outside go to the end bins).
GRAD_LOG_EDGES = np.linspace(-12.0, 4.0, HIST_BINS + 1)
#: The range of the output histograms per activation (values outside go to the end bins); others: ``(-4, 4)``.
ACT_RANGES: dict[str, tuple[float, float]] = {"sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "relu": (0.0, 4.0)}
#: A unit is inactive on a batch when ``|f'(z)|`` stays below this fraction of the activation's
#: largest ``|f'|`` at every example: ReLU's ``z <= 0`` (its derivative is exactly 0: dead),
#: sigmoid's ``|z|`` beyond about 6 and tanh's beyond about 3 (saturated).
SATURATION = 0.01
#: The usual guide for the update-to-data ratio (Karpathy, makemore part 3): about 1e-3 per step.
RATIO_GUIDE = 1e-3
#: A layer whose median update ratio is below this is not learning.
FROZEN_RATIO = 1e-5
#: A layer whose median update ratio is above this takes steps that are too large.
LARGE_RATIO = 1e-1
#: A finite loss that grows this many times over the run has diverged too.
GROWTH = 100.0
#: Units count as having died when this many more (at least 2, and 10% of the layer) are inactive than at step 0.
DIED_MIN = 2
DIED_SHARE = 0.1

#: What a saturating activation is called (the others' inactive units are dead).
SATURATING = frozenset({"sigmoid", "tanh", "hard_sigmoid", "softsign"})

_DERIVATIVE_MAX: dict[str, float] = {}


def _max_derivative(name: str) -> float:
    """The largest ``|f'(z)|`` of a Keras activation, on a fine grid of ``z`` in ``[-20, 20]`` (cached)."""
    if name not in _DERIVATIVE_MAX:
        z = tf.constant(np.linspace(-20.0, 20.0, 40_001))
        with tf.GradientTape() as tape:
            tape.watch(z)
            f = keras.activations.get(name)(z)
        d = tape.gradient(f, z)
        _DERIVATIVE_MAX[name] = 0.0 if d is None else float(tf.reduce_max(tf.abs(d)).numpy())
    return _DERIVATIVE_MAX[name]


def derivative_threshold(name: str) -> float:
    """:data:`SATURATION` times the activation's largest ``|f'|``: below it, a unit passes almost no gradient."""
    return SATURATION * _max_derivative(name)


def activation_derivative(z, activation: Callable):
    """``f'(z)`` element by element, by ``GradientTape`` (eagerly and inside ``tf.function``)."""
    with tf.GradientTape() as tape:
        tape.watch(z)
        f = activation(z)
    d = tape.gradient(f, z)
    return tf.zeros_like(z) if d is None else d


def inactive_from_derivative(d, threshold):
    """``[..., units]`` booleans: the units whose ``|f'(z)|`` (``d``, batch on axis -2) stays below
    ``threshold`` at every example."""
    return tf.reduce_all(tf.abs(d) < tf.cast(threshold, d.dtype), axis=-2)


def inactive_units(z, activation: Callable, threshold):
    """``[..., units]`` booleans: the units whose ``|f'(z)|`` stays below ``threshold`` at every example.

    ``z`` is a ``[batch, units]`` pre-activation (or a stack ``[layers, batch, units]``; the batch
    is axis -2). Works eagerly and inside ``tf.function``; the one definition of an inactive unit
    used by the built-in run and the run on a learner's model.
    """
    return inactive_from_derivative(activation_derivative(z, activation), threshold)


def act_edges(activation: str | None) -> np.ndarray:
    """The fixed edges of a layer's output histogram (:data:`ACT_RANGES`)."""
    lo, hi = ACT_RANGES.get(activation or "", (-4.0, 4.0))
    return np.linspace(lo, hi, HIST_BINS + 1)


def histogram_counts(values, lo, hi):
    """Counts of ``values`` ``[groups, n]`` in :data:`HIST_BINS` equal bins of ``[lo, hi]`` per group
    (``lo``, ``hi`` of shape ``[groups]``); values outside go to the end bins, NaN to none.
    Returns ``[groups, HIST_BINS]`` int32; usable inside ``tf.function``."""
    values = tf.cast(values, tf.float64)
    lo = tf.cast(lo, tf.float64)[:, None]
    hi = tf.cast(hi, tf.float64)[:, None]
    groups = tf.shape(values)[0]
    pos = tf.clip_by_value((values - lo) / (hi - lo) * HIST_BINS, 0.0, HIST_BINS - 0.5)
    idx = tf.cast(pos, tf.int32) + tf.range(groups)[:, None] * HIST_BINS
    idx = tf.where(tf.math.is_nan(values), groups * HIST_BINS, idx)  # NaN: one extra bin, dropped
    counts = tf.math.bincount(tf.reshape(idx, [-1]), minlength=groups * HIST_BINS + 1,
                              maxlength=groups * HIST_BINS + 1, dtype=tf.int32)
    return tf.reshape(counts[:-1], [groups, HIST_BINS])


# ----------------------------------------------------------------------------- the report
@dataclasses.dataclass(frozen=True)
class TrainingFinding:
    """One thing that happened over the run: ``kind``, the words (``text``) and what to do (``fix``)."""

    kind: str
    text: str
    fix: str

    def __str__(self) -> str:
        return _("{finding}. What to do: {fix}.").format(finding=self.text, fix=self.fix)


@dataclasses.dataclass(frozen=True, eq=False)
class TrainingReport:
    """Per step and per layer, what a training run did (chapter 11; see the module docstring).

    ``diverged_at`` is the first step (1-based) whose loss was NaN or inf, where the run stopped
    (that step is the last row, and was not applied), else ``None``.
    """

    settings: dict
    layer_names: tuple[str, ...]
    #: Each layer's activation name (``None``: no activation, or one the run cannot see).
    activations: tuple
    units: np.ndarray
    loss: np.ndarray
    grad_norms: np.ndarray
    update_ratios: np.ndarray
    dead_fraction: np.ndarray
    act_hist: np.ndarray
    act_edges: np.ndarray
    grad_hist: np.ndarray
    grad_zeros: np.ndarray
    steps: int
    diverged_at: int | None = None
    dtype: str = "float64"
    #: True when more steps are still to come (a partial report of a run delivered in chunks).
    partial: bool = False

    @property
    def steps_taken(self) -> int:
        return int(self.loss.shape[0])

    @property
    def depth(self) -> int:
        """The number of layers with trainable weights."""
        return len(self.layer_names)

    def inactive_word(self, layer: int) -> str:
        """``"saturated"`` for a sigmoid/tanh layer's inactive units, else ``"dead"`` (untranslated key)."""
        return "saturated" if self.activations[layer] in SATURATING else "dead"

    def findings(self) -> list[TrainingFinding]:
        """What the rules (:data:`TRAINING_RULES`) find in this run, most important first."""
        return findings(self)

    @property
    def status(self) -> str:
        """The first finding's kind (``"diverged"``, ``"not-learning"``, ...), ``"healthy"`` if none, ``"running"`` if partial."""
        if self.partial:
            return "running"
        found = self.findings()
        return found[0].kind if found else "healthy"

    @property
    def status_line(self) -> str:
        """What happened over the run, in words, with what to do (the current language)."""
        if self.partial:
            return _("running: {taken} of {steps} steps").format(taken=self.steps_taken, steps=self.steps)
        found = self.findings()
        if not found:
            return _healthy(self)
        return join_sentences(*(str(f) for f in found[:2]))

    def to_dict(self, digits: int = 4) -> dict:
        """``settings``, ``loss``, ``grad_norms``, ``update_ratios`` and ``dead_fraction`` as plain lists,
        rounded to ``digits`` significant digits, NaN/inf as ``None`` (what a view's ``data-report`` holds)."""

        def r(a):
            a = np.asarray(a, dtype=np.float64)
            return np.vectorize(lambda v: float(f"{v:.{digits}g}") if math.isfinite(v) else None,
                                otypes=[object])(a).tolist() if a.size else a.tolist()

        return {"settings": dict(self.settings), "layer_names": list(self.layer_names),
                "loss": r(self.loss), "grad_norms": r(self.grad_norms), "update_ratios": r(self.update_ratios),
                "dead_fraction": r(self.dead_fraction), "diverged_at": self.diverged_at, "status": self.status}

    def __repr__(self) -> str:
        return (f"TrainingReport({self.steps_taken}/{self.steps} steps, {self.depth} layers, "
                f"status={self.status!r})")


def _layer_word(report: TrainingReport, layer: int) -> str:
    """``the first layer`` / ``the output layer`` / ``layer 3 (hidden_3)`` in the current language."""
    if layer == 0:
        return _("the first layer ({name})").format(name=report.layer_names[0])
    if layer == report.depth - 1:
        return _("the last layer ({name})").format(name=report.layer_names[layer])
    return _("layer {n} ({name})").format(n=layer + 1, name=report.layer_names[layer])


def _median_ratios(report: TrainingReport) -> np.ndarray:
    """Each layer's median update ratio over the steps that were applied (finite rows)."""
    rows = report.update_ratios
    if report.diverged_at is not None:
        rows = rows[:-1]
    rows = rows[np.all(np.isfinite(rows), axis=1)] if rows.size else rows
    if rows.shape[0] == 0:
        return np.full(report.depth, np.nan)
    return np.median(rows, axis=0)


# ----------------------------------------------------------------------------- the rules
def rule_diverged(report: TrainingReport) -> TrainingFinding | None:
    """The loss became NaN or inf at some step, or grew :data:`GROWTH` times while staying finite."""
    if report.diverged_at is None:
        first, last = float(report.loss[0]), float(report.loss[-1])
        if report.steps_taken >= 2 and first > 0 and last > GROWTH * first:
            return TrainingFinding(
                "diverged",
                _("diverged: the loss grew from {first} to {last} (still finite, but it will not come back)").format(
                    first=f"{first:.4g}", last=f"{last:.3g}"),
                _("lower the learning rate (try a tenth), or clip the gradients, e.g. clip=('global_norm', 1.0)"))
        return None
    value = report.loss[-1]
    word = "NaN" if math.isnan(value) else "inf"
    finite = report.grad_norms[:-1][np.isfinite(report.grad_norms[:-1])]
    largest = f"{finite.max():.3g}" if finite.size else "-"
    return TrainingFinding(
        "diverged",
        _("diverged at step {step}: the loss became {word} (the largest gradient norm before was {largest})").format(
            step=report.diverged_at, word=word, largest=largest),
        _("lower the learning rate (try a tenth), or clip the gradients, e.g. clip=('global_norm', 1.0)"))


def rule_not_learning(report: TrainingReport) -> TrainingFinding | None:
    """A layer's median update ratio is below :data:`FROZEN_RATIO` (the first such layer, input side first).

    Not on a run that diverged: there the steps before the overflow decide the ratios (a ReLU
    layer whose units all died in them has updates of 0), not a gradient that vanished."""
    if report.diverged_at is not None:
        return None
    med = _median_ratios(report)
    frozen = [i for i, m in enumerate(med) if math.isfinite(m) and m < FROZEN_RATIO]
    if not frozen:
        return None
    i = frozen[0]
    top = float(np.nanmax(med))
    return TrainingFinding(
        "not-learning",
        _("{layer}'s updates are {ratio} of its weights (the largest layer's: {top}): it is not learning").format(
            layer=_layer_word(report, i), ratio=f"{med[i]:.1e}", top=f"{top:.1e}"),
        _("its gradient vanished on the way back: use relu with he_normal, normalization or residual connections; "
          "a larger learning rate only moves the other layers faster, and Adam rescues gradients only down to "
          "about its epsilon (Keras's default: 1e-7)"))


def _died(report: TrainingReport, layer: int):
    """``(first step, count then, count at step 0)`` when units of ``layer`` died during the run (the
    first step at which enough more are inactive than at step 0, and still at the end)."""
    frac = report.dead_fraction[:, layer]
    if not np.all(np.isfinite(frac[:1])) or report.steps_taken < 2:
        return None
    counts = np.rint(frac * report.units[layer]).astype(int)
    need = max(DIED_MIN, math.ceil(DIED_SHARE * report.units[layer]))
    end = counts[-1] if np.isfinite(frac[-1]) else counts[-2]
    if end - counts[0] < need:
        return None
    first = int(np.argmax(counts - counts[0] >= need))
    return first, int(counts[first]), int(counts[0])


def rule_units_died(report: TrainingReport) -> TrainingFinding | None:
    """Units of a ReLU-family layer became inactive on the whole batch during the run."""
    for layer in range(report.depth):
        if report.inactive_word(layer) != "dead":
            continue
        died = _died(report, layer)
        if died is None:
            continue
        t, then, start = died
        prev = report.update_ratios[t - 1] if t >= 1 else None
        large = prev is not None and np.nanmax(prev) >= 10 * np.nanmedian(report.update_ratios[: max(t - 1, 1)])
        text = (_("{dead} of {units} units in {layer} died by step {step}, after a large step (update ratio {ratio})")
                if large else _("{dead} of {units} units in {layer} died by step {step}"))
        return TrainingFinding(
            "dead-units",
            text.format(dead=then - start, units=int(report.units[layer]), layer=_layer_word(report, layer),
                        step=t + 1, ratio=f"{np.nanmax(prev):.2g}" if large else ""),
            _("a dead unit passes no gradient and cannot come back: lower the learning rate or clip the "
              "gradients, or use leaky_relu"))
    return None


def rule_saturated(report: TrainingReport) -> TrainingFinding | None:
    """At the end of the run at least half the units of a sigmoid/tanh layer are saturated."""
    for layer in range(report.depth):
        if report.inactive_word(layer) != "saturated":
            continue
        frac = report.dead_fraction[:, layer]
        frac = frac[np.isfinite(frac)]
        if frac.size and frac[-1] >= 0.5:
            return TrainingFinding(
                "saturated",
                _("{share} of the units in {layer} are saturated on the whole batch: their gradient is "
                  "almost 0").format(share=f"{frac[-1]:.0%}", layer=_layer_word(report, layer)),
                _("lower the learning rate, use an initializer that keeps z near 0 (glorot_uniform), or relu"))
    return None


def rule_steps_too_large(report: TrainingReport) -> TrainingFinding | None:
    """A layer's median update ratio is above :data:`LARGE_RATIO` (without divergence)."""
    if report.diverged_at is not None:
        return None
    med = _median_ratios(report)
    if not np.any(np.isfinite(med)):
        return None
    i = int(np.nanargmax(med))
    if med[i] < LARGE_RATIO:
        return None
    return TrainingFinding(
        "steps-too-large",
        _("{layer}'s updates are {ratio} of its weights at each step: the steps are too large").format(
            layer=_layer_word(report, i), ratio=f"{med[i]:.2g}"),
        _("lower the learning rate; about 1e-3 of the weights per step is the usual guide"))


def rule_stalled(report: TrainingReport) -> TrainingFinding | None:
    """The loss at the end is not below 99% of the first loss (and the run did not diverge)."""
    if report.diverged_at is not None or report.steps_taken < 2:
        return None
    first, last = float(report.loss[0]), float(report.loss[-1])
    if not (math.isfinite(first) and math.isfinite(last)) or last < 0.99 * first:
        return None
    return TrainingFinding(
        "stalled",
        _("the loss did not go down: {first} at step 1, {last} at step {step}").format(
            first=f"{first:.4g}", last=f"{last:.4g}", step=report.steps_taken),
        _("look at the update ratios: below about 1e-5 the layers are not learning (raise the learning "
          "rate, or fix the gradient's path); above 1e-1 the steps are too large"))


#: The rules in the order of their importance: the first finding is the status.
TRAINING_RULES: tuple[Callable[[TrainingReport], TrainingFinding | None], ...] = (
    rule_diverged,
    rule_not_learning,
    rule_units_died,
    rule_saturated,
    rule_steps_too_large,
    rule_stalled,
)


def findings(report: TrainingReport) -> list[TrainingFinding]:
    """Every finding of :data:`TRAINING_RULES` on ``report``, in the rules' order."""
    return [f for f in (rule(report) for rule in TRAINING_RULES) if f is not None]


def _healthy(report: TrainingReport) -> str:
    med = _median_ratios(report)
    finite = med[np.isfinite(med)]
    span = (f"{finite.min():.1e}", f"{finite.max():.1e}") if finite.size else ("-", "-")
    return _("the loss went from {first} to {last} in {steps} steps; every layer's updates are {lo} to {hi} "
             "of its weights (the guide: about 1e-3)").format(
        first=f"{report.loss[0]:.4g}", last=f"{report.loss[-1]:.4g}", steps=report.steps_taken,
        lo=span[0], hi=span[1])
