"""Every norm a learner reads, and the finite check (chapters 01, 03, 07 and every report).

A float32 ``tf.norm`` squares in float32: every element below about 1e-19 squares to below
float32's smallest normal number (1.18e-38) and is flushed to 0, so the norm of a tiny but
non-zero gradient comes out as exactly 0. Every norm here is taken in float64, so it is 0
only when every element is 0. ``IndexedSlices`` (from ``tf.gather`` or an ``Embedding``)
have their duplicate rows summed first, so their norm is that of the dense gradient.

The tensor functions (:func:`norm64`, :func:`global_norm`, :func:`axis_norms64`,
:func:`all_finite`) work eagerly and inside ``tf.function``; :func:`true_norm`,
:func:`true_global_norm` and :func:`step_norms` return Python/NumPy numbers.
"""

from __future__ import annotations

import numpy as np

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()

__all__ = [
    "all_finite",
    "axis_norms64",
    "dedupe",
    "global_norm",
    "group_norms",
    "is_finite",
    "map_values",
    "norm64",
    "step_norms",
    "true_global_norm",
    "true_norm",
]


def map_values(g, fn):
    """``fn`` applied to a dense gradient, or to the values of an ``IndexedSlices``."""
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)
    return fn(g)


def dedupe(g):
    """An ``IndexedSlices`` with each row once (duplicates summed, as the dense gradient has
    them); any other gradient unchanged."""
    if not isinstance(g, tf.IndexedSlices):
        return g
    unique, pos = tf.unique(g.indices)
    values = tf.math.unsorted_segment_sum(g.values, pos, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, g.dense_shape)


def _sumsq64(g):
    g = dedupe(g)
    v = g.values if isinstance(g, tf.IndexedSlices) else g
    return tf.reduce_sum(tf.square(tf.cast(v, tf.float64)))


def norm64(t):
    """The L2 norm of one tensor (or ``IndexedSlices``) as a float64 tensor."""
    return tf.sqrt(_sumsq64(t))


def global_norm(grads):
    """The joint L2 norm of ``grads`` as a float64 tensor, ``None`` skipped (0 when all are).

    What ``tf.clip_by_global_norm`` calls the global norm, but taken in float64. Every gradlab
    tool reports and clips with it.
    """
    parts = [_sumsq64(g) for g in grads if g is not None]
    if not parts:
        return tf.constant(0.0, tf.float64)
    return tf.sqrt(tf.add_n(parts))


def axis_norms64(t, axis: int = 0):
    """Float64 norms of each slice of ``t`` along ``axis`` (all other axes reduced).

    The per-layer norms of a stack of kernels ``[depth, ...]`` (``axis=0``) or the per-step
    norms of a ``[batch, time, ...]`` gradient (``axis=1``); usable inside ``tf.function``.
    """
    t = tf.cast(t, tf.float64)
    t = tf.experimental.numpy.moveaxis(t, axis, 0) if axis else t
    return tf.sqrt(tf.reduce_sum(tf.reshape(tf.square(t), [tf.shape(t)[0], -1]), axis=1))


def true_norm(t) -> float:
    """The L2 norm of a tensor or array, taken in float64 (chapter 01, and every report in gradlab).

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
    if not isinstance(t, (tf.Tensor, tf.Variable, tf.IndexedSlices)) and not hasattr(t, "dtype"):
        try:
            t = np.asarray(t, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"t must be a tensor or array of numbers; got {type(t).__name__}") from err
    return float(norm64(t if isinstance(t, tf.IndexedSlices) else tf.convert_to_tensor(t)).numpy())


def true_global_norm(grads) -> float:
    """The joint L2 norm of several gradients (``None`` skipped), in float64 like :func:`true_norm`."""
    if isinstance(grads, (tf.Tensor, np.ndarray)):
        raise ValueError("grads must be a list of gradients (e.g. tape.gradient(loss, variables)); "
                         "for one tensor use true_norm")
    return float(global_norm(list(grads)).numpy())


def step_norms(grad, mask=None) -> np.ndarray:
    """Per-time-step float64 norms of a ``(batch, time, ...)`` gradient, earliest first (chapter 07).

    The norm of step ``t`` is taken over the batch and the features. With a Keras ``mask`` of
    shape ``(batch, time)`` (padding from ``Embedding(mask_zero=True)``) the masked steps are
    left out: the recurrent layer skips them, so their gradient is 0 by construction, not
    because it vanished. A step masked in every example is dropped; a step masked in some
    examples is the norm over the examples where it counts, scaled by ``sqrt(batch / count)``
    so that it compares with the fully used steps.
    """
    g = tf.cast(tf.convert_to_tensor(grad), tf.float64)
    if g.shape.rank is None or g.shape.rank < 2:
        raise ValueError(f"grad must have shape (batch, time, ...); got shape {tuple(g.shape)}")
    axes = list(range(2, g.shape.rank))
    per = (tf.reduce_sum(tf.square(g), axis=axes) if axes else tf.square(g)).numpy()  # (batch, time)
    if mask is not None:
        m = np.asarray(tf.convert_to_tensor(mask).numpy()).astype(bool)
        if m.shape == per.shape:
            count = m.sum(axis=0)
            keep = count > 0
            sums = (per * m).sum(axis=0)
            return np.sqrt(sums[keep] * (per.shape[0] / count[keep]))
    return np.sqrt(per.sum(axis=0))


def all_finite(grads):
    """A boolean tensor: every non-``None`` gradient (or tensor) in ``grads`` is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
              for g in grads if g is not None and (g.dtype.is_floating if hasattr(g, "dtype") else True)]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def is_finite(t) -> bool:
    """``True`` when every element of ``t`` is finite (eagerly): ``None`` and integers are,
    ``IndexedSlices`` are judged by their values, complex numbers by both parts."""
    if t is None:
        return True
    if isinstance(t, tf.IndexedSlices):
        t = t.values
    t = tf.convert_to_tensor(t)
    if t.dtype.is_complex:
        return is_finite(tf.math.real(t)) and is_finite(tf.math.imag(t))
    if not t.dtype.is_floating:
        return True
    return bool(tf.reduce_all(tf.math.is_finite(t)).numpy())


def group_norms(grads, groups) -> dict:
    """``{name: float64 global norm of grads[i] for i in indices}`` for ``(name, indices)`` groups
    (:func:`gradlab.core.layers.layer_groups`); usable inside ``tf.function``."""
    return {name: global_norm([grads[i] for i in idx]) for name, idx in groups}
