"""One gradient per example (chapter 10): a loop of tapes, ``tf.vectorized_map``, or a Jacobian.

The gradient of a batch's mean loss is the mean of the examples' gradients; DP-SGD (Abadi et
al. 2016) clips each example's gradient before that mean, influence estimates and "which
example makes this batch explode" read them one by one. :func:`per_example_gradients`
returns them, for every trainable variable, with a leading batch dimension.

*Example ``i``'s loss* is the loss of the batch that holds example ``i`` alone: the model's
compiled loss (through ``model.compute_loss``), a ``loss`` callable, or the core's default
(mean squared error), each plus ``model.losses`` as :func:`gradlab.core.resolve_loss` defines
it. A mean over the batch divides by the batch size, a batch of one by 1, so the mean of the
per-example gradients is the gradient of the batch's loss. With ``sample_weight`` the data
term of example ``i`` is multiplied by ``w_i`` (Keras reduces a weighted loss as
``sum(w·l) / B``), so that holds with weights too.

Three ways to compute them, all inside one ``tf.function`` per model and method:

* ``"loop"``: one tape per example (a ``tf.function`` of one example, called ``B`` times);
  the reference, and the slowest for large batches;
* ``"vectorized_map"``: the same function of one example, vectorized over the batch by
  ``tf.vectorized_map`` (pfor): one batched forward and backward pass;
* ``"jacobian"``: one forward pass of the whole batch, the vector of per-example losses, and
  ``tape.jacobian`` of that vector with respect to the variables (pfor over its rows).

``method="auto"`` uses ``vectorized_map``, falls back to the Jacobian where pfor cannot convert
the model's forward pass (TF 2.21: a recurrent layer whose input sequence is computed inside the
model, e.g. after a Dense, a Conv1D or another RNN) or where the model has random layers in
training mode, and to the loop where pfor cannot convert the backward pass either. Two kinds of
model never go through the Jacobian, whose one batched forward pass would give wrong numbers
(``method="jacobian"`` is refused there):

* an output that carries a mask (a per-step loss over padded sequences): the batched pass
  loses each example's mask;
* ``model.losses`` that depend on the input (an ``activity_regularizer``, ``add_loss`` in a
  layer's ``call``): the batched pass holds the whole batch's penalty, which every example's
  loss would include (measured on a Dense model with an L2 activity regularizer: 0.16 off a
  per-example tape). The loop and ``vectorized_map`` run each example alone, with its own
  penalty.

The model runs with ``training=False`` by default, so BatchNorm uses its moving statistics and
examples do not interact; nothing of the model changes (every variable is restored afterwards,
BatchNorm statistics, RNN states and a counter that a layer updates in its own ``call``
included).

:func:`per_example_gradients` is a pipeline of named stages: the arguments, the build, the
loss checked on one example, the candidate methods, the run with its fallbacks.

A sparse or ragged ``x`` (``keras.Input(sparse=True)``, a ``tf.RaggedTensor``) is sliced example by
example; pfor cannot vectorize over a ``SparseTensor`` (TF 2.21), so ``"auto"`` runs the loop there
and ``"vectorized_map"``/``"jacobian"`` say so in a ``ValueError``.

Where TensorFlow runs oneDNN's graph rewrites (imported before gradlab, without
``TF_ENABLE_ONEDNN_OPTS=0``), pfor over an ``EinsumDense`` (inside every ``MultiHeadAttention``)
kills the process on TF 2.21 with an AVX-512 CPU; ``"auto"`` then skips ``vectorized_map`` and
``method="vectorized_map"`` is refused.

An ``Embedding``'s gradient is ``tf.IndexedSlices`` (chapter 06); per example it is returned
dense, ``(B, vocabulary, dim)``: mind the memory for a large table.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Callable

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import renamed_keywords
from ..i18n import _
from ..progress import Progress, check_progress

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["METHODS", "PerExampleGradients", "per_example_gradients", "per_example_norms"]

#: The ways :func:`per_example_gradients` can compute them (``"auto"`` picks one).
METHODS: tuple[str, ...] = ("auto", "loop", "vectorized_map", "jacobian")


class PerExampleGradients(list):
    """A list with one tensor per trainable variable, each ``(B, *variable.shape)``.

    ``None`` where the loss does not depend on the variable (as ``tape.gradient`` returns).
    ``method`` says how they were computed, ``variables`` which variables they belong to,
    ``losses`` is each example's loss (float64 NumPy, ``(B,)``).
    """

    def __init__(self, grads, *, method: str, variables, losses):
        super().__init__(grads)
        self.method = method
        self.variables = list(variables)
        self.losses = losses

    @property
    def norms(self) -> np.ndarray:
        """Each example's gradient norm over all variables, in float64 (``(B,)``)."""
        return per_example_norms(self)


