"""Watch a learner's own model train: per step and per layer, what the built-in run of chapter 11 shows.

Pure computation: :func:`watch_training` trains ``model`` on one batch for ``steps`` steps through
the core's step, in its parts (:func:`gradlab.core.forward_loss` with the layers tapped, the
gradients with the optimizer's loss scaling, :func:`gradlab.core.apply_update` with ``clip`` and
the finite check), and fills a :class:`gradlab.reports.training.TrainingReport`. Afterwards the
model, its optimizer and every state a step touches are put back exactly
(:func:`gradlab.core.snapshot`/:func:`gradlab.core.restore`): the run trains a copy in effect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_int
from ..reports.training import (
    GRAD_LOG_EDGES,
    TrainingReport,
    act_edges,
    activation_derivative,
    derivative_threshold,
    histogram_counts,
    inactive_from_derivative,
)

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["OPTIMIZER_NAMES", "copy_optimizer", "watch_training", "watch_training_chunks"]

#: The optimizer names :func:`watch_training` accepts besides an optimizer instance (Keras's defaults).
OPTIMIZER_NAMES: tuple[str, ...] = ("sgd", "momentum", "adam")


def copy_optimizer(optimizer):
    """A fresh optimizer with ``optimizer``'s configuration (the one given is never built or stepped).

    ``optimizer`` is a ``keras.optimizers.Optimizer`` or one of :data:`OPTIMIZER_NAMES`
    (``SGD()``, ``SGD(momentum=0.9)``, ``Adam()`` with Keras's default learning rates).
    """
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer must be a keras.optimizers.Optimizer or one of "
                             f"{', '.join(OPTIMIZER_NAMES)}; got {optimizer!r}")
        if optimizer == "momentum":
            return keras.optimizers.SGD(momentum=0.9)
        return keras.optimizers.get(optimizer)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"optimizer must be a keras.optimizers.Optimizer or one of {', '.join(OPTIMIZER_NAMES)}; "
                        f"got {type(optimizer).__name__}")
    lr = optimizer.get_config().get("learning_rate")
    if isinstance(lr, (int, float)) and not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"the optimizer's learning_rate must be a positive number; got {lr!r}")
    return type(optimizer).from_config(optimizer.get_config())


def _activation_name(layer) -> str | None:
    """The name of a ``Dense`` layer's activation whose units can be inactive, else ``None``."""
    if not isinstance(layer, keras.layers.Dense):
        return None
    name = getattr(getattr(layer, "activation", None), "__name__", None)
    return None if name in (None, "linear") else name


def _layers(model):
    """``(name, variable indices, leaf layer)`` for each layer with trainable weights, input side first."""
    by_name = {layer.name: layer for layer in core.leaf_layers(model)}
    return [(name, idx, by_name.get(name)) for name, idx in core.layer_groups(model)]


def _layer_norms(tensors, layers) -> np.ndarray:
    return np.array([float(core.global_norm([tensors[i] for i in idx]).numpy()) for _n, idx, _l in layers])


def _step_rows(p, grads, before, after, layers, thresholds):
    """One step's rows: gradient norms, update ratios, inactive fractions, histograms."""
    norms = _layer_norms(grads, layers)
    delta = [a - b for a, b in zip(after, before, strict=True)]
    ratios = _layer_norms(delta, layers) / _layer_norms(before, layers)
    calls = {}
    for c in p.calls:
        calls.setdefault(id(c.layer), c)
    dead, outs, los, his = [], [], [], []
    width = 1
    for (_name, _idx, layer), thr in zip(layers, thresholds, strict=True):
        call = calls.get(id(layer))
        frac = math.nan
        if call is not None and thr is not None and call.pre_activation is not None:
            z = call.pre_activation
            z2 = tf.reshape(z, [-1, z.shape[-1]])
            d = activation_derivative(z2, layer.activation)
            frac = float(tf.reduce_mean(tf.cast(inactive_from_derivative(d, thr), tf.float64)).numpy())
        dead.append(frac)
        out = tf.reshape(tf.cast(call.outputs[0], tf.float64), [-1]) if call is not None and call.outputs \
            else tf.zeros([0], tf.float64)
        outs.append(out)
        width = max(width, int(out.shape[0]))
        edges = act_edges(_activation_name(layer))
        los.append(edges[0])
        his.append(edges[-1])
    pad = tf.stack([tf.pad(o, [[0, width - int(o.shape[0])]], constant_values=np.nan) for o in outs])
    ahist = histogram_counts(pad, tf.constant(los), tf.constant(his)).numpy()
    ghist, gzeros = _grad_hist(grads, layers)
    return norms, ratios, np.array(dead), ahist, ghist, gzeros


def _grad_hist(grads, layers):
    hist, zeros = [], []
    for _n, idx, _l in layers:
        g = [tf.reshape(tf.cast(core.dedupe(grads[i]).values if isinstance(grads[i], tf.IndexedSlices)
                                else grads[i], tf.float64), [-1]) for i in idx if grads[i] is not None]
        g = tf.concat(g, 0) if g else tf.zeros([0], tf.float64)
        zeros.append(int(tf.reduce_sum(tf.cast(tf.equal(g, 0), tf.int32)).numpy()))
        logs = tf.where(tf.equal(g, 0), tf.constant(np.nan, tf.float64), tf.math.log(tf.abs(g)) / np.log(10.0))
        hist.append(histogram_counts(logs[None], tf.constant([GRAD_LOG_EDGES[0]]),
                                     tf.constant([GRAD_LOG_EDGES[-1]]))[0].numpy())
    return np.stack(hist), np.array(zeros)


def watch_training_chunks(model, x, y, *, optimizer, steps: int, clip=None, loss: Callable | None = None,
                          sample_weight=None, chunk: int = 10) -> Iterator[TrainingReport]:
    """:func:`watch_training`, yielding a partial report after every ``chunk`` steps (the view draws them)."""
    core.check_model(model)
    loss_fn = core.resolve_loss(model, loss)
    steps = check_int("steps", steps, 1, 100_000)
    chunk = check_int("chunk", chunk, 1, 100_000)
    clip = core.check_clip(clip)
    opt = copy_optimizer(optimizer)
    x, y = core.coerce_batch(model, x, y)
    sw = core.coerce_sample_weight(sample_weight, y)
    if not model.built:
        model(tf.nest.map_structure(lambda t: t[:1], x))
    data = core.data_problems(x, y)
    if data:
        raise ValueError("the data is not finite: " + "; ".join(data) + ". Clean the batch first")
    variables = list(model.trainable_variables)
    if not variables:
        raise ValueError(f"model {model.name!r} has no trainable variables: there is nothing to train")
    opt = core.fit_optimizer(model, opt)
    layers = _layers(model)
    names = tuple(n for n, _i, _l in layers)
    acts = tuple(_activation_name(layer) for _n, _i, layer in layers)
    thresholds = [None if a is None else derivative_threshold(a) for a in acts]
    units = np.array([int(getattr(layer, "units", 0) or 0) for _n, _i, layer in layers])
    settings = {"model": model.name, "optimizer": type(opt).__name__, "steps": steps, "clip": clip}
    edges = np.stack([act_edges(a) for a in acts])
    saved = core.snapshot(model)
    rows: list[tuple] = []
    try:
        opt.build(variables)
        for t in range(steps):
            before = [tf.identity(v) for v in variables]
            p = core.forward_loss(model, x, y, loss=loss_fn, sample_weight=sw, taps=True)
            grads = p.gradients(variables, opt)
            out = core.apply_update(opt, grads, variables, clip=clip, check_finite=True)
            after = [tf.identity(v) for v in variables]
            value = float(tf.cast(p.loss, tf.float64).numpy())
            rows.append((value, *_step_rows(p, grads, before, after, layers, thresholds)))
            finite = math.isfinite(value) and bool(out["finite"].numpy())
            done = t + 1 == steps or not finite
            if done or (t + 1) % chunk == 0:
                yield _report(settings, names, acts, units, edges, rows, steps, model, partial=not done)
            if done:
                return
    finally:
        core.restore(saved)


def _report(settings, names, acts, units, edges, rows, steps, model, *, partial) -> TrainingReport:
    loss = np.array([r[0] for r in rows])
    grad_norms, ratios, dead, ahist, ghist, gzeros = (np.stack([r[i] for r in rows]) for i in range(1, 7))
    bad = ~np.isfinite(loss) | ~np.all(np.isfinite(grad_norms), axis=1)
    diverged = int(np.argmax(bad)) + 1 if bad.any() else None
    return TrainingReport(settings=settings, layer_names=names, activations=acts, units=units, loss=loss,
                          grad_norms=grad_norms, update_ratios=ratios, dead_fraction=dead, act_hist=ahist,
                          act_edges=edges, grad_hist=ghist, grad_zeros=gzeros, steps=steps, diverged_at=diverged,
                          dtype=str(getattr(getattr(model, "dtype_policy", None), "compute_dtype", "float32")),
                          partial=partial and diverged is None)


def watch_training(model, x, y, *, optimizer, steps: int, clip=None, loss: Callable | None = None,
                   sample_weight=None) -> TrainingReport:
    """Train ``model`` on the batch ``(x, y)`` for ``steps`` steps and report every step, per layer (chapter 11).

    Each step is the core's step (forward with the layers tapped, the loss as
    :func:`gradlab.train_steps` takes it: ``loss(y, y_pred)``, else the compiled loss, else the
    mean squared error, plus ``model.losses``; ``sample_weight`` as ``fit`` weighs it; the optimizer's
    loss scaling; ``clip`` as every gradlab tool spells it; the finite check), in the model's own
    dtype. The run stops at the first step whose loss or gradient is NaN/inf (recorded, not
    applied). ``optimizer`` is copied (:func:`copy_optimizer`): the one given is not touched.
    Afterwards the model's weights, BatchNorm statistics, dropout seeds, attribute counters and
    trackers are put back exactly as they were. Returns a :class:`TrainingReport` whose layers are
    those with trainable weights; ``dead_fraction`` is known for ``Dense`` layers with an activation.
    """
    *_, report = watch_training_chunks(model, x, y, optimizer=optimizer, steps=steps, clip=clip, loss=loss,
                                        sample_weight=sample_weight, chunk=100_000)
    return report

