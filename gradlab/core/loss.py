"""The loss, once for every tool (chapters 01, 03, 04, 07, 08).

:func:`resolve_loss` picks, in this order: ``loss(y, y_pred)`` when given; the model's
compiled loss through ``model.compute_loss`` (which adds ``model.losses``) when the model is
compiled with a loss; otherwise the documented default, the **mean squared error** plus
``model.losses`` (weight regularizers, ``add_loss``).

The default keeps the model's precision: it is computed in the dtype of the model's output,
at least float32 (a float64 model's loss is float64; a float16 output is compared in
float32, as Keras's own losses do). It refuses a ``y`` whose shape differs from the output's,
since it would broadcast into a wrong loss (a ``y`` of shape ``(B,)`` against an output
``(B, 1)`` broadcasts to ``(B, B)``).

A ``loss`` function may return one loss per example (shape ``(batch,)``, as
``keras.losses.mean_absolute_error`` does): it is reduced by the mean over the batch, as
``compile`` reduces a loss function; any other non-scalar result is refused.

``sample_weight`` has Keras's meaning everywhere: each example's loss is multiplied by its
weight and the sum is divided by the number of loss values (Keras's ``"sum_over_batch_size"``
reduction, what ``model.compute_loss`` and ``fit`` do), so a weight of 0 removes an example
without changing the divisor. Under a ``tf.distribute`` strategy every kind returns what
Keras's losses return inside a replica: this replica's share, divided by the number of
replicas, so that the replicas' sum is the global-batch loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _
from .layers import has_custom_train_step

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["Loss", "mean_squared_error", "reduce_weighted", "resolve_loss"]


def _loss_dtype(y_pred):
    dtypes = [t.dtype for t in tf.nest.flatten(y_pred) if hasattr(t, "dtype")]
    return tf.float64 if tf.float64 in dtypes else tf.float32


def _batch_size(y_pred):
    """The batch size of the (first) output, ``None`` when it is not known statically."""
    flat = [t for t in tf.nest.flatten(y_pred) if hasattr(t, "shape")]
    return flat[0].shape[0] if flat and flat[0].shape.rank else None


def reduce_weighted(values, sample_weight=None):
    """Keras's ``"sum_over_batch_size"`` reduction of per-example (or per-step) loss ``values``.

    ``sum(values * sample_weight) / values.size``: ``sample_weight`` of shape ``(batch,)``,
    ``(batch, 1)`` or ``values.shape`` is broadcast over the remaining axes of ``values``. Then
    divided by the replicas of the current ``tf.distribute`` strategy, as Keras's losses are.
    """
    values = tf.convert_to_tensor(values)
    if sample_weight is not None:
        sw = tf.cast(sample_weight, values.dtype)
        while sw.shape.rank > values.shape.rank and sw.shape[-1] == 1:
            sw = tf.squeeze(sw, axis=-1)
        while sw.shape.rank < values.shape.rank:
            sw = tf.expand_dims(sw, axis=-1)
        values = values * sw
    size = tf.cast(tf.size(values), values.dtype)
    loss = tf.math.divide_no_nan(tf.reduce_sum(values), size)
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss / replicas if replicas > 1 else loss


def _mask_weights(y_pred, values):
    """Keras's weights for an output that carries a mask (``Masking``, ``mask_zero=True``): a valid
    value weighs ``total / valid``, a padded one 0 (``keras.losses.Loss`` under
    ``"sum_over_batch_size"``); ``None`` without a mask of the values' shape."""
    mask = getattr(y_pred, "_keras_mask", None)
    if mask is None or mask.shape.rank != values.shape.rank:
        return None
    mask = tf.cast(mask, values.dtype)
    return mask * tf.math.divide_no_nan(tf.cast(tf.size(mask), values.dtype), tf.reduce_sum(mask))


def mean_squared_error(y, y_pred, sample_weight=None, *, per_example: bool = False):
    """The mean squared error of one output, as ``keras.losses.MeanSquaredError`` computes it,
    in the output's dtype (at least float32), the padded steps of a masked output left out as
    Keras leaves them out. ``per_example`` returns the per-example values (the mean over the
    last axis, unmasked) instead of their weighted reduction."""
    dtype = _loss_dtype(y_pred)
    values = tf.reduce_mean(tf.square(tf.cast(y_pred, dtype) - tf.cast(y, dtype)), axis=-1)
    if per_example:
        return values
    mask = _mask_weights(y_pred, values)
    return reduce_weighted(values if mask is None else values * mask, sample_weight)


