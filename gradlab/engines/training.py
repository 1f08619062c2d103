"""The built-in training run of chapter 11: the workbook's MLP trained on its batch, watched at every step.

Pure computation: :class:`TrainingEngine` trains :func:`gradlab.build_mlp`'s network
(``depth`` hidden ``Dense(64)`` layers and a ``Dense(1)`` output, the same initial kernels as
``build_mlp(depth, activation=..., initializer=...)``, zero biases) on the batch of
:func:`gradlab.make_data` with the mean squared error, and fills a
:class:`gradlab.reports.training.TrainingReport`.

* **Numbers any CPU reproduces**: the run computes in float64 (the float32 initial weights and
  data cast to float64). A float64 matmul is Eigen's on every x86 CPU, not oneDNN's, whose
  float32 summation order depends on the CPU's instruction set.
* **Fast**: one ``tf.function`` per activation runs a ``tf.while_loop`` over the steps, the
  layers a free axis (``tf.scan``); the depth, the initializer, the optimizer, the learning rate,
  the clip setting and the number of steps are tensors, so changing them never retraces
  (:meth:`TrainingEngine.tracing_count`).
* **Progressive**: :meth:`TrainingEngine.chunks` yields a partial report after every ``chunk``
  steps, so a view draws the run as it comes in.

The optimizers are Keras's formulas (``tests/test_training_engine.py`` checks them against
``keras.optimizers`` in an independent ``GradientTape`` loop, to the last bit for SGD; the
hyperparameters are Keras's float32 numbers, :data:`MOMENTUM`): ``"sgd"`` is ``SGD(lr)``,
``"momentum"`` ``SGD(lr, momentum=0.9)``, ``"adam"`` ``Adam(lr)`` (``beta_1=0.9, beta_2=0.999,
epsilon=1e-7``). Clipping is the core's (:func:`gradlab.core.clip_with`), per variable for
``"norm"`` as ``tf.clip_by_norm`` on each kernel and bias.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..core import CLIP_MODES, check_clip
from ..models.mlp import ACTIVATIONS, INITIALIZERS
from ..reports.training import (
    GRAD_LOG_EDGES,
    TrainingReport,
    act_edges,
    activation_derivative,
    derivative_threshold,
    histogram_counts,
    inactive_from_derivative,
)
from ..topics.tracing import total_tracing_count
from .mlp import MLPGradientEngine

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["MAX_STEPS", "OPTIMIZERS", "TrainingEngine", "check_settings", "training_run"]

#: The optimizers of the built-in run: Keras's SGD, SGD with momentum 0.9, and Adam.
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")
#: The hyperparameters exactly as Keras applies them in float64: its learning rate is a float32
#: variable, and ``ops.cast(0.9, "float64")`` goes through float32 (the momentum, and the betas of
#: Adam's bias correction ``beta ** t``), while ``1 - beta`` and ``epsilon`` stay Python floats.
MOMENTUM = float(np.float32(0.9))
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7
POWER_1, POWER_2 = float(np.float32(BETA_1)), float(np.float32(BETA_2))
MAX_STEPS = 10_000
F64 = tf.float64


def check_settings(depth, activation, initializer, optimizer, learning_rate, clip, steps, *, max_depth=100):
    """Validate the built-in run's settings; returns them normalized (``clip`` as ``None`` or ``(mode, t)``)."""
    depth = _check_int("depth", depth, 1, max_depth)
    _check_choice("activation", activation, ACTIVATIONS)
    _check_choice("initializer", initializer, tuple(INITIALIZERS))
    if not isinstance(optimizer, str):
        raise TypeError(f"optimizer must be one of {', '.join(OPTIMIZERS)} (a string); got {type(optimizer).__name__}")
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    learning_rate = _check_positive("learning_rate", learning_rate)
    clip = check_clip(clip)
    steps = _check_int("steps", steps, 1, MAX_STEPS)
    return depth, activation, initializer, optimizer, learning_rate, clip, steps


def _clip(grads, mode, threshold):
    """The core's clipping of ``[kernels, biases, out_kernel, out_bias]`` (``mode`` an int tensor: 0 none,
    1 + index in :data:`CLIP_MODES`); ``norm`` clips each kernel and bias on its own."""

    def by(name):
        if name == "norm":
            def per_variable():
                k = tf.map_fn(lambda g: core.clip_with([g], "norm", threshold)[0], grads[0])
                b = tf.map_fn(lambda g: core.clip_with([g], "norm", threshold)[0], grads[1])
                return [k, b, *core.clip_with(grads[2:], "norm", threshold)]
            return per_variable
        return lambda: core.clip_with(grads, name, threshold)

    return tf.switch_case(mode, [lambda: list(grads)] + [by(m) for m in CLIP_MODES])


