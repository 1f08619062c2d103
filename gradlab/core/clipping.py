"""Gradient clipping, once for every tool (chapters 01, 04, 07 and 08).

Exactly ``tf.clip_by_value``, ``tf.clip_by_norm`` and ``tf.clip_by_global_norm`` for dense
gradients; correct for ``IndexedSlices`` (duplicate rows are summed *before* clipping, so the
bound holds for the dense gradient); ``None`` passed through in every mode; the global norm
taken in float64 (:func:`gradlab.core.norms.global_norm`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import N_
from .norms import dedupe, global_norm, map_values, norm64

tf = quiet_import_tensorflow()

__all__ = ["CLIP_MODES", "check_clip", "clip_gradients", "clip_with"]

#: Clipping modes: what ``tf.clip_by_value``, ``tf.clip_by_norm`` and ``tf.clip_by_global_norm`` do.
CLIP_MODES: tuple[str, ...] = ("value", "norm", "global_norm")
#: The word for "no clipping" in the explorers' clip dropdown (gradlab/widgets/base.py shows it through ``_()``).
CLIP_OFF = N_("off")


def check_clip(clip, name: str = "clip"):
    """``None`` or a validated ``(mode, threshold)`` clip setting (see :func:`clip_gradients`).

    The one ``clip=`` keyword of every gradlab tool takes ``None`` (no clipping), a number
    ``t`` (clip the global norm at ``t``: ``("global_norm", t)``, what ``tf.clip_by_global_norm``
    and Keras's ``global_clipnorm`` do) or a ``(mode, threshold)`` pair with ``mode`` one of
    :data:`CLIP_MODES`.
    """
    if clip is None:
        return None
    if _is_threshold(clip):
        clip = ("global_norm", clip)
    if (
        not isinstance(clip, (tuple, list))
        or len(clip) != 2
        or clip[0] not in CLIP_MODES
        or not _is_threshold(clip[1])
    ):
        raise ValueError(
            f"{name} must be None or a number > 0 (a global-norm threshold) or (mode, threshold) with mode one of "
            f"{', '.join(CLIP_MODES)} and a finite threshold > 0; got {clip!r}"
        )
    return (clip[0], float(clip[1]))


def _is_threshold(value) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
            and value > 0 and math.isfinite(value))


def clip_with(grads: Sequence, mode: str, threshold):
    """Clip ``grads`` in ``mode`` to ``threshold`` (a number or a scalar tensor, so that an
    engine inside ``tf.function`` can change it without retracing). Unvalidated: the public
    entry is :func:`clip_gradients`."""
    grads = list(grads)
    out = []
    if mode == "global_norm":
        norm = global_norm(grads)
        for g in grads:
            if g is None:
                out.append(None)
                continue

            def scale(v):  # tf.clip_by_global_norm's own formula, NaN for a non-finite norm
                n = tf.cast(norm, v.dtype)
                t = tf.cast(threshold, v.dtype)
                return v * (t * tf.minimum(1.0 / n, 1.0 / t) + (n - n))

            out.append(map_values(dedupe(g), scale))
        return out
    for g in grads:
        if g is None:
            out.append(None)
        elif mode == "value":
            out.append(map_values(dedupe(g), lambda v: tf.clip_by_value(
                v, -tf.cast(threshold, v.dtype), tf.cast(threshold, v.dtype))))
        else:
            out.append(map_values(dedupe(g), lambda v: _clip_norm(v, threshold)))
    return out


def _clip_norm(v, threshold):
    """``tf.clip_by_norm``'s ``v * t / max(‖v‖, t)``, with ``‖v‖`` taken in float64.

    ``tf.clip_by_norm`` sums the squares in ``v``'s own dtype: a float32 gradient with an
    element above about 1.8e19 squares to inf and comes back as zeros, although its norm is
    finite. The float64 norm (the one every gradlab tool reports) gives the tensor norm ``t``,
    as the formula says; the factor is cast back to ``v``'s dtype. A NaN or inf norm gives NaN.
    """
    n = norm64(v)
    t = tf.cast(threshold, tf.float64)
    return v * tf.cast(t / tf.maximum(n, t) + (n - n), v.dtype)


def clip_gradients(grads: Sequence, clip):
    """Clip a list of gradients as ``tf.clip_by_value``/``_norm``/``_global_norm`` do (chapter 01), norms in float64.

    ``clip`` is ``None``, a number ``t`` (``("global_norm", t)``) or ``(mode, threshold)``; ``value`` clips to ``[-t, t]`` element by
    element, ``norm`` rescales each tensor whose L2 norm exceeds ``t``, ``global_norm``
    rescales all together when their joint (float64) norm exceeds ``t``. ``None`` gradients
    stay ``None`` in every mode. An ``IndexedSlices`` gradient (from an ``Embedding`` or
    ``tf.gather``) has its duplicate rows summed first, so the bound holds for the dense
    gradient it stands for (``tf.clip_by_value`` on the raw slices clips each duplicate, and
    their sum can exceed it).
    """
    clip = check_clip(clip)
    if isinstance(grads, (tf.Tensor, np.ndarray, tf.IndexedSlices)):
        raise ValueError("grads must be a list of gradients (e.g. tape.gradient(loss, variables)); "
                         f"got one {type(grads).__name__}: wrap it in a list")
    grads = list(grads)
    if clip is None:
        return grads
    return clip_with(grads, *clip)
