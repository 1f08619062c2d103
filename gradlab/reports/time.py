"""Gradients through time: :func:`time_report` and its :class:`TimeReport` (chapter 07).

One tape over any sequence model (the core's inputs, loss, ``sample_weight``, norms and
clipping) measures the float64 norm of dLoss/d(input at step t) for every step, earliest
first, padded steps left out. The verdict is :func:`gradlab.reports.verdict.judge` applied to
the per-step norms: time plays the role of depth.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import renamed_keywords
from ..core import check_clip
from ..i18n import _
from .base import VerdictReport
from .verdict import judge, status_word

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "TimeReport",
    "time_report",
]


# ----------------------------------------------------------------------------- the report
@dataclasses.dataclass(frozen=True)
class TimeReport(VerdictReport):
    """Per-time-step gradient norms of one batch, earliest step first (chapter 07).

    ``time_step_norms[t]`` is the float64 norm of dLoss/d(input at step t+1) over the batch
    and the features; ``weight_norms`` are the gradient norms of the trainable weights,
    ``clipped_weight_norms`` the same after ``clip``. ``verdict`` is the
    :class:`gradlab.reports.verdict.Verdict` applied over time; ``ratio``, ``gain``, ``status``
    and ``message`` are read from it (:class:`gradlab.reports.base.VerdictReport`).
    """

    time_step_norms: np.ndarray
    weight_names: tuple[str, ...]
    weight_norms: np.ndarray
    clipped_weight_norms: np.ndarray
    loss: float
    clip: tuple[str, float] | None = None

    @property
    def steps(self) -> int:
        return int(self.time_step_norms.size)

    @classmethod
    def from_norms(cls, *, loss: float, time_step_norms, weight_names, weight_norms,
                   clipped_weight_norms=None, clip=None) -> TimeReport:
        """A report from per-step norms (earliest first), with its ratio, gain and verdict."""
        s = np.asarray(time_step_norms, dtype=np.float64)
        v = judge(s, unit="step")
        w = np.asarray(weight_norms, dtype=np.float64)
        return cls(
            time_step_norms=s,
            weight_names=tuple(weight_names),
            weight_norms=w,
            clipped_weight_norms=w if clipped_weight_norms is None
            else np.asarray(clipped_weight_norms, dtype=np.float64),
            loss=float(loss),
            clip=clip,
            verdict=v,
        )

    def summary(self) -> str:
        """A short, rounded, printable summary (stable across CPUs)."""
        return _("{steps} steps · loss {loss} · ratio step 1 / step {steps} = {ratio} (gain {gain} per step) → "
                 "{status}").format(steps=self.steps, loss=f"{self.loss:.3g}", ratio=f"{self.ratio:.3g}",
                                    gain=f"{self.gain:.3g}", status=status_word(self.status))

    def __str__(self) -> str:
        def fmt(a):
            return "[" + ", ".join(f"{v:.3g}" for v in a) + "]"

        s = self.time_step_norms
        shown = fmt(s) if s.size <= 10 else fmt(s[:5])[:-1] + ", ..., " + fmt(s[-5:])[1:]
        lines = [(_("TimeReport: {summary} (clip off)").format(summary=self.summary()) if self.clip is None else
             _("TimeReport: {summary} (clip {clip})").format(summary=self.summary(),
                                                            clip=f"{self.clip[0]} ≤ {self.clip[1]:g}")),
                 _("  per-step norms: {values}").format(values=shown),
                 _("  weight grads  : {values}").format(values=", ".join(
                     f"{n} {v:.3g}" for n, v in zip(self.weight_names, self.weight_norms, strict=True)))]
        if self.clip is not None:
            lines.append(_("  after clipping: {values}").format(values=", ".join(
                f"{n} {v:.3g}" for n, v in zip(self.weight_names, self.clipped_weight_norms, strict=True))))
        lines.append(f"  {self.message}")
        return "\n".join(lines)


def _input_mask(model, x, training: bool):
    """The padding mask over ``x``'s steps that the model's first recurrent layer receives (a
    ``Masking`` layer's), or ``None``: one eager forward pass with the core's taps.

    A layer between the ``Masking`` and the RNN that drops masks (``Conv1D``) makes the RNN read
    the padding as data: then no step is left out. Without a recurrent layer, the first mask
    over ``x``'s steps counts."""
    taps = core.tapped_call(model, x, training=training)
    for call in taps.calls:
        if core.is_recurrent(call.layer):
            mask = call.mask
            return mask if mask is not None and tuple(mask.shape) == tuple(x.shape[:2]) else None
    for call in taps.calls:
        if call.mask is not None and tuple(call.mask.shape) == tuple(x.shape[:2]):
            return call.mask
        out_mask = getattr(call.outputs[0], "_keras_mask", None) if call.outputs else None
        if out_mask is not None and tuple(out_mask.shape) == tuple(x.shape[:2]):
            return out_mask
    return None


def _weight_name(model, v) -> str:
    name = getattr(v, "path", v.name)
    return name[len(model.name) + 1:] if name.startswith(model.name + "/") else name


@renamed_keywords(loss_fn="loss")
def time_report(model: keras.Model, x, y, *, clip=None, compiled: bool = False, loss=None,
                sample_weight=None, training: bool = False) -> TimeReport:
    """One tape over ``model(x)`` and its loss against ``y`` (chapter 07).

    Measures the float64 norm of dLoss/d(input at step t) for every step, earliest first, and
    the norms of the weight gradients before and after ``clip`` (``None``, a global-norm
    threshold or ``(mode, t)`` as in :func:`gradlab.clip_gradients`). Works for any Keras model that takes one
    ``[batch, steps, features]`` tensor (stacked, bidirectional and stateful layers included).
    The loss is the core's (:func:`gradlab.core.resolve_loss`): ``loss``, else the compiled
    loss, else the mean squared error, whose ``y`` must have the output's shape (a ``y`` of
    shape ``(B,)`` against an output ``(B, 1)`` is a ``ValueError``, not a silent ``(B, B)``
    broadcast); ``sample_weight`` weighs the examples as ``fit`` does. Steps masked as padding
    (a ``Masking`` layer) are left out of ``time_step_norms``: the layer skips them, so their
    gradient is 0 by construction, not because it vanished. The mask is the one the first
    recurrent layer receives (after a ``Conv1D``, which drops masks, there is none). ``training=False``
    (inference, the default) or ``True`` (dropout on). The states of stateful layers and the
    trackers are put back afterwards. ``compiled=True`` runs the same tape inside a
    ``tf.function`` (traced once per call): faster than eager for long sequences.
    """
    core.check_model(model)
    clip = check_clip(clip)
    if not isinstance(compiled, bool) or not isinstance(training, bool):
        raise ValueError(f"compiled and training must be True or False; got {compiled!r}, {training!r}")
    loss = core.resolve_loss(model, loss)
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    if not isinstance(x, tf.Tensor):
        raise ValueError(f"x must be one [batch, steps, features] tensor for time_report; got a "
                         f"{type(x).__name__} of inputs")
    if not x.dtype.is_floating or x.shape.rank != 3:
        raise ValueError(f"x must be a float tensor of shape [batch, steps, features]; got shape "
                         f"{tuple(x.shape)} and dtype {x.dtype.name}")
    problems = core.data_problems(x, y, sw)
    if problems:
        raise ValueError("the data is not finite: " + "; ".join(problems) +
                         ". Clean the batch first (this is a data problem, not a model problem)")
    saved = core.snapshot(model, False)
    try:
        if not model.built:
            model(x)
            core.restore(saved)
        weights = model.trainable_weights
        mask = _input_mask(model, x, training)  # padding (Masking): those steps are skipped, not vanished
        core.restore(saved)

        def grads(x, y, sw):  # the core's forward and loss (checked at trace time when compiled)
            p = core.forward_loss(model, x, y, loss=loss, training=training, sample_weight=sw, watch=(x,))
            return p.loss, p.gradients([x, *weights])

        if compiled:
            grads = tf.function(grads, autograph=False)
        value, (dx, *dw) = grads(x, y, sw)
    finally:
        core.restore(saved)
    if dx is None:
        raise ValueError("the loss does not depend on x (its gradient is None): time_report needs a model "
                         "whose output depends on its input sequence")
    pairs = [(w, g) for w, g in zip(weights, dw, strict=True) if g is not None]
    clipped = core.clip_gradients([g for _w, g in pairs], clip)
    return TimeReport.from_norms(
        loss=float(value.numpy()),
        time_step_norms=core.step_norms(dx, mask),
        weight_names=[_weight_name(model, w) for w, _g in pairs],
        weight_norms=[core.true_norm(g) for _w, g in pairs],
        clipped_weight_norms=[core.true_norm(g) for g in clipped],
        clip=clip,
    )
