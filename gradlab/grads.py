"""Per-layer gradient reports, the verdict on them, and clipping (chapters 00, 01 and 04).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out. Nothing here
imports ipywidgets, so tests, benchmarks and other chapters can use it headless.

* :func:`gradient_report` takes a Keras model built from Dense layers (Sequential, functional
  blocks with normalization and skip connections, nested or subclassed; the learner's own
  included) and taps its Dense layers while the model runs its own call
  (:func:`gradlab.core.tap_layers`). The explorer's fast engine (:mod:`gradlab.engine`)
  computes the same report; ``tests/test_grads.py`` checks that both agree.
* :func:`train_mlp` is a view of :func:`gradlab.train_steps` (one monitored training loop).
* :func:`diagnose` turns per-layer signal norms into a verdict from the total ratio and the
  per-layer gain (:func:`per_layer_gain`).
* :func:`true_norm` is the norm every report uses: taken in float64, so that a float32
  gradient whose elements are all below about 1e-19 is not reported as 0 (their float32
  squares would flush to zero).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import core
from ._env import quiet_import_tensorflow
from .core import CLIP_MODES, check_clip, clip_gradients

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CLIP_MODES",
    "DensePass",
    "GAIN_TOLERANCE",
    "MILD_RATIO",
    "GradientReport",
    "TrainingHistory",
    "check_clip",
    "clip_gradients",
    "dense_layers",
    "dense_signal_pass",
    "diagnose",
    "gradient_report",
    "per_layer_gain",
    "train_mlp",
    "true_global_norm",
    "true_norm",
]


STATUSES = ("healthy", "vanishing", "exploding", "non-finite")

#: :func:`diagnose`'s per-layer rule: a signal that changes by more than this fraction per
#: layer (gain below 0.95 or above 1/0.95) *and* by more than :data:`MILD_RATIO` overall is
#: flagged, however shallow the network.
GAIN_TOLERANCE = 0.05
#: :func:`diagnose`'s per-layer rule also needs a total change of at least this factor
#: (0.1 or 10): a mild decay in a shallow network stays healthy.
MILD_RATIO = 10.0


# ----------------------------------------------------------------------------- validation
# check_clip and clip_gradients live in gradlab.core (one implementation for every tool).


def true_norm(t) -> float:
    """The L2 norm of a tensor, taken in float64 (chapter 01, and every report in gradlab).

    ``tf.norm`` of a float32 tensor squares in float32: every element below about 1e-19
    squares to below float32's smallest normal number (1.18e-38) and is flushed to 0, so the
    norm of a tiny but non-zero gradient comes out as exactly 0. Here the norm is 0 only when
    every element is 0. ``IndexedSlices`` are summed per row first, as the dense gradient.
    """
    if t is None:
        raise ValueError(
            "t is None: true_norm needs a tensor or array of numbers. A None gradient means the loss "
            "does not depend on that variable (chapter 02); skip it, or use true_global_norm, which skips None"
        )
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


# ----------------------------------------------------------------------------- the Dense view
#: Layers with weights that may sit between the Dense layers of a model gradient_report reads.
_NORM_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization)


def dense_layers(model) -> list:
    """The ``Dense`` layers of ``model`` (nested models expanded), in the order they were created.

    Raises ``ValueError`` when the model has another layer with weights than ``Dense``,
    ``BatchNormalization`` or ``LayerNormalization``: :func:`gradient_report` measures one
    signal per Dense layer and would not describe such a model.
    """
    core.check_model(model)
    out = []
    for layer in core.leaf_layers(model):
        if isinstance(layer, keras.layers.Dense):
            out.append(layer)
        elif layer.weights and not isinstance(layer, _NORM_LAYERS):
            raise ValueError(
                "gradient_report reads models built from Dense layers (with optional "
                "BatchNormalization/LayerNormalization, Activation, Add and Dropout layers); found "
                f"{type(layer).__name__} ({layer.name!r}). gl.inspect_training_step reports any model, "
                "layer by layer"
            )
    return out


@dataclasses.dataclass
class DensePass:
    """One forward and backward pass of a Dense model, taken from the model's own call.

    ``signals[i]`` is dLoss/d(pre-activation) of hidden Dense layer ``i`` (input side first),
    ``kernel_grads[i]`` its kernel's gradient, ``block_outputs[i]`` the tensor its block hands
    on (the output of the last layer call before the next Dense layer), ``grads`` the gradients
    of ``variables`` (every trainable variable; ``None`` where the loss does not depend on one).
    """

    loss: object
    signals: list
    kernel_grads: list
    block_outputs: list
    variables: list
    grads: list
    kernel_positions: list


def dense_signal_pass(model, x, y, *, loss=None, training: bool = True, optimizer=None) -> DensePass:
    """Run ``model`` on ``x`` once under a tape, tapping its Dense layers (chapter 01).

    ``x`` and ``y`` must already be coerced (:func:`gradlab.core.coerce_batch`). ``loss`` is a
    :class:`gradlab.core.Loss` (default: the model's compiled loss, else mean squared error,
    plus ``model.losses``). With a ``LossScaleOptimizer`` the gradients are taken of the scaled
    loss and unscaled, as ``fit`` takes them. Raises ``ValueError`` where one signal per Dense
    layer cannot be measured faithfully: a Dense layer applied twice, or one whose weights the
    model reads without calling the layer.
    """
    dense = dense_layers(model)
    loss = loss or core.resolve_loss(model)
    variables = list(model.trainable_variables)
    with tf.GradientTape(persistent=True) as tape:
        with core.tap_layers(model, tape) as taps:
            y_pred = model(x, training=training)
        loss.check(y, y_pred)
        value = loss(x, y, y_pred, training)
    if taps.untapped:
        raise ValueError(
            "the model's call runs its layers inside a tf.function, so their pre-activations cannot be "
            "tapped; gl.inspect_training_step shows the per-variable view"
        )
    for layer in dense:
        n = taps.count(layer)
        if n > 1:
            raise ValueError(
                f"Dense layer {layer.name!r} is applied {n} times in the model's call: one signal per "
                "Dense layer would mix its calls. gl.inspect_training_step reports each call and every "
                "variable"
            )
        if n == 0:
            raise ValueError(
                f"Dense layer {layer.name!r} is never called by the model's call (its weights are read "
                "directly, it is unused, or the call runs inside a tf.function): its signal cannot be "
                "measured. gl.inspect_training_step "
                "reports the per-variable gradients"
            )
    calls = taps.calls
    positions = [i for i, c in enumerate(calls) if isinstance(c.layer, keras.layers.Dense)]
    if len(positions) < 2:
        raise ValueError(
            f"model needs at least one hidden Dense layer and a Dense output; found {len(positions)} Dense"
        )
    hidden = positions[:-1]
    zs = [calls[p].pre_activation if calls[p].pre_activation is not None else calls[p].outputs[0]
          for p in hidden]
    blocks = [calls[nxt - 1].outputs[0] for nxt in positions[1:]]
    scale = None if optimizer is None else core.loss_scale(optimizer)
    grads = tape.gradient(value, zs + variables,
                          output_gradients=None if scale is None else tf.cast(scale, value.dtype))
    del tape
    if scale is not None:
        grads = [None if g is None else g / tf.cast(scale, g.dtype) for g in grads]
    dzs, dvars = grads[: len(zs)], grads[len(zs):]
    kernel_ids = [id(calls[p].layer.kernel) for p in hidden]
    index = {id(v): i for i, v in enumerate(variables)}
    kernel_pos = [index[k] for k in kernel_ids if k in index]
    dkernels = [dvars[i] if dvars[i] is not None else tf.zeros_like(variables[i]) for i in kernel_pos]
    return DensePass(value, dzs, dkernels, blocks, variables, dvars, kernel_pos)


def gradient_report(model, x, y, *, clip=None, training: bool = True) -> GradientReport:
    """Per-layer signal and weight-gradient norms of one batch, from the model's own call (chapter 01).

    ``model`` is built from Dense layers: a Sequential stack, a functional model (blocks of
    ``Dense`` → ``BatchNormalization``/``LayerNormalization`` → ``Activation`` → ``Add``
    included), a nested or a subclassed model, skip connections included. The layers are
    tapped while the model runs (:func:`gradlab.core.tap_layers`), so the numbers are those of
    this model as it runs. The signal of hidden layer ``i`` is dLoss/d(pre-activation of Dense
    layer ``i``), input side first; weight norms are dLoss/d(kernel). The loss is the model's
    compiled loss when it is compiled with one, otherwise the mean squared error, plus
    ``model.losses``. ``training=True`` (the default) runs the pass as a training step
    (dropout on, BatchNorm on batch statistics); every variable is put back afterwards, so the
    model is unchanged. ``clip`` is applied to all trainable variables' gradients, as an
    optimizer would apply it, and ``clipped_weight_norms`` reports the hidden kernels after it.
    A Dense layer applied twice, or a model with other weighted layers (Conv, LSTM, ...), is a
    ``ValueError`` that points to :func:`gradlab.inspect_training_step`.
    """
    clip = check_clip(clip)
    core.check_model(model)
    if not isinstance(training, bool):
        raise ValueError(f"training must be True or False; got {training!r}")
    dense_layers(model)
    x, y = core.coerce_batch(model, x, y)
    problems = core.data_problems(x, y)
    if problems:
        raise ValueError("the data is not finite: " + "; ".join(problems) +
                         ". Clean the batch first (this is a data problem, not a model problem)")
    if not model.built:
        model(tf.nest.map_structure(lambda t: t[:1], x))
    saved = core.snapshot(model)
    try:
        p = dense_signal_pass(model, x, y, training=training)
    finally:
        core.restore(saved)
    clipped = clip_gradients(p.grads, clip)
    clipped_k = [clipped[i] if clipped[i] is not None else tf.zeros_like(p.variables[i])
                 for i in p.kernel_positions]
    return GradientReport.from_norms(
        loss=float(p.loss.numpy()),
        signal_norms=[true_norm(g) if g is not None else 0.0 for g in p.signals],
        weight_norms=[true_norm(g) for g in p.kernel_grads],
        clipped_weight_norms=[true_norm(g) for g in clipped_k],
        activation_stds=[float(tf.math.reduce_std(tf.cast(h, tf.float64)).numpy()) for h in p.block_outputs],
        clip=clip,
    )


# ----------------------------------------------------------------------------- monitored training
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
    """A short training run that monitors every Dense layer's gradient signal (chapter 01).

    A thin view of :func:`gradlab.train_steps` with ``monitor_signals=True``: each step takes
    one tape over the whole batch (the pass of :func:`gradient_report`), records the loss, the
    per-layer signal norms and the global gradient norm, clips the gradients with ``clip`` and
    applies them with ``optimizer`` (a mixed-precision model gets its loss scaled, as in
    ``fit``). A non-finite loss or gradient stops the run (``stop_on_nonfinite``) before that
    step is applied, because clipping cannot repair NaN. With ``progress`` a text progress bar
    is printed a few times during the run.
    """
    from .diagnostics import train_steps

    run = train_steps(model, x, y, optimizer=optimizer, steps=steps, clip=clip,
                      stop_on_nonfinite=stop_on_nonfinite, monitor_signals=True,
                      progress=progress, progress_every=progress_every)
    return TrainingHistory(
        losses=list(run.losses),
        signal_norms=[np.asarray(s, dtype=np.float64) for s in run.signal_norms],
        statuses=[diagnose(s)[0] for s in run.signal_norms],
        global_norms=list(run.global_norms),
        stopped_at=run.stopped_at,
    )