def per_example_norms(grads) -> np.ndarray:
    """The global L2 norm of each example's gradient (``None`` skipped), taken in float64 by the
    core's :func:`gradlab.core.global_norm`, example by example. ``grads`` is what
    :func:`per_example_gradients` returns (chapter 10)."""
    present = [g for g in grads if g is not None]
    if not present:
        raise ValueError("grads holds no gradient (every entry is None); there is no norm to take")
    sizes = {int(g.shape[0]) for g in present}
    if len(sizes) != 1:
        raise ValueError(f"every per-example gradient must have the same batch size; got {sorted(sizes)}")
    norms = tf.vectorized_map(core.global_norm, present)
    return np.asarray(norms.numpy(), dtype=np.float64)


# ----------------------------------------------------------------------------- arguments
def _check_method(method) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return method


def _check_training(training) -> bool:
    if not isinstance(training, bool):
        raise ValueError(f"training must be True or False; got {training!r}")
    return training


def _has_batch_norm(model) -> bool:
    return any(isinstance(layer, keras.layers.BatchNormalization) for layer in core.leaf_layers(model))


_RANDOM_LAYERS = tuple(getattr(keras.layers, name) for name in (
    "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise", "GaussianDropout",
    "AlphaDropout") if hasattr(keras.layers, name))


def _random_layers(model) -> list[str]:
    """Layers that draw random numbers in training mode (Dropout, GaussianNoise, ...)."""
    return [layer.name for layer in core.leaf_layers(model) if isinstance(layer, _RANDOM_LAYERS)
            or getattr(layer, "seed_generator", None) is not None]


_EINSUM_LAYERS = tuple(getattr(keras.layers, name) for name in (
    "EinsumDense", "MultiHeadAttention", "GroupQueryAttention") if hasattr(keras.layers, name))


