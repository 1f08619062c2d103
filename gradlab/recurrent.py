"""Gradients through time in recurrent networks (chapter 07).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out; no widgets.

* :func:`build_rnn` builds a Keras ``SimpleRNN``/``GRU``/``LSTM`` with a one-unit readout;
  :func:`time_report` runs one eager tape over it and measures the norm of
  dLoss/d(input at step t) for every step (earliest first) in float64.
* :func:`bptt_reference` is back-propagation through time written out by hand for a tiny
  ``tanh`` RNN (NumPy, float64): the reference a tape must agree with.
* :func:`adding_problem` is the seeded long-memory task, :func:`train_rnn` a short,
  compiled training loop on it.
* :func:`cliff_loss` / :func:`descent_path` are Pascanu, Mikolov and Bengio's (2013)
  one-unit RNN whose loss surface has a wall, and plain against clipped gradient descent on it.
* :class:`TimeGradientEngine` is the fast engine behind ``gl.TimeExplorer``: the three cells
  written once in a ``tf.function`` whose sequence length is a tensor, so no control change
  retraces. ``tests/test_recurrent.py`` checks it against the Keras layers.

The verdict is :func:`gradlab.grads.diagnose` applied to the per-step norms: time plays the
role of depth.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._env import quiet_import_tensorflow
from ._validate import check_choice as _check_choice
from ._validate import check_int as _check_int
from ._validate import check_positive as _check_positive
from .grads import CLIP_MODES, check_clip, diagnose, per_layer_gain

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CELLS",
    "MAX_STEPS",
    "RECURRENT_INITIALIZERS",
    "TimeGradientEngine",
    "TimeReport",
    "adding_problem",
    "bptt_reference",
    "build_rnn",
    "cliff_loss",
    "descent_path",
    "make_recurrent_initializer",
    "make_sequence_data",
    "pascanu_bound",
    "time_report",
    "train_rnn",
]

#: The recurrent cells, by their Keras layer.
CELLS: dict[str, str] = {"simple_rnn": "SimpleRNN", "gru": "GRU", "lstm": "LSTM"}
#: Gates per cell: the recurrent kernel of a cell is ``[units, gates * units]``.
_GATES = {"simple_rnn": 1, "gru": 3, "lstm": 4}
#: Recurrent initializers offered by the explorer, with a short description.
RECURRENT_INITIALIZERS: dict[str, str] = {
    "orthogonal": "orthogonal (Keras default)",
    "glorot_uniform": "glorot_uniform",
    "small_normal": "normal, std 0.5/√units",
    "large_normal": "normal, std 2/√units",
    "identity": "identity (per gate)",
}
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


def adding_problem(n: int, steps: int, seed: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """The adding problem (Hochreiter & Schmidhuber 1997): ``x`` is ``[n, steps, 2]``, ``y`` is ``[n, 1]``.

    Channel 0 holds random numbers in ``[0, 1)``; channel 1 marks two positions with 1, one
    in the first half of the sequence and one in the second. The target is the sum of the two
    marked numbers, so the network has to remember a value from far back. Always predicting
    the mean (1.0) gives a mean squared error of about 1/6 ≈ 0.167 (chapter 07).
    """
    n = _check_int("n", n, 1, 1_000_000)
    steps = _check_int("steps", steps, 2, 100_000)
    seed = _check_int("seed", seed, 0)
    values = tf.random.stateless_uniform([n, steps], [seed, 81])
    half = steps // 2
    first = tf.random.stateless_uniform([n], [seed, 82], maxval=half, dtype=tf.int32)
    second = tf.random.stateless_uniform([n], [seed, 83], minval=half, maxval=steps, dtype=tf.int32)
    marks = tf.one_hot(first, steps) + tf.one_hot(second, steps)
    x = tf.stack([values, marks], axis=-1)
    y = tf.reduce_sum(values * marks, axis=1, keepdims=True)
    return x, y


# ----------------------------------------------------------------------------- models
def make_recurrent_initializer(name: str, units: int, seed: int = 0):
    """A Keras initializer for a recurrent kernel, by its :data:`RECURRENT_INITIALIZERS` name.

    ``small_normal``/``large_normal`` scale with ``units`` so that a square block's spectral
    radius is about 0.5 / 2 whatever the width; ``identity`` puts an identity matrix in every
    gate's block (Le, Jaitly and Hinton 2015 for ReLU RNNs; here it is a tanh RNN's best case).
    """
    _check_choice("recurrent_initializer", name, tuple(RECURRENT_INITIALIZERS))
    units = _check_int("units", units, 1, 4096)
    seed = _check_int("seed", seed, 0)
    if name == "orthogonal":
        return keras.initializers.Orthogonal(seed=seed)
    if name == "glorot_uniform":
        return keras.initializers.GlorotUniform(seed=seed)
    if name == "small_normal":
        return keras.initializers.RandomNormal(stddev=0.5 / math.sqrt(units), seed=seed)
    if name == "large_normal":
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
    ``clipped_weight_norms`` the same after ``clip``. ``status``/``message`` come from
    :func:`gradlab.grads.diagnose` applied over time.
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

    @property
    def steps(self) -> int:
        return int(self.time_step_norms.size)

    @classmethod
    def from_norms(cls, *, loss: float, time_step_norms, weight_names, weight_norms,
                   clipped_weight_norms=None, clip=None) -> TimeReport:
        """A report from per-step norms (earliest first), with its ratio, gain and verdict."""
        s = np.asarray(time_step_norms, dtype=np.float64)
        status, _ = diagnose(s)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = float(s[0] / s[-1]) if s.size else math.nan
        gain = per_layer_gain(s)
        w = np.asarray(weight_norms, dtype=np.float64)
        return cls(
            time_step_norms=s,
            weight_names=tuple(weight_names),
            weight_norms=w,
            clipped_weight_norms=w if clipped_weight_norms is None
            else np.asarray(clipped_weight_norms, dtype=np.float64),
            ratio=ratio,
            gain=gain,
            status=status,
            message=_time_message(status, s, ratio, gain),
            loss=float(loss),
            clip=clip,
        )

    def summary(self) -> str:
        """A short, rounded, printable summary (stable across CPUs)."""
        return (f"{self.steps} steps · loss {self.loss:.3g} · ratio step 1 / step {self.steps} "
                f"= {self.ratio:.3g} (gain {self.gain:.3g} per step) → {self.status}")

    def __str__(self) -> str:
        def fmt(a):
            return "[" + ", ".join(f"{v:.3g}" for v in a) + "]"

        clip = "off" if self.clip is None else f"{self.clip[0]} ≤ {self.clip[1]:g}"
        s = self.time_step_norms
        shown = fmt(s) if s.size <= 10 else fmt(s[:5])[:-1] + ", ..., " + fmt(s[-5:])[1:]
        lines = [f"TimeReport: {self.summary()} (clip {clip})",
                 f"  per-step norms: {shown}",
                 "  weight grads  : " + ", ".join(
                     f"{n} {v:.3g}" for n, v in zip(self.weight_names, self.weight_norms, strict=True))]
        if self.clip is not None:
            lines.append("  after clipping: " + ", ".join(
                f"{n} {v:.3g}" for n, v in zip(self.weight_names, self.clipped_weight_norms, strict=True)))
        lines.append(f"  {self.message}")
        return "\n".join(lines)


def _time_message(status: str, s: np.ndarray, ratio: float, gain: float) -> str:
    n = s.size
    if status == "non-finite":
        return ("some steps have NaN/inf gradients: the recurrence overflowed. Lower the "
                "recurrent weights' scale or the learning rate; clipping cannot repair NaN.")
    if n == 1:
        return "one step: no time for the gradient to vanish or explode over."
    how = f"{gain:.3g}× per step, {ratio:.2g}× from step {n} back to step 1"
    if status == "vanishing":
        what = ("the gradient at step 1 is exactly 0 (float32 underflow)" if s[0] == 0
                else f"the gradient shrinks {how}")
        return (f"{what}: the early inputs cannot teach the network. Shorter sequences, a "
                "recurrent matrix with singular values near 1 (orthogonal, identity), smaller "
                "inputs (less tanh saturation) or a trained gate help; clipping does not.")
    if status == "exploding":
        return (f"the gradient grows {how}: early steps get huge updates. Lower the recurrent "
                "matrix's scale; clipping bounds the step but not the cause.")
    return f"the gradient changes {how}: early steps still get a usable gradient."


def _per_step_norms(g) -> np.ndarray:
    """Float64 norm over batch and features of a ``[batch, steps, features]`` gradient."""
    return tf.norm(tf.reshape(tf.transpose(tf.cast(g, tf.float64), [1, 0, 2]),
                              [tf.shape(g)[1], -1]), axis=1).numpy()


def _weight_name(model, v) -> str:
    name = getattr(v, "path", v.name)
    return name[len(model.name) + 1:] if name.startswith(model.name + "/") else name


def time_report(model: keras.Model, x, y, *, clip=None, compiled: bool = False) -> TimeReport:
    """One eager tape over ``model(x)`` with a mean-squared-error loss against ``y`` (chapter 07).

    Measures the norm of dLoss/d(input at step t) for every step, earliest first, and the
    norms of the weight gradients before and after ``clip`` (``None`` or ``(mode, t)`` as in
    :func:`gradlab.clip_gradients`). Works for any Keras model that takes a
    ``[batch, steps, features]`` tensor. ``compiled=True`` runs the same tape inside a
    ``tf.function`` (traced once per call): faster than eager for long sequences.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    clip = check_clip(clip)
    x = tf.convert_to_tensor(x, dtype=tf.float32)
    y = tf.convert_to_tensor(y, dtype=tf.float32)
    if x.shape.rank != 3:
        raise ValueError(f"x must have shape [batch, steps, features]; got shape {tuple(x.shape)}")
    weights = model.trainable_weights

    def grads(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_mean(tf.square(model(x) - y))
        return loss, tape.gradient(loss, [x, *weights])

    if compiled:
        grads = tf.function(grads, autograph=False)
    loss, (dx, *dw) = grads(x, y)
    from .grads import clip_gradients, true_norm

    pairs = [(w, g) for w, g in zip(weights, dw, strict=True) if g is not None]
    clipped = clip_gradients([g for _, g in pairs], clip)
    return TimeReport.from_norms(
        loss=float(loss.numpy()),
        time_step_norms=_per_step_norms(dx),
        weight_names=[_weight_name(model, w) for w, _ in pairs],
        weight_norms=[true_norm(g) for _, g in pairs],
        clipped_weight_norms=[true_norm(g) for g in clipped],
        clip=clip,
    )


# ----------------------------------------------------------------------------- BPTT by hand
def bptt_reference(w_rec, w_in, w_out, x, y) -> dict[str, np.ndarray]:
    """Back-propagation through time written out by hand, in float64 NumPy (chapter 07).

    The network is ``h_t = tanh(h_{t-1} @ w_rec + x_t @ w_in)`` from ``h_0 = 0``, output
    ``h_T @ w_out`` and loss ``mean((out - y)**2)``. Going back one step multiplies the
    gradient by ``diag(1 - h_t**2) @ w_rec.T``: the product of these Jacobians is why it
    vanishes or explodes. Returns ``loss``, ``dx`` (``[batch, steps, features]``),
    ``d_w_rec``, ``d_w_in``, ``d_w_out``, ``time_step_norms`` (the norm of dLoss/dx_t, earliest
    first) and ``state_norms`` (the norm of dLoss/dh_t, earliest first: each step back multiplies
    it by at most ``sigma_max(w_rec)``, see :func:`pascanu_bound`).
    """
    w_rec, w_in, w_out, x, y = (np.asarray(getattr(a, "numpy", lambda a=a: a)(), dtype=np.float64)
                                for a in (w_rec, w_in, w_out, x, y))
    if x.ndim != 3:
        raise ValueError(f"x must have shape [batch, steps, features]; got shape {x.shape}")
    batch, steps, _ = x.shape
    units = w_rec.shape[0]
    if w_rec.shape != (units, units) or w_in.shape != (x.shape[2], units) or w_out.shape[0] != units:
        raise ValueError(f"shapes do not fit: w_rec {w_rec.shape}, w_in {w_in.shape}, "
                         f"w_out {w_out.shape}, x {x.shape}")
    hs = [np.zeros((batch, units))]
    for t in range(steps):
        hs.append(np.tanh(hs[-1] @ w_rec + x[:, t] @ w_in))
    out = hs[-1] @ w_out
    loss = float(np.mean((out - y) ** 2))
    d_out = 2.0 * (out - y) / out.size
    d_w_out = hs[-1].T @ d_out
    dh = d_out @ w_out.T  # dLoss/dh_T
    dx = np.zeros_like(x)
    d_w_rec = np.zeros_like(w_rec)
    d_w_in = np.zeros_like(w_in)
    state_norms = np.zeros(steps)
    for t in range(steps, 0, -1):
        state_norms[t - 1] = np.sqrt(np.sum(dh ** 2))
        dz = dh * (1.0 - hs[t] ** 2)  # through tanh
        dx[:, t - 1] = dz @ w_in.T
        d_w_in += x[:, t - 1].T @ dz
        d_w_rec += hs[t - 1].T @ dz
        dh = dz @ w_rec.T  # one step back in time
    norms = np.sqrt(np.sum(dx ** 2, axis=(0, 2)))
    return {"loss": loss, "dx": dx, "d_w_rec": d_w_rec, "d_w_in": d_w_in, "d_w_out": d_w_out,
            "time_step_norms": norms, "state_norms": state_norms}


def pascanu_bound(w_rec, *, derivative_bound: float = 1.0) -> dict[str, float]:
    """Pascanu et al.'s (2013) condition for a ``tanh`` RNN's recurrent matrix (chapter 07).

    Going back one step multiplies the gradient by ``diag(f'(z)) @ w_rec.T``, whose norm is at
    most ``sigma_max(w_rec) · γ`` with ``γ = max|f'| = 1`` for tanh. When that bound is
    below 1 the gradient *must* vanish, by at least that factor per step (sufficient). Above 1
    it *may* explode (necessary, not sufficient: saturation can still kill it). Returns
    ``sigma_max``, ``bound`` (``sigma_max · γ``) and ``spectral_radius``.
    """
    w = np.asarray(getattr(w_rec, "numpy", lambda: w_rec)(), dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"w_rec must be a square matrix; got shape {w.shape}")
    derivative_bound = _check_positive("derivative_bound", derivative_bound)
    sigma = float(np.linalg.svd(w, compute_uv=False)[0])
    return {"sigma_max": sigma, "bound": sigma * derivative_bound,
            "spectral_radius": float(np.max(np.abs(np.linalg.eigvals(w))))}


# ----------------------------------------------------------------------------- training
def train_rnn(model: keras.Model, x, y, *, train_steps: int = 200, batch_size: int = 64,
              learning_rate: float = 1e-2, clipnorm: float | None = 1.0, seed: int = 0) -> np.ndarray:
    """Train ``model`` with Adam on ``(x, y)`` for ``train_steps`` mini-batches; return the losses (chapter 07).

    One compiled train step (``tf.function``, no retrace per step); mini-batches are drawn by
    a seeded stateless shuffle, so the run reproduces. ``clipnorm`` is passed to the optimizer
    (``None`` for none).
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    train_steps = _check_int("train_steps", train_steps, 1, 1_000_000)
    batch_size = _check_int("batch_size", batch_size, 1, 1_000_000)
    learning_rate = _check_positive("learning_rate", learning_rate)
    clipnorm = _check_positive("clipnorm", clipnorm, allow_none=True)
    x = tf.convert_to_tensor(x, tf.float32)
    y = tf.convert_to_tensor(y, tf.float32)
    n = int(x.shape[0])
    opt = keras.optimizers.Adam(learning_rate, clipnorm=clipnorm)
    weights = model.trainable_weights

    @tf.function(autograph=False, reduce_retracing=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    losses = np.empty(train_steps)
    per_epoch = max(1, n // batch_size)
    order = None
    for i in range(train_steps):
        if i % per_epoch == 0:
            order = tf.argsort(tf.random.stateless_uniform([n], [seed, 91 + i // per_epoch]))
        idx = order[(i % per_epoch) * batch_size:(i % per_epoch + 1) * batch_size]
        losses[i] = float(step(tf.gather(x, idx), tf.gather(y, idx)).numpy())
    return losses


# ----------------------------------------------------------------------------- the cliff
def cliff_loss(w, b, *, steps: int = 50, x0: float = 0.5, target: float = 0.7):
    """Pascanu et al.'s one-unit RNN ``x_t = w·sigmoid(x_{t-1}) + b``; loss ``(x_steps - target)²`` (chapter 07).

    ``w`` and ``b`` may be arrays of the same shape (a grid): the loss is returned for each
    pair, in float64. Where a small change of ``(w, b)`` moves the fixed point the sequence
    settles in, the loss jumps: the "cliff" of their Figure 6.
    """
    steps = _check_int("steps", steps, 1, 100_000)
    w = np.asarray(w, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    x = np.full(np.broadcast(w, b).shape, float(x0))
    for _ in range(steps):
        x = w / (1.0 + np.exp(-x)) + b
    return (x - target) ** 2


@tf.function(autograph=False, reduce_retracing=True)
def _cliff_tape(p, steps, x0, target):
    with tf.GradientTape() as tape:
        tape.watch(p)
        x = tf.fill(tf.shape(p[0]), x0)

        def body(i, x):
            return i + 1, p[0] * tf.sigmoid(x) + p[1]

        _, x = tf.while_loop(lambda i, x: i < steps, body, (tf.constant(0), x))
        loss = tf.square(x - target)
    return loss, tape.gradient(loss, p)


def _cliff_grad(w: float, b: float, steps: int, x0: float, target: float):
    """Loss and gradient of :func:`cliff_loss` at ``(w, b)``, from a tape over the recurrence."""
    loss, g = _cliff_tape(tf.constant([w, b], tf.float64), tf.constant(steps),
                          tf.constant(x0, tf.float64), tf.constant(target, tf.float64))
    return float(loss.numpy()), g.numpy()


def descent_path(w: float, b: float, *, learning_rate: float = 0.1, iterations: int = 20,
                 clip_norm: float | None = None, steps: int = 50, x0: float = 0.5,
                 target: float = 0.7) -> dict[str, np.ndarray]:
    """Gradient descent on :func:`cliff_loss` from ``(w, b)``, each gradient taken with a tape (chapter 07).

    With ``clip_norm`` the gradient is rescaled to at most that norm before the step
    (``tf.clip_by_norm``), as Pascanu et al. propose. Returns ``points`` (``[iterations+1, 2]``),
    ``losses`` and ``grad_norms`` (before clipping).
    """
    iterations = _check_int("iterations", iterations, 1, 10_000)
    learning_rate = _check_positive("learning_rate", learning_rate)
    clip_norm = _check_positive("clip_norm", clip_norm, allow_none=True)
    p = np.array([float(w), float(b)])
    points, losses, norms = [p.copy()], [], []
    for _ in range(iterations):
        loss, g = _cliff_grad(p[0], p[1], steps, x0, target)
        gn = float(np.linalg.norm(g))
        losses.append(loss)
        norms.append(gn)
        if clip_norm is not None and gn > clip_norm:
            g = g * (clip_norm / gn)
        if not np.all(np.isfinite(g)):
            break
        p = p - learning_rate * g
        points.append(p.copy())
    losses.append(float(cliff_loss(p[0], p[1], steps=steps, x0=x0, target=target)))
    return {"points": np.array(points), "losses": np.array(losses), "grad_norms": np.array(norms)}


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
        h0 = tuple(tf.zeros(tf.stack([batch, units])) for _ in range(n_carry))
        with tf.GradientTape() as tape:
            tape.watch([x, k, r, b, out_k, out_b])
            hs = tf.scan(lambda c, xt: cell_step(c, xt, k, r, b), x, initializer=h0)
            out = tf.matmul(hs[0][-1], out_k) + out_b
            loss = tf.reduce_mean(tf.square(out - y))
        grads = tape.gradient(loss, [x, k, r, b, out_k, out_b])
        dx, dw = grads[0], grads[1:]
        per_step = tf.norm(tf.reshape(tf.cast(dx, tf.float64), [tf.shape(dx)[0], -1]), axis=1)

        def n64(g):
            return tf.norm(tf.reshape(tf.cast(g, tf.float64), [-1]))

        weight = tf.stack([n64(g) for g in dw])
        t64 = tf.cast(clip_t, tf.float64)
        by_value = tf.stack([n64(tf.clip_by_value(g, -clip_t, clip_t)) for g in dw])
        by_norm = tf.minimum(weight, t64)
        global_norm = tf.cast(tf.linalg.global_norm(dw), tf.float64)
        by_global = weight * t64 / tf.maximum(global_norm, t64)
        return loss, per_step, weight, tf.stack([by_value, by_norm, by_global])

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
        _check_choice("recurrent_initializer", recurrent_initializer, tuple(RECURRENT_INITIALIZERS))
        key = (cell, recurrent_initializer)
        if key not in self._weights:
            model = self.model(cell, recurrent_initializer)
            self._weights[key] = [tf.convert_to_tensor(w) for w in model.get_weights()]
        return self._weights[key]

    def tracing_count(self) -> int:
        """How many times the engine's functions have been traced, over all cells."""
        return sum(int(f.experimental_get_tracing_count()) for f in self._steps.values())

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