def _optimize(params, grads, m, v, kind, lr, it):
    """One update of Keras's SGD / SGD(momentum) / Adam (``kind`` 0, 1, 2); ``it`` counts from 1."""

    def sgd():
        return [p - lr * g for p, g in zip(params, grads, strict=True)], list(m), list(v)

    def momentum():
        m2 = [MOMENTUM * a - lr * g for a, g in zip(m, grads, strict=True)]
        return [p + a for p, a in zip(params, m2, strict=True)], m2, list(v)

    def adam():
        t = tf.cast(it, F64)
        alpha = lr * tf.sqrt(1 - tf.pow(tf.constant(POWER_2, F64), t)) / (1 - tf.pow(tf.constant(POWER_1, F64), t))
        m2 = [a + (g - a) * (1 - BETA_1) for a, g in zip(m, grads, strict=True)]
        v2 = [b + (g * g - b) * (1 - BETA_2) for b, g in zip(v, grads, strict=True)]
        return [p - (a * alpha) / (tf.sqrt(b) + EPSILON) for p, a, b in zip(params, m2, v2, strict=True)], m2, v2

    return tf.switch_case(kind, [sgd, momentum, adam])


def _layer_norms(k, b, ok, ob):
    """Per layer (hidden, then output) float64 norms of ``(kernel, bias)`` together: ``[depth + 1]``."""
    hidden = tf.sqrt(tf.reduce_sum(tf.square(k), axis=[1, 2]) + tf.reduce_sum(tf.square(b), axis=1))
    out = tf.sqrt(tf.reduce_sum(tf.square(ok)) + tf.reduce_sum(tf.square(ob)))
    return tf.concat([hidden, out[None]], 0)


def _grad_hist(gk, gb, gok, gob):
    """``[depth + 1, bins]`` counts of ``log10 |g|`` and ``[depth + 1]`` exact zeros, per layer."""
    depth = tf.shape(gk)[0]
    hidden = tf.concat([tf.reshape(gk, [depth, -1]), gb], 1)
    out = tf.concat([tf.reshape(gok, [-1]), gob], 0)
    width = tf.shape(hidden)[1]
    out = tf.pad(out, [[0, width - tf.shape(out)[0]]], constant_values=np.nan)[None]  # NaN: not counted
    g = tf.concat([hidden, out], 0)
    zeros = tf.reduce_sum(tf.cast(tf.equal(g, 0), tf.int32), axis=1)
    logs = tf.math.log(tf.abs(g)) / np.log(10.0)
    logs = tf.where(tf.equal(g, 0), tf.fill(tf.shape(g), tf.constant(np.nan, F64)), logs)
    n = tf.shape(g)[0]
    lo = tf.fill([n], tf.constant(GRAD_LOG_EDGES[0], F64))
    hi = tf.fill([n], tf.constant(GRAD_LOG_EDGES[-1], F64))
    return histogram_counts(logs, lo, hi), zeros


def _loss_and_gradients(act, x, y, params):
    """The forward pass, the loss and the gradients of ``[kernels, biases, out_kernel, out_bias]``.

    Back-propagation written out over the free depth axis (a ``tf.scan`` each way, which is
    several times faster than a tape through the forward ``tf.scan``): ``dz_l = dh_l * f'(z_l)``,
    ``dh_{l-1} = dz_l W_lᵀ``, ``dW_l = h_{l-1}ᵀ dz_l``, ``db_l = Σ dz_l``. ``f'`` and ``dL/dpred``
    come from ``GradientTape`` (the activation's and the core loss's own gradients).
    ``tests/test_training_engine.py`` checks the result against a tape through a Keras model.
    Returns ``(loss, grads, zs, hs, f'(zs), pred)``.
    """
    k, b, ok, ob = params

    def layer(carry, kb):
        z = tf.matmul(carry[1], kb[0]) + kb[1]
        return z, act(z)

    zs, hs = tf.scan(layer, (k, b), initializer=(tf.zeros_like(x), x))
    dact = activation_derivative(zs, act)
    last = hs[-1]
    with tf.GradientTape() as tape:
        tape.watch([last, ok, ob])
        pred = tf.matmul(last, ok) + ob
        loss = core.mean_squared_error(y, pred)
    dlast, gok, gob = tape.gradient(loss, [last, ok, ob])

    def back(carry, elems):
        kernel, d = elems
        dz = carry[0] * d
        return tf.matmul(dz, kernel, transpose_b=True), dz

    _, dzs = tf.scan(back, (k, dact), initializer=(dlast, tf.zeros_like(dlast)), reverse=True)
    h_prev = tf.concat([x[None], hs[:-1]], 0)
    gk = tf.matmul(h_prev, dzs, transpose_a=True)
    gb = tf.reduce_sum(dzs, axis=1)
    return loss, [gk, gb, gok, gob], zs, hs, dact, pred


