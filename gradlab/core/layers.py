"""The one layer walker and the one per-layer tap of gradlab (chapters 01, 04, 06, 07).

* :func:`leaf_layers` lists a model's layers with nested models expanded;
  :func:`variable_layers` maps each variable to the leaf layer that owns it;
  :func:`stateful_rnn_layers` finds the recurrent layers whose carried state lives outside
  ``model.variables``.
* :func:`tap_layers` records every leaf-layer call *made by the model's own call*
  (Sequential, functional with shared layers and several outputs, nested, subclassed): each
  call's input and outputs, and for ``Dense`` layers the pre-activation, all watched by the tape.
"""

from __future__ import annotations

import contextlib
import dataclasses

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "NORMALIZATION_LAYERS",
    "LayerCall",
    "Taps",
    "attribute_variables",
    "has_custom_train_step",
    "is_normalization",
    "is_recurrent",
    "nested_layers",
    "layer_groups",
    "leaf_layers",
    "normalization_inside",
    "stateful_rnn_layers",
    "sublayers",
    "tap_layers",
    "variable_layers",
    "variable_path",
]

#: Layers that normalize their input: the gradient through them is divided by the scale of
#: their input, so a change of size across them says nothing about the initializer.
NORMALIZATION_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                        keras.layers.GroupNormalization, keras.layers.UnitNormalization)
if hasattr(keras.layers, "RMSNormalization"):  # Keras >= 3.9
    NORMALIZATION_LAYERS = (*NORMALIZATION_LAYERS, keras.layers.RMSNormalization)


def variable_path(v) -> str:
    """A variable's path (``"dense/kernel"``), or its name where it has no path."""
    return getattr(v, "path", None) or v.name


def has_custom_train_step(model) -> bool:
    """True when ``model``'s class overrides ``train_step`` outside Keras and gradlab, so that
    ``fit`` runs the learner's own step (whose loss gradlab cannot see unless it is compiled)."""
    for cls in type(model).__mro__:
        if "train_step" in cls.__dict__:
            module = getattr(cls, "__module__", "") or ""
            return not (module.startswith("keras") or module.startswith("gradlab."))
    return False


def leaf_layers(model) -> list:
    """Every layer of ``model`` that is not itself a model, nested models expanded, in order.

    A layer reached twice (shared between nested models) is listed once. Layers that hold
    sub-layers but are not models (``LSTM`` and its cell, ``MultiHeadAttention``,
    ``Bidirectional``) are one leaf each.
    """
    out, seen = [], set()

    def walk(layer):
        if isinstance(layer, keras.Model):
            for sub in layer.layers:
                walk(sub)
        elif id(layer) not in seen and not isinstance(layer, keras.layers.InputLayer):
            seen.add(id(layer))
            out.append(layer)

    walk(model)
    return out


def variable_layers(model) -> dict[int, str]:
    """``id(variable) -> name`` of the leaf layer that owns it (variables of no leaf: absent)."""
    owner: dict[int, str] = {}
    for layer in leaf_layers(model):
        for v in layer.variables:
            owner.setdefault(id(v), layer.name)
    return owner


def is_recurrent(layer) -> bool:
    """True for ``SimpleRNN``/``LSTM``/``GRU``/any ``keras.layers.RNN`` and ``Bidirectional``."""
    return isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional))


def is_normalization(layer) -> bool:
    """True for the layers of :data:`NORMALIZATION_LAYERS`."""
    return isinstance(layer, NORMALIZATION_LAYERS)


def nested_layers(root, *, stop=None) -> list:
    """``root`` and every layer it holds, depth first, each once: a model's ``layers`` and any
    layer's :func:`sublayers`, nested models and custom layers included, to a depth of 8. A layer
    for which ``stop(layer)`` is true is listed but not entered. The one walk behind
    :func:`normalization_inside`, :func:`stateful_rnn_layers` and :func:`attribute_variables`."""
    out, seen = [], set()

    def walk(item, depth=0):
        if id(item) in seen or depth > 8:
            return
        seen.add(id(item))
        out.append(item)
        if stop is not None and stop(item):
            return
        for sub in (list(item.layers) if isinstance(item, keras.Model) else []) + sublayers(item):
            walk(sub, depth + 1)

    walk(root)
    return out


def normalization_inside(layer) -> list:
    """The normalization layers that ``layer`` is or holds (a block such as a Transformer layer
    keeps its LayerNorms as attributes), depth first; ``[]`` when there are none."""
    return [item for item in nested_layers(layer, stop=is_normalization) if is_normalization(item)]


def sublayers(layer) -> list:
    """The layers held in ``layer``'s public attributes (one level; lists and tuples included).

    Keras keeps no public list of a plain layer's sub-layers; a learner's custom layer keeps
    them as attributes, as ``Bidirectional`` keeps ``forward_layer`` and ``backward_layer``.
    """
    out = []
    for name, value in vars(layer).items():
        if name.startswith("_"):
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        out.extend(v for v in items if isinstance(v, keras.layers.Layer) and v is not layer)
    return out


def stateful_rnn_layers(model) -> list:
    """Every ``stateful=True`` recurrent layer of ``model`` (inside ``Bidirectional`` and custom
    layers too). Their carried states are variables outside ``model.variables``, so a forward
    pass moves them (chapter 07)."""
    return [layer for layer in nested_layers(model)
            if isinstance(layer, keras.layers.RNN) and getattr(layer, "stateful", False)]


