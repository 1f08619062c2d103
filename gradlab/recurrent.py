"""Gradients through time in recurrent networks (chapter 07).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out; no widgets.

* :func:`build_rnn` builds a Keras ``SimpleRNN``/``GRU``/``LSTM`` with a one-unit readout;
  :func:`time_report` runs one tape over any sequence model (the core's inputs, loss,
  ``sample_weight``, norms and clipping) and measures the float64 norm of dLoss/d(input at
  step t) for every step, earliest first.
* chapter 07's theory (back-propagation through time by hand, Pascanu's bound and cliff, the
  adding problem) is in :mod:`gradlab.rnn_theory`.
* :class:`TimeGradientEngine` is the fast engine behind ``gl.TimeExplorer``: the three cells
  written once in a ``tf.function`` whose sequence length is a tensor, so no control change
  retraces. ``tests/test_recurrent.py`` checks it against the Keras layers.

The verdict is :func:`gradlab.verdict.judge` applied to the per-step norms: time plays the
role of depth.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import core
from ._env import quiet_import_tensorflow
from ._validate import check_choice as _check_choice
from ._validate import check_int as _check_int
from ._validate import check_positive as _check_positive
from .core import CLIP_MODES, check_clip
from .i18n import N_, _
from .tracing import total_tracing_count
from .verdict import Verdict, judge, status_word

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CELLS",
    "MAX_STEPS",
    "RECURRENT_INITIALIZERS",
    "TimeGradientEngine",
    "TimeReport",
    "build_rnn",
    "make_recurrent_initializer",
    "make_sequence_data",
    "time_report",
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
_RENAMED = {"small_normal": "normal_0.5", "large_normal": "normal_2"}
#: The longest sequence the explorer offers.
MAX_STEPS = 200
_OUT_SEED_OFFSET = 1000
_REC_SEED_OFFSET = 500


def _check_cell(cell: str) -> str:
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
    name = _RENAMED.get(name, name)
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
    _check_cell(cell)
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


# ----------------------------------------------------------------------------- the report
@dataclasses.dataclass(frozen=True)
class TimeReport:
    """Per-time-step gradient norms of one batch, earliest step first (chapter 07).

    ``time_step_norms[t]`` is the float64 norm of dLoss/d(input at step t+1) over the batch
    and the features; ``weight_norms`` are the gradient norms of the trainable weights,
    ``clipped_weight_norms`` the same after ``clip``. ``status``/``message`` come from the
    :class:`gradlab.verdict.Verdict` (``verdict``) applied over time.
    """

    time_step_norms: np.ndarray
    weight_names: tuple[str, ...]
    weight_norms: np.ndarray
    clipped_weight_norms: np.ndarray
    ratio: float
    gain: float
    status: str
    message: str
    loss: float
    clip: tuple[str, float] | None = None
    verdict: Verdict | None = None

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
            ratio=v.ratio,
            gain=v.gain,
            status=v.status,
            message=v.message,
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
    with tf.GradientTape() as tape, core.tap_layers(model, tape) as taps:
        model(x, training=training)
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


def time_report(model: keras.Model, x, y, *, clip=None, compiled: bool = False, loss_fn=None,
                sample_weight=None, training: bool = False) -> TimeReport:
    """One tape over ``model(x)`` and its loss against ``y`` (chapter 07).

    Measures the float64 norm of dLoss/d(input at step t) for every step, earliest first, and
    the norms of the weight gradients before and after ``clip`` (``None`` or ``(mode, t)`` as
    in :func:`gradlab.clip_gradients`). Works for any Keras model that takes one
    ``[batch, steps, features]`` tensor (stacked, bidirectional and stateful layers included).
    The loss is the core's (:func:`gradlab.core.resolve_loss`): ``loss_fn``, else the compiled
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
    loss = core.resolve_loss(model, loss_fn)
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

        def grads(x, y, sw):
            with tf.GradientTape() as tape:
                tape.watch(x)
                pred = model(x, training=training)
                loss.check(y, pred, sw)  # at trace time when compiled: a plain ValueError
                value = loss(x, y, pred, training, sw)
            return value, tape.gradient(value, [x, *weights])

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
        _check_cell(cell)
        recurrent_initializer = _RENAMED.get(recurrent_initializer, recurrent_initializer)
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
        _check_cell(cell)
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
