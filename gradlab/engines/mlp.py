"""The fast engine behind the live GradientExplorer (chapters 01 and 05).

Pure computation: :class:`MLPGradientEngine` computes the per-layer report of
:func:`gradlab.build_mlp` networks without building a Keras model per change, in every mode
of chapter 05 (residual connections, batch/layer normalization, float16/bfloat16 compute,
loss scaling). :func:`predicted_signal` is the mean-field theory curve drawn over the
measurement, :func:`predicted_gain` its one-number form (chapter 01).
``tests/test_grads.py`` and ``tests/test_engine.py`` check the engine against Keras models.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..core import CLIP_MODES, check_clip
from ..i18n import _
from ..models.mlp import (
    ACTIVATIONS,
    DTYPES,
    INITIALIZERS,
    MAX_DEPTH,
    NORM_EPSILON,
    NORMS,
    OUTPUT_SEED_OFFSET,
    make_data,
    make_initializer,
)
from ..reports.gradients import GradientReport
from ..topics.tracing import total_tracing_count

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["EngineReport", "MLPGradientEngine", "THEORY_MODES", "check_mode", "clipped_kernel_norms", "gaussian_moments",
           "predicted_gain", "predicted_signal"]

#: The modes in which :func:`predicted_signal` has a theory: every activation, initializer,
#: residual and norm setting in float32. In float16/bfloat16 it returns ``None``: the
#: recursion describes real numbers, while the point of those modes is rounding, underflow
#: and overflow, which it does not model.
THEORY_MODES = "float32 (every activation, initializer, residual and norm setting)"


@dataclasses.dataclass(frozen=True)
class EngineReport(GradientReport):
    """A :class:`GradientReport` of the engine, with its mode and the theory curve (chapter 05)."""

    residual: bool = False
    norm: str = "none"
    dtype: str = "float32"
    loss_scale: float = 1.0
    #: :func:`predicted_signal` for this report: one value per layer, or ``None`` where the
    #: theory does not apply (float16/bfloat16, or nothing finite to anchor to).
    predicted_signal: np.ndarray | None = None

    @property
    def mode(self) -> str:
        """The non-default modes in words, e.g. ``"residual · batch norm · float16"`` ("" if none)."""
        parts = [_("residual")] if self.residual else []
        if self.norm != "none":
            parts.append(_("batch norm") if self.norm == "batch" else _("layer norm"))
        if self.dtype != "float32":
            parts.append(self.dtype)
        if self.loss_scale != 1:
            k = math.log2(self.loss_scale)
            parts.append(_("loss scale 2^{k}").format(k=f"{k:g}") if k == int(k)
                         else _("loss scale {scale}").format(scale=f"{self.loss_scale:g}"))
        return " · ".join(parts)

    def summary(self) -> str:
        mode = f" [{self.mode}]" if self.mode else ""
        return super().summary() + mode



def clipped_kernel_norms(kernel_grads, other_grads, threshold):
    """``[len(CLIP_MODES), depth]`` float64 norms of each hidden kernel's gradient after each clip mode.

    ``kernel_grads`` stacks the hidden kernels' gradients on axis 0 (the engine's free depth
    axis), ``other_grads`` are the remaining gradients (biases, output layer) that a global
    norm also counts. Each mode is the core's own clipping (:func:`gradlab.core.clip_with`,
    what :func:`gradlab.clip_gradients` runs): ``value`` element by element, ``norm`` each
    kernel on its own (``tf.map_fn`` over the depth axis), ``global_norm`` all gradients
    together. Rows follow :data:`gradlab.core.CLIP_MODES`.
    """
    rows = []
    for mode in CLIP_MODES:
        if mode == "norm":  # one tensor per layer: each kernel clipped on its own
            clipped = tf.map_fn(lambda k, mode=mode: core.clip_with([k], mode, threshold)[0], kernel_grads)
        else:
            clipped = core.clip_with([kernel_grads, *other_grads] if mode == "global_norm" else [kernel_grads],
                                     mode, threshold)[0]
        rows.append(core.axis_norms64(clipped, axis=0))
    return tf.stack(rows)


def matmul32(a, b):
    """``a @ b`` for float32 tensors, rounded to float32 from a float64 product (the engine's float32 mode).

    A float32 matmul on an x86 CPU runs oneDNN's sgemm, whose summation order depends on the
    CPU's instruction set (AVX2, AVX-512, ...): the last bit of a result differs from one CPU to
    another, and a chaotic network (tanh at a large initialization) amplifies that bit layer by
    layer into the third printed digit. The product of two float32 numbers is exact in float64
    and the float64 sum of a row (Eigen, the same code on every x86 CPU) is accurate far beyond
    float32, so rounding it to float32 gives (almost always) the correctly rounded float32
    result on every CPU. Everything else stays float32: the activations, the products with
    ``f'(z)``, and so float32's underflow to subnormals and to exact zeros (chapter 01).
    """
    return tf.cast(tf.matmul(tf.cast(a, tf.float64), tf.cast(b, tf.float64)), tf.float32)


def _make_step(activation: str, residual: bool, norm: str, dtype: str):
    """One tf.function per (activation, residual, norm, dtype); depth, clip and loss scale are inputs."""
    act = keras.activations.get(activation)
    cdt = tf.dtypes.as_dtype(dtype)

    def normalize(z, gamma, beta):
        # Keras's BatchNormalization (training=True) and LayerNormalization compute in float32
        # even under a mixed policy, and cast the result back to the compute dtype.
        z32 = tf.cast(z, tf.float32)
        axis = 0 if norm == "batch" else 1  # the batch's statistics, or the example's
        mean = tf.reduce_mean(z32, axis=axis, keepdims=True)
        var = tf.reduce_mean(tf.square(z32 - mean), axis=axis, keepdims=True)
        u = (z32 - mean) * tf.math.rsqrt(var + NORM_EPSILON) * gamma + beta
        return tf.cast(u, cdt)

    def step(x, y, kernels, out_kernel, out_bias, clip_t, loss_scale):
        depth = tf.shape(kernels)[0]
        n = tf.shape(x)[0]
        width = tf.shape(kernels)[2]
        # A zero "probe" added to every pre-activation: d loss / d probe = the signal.
        probe = tf.zeros(tf.stack([depth, n, width]), dtype=cdt)
        gammas = tf.ones(tf.stack([depth, 1, width]), tf.float32)
        betas = tf.zeros(tf.stack([depth, 1, width]), tf.float32)
        watched = [probe, kernels, out_kernel, out_bias] + ([gammas, betas] if norm != "none" else [])
        with tf.GradientTape() as tape:
            tape.watch(watched)

            def layer(h, elems):
                w, p, g, b = elems
                if cdt == tf.float32:  # the same float32 numbers on every CPU (matmul32)
                    z = matmul32(h, w) + p
                else:  # float32 variable, cast at use (Keras policy)
                    z = tf.matmul(h, tf.cast(w, cdt)) + p
                a = act(normalize(z, g, b) if norm != "none" else z)
                return h + a if residual else a

            hs = tf.scan(layer, (kernels, probe, gammas, betas), initializer=tf.cast(x, cdt))
            # the output layer in float32, as the mixed-precision guide recommends
            out = matmul32(tf.cast(hs[-1], tf.float32), out_kernel) + out_bias
            loss = core.mean_squared_error(y, out)  # the core's default loss
            scaled = loss * loss_scale
        grads = tape.gradient(scaled, watched)
        d_probe, d_k = grads[0], grads[1]
        s64 = tf.cast(loss_scale, tf.float64)

        def norms(t):  # per-layer norms in float64: float32 squares below ~1e-38 flush to 0
            return core.axis_norms64(t, axis=0)

        signal = norms(d_probe) / s64  # the scaled float16 signal: its zeros are real
        weight = norms(d_k) / s64
        # what an optimizer clips: the float32 gradients unscaled (LossScaleOptimizer's order)
        u_k = d_k / loss_scale
        d_bias = tf.cast(tf.reduce_sum(d_probe, axis=1), tf.float32) / loss_scale  # zero biases
        others = [d_bias] + [g / loss_scale for g in grads[2:]]
        # the core's clipping, every mode; skipped without a clip (clip_t < 0): a fifth of the step's time
        clipped = tf.cond(clip_t > 0, lambda: clipped_kernel_norms(u_k, others, clip_t),
                          lambda: tf.zeros(tf.stack([len(CLIP_MODES), depth]), tf.float64))
        stds = tf.math.reduce_std(tf.reshape(tf.cast(hs, tf.float64), [depth, -1]), axis=1)
        return loss, signal, weight, clipped, stds

    f32 = tf.float32
    signature = [
        tf.TensorSpec([None, None], f32),  # x
        tf.TensorSpec([None, None], f32),  # y
        tf.TensorSpec([None, None, None], f32),  # kernels: a free depth axis
        tf.TensorSpec([None, None], f32),  # out_kernel
        tf.TensorSpec([None], f32),  # out_bias
        tf.TensorSpec([], f32),  # clip threshold (< 0: no clip)
        tf.TensorSpec([], f32),  # loss scale
    ]
    # A full input signature: exactly one trace per mode, whatever the depth or the numbers.
    return tf.function(step, input_signature=signature, autograph=False)


def check_mode(residual=False, norm="none", dtype="float32", loss_scale=1.0):
    """Validate the chapter-05 mode arguments; returns ``(residual, norm, dtype, loss_scale)``."""
    if not isinstance(residual, (bool, np.bool_)):
        raise ValueError(f"residual must be True or False; got {residual!r}")
    if norm is None:
        norm = "none"
    _check_choice("norm", norm, NORMS)
    _check_choice("dtype", dtype, DTYPES)
    loss_scale = _check_positive("loss_scale", loss_scale)
    if loss_scale > 2.0**64:
        raise ValueError(f"loss_scale must be at most 2**64; got {loss_scale!r}")
    return bool(residual), norm, dtype, loss_scale


class MLPGradientEngine:
    """Fast per-layer gradient reports for :func:`build_mlp` networks (chapters 01 and 05).

    Weights are sampled once per initializer for ``max_depth`` layers (the same seeds as
    ``build_mlp``, so depth ``d`` uses exactly ``build_mlp(d, ...)``'s kernels) and cached.
    Each mode (activation, residual, norm, dtype) has one ``tf.function`` with a full input
    signature and a free depth axis, so changing the depth, the clip mode or threshold, or the
    loss scale never retraces.

    The modes, as chapter 05 explains them: ``residual`` makes each hidden layer compute
    ``h + act(...)``; ``norm`` normalizes the pre-activation with the current batch's
    (``"batch"``) or example's (``"layer"``) statistics, ``gamma=1, beta=0``, epsilon 1e-3 as
    Keras; ``dtype`` is the compute dtype of the forward and backward pass with float32
    variables (Keras's ``mixed_float16``/``mixed_bfloat16`` policies; the output layer and
    the loss stay float32); ``loss_scale`` multiplies the loss before the backward pass and
    divides the float32 gradients after it, as ``LossScaleOptimizer`` does.
    """

    def __init__(self, *, width: int = 64, batch_size: int = 128, max_depth: int = 100, seed: int = 0):
        self.width = _check_int("width", width, 1, 1024)
        self.batch_size = _check_int("batch_size", batch_size, 1, 100_000)
        self.max_depth = _check_int("max_depth", max_depth, 1, MAX_DEPTH)
        self.seed = _check_int("seed", seed, 0)
        self.x, self.y = make_data(self.batch_size, self.width, self.seed)
        self._kernels: dict[str, tf.Tensor] = {}
        self._var_w: dict[str, np.ndarray] = {}
        self._steps: dict[tuple, tf.types.experimental.PolymorphicFunction] = {}
        init = keras.initializers.GlorotUniform(seed=self.seed + OUTPUT_SEED_OFFSET)
        self.out_kernel = tf.convert_to_tensor(init((self.width, 1)))
        self.out_bias = tf.zeros([1])

    def kernels(self, initializer: str) -> tf.Tensor:
        """The ``[max_depth, width, width]`` stack of hidden kernels for ``initializer`` (cached)."""
        _check_choice("initializer", initializer, tuple(INITIALIZERS))
        if initializer not in self._kernels:
            shape = (self.width, self.width)
            k = tf.stack(
                [
                    tf.convert_to_tensor(make_initializer(initializer, self.seed + i)(shape))
                    for i in range(self.max_depth)
                ]
            )
            self._kernels[initializer] = k
            self._var_w[initializer] = np.var(k.numpy().astype(np.float64), axis=(1, 2))
        return self._kernels[initializer]

    def kernel_variances(self, initializer: str) -> np.ndarray:
        """The sampled variance of each hidden kernel (``max_depth`` values, float64)."""
        self.kernels(initializer)
        return self._var_w[initializer]

    def tracing_count(self) -> int:
        """How many times the engine's functions have been traced, over all modes."""
        return total_tracing_count(self._steps.values())

    def report(
        self,
        depth: int,
        activation: str = "sigmoid",
        initializer: str = "glorot_uniform",
        clip=None,
        *,
        residual: bool = False,
        norm: str = "none",
        dtype: str = "float32",
        loss_scale: float = 1.0,
        theory: bool = True,
    ) -> EngineReport:
        """The :class:`GradientReport` of ``build_mlp(depth, ...)`` on the engine's batch.

        Without the keyword arguments this is chapter 01's plain network; see the class
        docstring for ``residual``, ``norm``, ``dtype`` and ``loss_scale`` (chapter 05).
        With ``theory`` the report carries :func:`predicted_signal` (``report.predicted_signal``).
        A signal norm is 0 only where the signal tensor is 0 in every element (real
        underflow in the compute dtype, not a norm artifact).
        """
        depth = _check_int("depth", depth, 1, self.max_depth)
        _check_choice("activation", activation, ACTIVATIONS)
        clip = check_clip(clip)
        residual, norm, dtype, loss_scale = check_mode(residual, norm, dtype, loss_scale)
        kernels = self.kernels(initializer)[:depth]
        key = (activation, residual, norm, dtype)
        if key not in self._steps:
            self._steps[key] = _make_step(activation, residual, norm, dtype)
        t = tf.constant(clip[1] if clip else -1.0, dtype=tf.float32)  # < 0: no clip, nothing clipped computed
        loss, signal, weight, clipped, stds = self._steps[key](
            self.x, self.y, kernels, self.out_kernel, self.out_bias, t,
            tf.constant(loss_scale, tf.float32),
        )
        weight = weight.numpy()
        report = EngineReport.from_norms(
            loss=float(loss.numpy()),
            signal_norms=signal.numpy(),
            weight_norms=weight,
            clipped_weight_norms=weight if clip is None else clipped[CLIP_MODES.index(clip[0])].numpy(),
            activation_stds=stds.numpy(),
            clip=clip,
            activation=activation,
            normalized=norm != "none",
            residual=residual,
            dtype=dtype,
        )
        report = dataclasses.replace(report, residual=residual, norm=norm, dtype=dtype, loss_scale=loss_scale)
        if theory:
            pred = predicted_signal(self, report, activation, initializer, residual=residual,
                                    norm=norm, dtype=dtype)
            report = dataclasses.replace(report, predicted_signal=pred)
        return report


# ------------------------------------------------------------------------------ theory
# E[g(u)] for u ~ N(0, 1) is sum(_GH_W * g(_GH_X)): Gauss-Legendre on [0, 9] and its mirror,
# so that the kink of relu/elu/selu at 0 falls between two smooth halves (exact to ~1e-9).
_LX, _LW = np.polynomial.legendre.leggauss(48)
_HALF = 4.5 * (_LX + 1)
_GH_X = np.concatenate([-_HALF[::-1], _HALF])
_GH_W = np.concatenate([_LW[::-1], _LW]) * 4.5 * np.exp(-0.5 * _GH_X**2) / math.sqrt(2 * math.pi)
_SELU_A, _SELU_L = 1.6732632423543772, 1.0507009873554805
_ERF = np.frompyfunc(math.erf, 1, 1)


def _act_np(name: str, z: np.ndarray):
    """``(f(z), f'(z))`` in NumPy float64, matching ``keras.activations`` (tests/test_engine.py)."""
    if name == "linear":
        return z, np.ones_like(z)
    if name == "sigmoid":
        s = 1 / (1 + np.exp(-np.clip(z, -700, 700)))
        return s, s * (1 - s)
    if name == "tanh":
        t = np.tanh(z)
        return t, 1 - t * t
    if name == "relu":
        return np.maximum(z, 0), (z > 0).astype(float)
    if name == "leaky_relu":  # keras.activations.leaky_relu: negative_slope 0.2
        return np.where(z > 0, z, 0.2 * z), np.where(z > 0, 1.0, 0.2)
    e = np.exp(np.minimum(z, 0))
    if name == "elu":
        return np.where(z > 0, z, e - 1), np.where(z > 0, 1.0, e)
    if name == "selu":
        return (_SELU_L * np.where(z > 0, z, _SELU_A * (e - 1)),
                _SELU_L * np.where(z > 0, 1.0, _SELU_A * e))
    if name == "gelu":  # exact gelu (keras default approximate=False): z * Phi(z)
        phi = 0.5 * (1 + _ERF(z / math.sqrt(2)).astype(float))
        return z * phi, phi + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {name!r}")


def gaussian_moments(activation: str, q: float = 1.0) -> tuple[float, float, float]:
    """``(E f(u), Var f(u), E f'(u)²)`` for ``u ~ N(0, q)``, by Gauss-Legendre quadrature (chapter 05)."""
    f, d = _act_np(activation, math.sqrt(max(q, 0.0)) * _GH_X)
    ef = float(np.sum(_GH_W * f))
    ef2 = float(np.sum(_GH_W * f * f))
    return ef, max(ef2 - ef * ef, 0.0), float(np.sum(_GH_W * d * d))


def predicted_signal(engine: MLPGradientEngine, report: GradientReport, activation: str,
                     initializer: str, *, residual: bool = False, norm: str = "none",
                     dtype: str = "float32") -> np.ndarray | None:
    """The per-layer signal predicted by variance propagation, anchored at the last layer (chapter 05).

    Mean field over the random weights (``Var W`` = the sampled kernels' variance, fan ``n``):
    the units of ``h`` have mean ``m`` and variance ``v`` (``x``: 0 and 1). A pre-activation
    ``z = hW`` has variance ``q = n·Var W·(m² + v)``; batch norm divides by the batch's spread
    ``√(n·Var W·v)`` (the constant ``m`` part is subtracted per feature), layer norm by the
    example's ``√(n·Var W·(m² + v))``, after which ``u ~ N(0, 1)``. Forward: ``m, v ← E f, Var f``
    (plus the old ``m, v`` with a residual connection). Backward, from layer ``l`` to ``l-1``:
    ``‖dL/dh‖² ← [residual: ‖dL/dh‖²] + n·Var W·s_l²`` and ``s_l² = ‖dL/dh_l‖²·E[f'(u)²] / σ_z²``,
    which without residual or norm is the per-layer gain ``√(n·Var W·E[f'(z)²])``.

    Returns one value per layer (input side first), equal to the measured last layer, or
    ``None`` where no theory is implemented: float16/bfloat16 (:data:`THEORY_MODES`), or
    when the measured last-layer signal is 0 or not finite (nothing to anchor to).
    """
    _check_choice("activation", activation, ACTIVATIONS)
    residual, norm, dtype, _scale = check_mode(residual, norm, dtype)
    if dtype != "float32":
        return None
    depth = report.depth
    last = float(report.signal_norms[-1])
    if not (math.isfinite(last) and last > 0):
        return None
    nvar, sig2, d2 = _forward_moments(engine, activation, initializer, residual, norm)
    if len(sig2) < depth:
        return None  # the forward pass overflows before the last layer: no finite prediction
    nvar, sig2, d2 = nvar[:depth], sig2[:depth], d2[:depth]
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.empty(depth)
        s[-1] = last
        dh2 = last * last * sig2[-1] / d2[-1] if d2[-1] > 0 else math.inf
        for i in range(depth - 1, 0, -1):
            dh2 = (dh2 if residual else 0.0) + nvar[i] * s[i] ** 2
            s[i - 1] = math.sqrt(dh2 * d2[i - 1] / sig2[i - 1])
    if not np.all(np.isfinite(s)):
        return None
    return s


def _forward_moments(engine: MLPGradientEngine, activation: str, initializer: str, residual: bool,
                     norm: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(n·Var W, σ_z², E f'²)`` per layer of :func:`predicted_signal`'s forward recursion, up to the
    engine's deepest network or the first layer whose variance overflows (no prediction past it).

    A layer's moments depend only on the layers before it, so one pass serves every depth: it is
    kept on the engine (a depth drag would otherwise repeat the same Gaussian integrals).
    """
    cache = engine.__dict__.setdefault("_theory_moments", {})
    key = (activation, initializer, residual, norm)
    if key in cache:
        return cache[key]
    nvar = engine.width * engine.kernel_variances(initializer)[:engine.max_depth]
    m, v = 0.0, 1.0  # the standard normal input
    sig2, d2 = [], []  # σ_z² and E f'² per layer
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(len(nvar)):
            if norm == "none":
                q, s2 = nvar[i] * (m * m + v), 1.0
            else:
                q = 1.0
                s2 = nvar[i] * (v if norm == "batch" else m * m + v) + NORM_EPSILON
            if not math.isfinite(q) or q > 1e300:
                break  # the forward pass overflows here: no prediction from this layer on
            ef, vf, d = gaussian_moments(activation, q)
            m, v = (m + ef, v + vf) if residual else (ef, vf)
            sig2.append(s2)
            d2.append(d)
    cache[key] = (np.asarray(nvar, dtype=np.float64), np.asarray(sig2), np.asarray(d2))
    return cache[key]


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
        z = matmul32(h, k)
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
