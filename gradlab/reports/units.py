"""Dead ReLU units: per layer, the fraction of units that are never active on a batch (chapters 01 and 04).

Pure computation: the inspector's tapped layer calls (:class:`gradlab.core.LayerCall`) in,
small frozen dataclasses out.

A unit of a ReLU-family layer (``relu``, ``relu6``, a ``ReLU`` layer with ``negative_slope=0``,
as the activation of a ``Dense`` or convolution layer or as an ``Activation``/``ReLU`` layer) is
**never active** on a batch when its output is exactly 0 at every example (and every position
of a feature map or sequence): its input stayed at or below the threshold, where the derivative
is 0, so no gradient reaches its weights or anything before it through it, and a gradient step on
this batch cannot bring it back (the "dying ReLU"). Where the layer's pre-activation is known (a
``Dense`` layer's, or the input of an ``Activation``/``ReLU``/``Lambda`` layer) the finder asks the
derivative itself: a unit is never active when the activation's derivative is exactly 0 at every
value. That also finds ``relu6`` units stuck above 6, and units of the smooth activations that die in
float32 (``elu``, ``selu``, ``gelu``, ``silu``, ``softplus``, ``mish``): far below 0 their derivative
rounds to exactly 0 (measured: a bias of -100 leaves the kernel before them exactly 0 gradient, a bias
of -10 does not). ``LeakyReLU``, ``PReLU`` (its slope is a weight that learns) and
``ReLU(negative_slope>0)`` pass a gradient for every input and are not counted. A convolution's
activation is judged by its output (exactly 0 for the ReLU family; the smooth ones are not judged
there). An activation applied as a plain op (``tf.nn.relu`` in a subclassed ``call``,
``keras.ops.relu`` in a functional model) is no layer, so the finder cannot see it.

Being never active on one batch also happens by chance, and more often than one might think:
deep in a freshly He-initialized ReLU network the examples' representations grow alike, so a
unit's pre-activation takes one sign for the whole batch (measured on batches of 32: up to half
the units of the 8th layer of an MLP, and of a Dense layer after global average pooling). At
initialization (zero biases, weights symmetric about 0) the unit with weights ``-w`` is always
active on the batch exactly when the unit with ``w`` is never active, and both are equally
likely draws: the units that are *always* active measure that chance level. A layer is reported when the units never active exceed those always
active by at least :data:`DEAD_FRACTION` (half) of its units: a negative bias or a step that
pushed the weights down kills units on one side only. A smooth activation's derivative is 0 only far
out on one side, so for those no unit is dead by chance and the dead fraction itself is compared. Fresh networks stay far below (at most
0.16 over 10 seeds of 8-layer MLPs of width 32 and 64, on normal and on [0, 1] inputs, and 5
small Conv-BN-ReLU CNNs); a layer with every unit dead is 1, one with 24 of 32 dead at least 0.5.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["DEAD_FRACTION", "MIN_VALUES", "MOST_DEAD", "RELU_FAMILY", "SMOOTH_DYING", "DeadUnits", "dead_fractions",
           "dead_layers", "relu_family"]

#: A layer whose units never active exceed those always active by this fraction of its units is a problem.
DEAD_FRACTION = 0.5
#: A layer with at least this fraction of its units never active is a problem whatever the always-active
#: count (20 of 32 never active next to 12 always active). On fresh He-initialized ReLU MLPs (8 layers,
#: batches of 32, normal and [0, 1] inputs, 20 seeds each) it fires on 0 of 120 networks of widths 32 to
#: 128, and on 9 of 80 of widths 8 and 16, whose few units go dead together by chance.
MOST_DEAD = 0.6
#: Each unit must produce at least this many values (examples × positions) for its layer to be judged.
MIN_VALUES = 2
#: The activations whose derivative is exactly 0 on one side: their units can die.
RELU_FAMILY = frozenset({"relu", "relu6"})
#: Smooth activations whose float32 derivative rounds to exactly 0 far below 0: their units can die too.
SMOOTH_DYING = frozenset({"elu", "selu", "gelu", "silu", "softplus", "mish"})


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
    #: Whether ``always_active`` is the chance level of ``dead`` (the ReLU family); a smooth
    #: activation's units are never dead by chance, so its chance level is 0.
    symmetric: bool = True
    #: Of the ``dead`` units, those stuck at the top of a capped activation (relu6 at 6 for every
    #: example: its derivative is 0 there too), not at 0.
    at_top: int = 0

    @property
    def fraction(self) -> float:
        """The fraction of the layer's units never active on the batch."""
        return self.dead / self.units if self.units else 0.0

    @property
    def excess(self) -> float:
        """The fraction of units dead beyond the chance level: ``(dead - always_active) / units`` for the
        ReLU family, the dead fraction itself for a smooth activation (:attr:`symmetric`)."""
        if not self.units:
            return 0.0
        return (self.dead - self.always_active) / self.units if self.symmetric else self.dead / self.units

    @property
    def judged(self) -> bool:
        """True when each unit produced at least :data:`MIN_VALUES` values, so that never active
        and always active are not the same thing."""
        return self.values >= MIN_VALUES

    @property
    def is_problem(self) -> bool:
        """At least :data:`DEAD_FRACTION` of the units dead beyond the chance level (:attr:`excess`), or at
        least :data:`MOST_DEAD` of them dead whatever the chance level (:attr:`fraction`)."""
        return self.judged and (self.excess >= DEAD_FRACTION or (self.units > 0 and self.dead / self.units >= MOST_DEAD))


