"""Chapter 07's theory and experiments on recurrent gradients, apart from the engine.

Pure computation: TensorFlow and NumPy in, NumPy arrays and dicts out; no widgets.

* :func:`bptt_reference` is back-propagation through time written out by hand for a tiny
  ``tanh`` RNN (NumPy, float64): the reference a tape must agree with; :func:`pascanu_bound`
  is Pascanu et al.'s (2013) condition on the recurrent matrix.
* :func:`adding_problem` is the seeded long-memory task (the variant of Le, Jaitly and Hinton
  2015), :func:`train_rnn` a short compiled training loop on it.
* :func:`cliff_loss` / :func:`descent_path` are Pascanu, Mikolov and Bengio's (2013) one-unit
  RNN whose loss surface has a wall, and plain against clipped gradient descent on it.

The per-step gradient reports and the explorer's engine are in :mod:`gradlab.reports.time` and :mod:`gradlab.engines.rnn`.
"""

from __future__ import annotations

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from .._validate import renamed_keywords

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["adding_problem", "bptt_reference", "cliff_loss", "descent_path", "pascanu_bound", "train_rnn"]


def adding_problem(n: int, steps: int, seed: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """The adding problem as Le, Jaitly & Hinton (2015) pose it: ``x`` is ``[n, steps, 2]``, ``y`` is ``[n, 1]``.

    Channel 0 holds random numbers in ``[0, 1)``; channel 1 marks two positions with 1, one
    in the first half of the sequence and one in the second. The target is the sum of the two
    marked numbers, so the network has to remember a value from far back. Always predicting
    the mean (1.0) gives a mean squared error of about 1/6 ≈ 0.167 (chapter 07). Hochreiter &
    Schmidhuber's (1997) original draws values in [-1, 1] and marks the first position among
    the first ten steps; this is the later, simpler variant.
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
@renamed_keywords(clipnorm="clip")
def train_rnn(model: keras.Model, x, y, *, train_steps: int = 200, batch_size: int = 64,
              learning_rate: float = 1e-2, clip=1.0, seed: int = 0) -> np.ndarray:
    """Train ``model`` with Adam on ``(x, y)`` for ``train_steps`` mini-batches; return the losses (chapter 07).

    Each step is the core's (:func:`gradlab.core.train_step`: the mean squared error plus
    ``model.losses``, clipping, Adam's update), compiled once (``tf.function``, no retrace per
    step); mini-batches are drawn by a seeded stateless shuffle, so the run reproduces.
    ``clip`` is gradlab's one clip keyword: a number clips the *global* norm of all gradients
    together, as every other gradlab tool does (``None`` for no clipping; ``(mode, t)`` for
    another mode of :func:`gradlab.clip_gradients`). A non-finite step is applied as Adam
    would apply it (no skipping), as with Keras's own clipping.
    """
    core.check_model(model)
    train_steps = _check_int("train_steps", train_steps, 1, 1_000_000)
    batch_size = _check_int("batch_size", batch_size, 1, 1_000_000)
    learning_rate = _check_positive("learning_rate", learning_rate)
    clip = core.check_clip(clip)
    x, y = core.coerce_batch(model, x, y)
    n = int(x.shape[0])
    opt = keras.optimizers.Adam(learning_rate)
    loss = core.Loss(model, "mse")
    weights = model.trainable_weights

    @tf.function(autograph=False, reduce_retracing=True)
    def step(xb, yb):
        out = core.train_step(model, opt, xb, yb, loss=loss, variables=weights, clip=clip, check_finite=False)
        return out["loss"]

    core.check_batch(model, x, y, loss=loss)  # a y of the wrong shape is a ValueError now, not at trace time
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


@renamed_keywords(clip_norm="clip")
def descent_path(w: float, b: float, *, learning_rate: float = 0.1, iterations: int = 20,
                 clip=None, steps: int = 50, x0: float = 0.5,
                 target: float = 0.7) -> dict[str, np.ndarray]:
    """Gradient descent on :func:`cliff_loss` from ``(w, b)``, each gradient taken with a tape (chapter 07).

    With ``clip`` (a number: the norm threshold; the gradient is one vector, so its global norm
    is its norm) the gradient is rescaled to at most that norm before the step, by the core's
    clipping (:func:`gradlab.clip_gradients`), as Pascanu et al. propose. Returns ``points`` (``[iterations+1, 2]``),
    ``losses`` and ``grad_norms`` (before clipping).
    """
    iterations = _check_int("iterations", iterations, 1, 10_000)
    learning_rate = _check_positive("learning_rate", learning_rate)
    clip = core.check_clip(clip)
    p = np.array([float(w), float(b)])
    points, losses, norms = [p.copy()], [], []
    for _ in range(iterations):
        loss, g = _cliff_grad(p[0], p[1], steps, x0, target)
        gn = core.true_norm(g)
        losses.append(loss)
        norms.append(gn)
        if clip is not None:
            g = core.clip_gradients([tf.constant(g)], clip)[0].numpy()
        if not np.all(np.isfinite(g)):
            break
        p = p - learning_rate * g
        points.append(p.copy())
    losses.append(float(cliff_loss(p[0], p[1], steps=steps, x0=x0, target=target)))
    return {"points": np.array(points), "losses": np.array(losses), "grad_norms": np.array(norms)}