def _pairs(y, y_pred, sample_weight=None):
    """``[(y_i, y_pred_i, sample_weight_i)]`` for each output (dicts matched by key)."""
    if isinstance(y_pred, dict) and isinstance(y, dict):
        keys = sorted(y_pred)
        sw = [sample_weight.get(k) if isinstance(sample_weight, dict) else sample_weight for k in keys]
        return [(y[k], y_pred[k], s) for k, s in zip(keys, sw, strict=True)]
    ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
    if isinstance(sample_weight, (list, tuple)):
        sws = list(sample_weight)
    elif isinstance(sample_weight, dict):
        sws = [sample_weight[k] for k in sorted(sample_weight)]
    else:
        sws = [sample_weight] * len(ps)
    return list(zip(ys, ps, sws, strict=False))


@dataclasses.dataclass(frozen=True)
class Loss:
    """The loss every tool uses: ``loss(x, y, y_pred, training, sample_weight)`` is a scalar tensor.

    ``kind`` is ``"given"`` (``loss``), ``"compiled"`` (``model.compute_loss``) or ``"mse"``
    (the default); every kind includes ``model.losses`` (regularizers, ``add_loss``). The value
    is in the loss's own dtype: float64 for a float64 model with the default, float32 for
    Keras's compiled losses (which compute in ``floatx``).
    """

    model: object
    kind: str
    fn: Callable | None = None

    @property
    def description(self) -> str:
        """What the loss is, in words a learner reads."""
        if self.default_for_custom_step:
            return _("mean squared error + model.losses (the default: the model has its own train_step "
                     "and no compiled loss, so the loss it trains with is unknown here; pass loss=)")
        if self.kind == "compiled" and has_custom_train_step(self.model):
            return _("the model's compiled loss + model.losses (the model has its own train_step, which may "
                     "train on another loss: pass loss= to inspect that one)")
        return {"given": _("the given loss= + model.losses"),
                "compiled": _("the model's compiled loss + model.losses"),
                "mse": _("mean squared error + model.losses")}[self.kind]

    @property
    def default_for_custom_step(self) -> bool:
        """True when the MSE default stands in for the unknown loss of a custom ``train_step``."""
        return self.kind == "mse" and has_custom_train_step(self.model)

    # ------------------------------------------------------------------ checks
    def _sparse_categorical(self) -> bool:
        fn = self.fn if self.kind == "given" else getattr(self.model, "loss", None) if self.kind == "compiled" else None
        return (isinstance(fn, keras.losses.SparseCategoricalCrossentropy)
                or fn is keras.losses.sparse_categorical_crossentropy
                or (isinstance(fn, str) and fn in ("sparse_categorical_crossentropy", "SparseCategoricalCrossentropy")))

    def _check_sparse_labels(self, y, y_pred) -> None:
        """Shape and range of the integer labels a SparseCategoricalCrossentropy needs."""
        ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        if len(ys) != 1 or len(ps) != 1:
            return
        t, p = ys[0], ps[0]
        a, b = tuple(t.shape), tuple(p.shape)
        if not b or b[-1] is None:
            return
        classes = int(b[-1])
        fix = (f"pass integer class labels 0..{classes - 1} of shape {b[:-1]} (np.argmax(y, axis=-1) turns "
               "one-hot rows into labels), or use CategoricalCrossentropy for one-hot y")
        if len(a) == len(b) and a[-1] == classes and classes > 1:
            raise ValueError(
                f"y has shape {a} and looks one-hot, but the loss is SparseCategoricalCrossentropy, "
                f"which wants one integer label per example: {fix}")

        def same(u, v):
            return len(u) == len(v) and all(i is None or j is None or i == j for i, j in zip(u, v, strict=True))

        if not (same(a, b[:-1]) or (len(a) == len(b) and a[-1] == 1 and same(a[:-1], b[:-1]))):
            raise ValueError(
                f"y has shape {a}, but SparseCategoricalCrossentropy on an output of shape {b} wants "
                f"labels of shape {b[:-1]}: {fix}")
        if not tf.executing_eagerly() or not hasattr(t, "numpy"):
            return
        values = np.asarray(t.numpy(), dtype=np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values >= classes)
        if bad.any():
            shown = values[bad].ravel()[:3]
            raise ValueError(
                f"y holds {int(bad.sum())} label{'s' if bad.sum() > 1 else ''} outside the classes 0..{classes - 1} "
                f"of the model's {classes}-unit output (e.g. {', '.join(f'{v:g}' for v in shown)}): "
                f"SparseCategoricalCrossentropy needs integer labels 0..{classes - 1}; relabel y (e.g. "
                "labels 1..n shifted by -1), or give the output layer one unit per class")

    def _elementwise_compiled(self) -> bool:
        """The compiled loss is one of Keras's own, which compare y and the output element by element
        (all but the sparse and CTC ones); a learner's own compiled function may take other shapes."""
        fn = getattr(self.model, "loss", None)
        name = fn if isinstance(fn, str) else getattr(fn, "__name__", None) if callable(fn) else None
        if isinstance(fn, keras.losses.Loss):
            name = type(fn).__name__ if type(fn).__module__.startswith("keras") else None
        elif callable(fn) and not getattr(fn, "__module__", "").startswith("keras"):
            name = None
        return bool(name) and not any(k in name.lower() for k in ("sparse", "ctc"))

    def _check_compiled_shapes(self, y, y_pred) -> None:
        """A Keras loss compiled into the model broadcasts a ``y`` of another shape (``(B,)`` against
        ``(B, 3)`` silently; ``(B, 2)`` against ``(B, 3)`` with TensorFlow's ``Incompatible shapes``):
        refused here, naming y. Keras squeezes or expands one trailing axis of size 1, so that stays."""
        ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        if len(ys) != len(ps) or isinstance(y_pred, dict) != isinstance(y, dict):
            return  # Keras matches the structures itself, and says so

        def same(u, v):
            return len(u) == len(v) and all(i is None or j is None or i == j for i, j in zip(u, v, strict=True))

        for t, p, _sw in _pairs(y, y_pred):
            a, b = tuple(t.shape), tuple(p.shape)
            if same(a, b) or (len(a) + 1 == len(b) and b[-1] == 1 and same(a, b[:-1])) or (
                    len(a) == len(b) + 1 and a[-1] == 1 and same(a[:-1], b)):
                continue
            also = f" (or {b[:-1]})" if b and b[-1] == 1 else ""
            raise ValueError(
                f"y has shape {a} but the model's output has shape {b}; the compiled loss compares them element "
                f"by element (a y it can broadcast would give a wrong loss), so y must have shape {b}{also}. "
                "Reshape y, or check that y belongs to this model's output")

    def check(self, y, y_pred, sample_weight=None) -> None:
        """Shape checks of ``y`` (and ``sample_weight``) against the output (eagerly, before any trace).

        The default MSE refuses a ``y`` that would broadcast; a SparseCategoricalCrossentropy
        (compiled or ``loss``) refuses one-hot ``y`` and labels outside ``0..n-1``; a
        ``loss`` that returns one number cannot weight examples, so ``sample_weight`` with
        it is refused.
        """
        if self._sparse_categorical():
            self._check_sparse_labels(y, y_pred)
        if self.kind == "given" and sample_weight is not None and not isinstance(self.fn, keras.losses.Loss):
            value = tf.convert_to_tensor(self.fn(y, y_pred))
            if value.shape.rank == 0:
                raise ValueError(
                    "sample_weight needs per-example losses, but loss= returns a single number: return "
                    "one loss per example (e.g. tf.reduce_mean(tf.square(y - y_pred), axis=-1)) or pass a "
                    "keras.losses.Loss such as keras.losses.MeanSquaredError()")
        if self.kind == "compiled" and self._elementwise_compiled():
            self._check_compiled_shapes(y, y_pred)
        if self.kind != "mse":
            return
        ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        if isinstance(y_pred, dict) and not isinstance(y, dict):
            if len(ps) == 1:
                ps = ps[:1]
            else:
                raise ValueError(
                    f"the model returns a dict of {len(ps)} outputs ({', '.join(sorted(y_pred))}); "
                    "y must be a dict with the same keys for the default mean squared error, or pass loss="
                )
        if isinstance(y_pred, dict) and isinstance(y, dict) and set(y) != set(y_pred):
            raise ValueError(f"y has keys {sorted(y)} but the model returns {sorted(y_pred)}; give one target "
                             "per output, or pass loss=")
        if len(ys) != len(ps):
            raise ValueError(f"y holds {len(ys)} arrays but the model returns {len(ps)} outputs; "
                             "give one target per output, or pass loss=")
        for t, p, _sw in _pairs(y, y_pred):
            a, b = tuple(t.shape), tuple(p.shape)
            if len(a) != len(b) or any(i is not None and j is not None and i != j
                                       for i, j in zip(a, b, strict=True)):
                raise ValueError(
                    f"y has shape {tuple(t.shape)} but the model's output has shape {tuple(p.shape)}; "
                    "the default mean squared error would broadcast them into a wrong loss. "
                    f"Reshape y to {tuple(p.shape)} (e.g. y.reshape(-1, 1)), or pass your own loss="
                )

    # ------------------------------------------------------------------ values
    def per_example(self, y, y_pred):
        """Per-example losses (no reduction, no ``model.losses``) for the default and for a
        ``loss`` that returns them or is a ``keras.losses.Loss``; the sum over outputs for a
        model with several. ``ValueError`` for the compiled kind (Keras reduces it internally)."""
        if self.kind == "compiled":
            raise ValueError("per-example losses of a compiled loss are not available; pass loss= "
                             "(a keras.losses.Loss or a function returning one loss per example)")
        if self.kind == "mse":
            parts = [mean_squared_error(t, p, per_example=True) for t, p, _sw in _pairs(y, y_pred)]
            return tf.add_n(parts) if len(parts) > 1 else parts[0]
        if isinstance(self.fn, keras.losses.Loss):
            config = self.fn.get_config()
            config["reduction"] = None
            return type(self.fn).from_config(config)(y, y_pred)
        value = tf.convert_to_tensor(self.fn(y, y_pred))
        if value.shape.rank == 0:
            raise ValueError("loss= returns a single number, not one loss per example")
        return value

    def __call__(self, x, y, y_pred, training: bool = True, sample_weight=None):
        model = self.model
        if self.kind == "compiled":
            return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
        if self.kind == "given":
            if isinstance(self.fn, keras.losses.Loss):
                loss = tf.convert_to_tensor(self.fn(y, y_pred, sample_weight=sample_weight))
            elif sample_weight is not None:
                loss = reduce_weighted(self.per_example(y, y_pred), tf.nest.flatten(sample_weight)[0])
            else:
                loss = tf.convert_to_tensor(self.fn(y, y_pred))
                if loss.shape.rank == 1 and loss.shape[0] == _batch_size(y_pred):
                    # one loss per example (keras.losses.mean_squared_error): reduced as Keras
                    # reduces a loss function given to compile, the mean over the batch
                    loss = reduce_weighted(loss)
                elif loss.shape.rank != 0:
                    raise ValueError(
                        f"loss= must return a scalar (or one loss per example, shape (batch,)), it returned "
                        f"shape {tuple(loss.shape)}. "
                        "tape.gradient would silently differentiate the sum of its elements (chapter 02); "
                        "reduce it, e.g. with tf.reduce_mean"
                    )
                else:
                    replicas = tf.distribute.get_strategy().num_replicas_in_sync
                    if replicas > 1:  # what a Keras loss does inside a replica
                        loss = loss / tf.cast(replicas, loss.dtype)
        else:
            parts = [mean_squared_error(t, p, sw) for t, p, sw in _pairs(y, y_pred, sample_weight)]
            dtype = tf.float64 if any(p.dtype == tf.float64 for p in parts) else tf.float32
            loss = tf.add_n([tf.cast(p, dtype) for p in parts])
        if not loss.dtype.is_floating:
            loss = tf.cast(loss, keras.backend.floatx())
        extra = [tf.cast(tf.reduce_sum(v), loss.dtype) for v in model.losses]
        return loss + tf.add_n(extra) if extra else loss


def resolve_loss(model, loss=None) -> Loss:
    """The loss of :class:`Loss`: ``loss``, else the compiled loss, else MSE (all + ``model.losses``)."""
    if loss is not None:
        if not callable(loss):
            raise ValueError(
                "loss must be None (the model's compiled loss, or mean squared error) or a "
                f"callable (y_true, y_pred) -> scalar; got {loss!r}"
            )
        return Loss(model, "given", loss)
    if getattr(model, "compiled", False) and getattr(model, "loss", None) is not None:
        return Loss(model, "compiled")
    return Loss(model, "mse")
