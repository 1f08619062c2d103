"""Per-layer gradient reports of Dense networks (chapters 00, 01 and 04).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out. Nothing here
imports ipywidgets or matplotlib.

* :func:`gradient_report` takes a Keras model built from Dense layers (Sequential, functional
  blocks with normalization and skip connections, nested or subclassed; LoRA-enabled layers;
  the learner's own included) and taps its Dense layers while the model runs its own call
  (:func:`gradlab.core.tap_layers`). The explorer's fast engine (:mod:`gradlab.engines.mlp`)
  computes the same report; ``tests/test_grads.py`` checks that both agree.
* :func:`dense_signal_pass` is that pass on its own (the monitored loop of
  :func:`gradlab.train_mlp` uses it).
* The verdict is :func:`gradlab.reports.verdict.judge`'s; every norm is the core's float64 norm
  (:func:`gradlab.core.true_norm`).
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import renamed_keywords
from ..core import check_clip, clip_gradients, true_global_norm, true_norm
from ..i18n import _
from .base import VerdictReport, given_verdict
from .verdict import judge, status_word

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "DensePass",
    "GradientReport",
    "dense_kernel_variables",
    "dense_layers",
    "dense_signal_pass",
    "gradient_report",
]


# ----------------------------------------------------------------------------- the report
@dataclasses.dataclass(frozen=True, init=False)
class GradientReport(VerdictReport):
    """Per-layer gradient statistics of one batch, input side first (chapter 01).

    One entry per hidden Dense layer in every array. ``weight_norms`` are the float64 norms of
    the gradients of each hidden layer's kernel (of its trainable LoRA factors together when
    LoRA is enabled). ``verdict`` is the :class:`gradlab.reports.verdict.Verdict` the report
    holds; ``ratio``, ``gain`` (:func:`per_layer_gain` of ``signal_norms``), ``status``,
    ``message`` and ``finding`` are read from it (:class:`gradlab.reports.base.VerdictReport`).
    Build one with :meth:`from_norms`; the older positional form
    ``GradientReport(signal, weight, clipped, stds, ratio, status, message, loss, clip, gain)``
    still works and makes a verdict that states those numbers and words.
    """

    signal_norms: np.ndarray
    weight_norms: np.ndarray
    clipped_weight_norms: np.ndarray
    activation_stds: np.ndarray
    loss: float
    clip: tuple[str, float] | None = None

    def __init__(self, signal_norms, weight_norms, clipped_weight_norms, activation_stds, ratio=None,
                 status=None, message=None, loss=math.nan, clip=None, gain=math.nan, verdict=None):
        if verdict is None and status is not None:
            verdict = given_verdict(ratio=math.nan if ratio is None else ratio, status=status,
                                    message=message or "", gain=gain, depth=np.size(signal_norms))
        for name, value in dict(signal_norms=signal_norms, weight_norms=weight_norms,
                                clipped_weight_norms=clipped_weight_norms, activation_stds=activation_stds,
                                loss=loss, clip=clip, verdict=verdict).items():
            object.__setattr__(self, name, value)

    @property
    def depth(self) -> int:
        return int(self.signal_norms.size)

    def summary(self) -> str:
        """A short, rounded, printable summary (stable across CPUs)."""
        return _("{depth} layers · loss {loss} · signal ratio {ratio} (gain {gain} per layer) → {status}").format(
            depth=self.depth, loss=f"{self.loss:.3g}", ratio=f"{self.ratio:.3g}", gain=f"{self.gain:.3g}",
            status=status_word(self.status))

    def __str__(self) -> str:
        def fmt(a):
            return "[" + ", ".join(f"{v:.3g}" for v in a) + "]"

        lines = [
            (_("GradientReport: {summary} (clip off)").format(summary=self.summary()) if self.clip is None else
             _("GradientReport: {summary} (clip {clip})").format(summary=self.summary(),
                                                            clip=f"{self.clip[0]} ≤ {self.clip[1]:g}")),
            _("  signal norms  : {values}").format(values=fmt(self.signal_norms)),
            _("  weight norms  : {values}").format(values=fmt(self.weight_norms)),
        ]
        if self.clip is not None:
            lines.append(_("  after clipping: {values}").format(values=fmt(self.clipped_weight_norms)))
        lines += [_("  forward stds  : {values}").format(values=fmt(self.activation_stds)), f"  {self.message}"]
        return "\n".join(lines)

    @classmethod
    def from_norms(cls, *, loss: float, signal_norms, weight_norms, clipped_weight_norms,
                   activation_stds, clip=None, activation: str | None = None, normalized: bool = False,
                   residual: bool = False, dtype: str = "float32", names=None) -> GradientReport:
        """A report from per-layer norms (input side first), with its ratio, gain and verdict.

        ``activation``, ``normalized``, ``residual`` and ``dtype`` describe the network for
        the verdict's causes (:func:`gradlab.reports.verdict.judge`).
        """
        signal = np.asarray(signal_norms, dtype=np.float64)
        v = judge(signal, names=names, activation=activation, normalized=normalized, residual=residual,
                  dtype=dtype)
        return cls(
            signal_norms=signal,
            weight_norms=np.asarray(weight_norms, dtype=np.float64),
            clipped_weight_norms=np.asarray(clipped_weight_norms, dtype=np.float64),
            activation_stds=np.asarray(activation_stds, dtype=np.float64),
            loss=float(loss),
            clip=clip,
            verdict=v,
        )


# ----------------------------------------------------------------------------- the Dense view
#: Layers with weights that may sit between the Dense layers of a model gradient_report reads.
_NORM_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization)


def dense_layers(model) -> list:
    """The ``Dense`` layers of ``model`` (nested models expanded), in the order they were created.

    Raises ``ValueError`` when the model has another layer with trainable weights than ``Dense``,
    ``BatchNormalization`` or ``LayerNormalization``: :func:`gradient_report` measures one
    signal per Dense layer and would not describe such a model. A layer whose weights are all
    non-trainable (an adapted ``Normalization``, a lookup table) takes no gradient and is read as
    part of the input.
    """
    core.check_model(model)
    out = []
    for layer in core.leaf_layers(model):
        if isinstance(layer, keras.layers.Dense):
            out.append(layer)
        elif layer.trainable_weights and not isinstance(layer, _NORM_LAYERS):  # preprocessing: no gradient
            raise ValueError(
                "gradient_report reads models built from Dense layers (with optional "
                "BatchNormalization/LayerNormalization, Activation, Add and Dropout layers); found "
                f"{type(layer).__name__} ({layer.name!r}). gl.inspect_training_step reports any model, "
                "layer by layer"
            )
    return out


def dense_kernel_variables(layer) -> list:
    """The trainable variables that stand for a Dense layer's kernel: the kernel itself, or its
    two LoRA factors (``lora_kernel_a``, ``lora_kernel_b``) when ``layer.enable_lora(rank)`` froze it."""
    if getattr(layer, "lora_enabled", False):
        return [v for v in (layer.lora_kernel_a, layer.lora_kernel_b) if v.trainable]
    kernels = [v for v in layer.trainable_weights if core.variable_path(v).split("/")[-1] == "kernel"]
    return kernels or [v for v in layer.trainable_weights if v.shape.rank == 2][:1]


@dataclasses.dataclass
class DensePass:
    """One forward and backward pass of a Dense model, taken from the model's own call.

    ``signals[i]`` is dLoss/d(pre-activation) of hidden Dense layer ``i`` (input side first),
    ``kernel_groups[i]`` the positions in ``variables`` of its kernel (or LoRA factors),
    ``block_outputs[i]`` the tensor its block hands on (the output of the last layer call
    before the next Dense layer), ``grads`` the gradients of ``variables`` (every trainable
    variable; ``None`` where the loss does not depend on one). ``calls`` are the tapped calls.
    """

    loss: object
    signals: list
    block_outputs: list
    variables: list
    grads: list
    kernel_groups: list
    calls: list = dataclasses.field(default_factory=list)
    hidden_positions: list = dataclasses.field(default_factory=list)

    @property
    def kernel_grads(self) -> list:
        """Per hidden layer, the gradients of its kernel variables (zeros for ``None``)."""
        return [[self.grads[i] if self.grads[i] is not None else tf.zeros_like(self.variables[i])
                 for i in group] for group in self.kernel_groups]


def dense_signal_pass(model, x, y, *, loss=None, training: bool = True, optimizer=None,
                      sample_weight=None) -> DensePass:
    """Run ``model`` on ``x`` once under a tape, tapping its Dense layers (chapter 01).

    ``x``, ``y`` and ``sample_weight`` must already be coerced (:func:`gradlab.core.coerce_batch`).
    ``loss`` is a :class:`gradlab.core.Loss` (default: the model's compiled loss, else mean
    squared error, plus ``model.losses``). With a ``LossScaleOptimizer`` the gradients are
    taken of the scaled loss and unscaled, as ``fit`` takes them. Raises ``ValueError`` where
    one signal per Dense layer cannot be measured faithfully: a Dense layer applied twice, or
    one whose weights the model reads without calling the layer.
    """
    dense = dense_layers(model)
    loss = loss or core.resolve_loss(model)
    variables = list(model.trainable_variables)
    p = core.forward_loss(model, x, y, loss=loss, training=training, sample_weight=sample_weight, taps=True,
                          persistent=True)
    taps = p.taps
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
                "measured. gl.inspect_training_step reports the per-variable gradients"
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
    grads = p.gradients(zs + variables, optimizer)  # scaled by a LossScaleOptimizer, then unscaled
    del p.tape
    dzs, dvars = grads[: len(zs)], grads[len(zs):]
    index = {id(v): i for i, v in enumerate(variables)}
    groups = [[index[id(v)] for v in dense_kernel_variables(calls[p].layer) if id(v) in index] for p in hidden]
    return DensePass(p.loss, dzs, blocks, variables, dvars, groups, calls, hidden)


def _network_traits(p: DensePass) -> dict:
    """What the verdict needs to rank causes: the hidden layers' activation, whether
    normalization or skip connections sit between them, the compute dtype."""
    calls, hidden = p.calls, p.hidden_positions
    names = [getattr(calls[i].layer.activation, "__name__", None) for i in hidden]
    between = calls[hidden[0]: hidden[-1] + 1] if hidden else []
    activation = collections.Counter(names).most_common(1)[0][0] if names else None
    if activation == "linear":  # Dense(activation=None) followed by an Activation layer
        acts = [c.layer.get_config().get("activation") for c in calls if isinstance(c.layer, keras.layers.Activation)]
        activation = collections.Counter(acts).most_common(1)[0][0] if acts else activation
    return {
        "activation": activation,
        "normalized": any(core.is_normalization(c.layer) for c in between),
        "residual": any(isinstance(c.layer, keras.layers.Add) for c in between),
        "dtype": str(calls[hidden[0]].layer.compute_dtype) if hidden else "float32",
        "names": [calls[i].name for i in hidden],
    }


@renamed_keywords(loss_fn="loss")
def gradient_report(model, x, y, *, clip=None, training: bool = True, sample_weight=None,
                    loss=None) -> GradientReport:
    """Per-layer signal and weight-gradient norms of one batch, from the model's own call (chapter 01).

    ``model`` is built from Dense layers: a Sequential stack, a functional model (blocks of
    ``Dense`` → ``BatchNormalization``/``LayerNormalization`` → ``Activation`` → ``Add``
    included), a nested or a subclassed model, skip connections and LoRA-enabled layers
    included. The layers are tapped while the model runs (:func:`gradlab.core.tap_layers`), so
    the numbers are those of this model as it runs. The signal of hidden layer ``i`` is
    dLoss/d(pre-activation of Dense layer ``i``), input side first; weight norms are
    dLoss/d(kernel) (of the LoRA factors together, for a LoRA layer). The loss is ``loss``,
    else the model's compiled loss when it is compiled with one, otherwise the mean squared
    error in the model's dtype, plus ``model.losses``; ``sample_weight`` weighs the examples as
    in ``fit``. ``training=True`` (the default) runs the pass as a training step (dropout on,
    BatchNorm on batch statistics); everything the pass touches (variables, trackers, RNN
    states) is put back afterwards, so the model is unchanged. ``clip`` (a number: the global-norm threshold, or ``(mode, threshold)``) is applied to all
    trainable variables' gradients, as an optimizer would apply it, and
    ``clipped_weight_norms`` reports the hidden kernels after it. A Dense layer applied twice,
    or a model with other weighted layers (Conv, LSTM, ...), is a ``ValueError`` that points to
    :func:`gradlab.inspect_training_step`.
    """
    clip = check_clip(clip)
    core.check_model(model)
    if not isinstance(training, bool):
        raise ValueError(f"training must be True or False; got {training!r}")
    loss = core.resolve_loss(model, loss)
    dense_layers(model)
    x, y = core.coerce_batch(model, x, y)
    sample_weight = core.coerce_sample_weight(sample_weight, y)
    problems = core.data_problems(x, y)
    if problems:
        raise ValueError("the data is not finite: " + "; ".join(problems) +
                         ". Clean the batch first (this is a data problem, not a model problem)")
    if not model.built:
        model(tf.nest.map_structure(lambda t: t[:1], x))
    saved = core.snapshot(model)
    try:
        p = dense_signal_pass(model, x, y, loss=loss, training=training, sample_weight=sample_weight)
    finally:
        core.restore(saved)
    clipped = clip_gradients(p.grads, clip)
    traits = _network_traits(p)
    return GradientReport.from_norms(
        loss=float(p.loss.numpy()),
        signal_norms=[true_norm(g) if g is not None else 0.0 for g in p.signals],
        weight_norms=[true_global_norm(gs) for gs in p.kernel_grads],
        clipped_weight_norms=[true_global_norm([clipped[i] if clipped[i] is not None
                                                else tf.zeros_like(p.variables[i]) for i in group])
                              for group in p.kernel_groups],
        activation_stds=[float(tf.math.reduce_std(tf.cast(h, tf.float64)).numpy()) for h in p.block_outputs],
        clip=clip,
        activation=traits["activation"],
        normalized=traits["normalized"],
        residual=traits["residual"],
        dtype=traits["dtype"],
    )
