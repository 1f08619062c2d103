"""What the model matrices share (tests/test_core_matrix.py, tests/test_models_matrix3.py): the
registry of cases, and the snapshot of everything a tool could move in a model
(:func:`everything`, :func:`changed`, :func:`restore`), collected without gradlab.

A matrix file keeps its own zoo (a dict of :class:`Case` by name, the test ids) and registers a
model builder with the decorator :func:`registry` makes::

    ZOO: dict[str, Case] = {}
    case = registry(ZOO, rtol=1e-4)

    @case("Dense", X4, Y1, dense=True)
    def _():
        return seq(keras.layers.Dense(1))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf


@dataclass
class Case:
    """One model of a matrix: its builder, data and what the tests expect of it.

    ``dense``: gradient_report applies; ``sequence``: time_report applies; ``per_example``, ``fit``,
    ``train``, ``gradcheck``: the tool's test runs; ``training``: the mode inspect_training_step is
    called in; ``refused``: {method or tool: the ValueError's words}; ``slow``: only in the full matrix."""

    build: Callable[[], keras.Model]
    x: Any
    y: Any
    sw: Any = None
    loss_fn: Any = None
    dense: bool = False
    sequence: bool = False
    per_example: bool = True
    fit: bool = True
    train: bool = True
    rtol: float = 1e-5
    slow: bool = False
    refused: dict = field(default_factory=dict)
    training: bool = True
    gradcheck: bool = True

    def __post_init__(self):
        self.refused = dict(self.refused)


def registry(zoo: dict[str, Case], **defaults) -> Callable:
    """The decorator ``case(name, x, y, **fields)`` that puts a builder into ``zoo`` (fields over ``defaults``)."""
    def case(name: str, x, y, **kw):
        if name in zoo:
            raise ValueError(f"case name {name!r} is registered twice")

        def register(build):
            zoo[name] = Case(build, x, y, **{**defaults, **kw})
            return build
        return register
    return case


def seq(*layers, inp=(4,), **kw) -> keras.Sequential:
    """A Sequential model on ``keras.Input(inp, **kw)``."""
    return keras.Sequential([keras.Input(inp, **kw), *layers])


# ----------------------------------------------------------------------------- the model's state
def walk(layer) -> list:
    """``layer`` and every layer inside it (nested models, wrappers, a Bidirectional's two RNNs, cells)."""
    out, stack = [], [layer]
    while stack:
        lay = stack.pop()
        out.append(lay)
        stack.extend(getattr(lay, "_layers", None) or [])
        for attr in ("forward_layer", "backward_layer", "layer", "cell"):
            sub = getattr(lay, attr, None)
            if isinstance(sub, keras.layers.Layer):
                stack.append(sub)
    return out


def state_variables(model) -> list:
    """(kind, variable) of every variable a step can touch: weights, RNN states, seed generators, plain
    ``tf.Variable`` attributes, metric and loss trackers, the optimizer's."""
    out = [("var", v) for v in model.variables]
    for layer in walk(model):
        out += [("rnn", v) for v in getattr(layer, "states", None) or [] if hasattr(v, "assign")]
        gen = getattr(layer, "seed_generator", None)
        if gen is not None:
            out.append(("seed", gen.state))
        out += [("attr", v) for v in vars(layer).values() if isinstance(v, tf.Variable)]  # a plain tf.Variable
    out += [("metric", v) for v in model.metrics_variables]
    opt = getattr(model, "optimizer", None)
    if opt is not None and opt.built:
        out += [("opt", v) for v in opt.variables]
    return out


def everything(model) -> dict:
    """Every value a tool could move, collected without gradlab, by (kind, id of the variable); also
    the layers' trainable flags and dtype policies, and the global policy."""
    values = {(kind, id(v)): np.array(v.numpy(), copy=True) for kind, v in state_variables(model)}
    values["flags"] = tuple((id(lay), lay.trainable, lay.dtype_policy.name) for lay in walk(model))
    values["policy"] = keras.config.dtype_policy().name
    return values


def changed(a: dict, b: dict) -> list:
    """What differs between two :func:`everything` (a tracker Keras built during the call may be 0)."""
    def same_value(u, v):
        if isinstance(u, np.ndarray):
            return np.array_equal(u, v, equal_nan=u.dtype.kind in "fc")
        return u == v

    bad = [k for k, v in a.items() if k not in b or not same_value(v, b[k])]
    return bad + [k for k, v in b.items() if k not in a and not (k[0] == "metric" and not np.any(v))]


def same(a: dict, b: dict) -> bool:
    """``b`` holds every value of ``a`` unchanged; a tracker Keras built during the call is still 0."""
    return not changed(a, b)


def restore(model, values: dict) -> None:
    """Put back what :func:`everything` read (after a reference pass moved it)."""
    for kind, v in state_variables(model):
        if (kind, id(v)) in values:
            v.assign(values[(kind, id(v))])
        elif kind == "metric":  # a tracker Keras built during the reference's own compute_loss
            v.assign(tf.zeros_like(v))