def _make_chunk(activation: str):
    """The ``tf.function`` that takes up to ``n`` steps from a state (one per activation)."""
    act = keras.activations.get(activation)
    edges = act_edges(activation)
    out_edges = act_edges(None)

    def step(x, y, params, m, v, it, kind, lr, clip_mode, clip_t, threshold):
        loss, grads, zs, hs, dact, pred = _loss_and_gradients(act, x, y, params)
        k = params[0]
        norms = _layer_norms(*grads)
        clipped = _clip(grads, clip_mode, clip_t)
        new, m2, v2 = _optimize(params, clipped, m, v, kind, lr, it)
        delta = _layer_norms(*[a - c for a, c in zip(new, params, strict=True)])
        ratios = delta / _layer_norms(*params)
        dead = tf.reduce_mean(tf.cast(inactive_from_derivative(dact, threshold), F64), axis=1)
        dead = tf.concat([dead, tf.constant([np.nan], F64)], 0)
        depth = tf.shape(k)[0]
        outs = tf.concat([tf.reshape(hs, [depth, -1]),
                          tf.pad(tf.reshape(pred, [1, -1]), [[0, 0], [0, tf.size(hs[0]) - tf.size(pred)]],
                                 constant_values=np.nan)], 0)
        lo = tf.concat([tf.fill([depth], tf.constant(edges[0], F64)), tf.constant([out_edges[0]], F64)], 0)
        hi = tf.concat([tf.fill([depth], tf.constant(edges[-1], F64)), tf.constant([out_edges[-1]], F64)], 0)
        ahist = histogram_counts(outs, lo, hi)
        ghist, gzeros = _grad_hist(*grads)
        return new, m2, v2, (loss, norms, ratios, dead, ahist, ghist, gzeros)

    def chunk(x, y, params, m, v, it, n, kind, lr, clip_mode, clip_t, threshold):
        arrays = [tf.TensorArray(d, size=0, dynamic_size=True) for d in (F64, F64, F64, F64, tf.int32, tf.int32,
                                                                         tf.int32)]

        def cond(i, params, m, v, finite, arrays):
            return tf.logical_and(i < n, finite)

        def body(i, params, m, v, finite, arrays):
            new, m2, v2, rows = step(x, y, params, m, v, it + i, kind, lr, clip_mode, clip_t, threshold)
            arrays = [a.write(i, r) for a, r in zip(arrays, rows, strict=True)]
            finite = tf.math.is_finite(rows[0])
            # the step whose loss is not finite is recorded but not applied
            keep = lambda a, c: tf.where(finite, a, c)  # noqa: E731
            return (i + 1, [keep(a, c) for a, c in zip(new, params, strict=True)], [keep(a, c) for a, c in zip(m2, m, strict=True)],
                    [keep(a, c) for a, c in zip(v2, v, strict=True)], finite, arrays)

        i, params, m, v, finite, arrays = tf.while_loop(
            cond, body, (tf.constant(0), list(params), list(m), list(v), tf.constant(True), arrays))
        return params, m, v, i, [a.stack() for a in arrays]

    f = tf.TensorSpec
    params = [f([None, None, None], F64), f([None, None], F64), f([None, None], F64), f([None], F64)]
    signature = [f([None, None], F64), f([None, None], F64), params, params, params, f([], tf.int32),
                 f([], tf.int32), f([], tf.int32), f([], F64), f([], tf.int32), f([], F64), f([], F64)]
    return tf.function(chunk, input_signature=signature, autograph=False)


