"""Per-layer gradient reports, the verdict on them, and clipping (chapters 00, 01 and 04).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out. Nothing here
imports ipywidgets, so tests, benchmarks and other chapters can use it headless.

* :func:`gradient_report` takes any Keras model that is a stack of Dense layers
  (the learner's own included) and runs one eager GradientTape over it. The explorer's fast
  engine (:mod:`gradlab.engine`) computes the same report; ``tests/test_grads.py`` checks
  that both agree.
* :func:`diagnose` turns per-layer signal norms into a verdict from the total ratio and the
  per-layer gain (:func:`per_layer_gain`).
* :func:`true_norm` is the norm every report uses: taken in float64, so that a float32
  gradient whose elements are all below about 1e-19 is not reported as 0 (their float32
  squares would flush to zero).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ._env import quiet_import_tensorflow
from ._validate import check_int as _check_int

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CLIP_MODES",
    "GAIN_TOLERANCE",
    "MILD_RATIO",
    "GradientReport",
    "TrainingHistory",
    "check_clip",
    "clip_gradients",
    "dense_layers",
    "diagnose",
    "gradient_report",
    "per_layer_gain",
    "train_mlp",
    "true_global_norm",
    "true_norm",
]

#: Clipping modes: what ``tf.clip_by_value``, ``tf.clip_by_norm`` and ``tf.clip_by_global_norm`` do.
CLIP_MODES: tuple[str, ...] = ("value", "norm", "global_norm")

STATUSES = ("healthy", "vanishing", "exploding", "non-finite")

#: :func:`diagnose`'s per-layer rule: a signal that changes by more than this fraction per
#: layer (gain below 0.95 or above 1/0.95) *and* by more than :data:`MILD_RATIO` overall is
#: flagged, however shallow the network.
GAIN_TOLERANCE = 0.05
#: :func:`diagnose`'s per-layer rule also needs a total change of at least this factor
#: (0.1 or 10): a mild decay in a shallow network stays healthy.
MILD_RATIO = 10.0


# ----------------------------------------------------------------------------- validation
def check_clip(clip):
    """``None`` or a validated ``(mode, threshold)`` clip setting (see :func:`clip_gradients`)."""
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


def true_norm(t) -> float:
    """The L2 norm of a tensor, taken in float64 (chapter 01, and every report in gradlab).

    ``tf.norm`` of a float32 tensor squares in float32: every element below about 1e-19
    squares to below float32's smallest normal number (1.18e-38) and is flushed to 0, so the
    norm of a tiny but non-zero gradient comes out as exactly 0. Here the norm is 0 only when
    every element is 0. ``IndexedSlices`` are summed per row first, as the dense gradient.
    """
    if isinstance(t, tf.IndexedSlices):
        t = tf.convert_to_tensor(t)
    return float(tf.norm(tf.cast(t, tf.float64)).numpy())


def true_global_norm(grads) -> float:
    """The joint L2 norm of several gradients (``None`` skipped), in float64 like :func:`true_norm`."""
    norms = [true_norm(g) for g in grads if g is not None]
    return math.sqrt(sum(n * n for n in norms)) if norms else 0.0


# ----------------------------------------------------------------------------- diagnosis
def per_layer_gain(signal_norms) -> float:
    """The geometric mean of the successive ratios ``s[l] / s[l+1]`` of per-layer norms.

    The product of the successive ratios telescopes to ``s[0] / s[-1]``, so the gain is
    ``(s[0] / s[-1]) ** (1 / (n - 1))``: the factor by which one layer multiplies the
    back-propagated signal on average (chapter 01). 0 when the first norm is exactly 0,
    ``inf`` when only the last is, ``nan`` for one layer or NaN/inf norms.
    """
    s = np.asarray(signal_norms, dtype=np.float64).ravel()
    if s.size < 2 or not np.all(np.isfinite(s)):
        return math.nan
    if s[0] == 0 and s[-1] == 0:
        return math.nan
    if s[0] == 0:
        return 0.0
    if s[-1] == 0:
        return math.inf
    return float(np.exp((np.log(s[0]) - np.log(s[-1])) / (s.size - 1)))


def diagnose(signal_norms, *, vanish_below: float = 1e-3, explode_above: float = 1e3):
    """Return ``(status, message)`` for per-layer back-propagated signal norms (chapter 01).

    ``signal_norms`` runs input side first. Any NaN or inf gives ``"non-finite"``. Otherwise
    two rules decide, on the total ratio ``r = signal_norms[0] / signal_norms[-1]`` and the
    per-layer gain ``g = r ** (1 / (depth - 1))`` (:func:`per_layer_gain`):

    * **total**: ``r < vanish_below`` is ``"vanishing"``, ``r > explode_above`` is
      ``"exploding"``, whatever the depth;
    * **per layer**: a signal that shrinks by more than :data:`GAIN_TOLERANCE` (5 %) per
      layer *and* by more than :data:`MILD_RATIO` (10×) overall is ``"vanishing"``, and the
      mirror image (``g > 1/0.95`` and ``r > 10``) is ``"exploding"``. A network that clearly
      shrinks the signal layer after layer is flagged even when shallow (sigmoid with Glorot
      at depth 5: ``g ≈ 0.21``), while a mild decay stays healthy (ReLU with Glorot at depth
      3: ``g ≈ 0.7``, ``r ≈ 0.5``).

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
    if isinstance(signal_norms, (list, tuple)) and any(v is None for v in signal_norms):
        raise ValueError(
            "signal_norms holds None: a layer whose gradient is None is not connected to the "
            "loss (chapter 02); leave it out or fix the connection"
        )
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
    if n == 1:
        return "healthy", "one layer: no depth for the signal to vanish or explode over."
    ratio = math.inf if s[-1] == 0 else s[0] / s[-1]
    gain = per_layer_gain(s)
    low, high = 1.0 - GAIN_TOLERANCE, 1.0 / (1.0 - GAIN_TOLERANCE)
    per_layer = f"{gain:.3g}× per layer, {ratio:.2g}× from layer {n} to layer 1"
    if ratio < vanish_below or (gain < low and ratio < 1.0 / MILD_RATIO):
        if s[0] == 0:
            what = ("the gradient at layer 1 is exactly 0: every element underflowed in float32 "
                    "(TensorFlow's CPU kernels flush values below 1.18e-38 to 0)")
        else:
            what = f"the signal shrinks {per_layer}"
        return (
            "vanishing",
            f"{what}, so early layers barely learn. Try relu with he_normal, fewer layers, or "
            "normalization.",
        )
    if ratio > explode_above or (gain > high and ratio > MILD_RATIO):
        return (
            "exploding",
            f"the signal grows {per_layer}, so early layers get huge updates. Use a "
            "smaller-variance initializer (glorot, he); clipping bounds the step but not the cause.",
        )
    return (
        "healthy",
        f"the signal changes {per_layer}: every layer gets a gradient of usable size.",
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
    #: :func:`per_layer_gain` of ``signal_norms``: the average factor per layer.
    gain: float = math.nan

    @property
    def depth(self) -> int:
        return int(self.signal_norms.size)

    def summary(self) -> str:
        """A short, rounded, printable summary (stable across CPUs)."""
        return (
            f"{self.depth} layers · loss {self.loss:.3g} · signal ratio {self.ratio:.3g} "
            f"(gain {self.gain:.3g} per layer) → {self.status}"
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


    @classmethod
    def from_norms(cls, *, loss: float, signal_norms, weight_norms, clipped_weight_norms,
                   activation_stds, clip=None) -> GradientReport:
        """A report from per-layer norms (input side first), with its ratio, gain and verdict."""
        signal = np.asarray(signal_norms, dtype=np.float64)
        status, message = diagnose(signal)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = float(signal[0] / signal[-1])
        return cls(
            signal_norms=signal,
            weight_norms=np.asarray(weight_norms, dtype=np.float64),
            clipped_weight_norms=np.asarray(clipped_weight_norms, dtype=np.float64),
            activation_stds=np.asarray(activation_stds, dtype=np.float64),
            ratio=ratio,
            status=status,
            message=message,
            loss=float(loss),
            clip=clip,
            gain=per_layer_gain(signal),
        )


def clip_gradients(grads: Sequence, clip):
    """Clip a list of gradient tensors exactly as ``tf.clip_by_value``/``_norm``/``_global_norm``.

    ``clip`` is ``None`` or ``(mode, threshold)``; ``value`` clips to ``[-t, t]`` element by
    element, ``norm`` rescales each tensor whose L2 norm exceeds ``t``, ``global_norm``
    rescales all together when their joint norm exceeds ``t`` (chapter 01).
    """
    clip = check_clip(clip)
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
    clip = check_clip(clip)
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
    return GradientReport.from_norms(
        loss=float(loss.numpy()),
        signal_norms=[true_norm(g) for g in dzs],
        weight_norms=[true_norm(g) for g in dkernels],
        clipped_weight_norms=[true_norm(g) for g in clipped_kernels],
        activation_stds=[float(tf.math.reduce_std(tf.cast(h, tf.float64)).numpy()) for h in hs],
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
    clip = check_clip(clip)
    layers = dense_layers(model)
    x = tf.convert_to_tensor(x, dtype=tf.float32)
    y = tf.convert_to_tensor(y, dtype=tf.float32)
    every = progress_every or max(1, steps // 5)
    hist = TrainingHistory([], [], [], [])
    for step in range(1, steps + 1):
        loss, dzs, variables, dvars, _ = _tape_pass(layers, x, y)
        signal = np.array([true_norm(g) for g in dzs], dtype=np.float64)
        gnorm = true_global_norm(dvars)
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
