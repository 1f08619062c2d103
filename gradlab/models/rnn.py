"""The recurrent networks of chapter 07 and their data.

* :func:`build_rnn` builds a Keras ``SimpleRNN``/``GRU``/``LSTM`` with a one-unit readout,
  its recurrent kernel from :func:`make_recurrent_initializer` (:data:`RECURRENT_INITIALIZERS`);
* :func:`make_sequence_data` draws seeded sequences, a longer one extending a shorter one.

The per-step report is :mod:`gradlab.reports.time`, the explorer's engine
:mod:`gradlab.engines.rnn`, chapter 07's theory :mod:`gradlab.topics.rnn_theory`.
"""

from __future__ import annotations

import math

from .._env import quiet_import_tensorflow
from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..i18n import N_

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CELLS",
    "MAX_STEPS",
    "RECURRENT_INITIALIZERS",
    "build_rnn",
    "make_recurrent_initializer",
    "make_sequence_data",
]

#: The recurrent cells, by their Keras layer.
CELLS: dict[str, str] = {"simple_rnn": "SimpleRNN", "gru": "GRU", "lstm": "LSTM"}
#: Recurrent initializers offered by the explorer, with a short description.
RECURRENT_INITIALIZERS: dict[str, str] = {
    "orthogonal": N_("orthogonal (Keras default)"),
    "glorot_uniform": N_("glorot_uniform"),
    "normal_0.5": N_("normal, std 0.5/√units"),
    "normal_2": N_("normal, std 2/√units"),
    "identity": N_("identity (per gate)"),
}
#: Chapter 07's earlier names, which clashed with chapter 01's (there ``large_normal`` is σ = 1);
#: still accepted, with their old meaning.
RENAMED_INITIALIZERS = {"small_normal": "normal_0.5", "large_normal": "normal_2"}
#: The longest sequence the explorer offers.
MAX_STEPS = 200
_OUT_SEED_OFFSET = 1000
_REC_SEED_OFFSET = 500


def check_cell(cell: str) -> str:
    return _check_choice("cell", cell, tuple(CELLS))


# ----------------------------------------------------------------------------- data
def make_sequence_data(batch_size: int, steps: int, input_dim: int, seed: int = 0,
                       *, scale: float = 1.0) -> tuple[tf.Tensor, tf.Tensor]:
    """``x`` of shape ``[batch, steps, input_dim]`` (standard normal times ``scale``) and a target ``y``.

    Stateless and seeded: the same arguments give the same tensors. Step ``t`` of a longer
    sequence is the same as step ``t`` of a shorter one with the same seed (chapter 07).
    """
    batch_size = _check_int("batch_size", batch_size, 1, 100_000)
    steps = _check_int("steps", steps, 1, 100_000)
    input_dim = _check_int("input_dim", input_dim, 1, 4096)
    seed = _check_int("seed", seed, 0)
    scale = _check_positive("scale", scale)
    # draw time-major so a longer sequence extends a shorter one
    x = tf.random.stateless_normal([steps, batch_size, input_dim], [seed, 71])
    x = tf.transpose(x, [1, 0, 2]) * scale
    y = tf.random.stateless_normal([batch_size, 1], [seed, 72])
    return x, y


# ----------------------------------------------------------------------------- models
def make_recurrent_initializer(name: str, units: int, seed: int = 0):
    """A Keras initializer for a recurrent kernel, by its :data:`RECURRENT_INITIALIZERS` name.

    ``normal_0.5``/``normal_2`` scale with ``units`` so that a square block's spectral
    radius is about 0.5 / 2 whatever the width; ``identity`` puts an identity matrix in every
    gate's block (Le, Jaitly and Hinton 2015 for ReLU RNNs; here it is a tanh RNN's best case).
    """
    name = RENAMED_INITIALIZERS.get(name, name)
    _check_choice("recurrent_initializer", name, tuple(RECURRENT_INITIALIZERS))
    units = _check_int("units", units, 1, 4096)
    seed = _check_int("seed", seed, 0)
    if name == "orthogonal":
        return keras.initializers.Orthogonal(seed=seed)
    if name == "glorot_uniform":
        return keras.initializers.GlorotUniform(seed=seed)
    if name == "normal_0.5":
        return keras.initializers.RandomNormal(stddev=0.5 / math.sqrt(units), seed=seed)
    if name == "normal_2":
        return keras.initializers.RandomNormal(stddev=2.0 / math.sqrt(units), seed=seed)

    def identity(shape, dtype=None):
        rows, cols = shape
        return tf.tile(tf.eye(rows, dtype=dtype or "float32"), [1, cols // rows])

    return identity


def build_rnn(cell: str = "simple_rnn", units: int = 32, input_dim: int = 8, *,
              recurrent_initializer: str = "orthogonal", seed: int = 0, **layer_kwargs) -> keras.Model:
    """``Input → SimpleRNN/GRU/LSTM(units) → Dense(1)`` with Keras defaults except the seeds (chapter 07).

    The input kernel is Glorot-uniform and the recurrent kernel ``recurrent_initializer``
    (:func:`make_recurrent_initializer`), both seeded; extra keyword arguments go to the
    recurrent layer (``use_cudnn``, ``unroll``, ...). The sequence length is free.
    """
    check_cell(cell)
    units = _check_int("units", units, 1, 4096)
    input_dim = _check_int("input_dim", input_dim, 1, 4096)
    seed = _check_int("seed", seed, 0)
    layer = getattr(keras.layers, CELLS[cell])(
        units,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        recurrent_initializer=make_recurrent_initializer(recurrent_initializer, units,
                                                         seed + _REC_SEED_OFFSET),
        name=cell,
        **layer_kwargs,
    )
    out = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(
        seed=seed + _OUT_SEED_OFFSET), name="readout")
    return keras.Sequential([keras.Input((None, input_dim)), layer, out], name=f"{cell}_{units}")
