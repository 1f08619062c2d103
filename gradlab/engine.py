"""The fast engine behind the live GradientExplorer (chapters 01 and 05).

Pure computation: :class:`MLPGradientEngine` computes the per-layer report of
:func:`gradlab.build_mlp` networks without building a Keras model per change, and
:func:`predicted_gain` compares the variance argument with the measurement.
``tests/test_grads.py`` checks the engine against :func:`gradlab.gradient_report`.
"""

from __future__ import annotations

import math

import numpy as np

from ._env import quiet_import_tensorflow
from ._validate import check_choice as _check_choice
from ._validate import check_int as _check_int
from .grads import CLIP_MODES, GradientReport, check_clip
from .mlp import (
    ACTIVATIONS,
    INITIALIZERS,
    MAX_DEPTH,
    OUTPUT_SEED_OFFSET,
    make_data,
    make_initializer,
)

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["MLPGradientEngine", "predicted_gain"]


def _make_step(activation: str):
    act = keras.activations.get(activation)

    def step(x, y, kernels, out_kernel, out_bias, clip_t):
        depth = tf.shape(kernels)[0]
        n = tf.shape(x)[0]
        width = tf.shape(kernels)[2]
        # A zero "probe" added to every pre-activation: d loss / d probe = the signal.
        probe = tf.zeros(tf.stack([depth, n, width]), dtype=x.dtype)
        with tf.GradientTape() as tape:
            tape.watch([kernels, out_kernel, out_bias, probe])

            def layer(h, elems):
                w, p = elems
                return act(tf.matmul(h, w) + p)

            hs = tf.scan(layer, (kernels, probe), initializer=x)
            out = tf.matmul(hs[-1], out_kernel) + out_bias
            loss = tf.reduce_mean(tf.square(out - y))
        d_probe, d_k, d_ok, d_ob = tape.gradient(loss, [probe, kernels, out_kernel, out_bias])
        d_bias = tf.reduce_sum(d_probe, axis=1)  # hidden biases are zero: grad = batch sum

        def norms(t):  # per-layer norms in float64: float32 squares below ~1e-38 flush to 0
            return tf.norm(tf.reshape(tf.cast(t, tf.float64), [depth, -1]), axis=1)

        signal = norms(d_probe)
        weight = norms(d_k)
        # the three clip modes, as the tf.clip_* ops define them
        t64 = tf.cast(clip_t, tf.float64)
        by_value = norms(tf.clip_by_value(d_k, -clip_t, clip_t))
        by_norm = tf.minimum(weight, t64)  # tf.clip_by_norm per kernel: ‖g‖ → min(‖g‖, t)
        # tf.clip_by_global_norm's own (float32) global norm decides the common scale
        global_norm = tf.cast(tf.linalg.global_norm([d_k, d_bias, d_ok, d_ob]), tf.float64)
        by_global = weight * t64 / tf.maximum(global_norm, t64)
        stds = tf.math.reduce_std(tf.reshape(tf.cast(hs, tf.float64), [depth, -1]), axis=1)
        return loss, signal, weight, tf.stack([by_value, by_norm, by_global]), stds

    return tf.function(step, reduce_retracing=True, autograph=False)


