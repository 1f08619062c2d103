"""Per-layer gradient reports for stacks of Dense layers (chapters 00, 01 and 04).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out. Nothing here
imports ipywidgets, so tests, benchmarks and other chapters can use it headless.

Two ways to get the same numbers:

* :func:`gradient_report` takes any Keras model that is a stack of Dense layers
  (the learner's own included) and runs one eager GradientTape over it.
* :class:`MLPGradientEngine` is the fast path behind the live explorer. Its weights are
  plain tensors sampled once per initializer with the same Keras initializers and seeds as
  :func:`build_mlp`, and one ``tf.function`` per activation does the forward and backward
  pass for any depth without retracing. ``tests/test_grads.py`` checks that both agree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ._env import quiet_import_tensorflow
from ._validate import check_choice as _check_choice
from ._validate import check_int as _check_int

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "ACTIVATIONS",
    "INITIALIZERS",
    "CLIP_MODES",
    "GradientReport",
    "MLPGradientEngine",
    "TrainingHistory",
    "activation_curves",
    "build_mlp",
    "clip_gradients",
    "dense_layers",
    "diagnose",
    "gradient_report",
    "make_data",
    "make_initializer",
    "predicted_gain",
    "train_mlp",
]

#: Activation names accepted everywhere (Keras names).
ACTIVATIONS: tuple[str, ...] = (
    "linear",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "elu",
    "selu",
    "gelu",
)

#: Initializer names, with the label the explorer shows. All but two are Keras names;
#: ``small_normal`` and ``large_normal`` are ``RandomNormal(stddev=0.01)`` and ``(stddev=1)``.
INITIALIZERS: dict[str, str] = {
    "zeros": "zeros",
    "small_normal": "small normal (σ=0.01)",
    "large_normal": "large normal (σ=1)",
    "glorot_uniform": "glorot_uniform (Xavier)",
    "glorot_normal": "glorot_normal (Xavier)",
    "he_normal": "he_normal",
    "he_uniform": "he_uniform",
    "lecun_normal": "lecun_normal",
    "lecun_uniform": "lecun_uniform",
    "orthogonal": "orthogonal",
}

#: Clipping modes: what ``tf.clip_by_value``, ``tf.clip_by_norm`` and ``tf.clip_by_global_norm`` do.
CLIP_MODES: tuple[str, ...] = ("value", "norm", "global_norm")

MAX_DEPTH = 200
STATUSES = ("healthy", "vanishing", "exploding", "non-finite")


# ----------------------------------------------------------------------------- validation
def _check_clip(clip):
    if clip is None:
        return None
    if (
        not isinstance(clip, (tuple, list))
        or len(clip) != 2
        or clip[0] not in CLIP_MODES
        or isinstance(clip[1], bool)
        or not isinstance(clip[1], (int, float, np.floating, np.integer))
        or not clip[1] > 0
        or not math.isfinite(clip[1])
    ):
        raise ValueError(
            "clip must be None or (mode, threshold) with mode one of "
            f"{', '.join(CLIP_MODES)} and a finite threshold > 0; got {clip!r}"
        )
    return (clip[0], float(clip[1]))


# ----------------------------------------------------------------------------- building
def make_initializer(name: str, seed: int = 0) -> keras.initializers.Initializer:
    """Return a seeded Keras initializer for one of :data:`INITIALIZERS` (chapter 01).

    A seeded Keras 3 initializer returns the same values every call, so the same
    ``(name, seed, shape)`` always gives the same kernel.
    """
    _check_choice("initializer", name, tuple(INITIALIZERS))
    if name == "zeros":
        return keras.initializers.Zeros()
    if name == "small_normal":
        return keras.initializers.RandomNormal(stddev=0.01, seed=seed)
    if name == "large_normal":
        return keras.initializers.RandomNormal(stddev=1.0, seed=seed)
    return type(keras.initializers.get(name))(seed=seed)


_OUTPUT_SEED_OFFSET = 10_000


def build_mlp(
    depth: int,
    *,
    width: int = 64,
    activation: str = "relu",
    initializer: str = "glorot_uniform",
    input_dim: int | None = None,
    seed: int = 0,
) -> keras.Sequential:
    """Build ``depth`` hidden ``Dense(width)`` layers and a ``Dense(1)`` output (chapters 01, 04).

    Hidden layer ``i`` (0-based) uses ``make_initializer(initializer, seed + i)``; the output
    layer uses Keras' default ``glorot_uniform`` with its own fixed seed, so it does not change
    with ``depth``. Biases start at zero. ``input_dim`` defaults to ``width``.
    """
    depth = _check_int("depth", depth, 1, MAX_DEPTH)
    width = _check_int("width", width, 1, 4096)
    _check_choice("activation", activation, ACTIVATIONS)
    _check_choice("initializer", initializer, tuple(INITIALIZERS))
    input_dim = width if input_dim is None else _check_int("input_dim", input_dim, 1, 100_000)
    seed = _check_int("seed", seed, 0)
    layers = [keras.Input((input_dim,))]
    for i in range(depth):
        layers.append(
            keras.layers.Dense(
                width,
                activation=activation,
                kernel_initializer=make_initializer(initializer, seed + i),
                name=f"hidden_{i + 1}",
            )
        )
    layers.append(
        keras.layers.Dense(
            1,
            kernel_initializer=keras.initializers.GlorotUniform(seed=seed + _OUTPUT_SEED_OFFSET),
            name="output",
        )
    )
    return keras.Sequential(layers, name=f"mlp_{depth}x{width}_{activation}")


def make_data(batch_size: int = 128, input_dim: int = 64, seed: int = 0):
    """A synthetic regression batch ``(x, y)``: standard normal inputs and targets (chapter 01).

    Stateless random ops, so the same arguments give the same batch in any process.
    """
    batch_size = _check_int("batch_size", batch_size, 1, 1_000_000)
    input_dim = _check_int("input_dim", input_dim, 1, 100_000)
    seed = _check_int("seed", seed, 0)
    x = tf.random.stateless_normal([batch_size, input_dim], seed=[seed, 1])
    y = tf.random.stateless_normal([batch_size, 1], seed=[seed, 2])
    return x, y


# ----------------------------------------------------------------------------- diagnosis
def diagnose(signal_norms, *, vanish_below: float = 1e-3, explode_above: float = 1e3):
    """Return ``(status, message)`` for per-layer back-propagated signal norms (chapter 01).

    ``signal_norms`` runs input side first. Any NaN or inf gives ``"non-finite"``.
    Otherwise the ratio ``signal_norms[0] / signal_norms[-1]`` decides: below
    ``vanish_below`` is ``"vanishing"``, above ``explode_above`` is ``"exploding"``.

    Why the signal (dLoss/d pre-activation) and not the weight gradients: a weight gradient
    is the product of the forward activation and the backward signal. When the forward
    activations grow as fast as the signal shrinks (or the other way round), the weight
    gradients look flat across layers while the signal vanishes or explodes. Glorot & Bengio
    (2010) point this out; chapter 01 shows a case.
    """
    if not (isinstance(vanish_below, (int, float)) and isinstance(explode_above, (int, float))):
        raise ValueError("vanish_below and explode_above must be numbers")
    if not (0 < vanish_below < explode_above):
        raise ValueError(
            f"need 0 < vanish_below < explode_above; got vanish_below={vanish_below}, "
            f"explode_above={explode_above}"
        )
    try:
        s = np.asarray(signal_norms, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"signal_norms must be a 1-D sequence of numbers; got {signal_norms!r}") from err
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"signal_norms must be a non-empty 1-D sequence; got shape {s.shape}")
    if np.any(s < 0):
        raise ValueError("signal_norms are norms and cannot be negative")
    n = s.size
    bad = ~np.isfinite(s)
    if bad.any():
        first = int(np.argmax(bad)) + 1
        return (
            "non-finite",
            f"{int(bad.sum())} of {n} layers have NaN/inf gradients (the first is layer {first}): "
            "the numbers overflowed. Clipping cannot repair NaN; lower the weight scale or "
            "learning rate and find the first bad op with tf.debugging.check_numerics.",
        )
    if s[-1] == 0 and s[0] == 0:
        return (
            "vanishing",
            "every layer's gradient signal is exactly 0: nothing reaches the network. Zero "
            "weights or dead units (relu at 0) block it; use a random initializer.",
        )
    ratio = math.inf if s[-1] == 0 else s[0] / s[-1]
    if ratio < vanish_below:
        size = "underflowed to exactly 0" if s[0] == 0 else f"is {ratio:.2g}× the signal at layer {n}"
        return (
            "vanishing",
            f"the signal at layer 1 {size}, so early layers barely learn. Try relu with "
            "he_normal, fewer layers, or normalization.",
        )
    if ratio > explode_above:
        return (
            "exploding",
            f"the signal at layer 1 is {ratio:.2g}× the signal at layer {n}, so early layers "
            "get huge updates. Use a smaller-variance initializer (glorot, he); clipping bounds the "
            "step but not the cause.",
        )
    return (
        "healthy",
        f"the signal at layer 1 is {ratio:.2g}× the signal at layer {n}: every layer gets a "
        "gradient of usable size.",
    )


# ----------------------------------------------------------------------------- the report
@dataclasses.dataclass(frozen=True)
class GradientReport:
    """Per-layer gradient statistics of one batch, input side first (chapter 01).

    One entry per hidden Dense layer in every array.
    """

    signal_norms: np.ndarray
    weight_norms: np.ndarray
    clipped_weight_norms: np.ndarray
    activation_stds: np.ndarray
    ratio: float
    status: str
    message: str
    loss: float
    clip: tuple[str, float] | None = None

    @property
    def depth(self) -> int:
        return int(self.signal_norms.size)

    def summary(self) -> str:
        """A short, rounded, printable summary (stable across CPUs)."""
        return (
            f"{self.depth} layers · loss {self.loss:.3g} · signal ratio {self.ratio:.3g} "
            f"→ {self.status}"
        )

    def __str__(self) -> str:
        def fmt(a):
            return "[" + ", ".join(f"{v:.3g}" for v in a) + "]"

        clip = "off" if self.clip is None else f"{self.clip[0]} ≤ {self.clip[1]:g}"
        lines = [
            f"GradientReport: {self.summary()} (clip {clip})",
            f"  signal norms  : {fmt(self.signal_norms)}",
            f"  weight norms  : {fmt(self.weight_norms)}",
        ]
        if self.clip is not None:
            lines.append(f"  after clipping: {fmt(self.clipped_weight_norms)}")
        lines += [f"  forward stds  : {fmt(self.activation_stds)}", f"  {self.message}"]
        return "\n".join(lines)


def _ratio(s: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(s[0]) / np.float64(s[-1]))


def clip_gradients(grads: Sequence, clip):
    """Clip a list of gradient tensors exactly as ``tf.clip_by_value``/``_norm``/``_global_norm``.

    ``clip`` is ``None`` or ``(mode, threshold)``; ``value`` clips to ``[-t, t]`` element by
    element, ``norm`` rescales each tensor whose L2 norm exceeds ``t``, ``global_norm``
    rescales all together when their joint norm exceeds ``t`` (chapter 01).
    """
    clip = _check_clip(clip)
    grads = list(grads)
    if clip is None:
        return grads
    mode, t = clip
    if mode == "value":
        return [tf.clip_by_value(g, -t, t) for g in grads]
    if mode == "norm":
        return [tf.clip_by_norm(g, t) for g in grads]
    clipped, _ = tf.clip_by_global_norm(grads, t)
    return clipped


def dense_layers(model) -> list:
    """The Dense layers of ``model`` in order, rejecting anything that is not a Dense stack."""
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    out = []

    def walk(layer):
        if isinstance(layer, keras.layers.Dense):
            out.append(layer)
        elif isinstance(layer, keras.Model):
            for sub in layer.layers:
                walk(sub)
        elif isinstance(layer, (keras.layers.InputLayer, keras.layers.Dropout)):
            return
        else:
            raise ValueError(
                "gradient_report needs a model that is a stack of Dense layers; "
                f"found {type(layer).__name__} ({layer.name!r})"
            )

    for layer in model.layers:
        walk(layer)
    if len(out) < 2:
        raise ValueError(
            f"model needs at least one hidden Dense layer and a Dense output; found {len(out)} Dense"
        )
    return out


def gradient_report(model, x, y, *, clip=None) -> GradientReport:
    """One tape over a Dense-stack model; per-layer signal and weight-gradient norms (chapter 01).

    The loss is the mean squared error of the model's output against ``y``. The signal of a
    hidden layer is dLoss/d(pre-activation); weight norms are dLoss/d(kernel). ``clip`` is
    applied to the gradients of all trainable variables, as an optimizer would apply it, and
    ``clipped_weight_norms`` reports the hidden kernels after it.
    """
    clip = _check_clip(clip)
    layers = dense_layers(model)
    x = tf.convert_to_tensor(x, dtype=tf.float32)
    y = tf.convert_to_tensor(y, dtype=tf.float32)
    if x.shape.rank != 2:
        raise ValueError(f"x must be 2-D (batch, features); got shape {tuple(x.shape)}")
    if not model.built:
        model(x[:1])
    in_dim = layers[0].kernel.shape[0]
    if x.shape[1] != in_dim:
        raise ValueError(f"x has {x.shape[1]} features but the first Dense layer expects {in_dim}")
    out_dim = layers[-1].kernel.shape[1]
    if y.shape.rank != 2 or y.shape[0] != x.shape[0] or y.shape[1] != out_dim:
        raise ValueError(
            f"y must have shape ({x.shape[0]}, {out_dim}) to match x and the output layer; "
            f"got {tuple(y.shape)}"
        )
    loss, dzs, variables, dvars, hs = _tape_pass(layers, x, y)
    kernel_pos = _kernel_positions(layers, variables)
    clipped = clip_gradients(dvars, clip)
    return _make_report(loss, dzs, [dvars[i] for i in kernel_pos],
                        [clipped[i] for i in kernel_pos], hs, clip)


def _kernel_positions(layers, variables) -> list[int]:
    kernel_ids = {id(layer.kernel) for layer in layers[:-1]}
    return [i for i, v in enumerate(variables) if id(v) in kernel_ids]


def _tape_pass(layers, x, y):
    """Forward and backward pass over Dense ``layers``; the tape watches every pre-activation."""
    hidden, output = layers[:-1], layers[-1]
    with tf.GradientTape() as tape:
        h = x
        zs, hs = [], []
        for layer in hidden:
            z = tf.matmul(h, layer.kernel)
            if layer.use_bias:
                z = z + layer.bias
            tape.watch(z)
            zs.append(z)
            h = layer.activation(z)
            hs.append(h)
        out = tf.matmul(h, output.kernel)
        if output.use_bias:
            out = out + output.bias
        out = output.activation(out)
        loss = tf.reduce_mean(tf.square(out - y))
    variables = [v for layer in layers for v in layer.trainable_variables]
    grads = tape.gradient(loss, zs + variables)
    dzs, dvars = grads[: len(zs)], grads[len(zs) :]
    dvars = [tf.zeros_like(v) if g is None else g for g, v in zip(dvars, variables, strict=True)]
    return loss, dzs, variables, dvars, hs


def _make_report(loss, dzs, dkernels, clipped_kernels, hs, clip) -> GradientReport:
    signal = np.array([tf.norm(g).numpy() for g in dzs], dtype=np.float64)
    status, message = diagnose(signal)
    return GradientReport(
        signal_norms=signal,
        weight_norms=np.array([tf.norm(g).numpy() for g in dkernels], dtype=np.float64),
        clipped_weight_norms=np.array([tf.norm(g).numpy() for g in clipped_kernels], dtype=np.float64),
        activation_stds=np.array([tf.math.reduce_std(h).numpy() for h in hs], dtype=np.float64),
        ratio=_ratio(signal),
        status=status,
        message=message,
        loss=float(loss.numpy()),
        clip=clip,
    )


@dataclasses.dataclass
class TrainingHistory:
    """What :func:`train_mlp` recorded: one entry per step (chapter 01)."""

    losses: list[float]
    signal_norms: list[np.ndarray]
    statuses: list[str]
    global_norms: list[float]
    stopped_at: int | None = None

    @property
    def signal_matrix(self) -> np.ndarray:
        """``[steps, layers]`` array of the per-layer signal norms."""
        return np.vstack(self.signal_norms)


def train_mlp(model, x, y, *, optimizer, steps: int = 50, clip=None, stop_on_nonfinite: bool = True,
              progress: bool = True, progress_every: int | None = None) -> TrainingHistory:
    """A short training run that monitors every layer's gradient signal (chapter 01).

    Each step takes one tape over the whole batch (the same pass as :func:`gradient_report`),
    records the loss, the per-layer signal norms and the global gradient norm, clips the
    gradients with ``clip`` and applies them with ``optimizer``. A non-finite loss or gradient
    stops the run (``stop_on_nonfinite``), because clipping cannot repair NaN. With
    ``progress`` a text progress bar is printed a few times during the run.
    """
    steps = _check_int("steps", steps, 1, 100_000)
    clip = _check_clip(clip)
    layers = dense_layers(model)
    x = tf.convert_to_tensor(x, dtype=tf.float32)
    y = tf.convert_to_tensor(y, dtype=tf.float32)
    every = progress_every or max(1, steps // 5)
    hist = TrainingHistory([], [], [], [])
    for step in range(1, steps + 1):
        loss, dzs, variables, dvars, _ = _tape_pass(layers, x, y)
        signal = np.array([tf.norm(g).numpy() for g in dzs], dtype=np.float64)
        gnorm = float(tf.linalg.global_norm(dvars).numpy())
        hist.losses.append(float(loss.numpy()))
        hist.signal_norms.append(signal)
        hist.statuses.append(diagnose(signal)[0])
        hist.global_norms.append(gnorm)
        finite = math.isfinite(hist.losses[-1]) and math.isfinite(gnorm)
        if progress and (step % every == 0 or step == steps or not finite):
            done = int(20 * step / steps)
            print(f"[{'#' * done}{'.' * (20 - done)}] step {step:>4}/{steps}  loss {hist.losses[-1]:.4g}"
                  f"  grad norm {gnorm:.3g}")
        if not finite and stop_on_nonfinite:
            hist.stopped_at = step
            if progress:
                print(f"stopped at step {step}: the loss or a gradient is not finite")
            break
        optimizer.apply_gradients(zip(clip_gradients(dvars, clip), variables, strict=True))
    return hist


# ----------------------------------------------------------------------------- fast engine
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
        signal = tf.norm(tf.reshape(d_probe, [depth, -1]), axis=1)
        weight = tf.norm(tf.reshape(d_k, [depth, -1]), axis=1)
        # the three clip modes, as the tf.clip_* ops define them
        by_value = tf.norm(tf.reshape(tf.clip_by_value(d_k, -clip_t, clip_t), [depth, -1]), axis=1)
        by_norm = tf.minimum(weight, clip_t)  # tf.clip_by_norm per kernel: ‖g‖ → min(‖g‖, t)
        global_norm = tf.linalg.global_norm([d_k, d_bias, d_ok, d_ob])
        by_global = weight * clip_t / tf.maximum(global_norm, clip_t)
        stds = tf.math.reduce_std(tf.reshape(hs, [depth, -1]), axis=1)
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
        init = keras.initializers.GlorotUniform(seed=self.seed + _OUTPUT_SEED_OFFSET)
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
        clip = _check_clip(clip)
        kernels = self.kernels(initializer)[:depth]
        if activation not in self._steps:
            self._steps[activation] = _make_step(activation)
        t = tf.constant(clip[1] if clip else 1.0, dtype=tf.float32)
        loss, signal, weight, clipped, stds = self._steps[activation](
            self.x, self.y, kernels, self.out_kernel, self.out_bias, t
        )
        signal = signal.numpy().astype(np.float64)
        weight = weight.numpy().astype(np.float64)
        clipped_w = weight if clip is None else clipped[CLIP_MODES.index(clip[0])].numpy()
        status, message = diagnose(signal)
        return GradientReport(
            signal_norms=signal,
            weight_norms=weight,
            clipped_weight_norms=np.asarray(clipped_w, dtype=np.float64),
            activation_stds=stds.numpy().astype(np.float64),
            ratio=_ratio(signal),
            status=status,
            message=message,
            loss=float(loss.numpy()),
            clip=clip,
        )


# ----------------------------------------------------------------------------- theory
def activation_curves(names: Sequence[str] = ("sigmoid", "tanh", "relu", "leaky_relu"), z=None):
    """Each activation and its derivative, the derivative taken with GradientTape (chapter 01).

    Returns ``(z, {name: (f(z), f'(z))})`` as NumPy arrays.
    """
    for name in names:
        _check_choice("activation", name, ACTIVATIONS)
    z = tf.linspace(-6.0, 6.0, 241) if z is None else tf.convert_to_tensor(z, tf.float32)
    curves = {}
    for name in names:
        act = keras.activations.get(name)
        with tf.GradientTape() as tape:
            tape.watch(z)
            f = act(z)
        curves[name] = (f.numpy(), tape.gradient(f, z).numpy())
    return z.numpy(), curves


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