def attribute_variables(model) -> list:
    """The plain ``tf.Variable`` objects that ``model``, its nested models and their layers hold as
    attributes (``self.calls = tf.Variable(0.0)``, as TF 2's Keras allowed). Keras 3 leaves them out
    of ``model.variables``, yet a counter that a layer updates in ``call`` moves in every pass."""
    out = []
    for layer in nested_layers(model):
        for value in vars(layer).values():
            items = value if isinstance(value, (list, tuple)) else [value]
            out.extend(v for v in items if isinstance(v, tf.Variable))
    return out


# ----------------------------------------------------------------------------- per-layer taps
@dataclasses.dataclass
class LayerCall:
    """One call of one leaf layer during the model's own forward pass."""

    layer: object
    index: int  # 0 for the layer's first call, 1 for its second, ...
    inputs: object  # the first positional argument (a tensor, or a structure of tensors)
    outputs: list  # the float outputs, flattened
    pre_activation: object = None  # Dense only: the tensor its activation received
    #: The Keras mask the call received (``Embedding(mask_zero=True)`` padding), or ``None``.
    mask: object = None
    #: Position of this call among all recorded calls (call order).
    position: int = 0

    @property
    def name(self) -> str:
        return self.layer.name if self.index == 0 else f"{self.layer.name} (call {self.index + 1})"


@dataclasses.dataclass
class Taps:
    """What :func:`tap_layers` recorded: the layer calls in the order the model made them."""

    calls: list
    #: True when some layer ran inside a ``tf.function`` (its tensors cannot be tapped eagerly).
    untapped: bool = False

    def count(self, layer) -> int:
        return sum(1 for c in self.calls if c.layer is layer)


def _float_tensors(value) -> list:
    """The float tensors in ``value``; of a ``tf.RaggedTensor`` (an Embedding of ragged token ids) its values."""
    return [t for t in tf.nest.flatten(value, expand_composites=True)
            if isinstance(t, tf.Tensor) and t.dtype.is_floating]


_ABSENT = object()


@contextlib.contextmanager
def tap_layers(model, tape):
    """Record every leaf-layer call made by ``model``'s own call, watched by ``tape``.

    Inside the ``with`` block, each leaf layer's ``call`` (and a ``Dense`` layer's activation)
    is wrapped on the instance: the wrapper runs the original, watches its outputs (and the
    Dense pre-activation, and a recurrent layer's input) on ``tape`` and appends a
    :class:`LayerCall`. Nothing is re-implemented, so the numbers are those of the model as it
    runs (float16 under mixed precision, shared layers called twice recorded twice, skip
    connections of subclassed models included). The wrappers are removed on exit.
    """
    taps = Taps([])
    patched: list = []
    try:
        for layer in leaf_layers(model):
            _patch(layer, tape, taps, patched)
        yield taps
    finally:
        for layer, attr, original in reversed(patched):
            if original is _ABSENT:
                object.__delattr__(layer, attr)
            else:
                object.__setattr__(layer, attr, original)


def _patch(layer, tape, taps: Taps, patched: list) -> None:
    original_call = layer.call
    counter = {"n": 0}
    state = {"z": None}
    if isinstance(layer, keras.layers.Dense) and layer.activation is not None:
        original_act = layer.activation

        def activation(z):
            tape.watch(z)
            state["z"] = z
            return original_act(z)

        object.__setattr__(layer, "activation", activation)
        patched.append((layer, "activation", original_act))

    def call(*args, **kwargs):
        if not tf.executing_eagerly():  # called while a tf.function traces: nothing to tap
            taps.untapped = True
            return original_call(*args, **kwargs)
        state["z"] = None
        inputs = args[0] if args else next(iter(kwargs.values()), None)
        if is_recurrent(layer):
            for t in _float_tensors(inputs):
                tape.watch(t)
        mask = kwargs.get("mask")
        if mask is None:  # Keras attaches the mask of a masked tensor to the tensor itself
            mask = getattr(inputs, "_keras_mask", None)
        out = original_call(*args, **kwargs)
        outs = _float_tensors(out)
        for t in outs:
            tape.watch(t)
        taps.calls.append(LayerCall(layer, counter["n"], inputs, outs, state["z"], mask,
                                    position=len(taps.calls)))
        counter["n"] += 1
        return out

    own = layer.__dict__.get("call", _ABSENT)  # an instance-level call the learner set stays
    object.__setattr__(layer, "call", call)
    patched.append((layer, "call", own))


def layer_groups(model) -> list[tuple[str, list[int]]]:
    """``(layer name, indices into model.trainable_variables)`` for each leaf layer with
    trainable weights, in layer order; variables of no leaf layer are grouped as ``"other"``.
    The per-layer gradient norms of the training tools (chapter 03) are taken over these groups."""
    variables = list(model.trainable_variables)
    index = {id(v): i for i, v in enumerate(variables)}
    groups, seen = [], set()
    for layer in leaf_layers(model):
        idx = [index[id(v)] for v in layer.trainable_weights if id(v) in index and id(v) not in seen]
        if idx:
            seen.update(id(variables[i]) for i in idx)
            groups.append((layer.name, idx))
    rest = [i for i, v in enumerate(variables) if id(v) not in seen]
    if rest:
        groups.append(("other", rest))
    return groups
