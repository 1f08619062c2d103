"""Dead ReLU units: per layer, the fraction of units that are never active on a batch (chapters 01 and 04).

Pure computation: the inspector's tapped layer calls (:class:`gradlab.core.LayerCall`) in,
small frozen dataclasses out.

A unit of a ReLU-family layer (``relu``, ``relu6``, a ``ReLU`` layer with ``negative_slope=0``,
as the activation of a ``Dense`` or convolution layer or as an ``Activation``/``ReLU`` layer) is
**never active** on a batch when its output is exactly 0 at every example (and every position
of a feature map or sequence): its input stayed at or below the threshold, where the derivative
is 0, so no gradient reaches its weights or anything before it through it, and a gradient step on
this batch cannot bring it back (the "dying ReLU"). ``LeakyReLU``, ``ELU``, ``gelu``, ``silu`` and
``ReLU(negative_slope>0)`` pass a gradient for every input, so they are never dead and are not
counted.

Being never active on one batch also happens by chance, and more often than one might think:
deep in a freshly He-initialized ReLU network the examples' representations grow alike, so a
unit's pre-activation takes one sign for the whole batch (measured on batches of 32: up to half
the units of the 8th layer of an MLP, and of a Dense layer after global average pooling). At
initialization (zero biases, weights symmetric about 0) the unit with weights ``-w`` is always
active on the batch exactly when the unit with ``w`` is never active, and both are equally
likely draws: the units that are *always* active measure that chance level. A layer is reported when the units never active exceed those always
active by at least :data:`DEAD_FRACTION` (half) of its units: a negative bias or a step that
pushed the weights down kills units on one side only. Fresh networks stay far below (at most
0.16 over 10 seeds of 8-layer MLPs of width 32 and 64, on normal and on [0, 1] inputs, and 5
small Conv-BN-ReLU CNNs); a layer with every unit dead is 1, one with 24 of 32 dead at least 0.5.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["DEAD_FRACTION", "MIN_VALUES", "RELU_FAMILY", "DeadUnits", "dead_fractions", "dead_layers",
           "relu_family"]

#: A layer whose units never active exceed those always active by this fraction of its units is a problem.
DEAD_FRACTION = 0.5
#: Each unit must produce at least this many values (examples × positions) for its layer to be judged.
MIN_VALUES = 2
#: The activations whose derivative is exactly 0 on one side: their units can die.
RELU_FAMILY = frozenset({"relu", "relu6"})


@dataclasses.dataclass(frozen=True)
class DeadUnits:
    """The units of one ReLU-family layer call that were never active on the batch."""

    layer: str
    #: The activation as it ran: ``"relu"``, ``"relu6"`` or ``"ReLU"`` (a ``keras.layers.ReLU``).
    activation: str
    dead: int
    units: int
    #: Units active at every example and position: at initialization (zero biases, weights whose
    #: distribution is symmetric about 0) as many units are always active as never active by
    #: chance, so this count is the chance level of ``dead``.
    always_active: int
    #: How many values each unit produced on the batch (examples × positions).
    values: int

    @property
    def fraction(self) -> float:
        """The fraction of the layer's units never active on the batch."""
        return self.dead / self.units if self.units else 0.0

    @property
    def excess(self) -> float:
        """The fraction of units dead beyond the chance level: ``(dead - always_active) / units``."""
        return (self.dead - self.always_active) / self.units if self.units else 0.0

    @property
    def judged(self) -> bool:
        """True when each unit produced at least :data:`MIN_VALUES` values, so that never active
        and always active are not the same thing."""
        return self.values >= MIN_VALUES

    @property
    def is_problem(self) -> bool:
        """At least :data:`DEAD_FRACTION` of the units dead beyond the chance level (:attr:`excess`)."""
        return self.judged and self.excess >= DEAD_FRACTION


def relu_family(layer) -> str | None:
    """The ReLU-family activation ``layer`` applies to its output (``"relu"``, ``"relu6"``,
    ``"ReLU"``), or ``None`` when its units cannot die (LeakyReLU, ELU, linear, ...)."""
    if isinstance(layer, keras.layers.ReLU):
        slope = float(np.asarray(getattr(layer, "negative_slope", 0.0)))
        return "ReLU" if slope == 0 else None
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in RELU_FAMILY else None


def _unit_axis(layer, rank: int) -> int:
    """The axis of the units: the channels of a ``channels_first`` convolution, else the last."""
    return 1 if getattr(layer, "data_format", "channels_last") == "channels_first" and rank > 2 else rank - 1


def dead_fractions(calls) -> tuple[DeadUnits, ...]:
    """:class:`DeadUnits` for every ReLU-family layer call among ``calls`` (call order).

    ``calls`` are the inspector's tapped calls (:func:`gradlab.core.tap_layers`); a unit is
    never active when its output is exactly 0 over the whole batch (every other axis).
    """
    out = []
    for c in calls:
        activation = relu_family(c.layer)
        if activation is None or not c.outputs:
            continue
        y = c.outputs[0]
        if y.shape.rank is None or y.shape.rank < 2:
            continue
        axis = _unit_axis(c.layer, y.shape.rank)
        others = [a for a in range(y.shape.rank) if a != axis]
        nonzero = tf.not_equal(y, 0)
        active = tf.reduce_any(nonzero, axis=others).numpy()
        always = tf.reduce_all(nonzero, axis=others).numpy()
        values = int(np.prod([int(y.shape[a]) for a in others]))
        out.append(DeadUnits(c.name, activation, int(active.size - active.sum()), int(active.size),
                             int(always.sum()), values))
    return tuple(out)


def dead_layers(found) -> tuple[DeadUnits, ...]:
    """The entries of ``found`` (:func:`dead_fractions`) that are a problem, worst first."""
    return tuple(sorted((d for d in found if d.is_problem), key=lambda d: -d.fraction))
