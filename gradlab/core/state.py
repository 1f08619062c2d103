"""Save and restore everything a training step can touch, so that inspecting never changes
the model (chapters 04, 07 and every report).

A forward and backward pass in training mode moves more than the weights:

* every variable of the model, trainable or not: BatchNormalization's moving statistics, the
  seed generators behind ``Dropout``; and a plain ``tf.Variable`` that a layer holds as an
  attribute (a counter updated in ``call``), which Keras 3 leaves out of ``model.variables``
  (:func:`gradlab.core.layers.attribute_variables`);
* the carried states of ``stateful=True`` recurrent layers, which live **outside**
  ``model.variables`` (:func:`gradlab.core.layers.stateful_rnn_layers`);
* the metric and loss trackers of a compiled model (``model.metrics_variables``):
  ``model.compute_loss`` updates the per-output loss means that ``fit`` reports;
* the optimizer's state (iterations, momentum and Adam slots, the loss scale), for a tool that
  applies an update it must undo.

:func:`snapshot` copies all of them; :func:`restore` puts them back bit for bit, and resets the
trackers that the tool's own call created (Keras builds a compiled model's per-output loss
trackers on first use).
"""

from __future__ import annotations

import dataclasses

from .._env import quiet_import_tensorflow
from .layers import attribute_variables, stateful_rnn_layers

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["State", "restore", "snapshot", "snapshot_variables", "state_variables"]


def _metric_variables(model) -> list:
    try:
        return list(model.metrics_variables)
    except (AttributeError, ValueError):  # pragma: no cover - a model without metrics support
        return []


def _optimizer_variables(optimizer) -> list:
    if optimizer is None or not getattr(optimizer, "built", False):
        return []
    return list(optimizer.variables)


def state_variables(model, optimizer=None, *, weights: bool = True) -> list:
    """Every variable a step on ``model`` can change, each once, in a stable order.

    ``weights=False`` leaves out ``model.variables`` (for an inference-mode probe, which moves
    only the recurrent states and the trackers). ``optimizer`` defaults to the compiled one;
    ``optimizer=False`` leaves the optimizer out (for a tool that never applies an update).
    """
    if optimizer is None:
        optimizer = getattr(model, "optimizer", None)
    elif optimizer is False:
        optimizer = None
    groups = []
    if weights:
        groups.append(list(model.variables))
    groups.append(attribute_variables(model))  # a counter a layer updates in every call, training or not
    for layer in stateful_rnn_layers(model):
        states = getattr(layer, "states", None)
        if states is not None:
            groups.append([v for v in tf.nest.flatten(states) if isinstance(v, tf.Variable)
                           or hasattr(v, "assign")])
    groups.append(_metric_variables(model))
    groups.append(_optimizer_variables(optimizer))
    out, seen = [], set()
    for group in groups:
        for v in group:
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


@dataclasses.dataclass
class State:
    """What :func:`snapshot` copied: ``(variable, value)`` pairs, and the metrics that existed."""

    entries: list
    model: object = None
    metric_ids: frozenset = frozenset()

    def __iter__(self):  # a State unpacks like the list of pairs it replaced
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def snapshot(model, optimizer=None, *, weights: bool = True) -> State:
    """Copies of every variable a step on ``model`` can change (see the module docstring)."""
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    entries = [(v, tf.identity(tf.convert_to_tensor(v))) for v in state_variables(model, optimizer,
                                                                                   weights=weights)]
    return State(entries, model, frozenset(id(v) for v in _metric_variables(model)))


def snapshot_variables(variables, optimizer=None) -> State:
    """Copies of ``variables`` (plain ``tf.Variable`` objects a tool trains without a Keras model,
    such as chapter 09's Transformer runs) and of ``optimizer``'s state (iterations, slots,
    learning rate), for :func:`restore`."""
    variables = list(variables)
    if not all(isinstance(v, tf.Variable) or hasattr(v, "assign") for v in variables):
        raise ValueError("variables must be a list of variables (tf.Variable or keras.Variable)")
    out, seen = [], set()
    for v in [*variables, *_optimizer_variables(optimizer)]:
        if id(v) not in seen:
            seen.add(id(v))
            out.append((v, tf.identity(tf.convert_to_tensor(v))))
    return State(out, None, frozenset())


def restore(saved) -> None:
    """Put back what :func:`snapshot` copied (a :class:`State`, or a list of ``(variable, value)``)."""
    for v, value in saved:
        v.assign(value)
    model = getattr(saved, "model", None)
    if model is not None:
        for metric in getattr(model, "metrics", []):
            if any(id(v) not in saved.metric_ids for v in metric.variables):
                if all(id(v) not in saved.metric_ids for v in metric.variables):
                    metric.reset_state()  # created by the tool's own call: back to its initial state