class TrainingEngine:
    """The built-in run of chapter 11 (see the module docstring): ``engine.run(depth=20, ...)``.

    ``width``, ``batch_size`` and ``seed`` are chapter 01's (the same kernels and batch as the
    GradientExplorer's :class:`gradlab.engines.mlp.MLPGradientEngine`, which samples them).
    """

    def __init__(self, *, width: int = 64, batch_size: int = 128, max_depth: int = 100, seed: int = 0):
        self._weights = MLPGradientEngine(width=width, batch_size=batch_size, max_depth=max_depth, seed=seed)
        self.width, self.batch_size = self._weights.width, self._weights.batch_size
        self.max_depth, self.seed = self._weights.max_depth, self._weights.seed
        self.x = tf.cast(self._weights.x, F64)
        self.y = tf.cast(self._weights.y, F64)
        self._chunks: dict[str, tf.types.experimental.PolymorphicFunction] = {}

    def tracing_count(self) -> int:
        """How many times the engine's functions have been traced (one per activation used)."""
        return total_tracing_count(self._chunks.values())

    def initial_weights(self, depth: int, initializer: str) -> list[np.ndarray]:
        """``build_mlp(depth, initializer=...)``'s initial weights in Keras's order (kernel, bias, ...), float64."""
        k = tf.cast(self._weights.kernels(initializer)[:depth], F64).numpy()
        out = []
        for i in range(depth):
            out += [k[i], np.zeros(self.width)]
        return out + [tf.cast(self._weights.out_kernel, F64).numpy(), np.zeros(1)]

    def chunks(self, depth: int = 20, activation: str = "sigmoid", initializer: str = "glorot_uniform",
               optimizer: str = "sgd", learning_rate: float = 0.1, clip=None, steps: int = 60, *,
               chunk: int = 25) -> Iterator[TrainingReport]:
        """Yield the run's report after every ``chunk`` steps (``partial=True`` until the last one)."""
        depth, activation, initializer, optimizer, learning_rate, clip, steps = check_settings(
            depth, activation, initializer, optimizer, learning_rate, clip, steps, max_depth=self.max_depth)
        chunk = _check_int("chunk", chunk, 1, MAX_STEPS)
        settings = dict(depth=depth, activation=activation, initializer=initializer, optimizer=optimizer,
                        learning_rate=learning_rate, clip=clip, steps=steps)
        if activation not in self._chunks:
            self._chunks[activation] = _make_chunk(activation)
        fn = self._chunks[activation]
        k = tf.cast(self._weights.kernels(initializer)[:depth], F64)
        params = [k, tf.zeros([depth, self.width], F64), tf.cast(self._weights.out_kernel, F64),
                  tf.zeros([1], F64)]
        m = [tf.zeros_like(p) for p in params]
        v = [tf.zeros_like(p) for p in params]
        consts = (tf.constant(OPTIMIZERS.index(optimizer)), tf.constant(float(np.float32(learning_rate)), F64),
                  tf.constant(0 if clip is None else 1 + CLIP_MODES.index(clip[0])),
                  tf.constant(1.0 if clip is None else clip[1], F64),
                  tf.constant(derivative_threshold(activation), F64))
        rows: list[list[np.ndarray]] = []
        taken = 0
        while taken < steps:
            n = min(chunk, steps - taken)
            params, m, v, done, stacked = fn(self.x, self.y, params, m, v, tf.constant(taken + 1), tf.constant(n),
                                             *consts)
            rows.append([s.numpy() for s in stacked])
            done = int(done.numpy())
            taken += done
            diverged = not np.isfinite(rows[-1][0][-1]) if done else False
            finished = taken >= steps or diverged or done < n
            yield self._report(settings, rows, activation, depth, steps, partial=not finished)
            if finished:
                return

    def run(self, depth: int = 20, activation: str = "sigmoid", initializer: str = "glorot_uniform",
            optimizer: str = "sgd", learning_rate: float = 0.1, clip=None, steps: int = 60) -> TrainingReport:
        """The whole run's :class:`TrainingReport` (the last of :meth:`chunks`, in one chunk)."""
        *_, report = self.chunks(depth, activation, initializer, optimizer, learning_rate, clip, steps,
                                  chunk=MAX_STEPS)
        return report

    def _report(self, settings, rows, activation, depth, steps, *, partial) -> TrainingReport:
        loss, norms, ratios, dead, ahist, ghist, gzeros = (np.concatenate([r[i] for r in rows]) for i in range(7))
        diverged = int(np.argmax(~np.isfinite(loss))) + 1 if not np.all(np.isfinite(loss)) else None
        edges = np.stack([act_edges(activation)] * depth + [act_edges(None)])
        names = tuple(f"hidden_{i + 1}" for i in range(depth)) + ("output",)
        units = np.array([self.width] * depth + [1])
        return TrainingReport(
            settings=settings, layer_names=names, activations=(activation,) * depth + (None,), units=units,
            loss=loss, grad_norms=norms, update_ratios=ratios, dead_fraction=dead, act_hist=ahist,
            act_edges=edges, grad_hist=ghist, grad_zeros=gzeros, steps=steps, diverged_at=diverged,
            dtype="float64", partial=partial and diverged is None)


_ENGINE: TrainingEngine | None = None


def training_run(depth: int = 20, activation: str = "sigmoid", initializer: str = "glorot_uniform",
                 optimizer: str = "sgd", learning_rate: float = 0.1, clip=None, steps: int = 60) -> TrainingReport:
    """The built-in run's report, from one shared :class:`TrainingEngine` (chapter 11)."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = TrainingEngine()
    return _ENGINE.run(depth, activation, initializer, optimizer, learning_rate, clip, steps)