def relu_family(layer) -> str | None:
    """The ReLU-family activation ``layer`` applies to its output (``"relu"``, ``"relu6"``,
    ``"ReLU"``), or ``None`` when its units cannot die (LeakyReLU, ELU, linear, ...)."""
    if isinstance(layer, keras.layers.ReLU):
        slope = float(np.asarray(getattr(layer, "negative_slope", 0.0)))
        return "ReLU" if slope == 0 else None
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return name if name in RELU_FAMILY else None


def _named(layer) -> tuple[str, object] | None:
    """``(label, elementwise function)`` of the activation whose units can die that ``layer`` applies to
    its pre-activation (an ``Activation``/``Lambda`` layer's input, a ``Dense`` layer's ``z``), or None."""
    if isinstance(layer, keras.layers.ReLU):
        if relu_family(layer) is None:
            return None
        max_value, threshold = layer.max_value, float(np.asarray(layer.threshold))
        return "ReLU", lambda z: keras.activations.relu(z, max_value=max_value, threshold=threshold)
    fn = getattr(layer, "function", None) if isinstance(layer, keras.layers.Lambda) else \
        getattr(layer, "activation", None)
    name = getattr(fn, "__name__", None)
    if name in RELU_FAMILY or name in SMOOTH_DYING:
        return name, keras.activations.get(name)
    return None


def _unit_axis(layer, rank: int) -> int:
    """The axis of the units: the channels of a ``channels_first`` convolution, else the last."""
    return 1 if getattr(layer, "data_format", "channels_last") == "channels_first" and rank > 2 else rank - 1


def _flat(c, fn, name: str):
    """Where the activation passes no gradient (``True``), same shape as the output, or None: the
    derivative at the pre-activation where it is known, else the ReLU family's exact-0 output."""
    z = c.pre_activation if c.pre_activation is not None else (c.inputs if isinstance(c.layer, (keras.layers.Activation, keras.layers.ReLU,
                                                                      keras.layers.Lambda)) else None)
    if isinstance(z, tf.Tensor) and z.dtype.is_floating and z.shape == c.outputs[0].shape:
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = fn(z)
        return tf.equal(tape.gradient(y, z), 0)
    if name in RELU_FAMILY or name == "ReLU":
        return tf.equal(c.outputs[0], 0)
    return None


def dead_fractions(calls) -> tuple[DeadUnits, ...]:
    """:class:`DeadUnits` for every layer call among ``calls`` whose units can die (call order).

    ``calls`` are the inspector's tapped calls (:func:`gradlab.core.tap_layers`); a unit is
    never active when the activation's derivative is exactly 0 over the whole batch (every other
    axis), or, where the pre-activation is unknown, a ReLU-family output is exactly 0 there.
    """
    out = []
    for c in calls:
        named = _named(c.layer)
        if named is None or not c.outputs:
            continue
        y = c.outputs[0]
        if y.shape.rank is None or y.shape.rank < 2:
            continue
        flat = _flat(c, named[1], named[0])
        if flat is None:
            continue
        axis = _unit_axis(c.layer, y.shape.rank)
        others = [a for a in range(y.shape.rank) if a != axis]
        active = tf.reduce_any(tf.logical_not(flat), axis=others).numpy()
        always = tf.reduce_all(tf.logical_not(flat), axis=others).numpy()
        values = int(np.prod([int(y.shape[a]) for a in others]))
        dead = ~active
        # a dead unit whose output is not 0 at any example sits at the top (relu6 stuck at 6), not at 0
        top = dead & tf.reduce_all(tf.not_equal(tf.cast(y, tf.float32), 0.0), axis=others).numpy()
        out.append(DeadUnits(c.name, named[0], int(active.size - active.sum()), int(active.size),
                             int(always.sum()), values, named[0] not in SMOOTH_DYING, int(top.sum())))
    return tuple(out)


def dead_layers(found) -> tuple[DeadUnits, ...]:
    """The entries of ``found`` (:func:`dead_fractions`) that are a problem, worst first."""
    return tuple(sorted((d for d in found if d.is_problem), key=lambda d: -d.fraction))
