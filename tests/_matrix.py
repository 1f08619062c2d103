"""The registry the model matrices share (tests/test_core_matrix.py, tests/test_models_matrix3.py).

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