def _onednn_rewrites() -> bool:
    """True when TensorFlow runs oneDNN's graph rewrites: it was imported before gradlab (which
    sets ``TF_ENABLE_ONEDNN_OPTS=0`` first) without that variable."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in ("0", "false")


def _einsum_layers(model) -> list[str]:
    """With oneDNN's rewrites on, the layers built on EinsumDense: pfor over them kills the process
    on TF 2.21 (``munmap_chunk(): invalid pointer`` on an AVX-512 CPU), so vectorized_map is not run."""
    if not _onednn_rewrites():
        return []
    stop = lambda layer: isinstance(layer, _EINSUM_LAYERS)  # noqa: E731 - MultiHeadAttention listed once
    return [layer.name for layer in core.nested_layers(model, stop=stop) if stop(layer)]


# ----------------------------------------------------------------------------- the per-example loss
def _example_loss(loss: core.Loss, model, x1, y1, w1, training: bool):
    """The loss of the batch holding one example (``x1``, ``y1``, ``w1`` with a batch axis of 1)."""
    return loss(x1, y1, model(x1, training=training), training, sample_weight=w1)


def _dense(g, v):
    if g is None:
        return tf.zeros(v.shape, v.dtype)
    return tf.convert_to_tensor(g)


def _row(t, i):
    """Example ``i`` of ``t`` with a batch axis of 1 (a ``tf.SparseTensor`` or ``tf.RaggedTensor`` too)."""
    if isinstance(t, tf.SparseTensor):
        return tf.sparse.slice(t, [i] + [0] * (t.shape.rank - 1), tf.concat([[1], t.dense_shape[1:]], 0))
    if isinstance(t, tf.RaggedTensor):
        return t[i:i + 1]
    return t[i][None]


def _one(xs, i):
    return None if xs is None else tf.nest.map_structure(lambda t: _row(t, i), xs, expand_composites=False)


def _add_batch_axis(xs):
    return None if xs is None else tf.nest.map_structure(
        lambda t: tf.sparse.expand_dims(t, 0) if isinstance(t, tf.SparseTensor) else tf.expand_dims(t, 0), xs)


def _placeholder(x):
    """What ``tf.vectorized_map`` maps over in place of a missing ``sample_weight``."""
    return tf.zeros([tf.shape(tf.nest.flatten(x)[0])[0]])


class _Compiled:
    """The traced functions of one model, loss and method (traced once per input signature)."""

    def __init__(self, model, loss: core.Loss, method: str, training: bool, weighted: bool):
        self.model, self.loss, self.method, self.training, self.weighted = model, loss, method, training, weighted
        self.connected: list[bool] | None = None
        self.failed: str | None = None  # why pfor could not convert the model, once it failed
        self.traced = False
        variables = model.trainable_variables

        def grads_of_one(x1, y1, w1):
            with tf.GradientTape() as tape:
                value = _example_loss(loss, model, x1, y1, w1, training)
            grads = tape.gradient(value, variables)
            self.connected = [g is not None for g in grads]
            return [_dense(g, v) for g, v in zip(grads, variables, strict=True)], value

        if method == "loop":
            self.fn = tf.function(grads_of_one, reduce_retracing=True)
        elif method == "vectorized_map":
            def vmap(x, y, w):
                def one(args):
                    xi, yi, wi = args
                    return grads_of_one(_add_batch_axis(xi), _add_batch_axis(yi),
                                        None if w is None else _add_batch_axis(wi))

                return tf.vectorized_map(one, (x, y, _placeholder(x) if w is None else w))

            self.fn = tf.function(vmap, reduce_retracing=True)
        else:
            def jacobian(x, y, w):
                with tf.GradientTape() as tape:
                    pred = model(x, training=training)

                    def one(args):
                        xi, yi, pi, wi = args
                        return loss(_add_batch_axis(xi), _add_batch_axis(yi), _add_batch_axis(pi), training,
                                    sample_weight=None if w is None else _add_batch_axis(wi))

                    values = tf.vectorized_map(one, (x, y, pred, _placeholder(x) if w is None else w))
                jac = tape.jacobian(values, variables)
                self.connected = [g is not None for g in jac]
                n = tf.shape(values)[0]
                out = [tf.zeros(tf.concat([[n], v.shape], 0), v.dtype) if g is None else tf.convert_to_tensor(g)
                       for g, v in zip(jac, variables, strict=True)]
                return out, values

            self.fn = tf.function(jacobian, reduce_retracing=True)

    def __call__(self, x, y, w, bar: Progress):
        n = int(tf.nest.flatten(x)[0].shape[0])
        if self.method != "loop":
            out = self.fn(x, y, w)
            self.traced = True
            bar.update(n, note=self.method)
            return out
        rows, values = [], []
        for i in range(n):
            grads, value = self.fn(_one(x, i), _one(y, i), _one(w, i))
            rows.append(grads)
            values.append(value)
            bar.update(note=self.method)
        return [tf.stack(c) for c in zip(*rows, strict=True)], tf.stack(values)


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: ``method="auto"`` tries these in order: the fastest first, the loop (which always converts) last.
_AUTO_ORDER = ("vectorized_map", "jacobian", "loop")


@contextlib.contextmanager
def _quiet_pfor(compiled: _Compiled):
    """While a vectorized method is traced for the first time, keep pfor's own ERROR log lines
    (whole op definitions, printed before it raises) off the learner's screen: the failure is
    reported once, as this module's ValueError or as the fallback's ``method``."""
    logger = logging.getLogger("tensorflow")
    if compiled.method == "loop" or compiled.traced:
        yield
        return
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _is_pfor_failure(err, compiled: _Compiled) -> bool:
    """An error while tracing the vectorized function (pfor could not convert an op), not an
    error of the model or the data, which every method would raise alike."""
    return not compiled.traced


def _compiled(model, loss: core.Loss, method: str, training: bool, weighted: bool) -> _Compiled:
    per_model = _CACHE.setdefault(model, {})
    key = (method, training, weighted, loss.kind, id(loss.fn), id(getattr(model, "loss", None)),
           tuple(id(v) for v in model.trainable_variables))
    entry = per_model.get(key)
    if entry is None:
        # the entry keeps loss.fn and model.loss alive, so their ids cannot be reused while it exists
        entry = per_model[key] = (_Compiled(model, loss, method, training, weighted), loss.fn,
                                  getattr(model, "loss", None))
    return entry[0]


# ----------------------------------------------------------------------------- the tool's stages
def _check_arguments(model, x, y, sample_weight, method, training, progress):
    """Stage 1: the validated batch and options, and the refusals that need no forward pass."""
    core.check_model(model)
    method = _check_method(method)
    training = _check_training(training)
    progress = check_progress(progress)
    x, y = core.coerce_batch(model, x, y)
    w = core.coerce_sample_weight(sample_weight, y)
    if training and _has_batch_norm(model):
        raise ValueError(
            "training=True with a BatchNormalization layer: in training mode BatchNorm normalizes each example "
            "with the statistics of the whole batch, so no example has a gradient of its own (DP-SGD "
            "implementations replace BatchNorm by GroupNorm or LayerNorm). Use training=False (the moving "
            "statistics), or a model without BatchNorm"
        )
    random = _random_layers(model) if training else []
    if random and method == "vectorized_map":
        raise ValueError(
            f"method='vectorized_map' with training=True and random layers ({', '.join(random)}): pfor treats the "
            "random seed as the same for every example, so every example would get the same dropout mask. Use "
            "method='jacobian' (one batched forward pass, a mask per example as in fit), 'loop' or 'auto'"
        )
    stateful = [layer.name for layer in core.stateful_rnn_layers(model)]
    if stateful:
        raise ValueError(
            f"model has stateful recurrent layers ({', '.join(stateful)}): their state carries over from batch to "
            "batch with a fixed batch size, so one example has no loss of its own. Build the same model with "
            "stateful=False (and the same weights) to take per-example gradients"
        )
    return x, y, w, method, training, progress, bool(random)


def _build(model, x) -> list:
    """Stage 2: build an unbuilt model (symbolically where Keras can, so that a layer's own
    updates in ``call`` do not run), and its trainable variables."""
    if not model.built:
        flat = tf.nest.flatten(x)
        if isinstance(model, keras.Sequential) and len(flat) == 1:
            with contextlib.suppress(ValueError, TypeError):  # a symbolic build Keras refuses: call it below
                model.build((None, *flat[0].shape[1:]))
        if not model.built or not model.variables:
            model(_one(x, 0), training=False)  # eagerly, so no variable is created while tracing
    variables = model.trainable_variables
    if not variables:
        raise ValueError("model has no trainable variables, so there is no gradient to take")
    return variables


def _losses_of(model, x, training: bool) -> list[float]:
    model(x, training=training)
    return [float(tf.reduce_sum(tf.cast(v, tf.float64))) for v in model.losses]


def _input_dependent_losses(model, x, training: bool) -> bool:
    """True when ``model.losses`` (activity regularizers, ``add_loss`` in ``call``) change with the
    input: the whole batch's penalty differs from one example's, or two examples' differ. The
    Jacobian's one batched forward pass would then add the batch's penalty to every example."""
    first = _losses_of(model, _one(x, 0), training)
    if not first or core.example_count(x) < 2:  # no penalty at all, or one example: the batch's is its own
        return False
    batch, second = _losses_of(model, x, training), _losses_of(model, _one(x, 1), training)
    return not (np.allclose(batch, first, rtol=1e-6, atol=0.0) and np.allclose(first, second, rtol=1e-6, atol=0.0))


def _prepare_loss(model, loss, x, y, w):
    """Stage 3: the resolved loss, checked eagerly on one example; per-example weights of 1 for a
    loss function that returns one loss per example; and whether the output carries a mask."""
    resolved = core.resolve_loss(model, loss)
    x1, y1 = _one(x, 0), _one(y, 0)  # the loss's own checks (shapes, labels), eagerly, on one example
    pred1 = model(x1, training=False)
    if w is None and resolved.kind == "given" and not isinstance(loss, keras.losses.Loss):
        # a loss function that returns one loss per example (keras.losses.mean_squared_error) is
        # natural here; weights of 1 send it through the core's per-example reduction, which on a
        # batch of one is that example's loss
        if tf.convert_to_tensor(loss(y1, pred1)).shape.rank:
            w = tf.ones([core.example_count(x)], keras.backend.floatx())
    resolved.check(y1, pred1, _one(w, 0))
    # a masked output (per-step loss over padded sequences): the Jacobian's batched forward pass
    # slices the predictions without their mask, so each example's loss would count the padding
    masked = any(getattr(t, "_keras_mask", None) is not None for t in tf.nest.flatten(pred1))
    return resolved, w, masked


def _candidates(method: str, *, random: bool, masked: bool, input_losses: bool,
                einsum: list[str] = ()) -> tuple[str, ...]:
    """Stage 4: the methods to try, in order; a forced method that would give wrong numbers (or
    crash the process) is refused."""
    if einsum and method == "vectorized_map":
        raise ValueError(
            f"method='vectorized_map' on a model with EinsumDense layers ({', '.join(einsum)}; MultiHeadAttention "
            "is built on them) while TensorFlow runs oneDNN's graph rewrites (it was imported before gradlab, "
            "without TF_ENABLE_ONEDNN_OPTS=0): pfor over them crashes the process on TF 2.21. Use method='auto' "
            "or 'jacobian' (or 'loop'), or set TF_ENABLE_ONEDNN_OPTS=0 before importing TensorFlow"
        )
    if masked and method == "jacobian":
        raise ValueError(
            "method='jacobian' on a model whose output carries a mask (padded sequences, Masking or "
            "mask_zero=True): the batched Jacobian loses the mask of each example's loss. Use method='loop' or "
            "'vectorized_map' (or 'auto', which avoids the Jacobian here)"
        )
    if input_losses and method == "jacobian":
        raise ValueError(
            "method='jacobian' on a model whose model.losses depend on the input (an activity_regularizer, or "
            "add_loss in a layer's call): its one batched forward pass holds the whole batch's penalty, which "
            "every example's loss would then include. Use method='loop' or 'vectorized_map' (or 'auto', which "
            "avoids the Jacobian here): they run each example alone, with its own penalty"
        )
    candidates = _AUTO_ORDER if method == "auto" else (method,)
    if random or einsum:  # one dropout mask for the whole batch, or a crash under oneDNN's rewrites
        candidates = tuple(c for c in candidates if c != "vectorized_map")
    if masked or input_losses:  # the Jacobian would lose the output's mask, or mix the examples' penalties
        candidates = tuple(c for c in candidates if c != "jacobian")
    return candidates


def _run(model, resolved, method: str, candidates, training: bool, x, y, w, bar: Progress):
    """Stage 5: the first candidate that pfor converts (the loop always does); the gradients, the
    per-example losses, which variables the tape reached, and the method used."""
    for chosen in candidates:
        compiled = _compiled(model, resolved, chosen, training, w is not None)
        if compiled.failed is None:
            try:
                with _quiet_pfor(compiled):
                    grads, values = compiled(x, y, w, bar)
                return grads, values, compiled.connected, chosen
            except (ValueError, TypeError, tf.errors.InvalidArgumentError, NotImplementedError) as err:
                if chosen == "loop" or not _is_pfor_failure(err, compiled):
                    raise
                last = str(err).strip().splitlines()[-1].strip()
                kind = f"{type(err).__name__}:"
                compiled.failed = f"{kind} {last.removeprefix(kind).strip()[:200]}"
        if method != "auto":
            raise ValueError(
                f"method={method!r} cannot convert this model with pfor ({compiled.failed}); use "
                "method='auto' (which falls back to the next method) or method='loop'"
            )
    raise AssertionError("the loop always converts")  # pragma: no cover


@renamed_keywords(loss_fn="loss")
def per_example_gradients(model, x, y, *, loss: Callable | None = None, sample_weight=None,
                          method: str = "auto", training: bool = False,
                          progress: bool | None = None) -> PerExampleGradients:
    """The gradient of each example's loss for every trainable variable of ``model`` (chapter 10).

    Returns a :class:`PerExampleGradients` list, one tensor ``(B, *variable.shape)`` per
    ``model.trainable_variables`` (``None`` where the loss does not depend on the variable).
    Example ``i``'s loss is that of a batch holding example ``i`` alone (``loss(y, y_pred)``
    when given, reduced to a scalar or one loss per example such as
    ``keras.losses.mean_squared_error``; else the compiled loss, else mean squared error; plus
    ``model.losses`` of that example alone: an activity regularizer or an ``add_loss`` in
    ``call`` counts each example's own penalty), times ``sample_weight[i]`` when given, so that
    their mean is the batch gradient that ``fit`` would take. ``method`` is ``"auto"``
    (``vectorized_map``, or the Jacobian or the loop where pfor cannot convert the model),
    ``"loop"``, ``"vectorized_map"`` or ``"jacobian"``; all give the same numbers (to float32
    rounding), and a method that would not is refused: the Jacobian where ``model.losses``
    depend on the input or the output carries a mask. ``training=False`` (the default, as
    :func:`gradlab.time_report`) runs layers in inference mode; ``training=True`` in training
    mode, which a model with BatchNorm refuses: in training mode BatchNorm mixes the examples of
    a batch, so an example has no gradient of its own. With ``training=True`` and random layers
    (Dropout, GaussianNoise, ...) each method draws its own masks: ``"auto"`` then uses the
    Jacobian (one batched forward pass, a mask per example, as ``fit`` draws them), and
    ``"vectorized_map"`` is refused (pfor would give every example the same mask). A masked
    per-step loss (``mask_zero=True`` sequences of different lengths) is divided by the valid
    steps of the whole batch in ``fit`` but by each example's own count here, so there the mean
    differs. ``progress`` shows a bar over the examples (``None``: on in a notebook). The model
    is left exactly as it was: every variable, a counter that a layer updates in its own
    ``call`` included, is restored.
    """
    x, y, w, method, training, progress, random = _check_arguments(model, x, y, sample_weight, method,
                                                                    training, progress)
    variables = _build(model, x)
    saved = core.snapshot(model)
    try:
        resolved, w, masked = _prepare_loss(model, loss, x, y, w)
        einsum = _einsum_layers(model)
        jacobian_possible = "jacobian" in _candidates(method, random=random, masked=masked, input_losses=False,
                                                      einsum=einsum)
        input_losses = jacobian_possible and _input_dependent_losses(model, x, training)
        candidates = _candidates(method, random=random, masked=masked, input_losses=input_losses, einsum=einsum)
        with Progress(core.example_count(x), _("per-example gradients"), enabled=progress) as bar:
            grads, values, connected, chosen = _run(model, resolved, method, candidates, training, x, y, w, bar)
            bar.close(note=chosen)
    finally:
        core.restore(saved)
    grads = [g if ok else None for g, ok in zip(grads, connected or [True] * len(grads), strict=True)]
    losses = np.asarray(tf.cast(values, tf.float64).numpy(), dtype=np.float64).reshape(-1)
    return PerExampleGradients(grads, method=chosen, variables=variables, losses=losses)