class MLPGradientEngine:
    """Fast per-layer gradient reports for :func:`build_mlp` networks (chapter 01's explorer).

    Weights are sampled once per initializer for ``max_depth`` layers (the same seeds as
    ``build_mlp``, so depth ``d`` uses exactly ``build_mlp(d, ...)``'s kernels) and cached.
    Each activation has one ``tf.function`` whose inputs are tensors with a free depth axis,
    so changing the depth, the clip mode or the clip threshold never retraces.
    """

    def __init__(self, *, width: int = 64, batch_size: int = 128, max_depth: int = 100, seed: int = 0):
        self.width = _check_int("width", width, 1, 1024)
        self.batch_size = _check_int("batch_size", batch_size, 1, 100_000)
        self.max_depth = _check_int("max_depth", max_depth, 1, MAX_DEPTH)
        self.seed = _check_int("seed", seed, 0)
        self.x, self.y = make_data(self.batch_size, self.width, self.seed)
        self._kernels: dict[str, tf.Tensor] = {}
        self._steps: dict[str, tf.types.experimental.PolymorphicFunction] = {}
        init = keras.initializers.GlorotUniform(seed=self.seed + OUTPUT_SEED_OFFSET)
        self.out_kernel = tf.convert_to_tensor(init((self.width, 1)))
        self.out_bias = tf.zeros([1])

    def kernels(self, initializer: str) -> tf.Tensor:
        """The ``[max_depth, width, width]`` stack of hidden kernels for ``initializer`` (cached)."""
        _check_choice("initializer", initializer, tuple(INITIALIZERS))
        if initializer not in self._kernels:
            shape = (self.width, self.width)
            self._kernels[initializer] = tf.stack(
                [
                    tf.convert_to_tensor(make_initializer(initializer, self.seed + i)(shape))
                    for i in range(self.max_depth)
                ]
            )
        return self._kernels[initializer]

    def tracing_count(self) -> int:
        """How many times the engine's functions have been traced, over all activations."""
        return sum(int(f.experimental_get_tracing_count()) for f in self._steps.values())

    def report(
        self,
        depth: int,
        activation: str = "sigmoid",
        initializer: str = "glorot_uniform",
        clip=None,
    ) -> GradientReport:
        """The :class:`GradientReport` of ``build_mlp(depth, ...)`` on the engine's batch."""
        depth = _check_int("depth", depth, 1, self.max_depth)
        _check_choice("activation", activation, ACTIVATIONS)
        clip = check_clip(clip)
        kernels = self.kernels(initializer)[:depth]
        if activation not in self._steps:
            self._steps[activation] = _make_step(activation)
        t = tf.constant(clip[1] if clip else 1.0, dtype=tf.float32)
        loss, signal, weight, clipped, stds = self._steps[activation](
            self.x, self.y, kernels, self.out_kernel, self.out_bias, t
        )
        weight = weight.numpy()
        return GradientReport.from_norms(
            loss=float(loss.numpy()),
            signal_norms=signal.numpy(),
            weight_norms=weight,
            clipped_weight_norms=weight if clip is None else clipped[CLIP_MODES.index(clip[0])].numpy(),
            activation_stds=stds.numpy(),
            clip=clip,
        )


def predicted_gain(report: GradientReport, engine: MLPGradientEngine, activation: str,
                   initializer: str) -> tuple[float, float]:
    """Predicted and measured per-layer gain of the back-propagated signal (chapter 01).

    Variance argument: going back through one layer multiplies the signal's size by about
    ``sqrt(fan_out · Var(W) · E[f'(z)²])``. ``E[f'(z)²]`` is measured on the engine's own
    forward pass; ``Var(W)`` is the variance of the sampled kernels. The measured gain is the
    geometric mean of ``signal[l] / signal[l+1]``. Returns ``(predicted, measured)``.
    """
    _check_choice("activation", activation, ACTIVATIONS)
    depth = report.depth
    if depth < 2:
        raise ValueError("predicted_gain needs a report of depth >= 2")
    kernels = engine.kernels(initializer)[:depth]
    var_w = float(tf.math.reduce_variance(kernels).numpy())
    act = keras.activations.get(activation)
    h = engine.x
    d2 = []
    for k in tf.unstack(kernels):
        z = tf.matmul(h, k)
        with tf.GradientTape() as tape:
            tape.watch(z)
            h = act(z)
        d2.append(float(tf.reduce_mean(tf.square(tape.gradient(h, z))).numpy()))
    predicted = math.sqrt(engine.width * var_w * float(np.mean(d2)))
    s = report.signal_norms
    with np.errstate(divide="ignore", invalid="ignore"):
        gains = s[:-1] / s[1:]
    gains = gains[np.isfinite(gains) & (gains > 0)]  # skip layers that underflowed to 0
    measured = float(np.exp(np.mean(np.log(gains)))) if gains.size else math.nan
    return predicted, measured
