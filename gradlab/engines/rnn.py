"""The TimeExplorer's fast engine (chapter 07): :class:`TimeGradientEngine`.

The three cells written once in a ``tf.function`` whose sequence length, input scale and
clip threshold are tensors, so no control change retraces; its weights are those of
:func:`gradlab.models.rnn.build_rnn` with the same seed. ``tests/test_recurrent.py`` checks it
against the Keras layers.
"""

from __future__ import annotations

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..core import CLIP_MODES, check_clip
from ..models.rnn import (
    MAX_STEPS,
    RECURRENT_INITIALIZERS,
    RENAMED_INITIALIZERS,
    build_rnn,
    check_cell,
    make_sequence_data,
)
from ..reports.time import TimeReport
from ..topics.tracing import total_tracing_count

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "TimeGradientEngine",
]


# ----------------------------------------------------------------------------- fast engine
def _cell_fn(cell: str):
    """One step of ``cell`` with Keras's weight layout: ``(carry, x_t) -> carry``."""
    if cell == "simple_rnn":
        def step(carry, xt, k, r, b):
            (h,) = carry
            return (tf.tanh(tf.matmul(xt, k) + b + tf.matmul(h, r)),)
    elif cell == "gru":  # Keras 3 default: reset_after=True, bias [2, 3u]
        def step(carry, xt, k, r, b):
            (h,) = carry
            x_z, x_r, x_h = tf.split(tf.matmul(xt, k) + b[0], 3, axis=-1)
            i_z, i_r, i_h = tf.split(tf.matmul(h, r) + b[1], 3, axis=-1)
            z = tf.sigmoid(x_z + i_z)
            rr = tf.sigmoid(x_r + i_r)
            hh = tf.tanh(x_h + rr * i_h)
            return (z * h + (1.0 - z) * hh,)
    else:
        def step(carry, xt, k, r, b):
            h, c = carry
            i, f, g, o = tf.split(tf.matmul(xt, k) + tf.matmul(h, r) + b, 4, axis=-1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            return (tf.sigmoid(o) * tf.tanh(c), c)
    return step


def _make_engine_step(cell: str):
    cell_step = _cell_fn(cell)
    n_carry = 2 if cell == "lstm" else 1

    def run(x_full, scale, steps, y, k, r, b, out_k, out_b, clip_t):
        x = tf.transpose(x_full[:, :steps], [1, 0, 2]) * scale  # time-major [T, B, D]
        batch = tf.shape(x)[1]
        units = tf.shape(r)[0]
        h0 = tuple(tf.zeros(tf.stack([batch, units])) for _carry in range(n_carry))
        with tf.GradientTape() as tape:
            tape.watch([x, k, r, b, out_k, out_b])
            hs = tf.scan(lambda c, xt: cell_step(c, xt, k, r, b), x, initializer=h0)
            out = tf.matmul(hs[0][-1], out_k) + out_b
            loss = core.mean_squared_error(y, out)  # the core's default loss
        grads = tape.gradient(loss, [x, k, r, b, out_k, out_b])
        dx, dw = grads[0], grads[1:]
        per_step = core.axis_norms64(dx, axis=0)  # time-major: one float64 norm per step
        weight = tf.stack([core.norm64(g) for g in dw])
        # the core's clipping in each mode, with the threshold as a tensor (no retrace)
        clipped = [tf.stack([core.norm64(g) for g in core.clip_with(dw, mode, clip_t)]) for mode in CLIP_MODES]
        return loss, per_step, weight, tf.stack(clipped)

    return tf.function(run, autograph=False, reduce_retracing=True)


class TimeGradientEngine:
    """Fast per-time-step gradient reports for :func:`build_rnn` networks (chapter 07's explorer).

    The weights of each ``(cell, recurrent_initializer)`` are those of ``build_rnn(...)`` with
    the same seed (cached). The inputs are drawn once for ``max_steps`` steps; a shorter
    sequence is their first ``steps`` steps. Each cell has one ``tf.function`` whose sequence
    length, input scale and clip threshold are tensors, so no control change retraces.
    """

    weight_names = ("kernel", "recurrent_kernel", "bias", "readout kernel", "readout bias")

    def __init__(self, *, units: int = 32, input_dim: int = 8, batch_size: int = 32,
                 max_steps: int = MAX_STEPS, seed: int = 0):
        self.units = _check_int("units", units, 1, 1024)
        self.input_dim = _check_int("input_dim", input_dim, 1, 1024)
        self.batch_size = _check_int("batch_size", batch_size, 1, 100_000)
        self.max_steps = _check_int("max_steps", max_steps, 1, 10_000)
        self.seed = _check_int("seed", seed, 0)
        self.x, self.y = make_sequence_data(self.batch_size, self.max_steps, self.input_dim, self.seed)
        self._weights: dict[tuple[str, str], list[tf.Tensor]] = {}
        self._steps: dict[str, tf.types.experimental.PolymorphicFunction] = {}

    def model(self, cell: str, recurrent_initializer: str = "orthogonal") -> keras.Model:
        """The Keras model whose weights the engine uses (a fresh :func:`build_rnn`)."""
        return build_rnn(cell, self.units, self.input_dim, recurrent_initializer=recurrent_initializer,
                         seed=self.seed)

    def weights(self, cell: str, recurrent_initializer: str = "orthogonal") -> list[tf.Tensor]:
        """``[kernel, recurrent_kernel, bias, readout kernel, readout bias]`` (cached)."""
        check_cell(cell)
        recurrent_initializer = RENAMED_INITIALIZERS.get(recurrent_initializer, recurrent_initializer)
        _check_choice("recurrent_initializer", recurrent_initializer, tuple(RECURRENT_INITIALIZERS))
        key = (cell, recurrent_initializer)
        if key not in self._weights:
            model = self.model(cell, recurrent_initializer)
            self._weights[key] = [tf.convert_to_tensor(w) for w in model.get_weights()]
        return self._weights[key]

    def tracing_count(self) -> int:
        """How many times the engine's functions have been traced, over all cells."""
        return total_tracing_count(self._steps.values())

    def report(self, cell: str = "simple_rnn", steps: int = 50, recurrent_initializer: str = "orthogonal",
               input_scale: float = 1.0, clip=None) -> TimeReport:
        """The :class:`TimeReport` of ``build_rnn(cell, ...)`` on the first ``steps`` steps of the engine's batch."""
        check_cell(cell)
        steps = _check_int("steps", steps, 1, self.max_steps)
        input_scale = _check_positive("input_scale", input_scale)
        clip = check_clip(clip)
        k, r, b, ok, ob = self.weights(cell, recurrent_initializer)
        if cell not in self._steps:
            self._steps[cell] = _make_engine_step(cell)
        loss, per_step, weight, clipped = self._steps[cell](
            self.x, tf.constant(input_scale, tf.float32), tf.constant(steps, tf.int32), self.y,
            k, r, b, ok, ob, tf.constant(clip[1] if clip else 1.0, tf.float32))
        weight = weight.numpy()
        return TimeReport.from_norms(
            loss=float(loss.numpy()),
            time_step_norms=per_step.numpy(),
            weight_names=self.weight_names,
            weight_norms=weight,
            clipped_weight_norms=weight if clip is None else clipped[CLIP_MODES.index(clip[0])].numpy(),
            clip=clip,
        )
