"""The update step, once for every tool: loss scaling, gradients, clipping, the finite check and
the optimizer's step, also under ``tf.distribute`` (chapters 03, 05 and 08).

* :func:`fit_optimizer`, :func:`loss_scale`, :func:`compute_gradients`: the loss is scaled as
  ``optimizer.scale_loss`` scales it and the gradients are unscaled before anyone reads them;
  a ``mixed_float16`` model gets a ``LossScaleOptimizer`` as ``compile`` gives it.
* :func:`settle_loss_scale`: where the scaled float16 gradients overflow, the scale a
  ``LossScaleOptimizer`` halves down to on this batch (it skips a step at each halving).
* :func:`apply_update`: clip, check finiteness, apply (skipping non-finite steps when asked;
  a ``LossScaleOptimizer`` sees the rescaled gradients and adapts its scale). Under a strategy
  with several replicas the replicas' gradients are summed *first*, so the norm, the clipping
  and the finite check see the global-batch gradient.
* :func:`check_optimizer`: an optimizer built for another model is a ``ValueError`` before
  anything is traced.
"""

from __future__ import annotations

import math

from .._env import quiet_import_tensorflow
from .clipping import clip_gradients
from .layers import variable_path
from .norms import all_finite, global_norm, map_values

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["apply_update", "check_optimizer", "compute_gradients", "fit_optimizer", "loss_scale",
           "loss_scale_optimizer", "settle_loss_scale"]


def check_optimizer(optimizer, variables) -> None:
    """A ``ValueError`` when ``optimizer`` was already built for other variables (another model's).

    A Keras optimizer keeps one slot per variable it was built with and refuses any other
    variable, deep inside ``apply_gradients`` (inside a ``tf.function`` the message arrives
    wrapped in a long traceback). Checked eagerly, before anything is traced or trained.
    """
    inner = optimizer
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        inner = optimizer.inner_optimizer
    if not getattr(inner, "built", False):
        return
    known = getattr(inner, "_trainable_variables", None)
    if known is None:  # pragma: no cover - a Keras version without the attribute
        return
    ids = {id(v) for v in known}
    foreign = [variable_path(v) for v in variables if id(v) not in ids]
    if foreign:
        raise ValueError(
            f"optimizer was already built for other variables (another model's, {len(known)} of them), "
            f"so it cannot update {foreign[0]!r}{' and others' if len(foreign) > 1 else ''}: build a fresh "
            "optimizer for each model, e.g. optimizer=keras.optimizers.SGD(0.01)"
        )



def loss_scale_optimizer(optimizer, *, initial_scale: float | None = None):
    """``optimizer`` wrapped in Keras's ``LossScaleOptimizer`` (dynamic scale, ``initial_scale``
    or Keras's default); the one place gradlab builds one (chapter 05)."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    if initial_scale is None:
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=initial_scale)


def fit_optimizer(model, optimizer):
    """``optimizer`` as ``compile`` would use it: wrapped in a ``LossScaleOptimizer`` for a
    ``mixed_float16`` model, so float16 gradients do not underflow."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    policy = getattr(getattr(model, "dtype_policy", None), "name", "")
    if policy == "mixed_float16" and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return loss_scale_optimizer(optimizer)
    return optimizer


def loss_scale(optimizer):
    """The current loss scale of a ``LossScaleOptimizer`` as a tensor, ``None`` otherwise."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        if optimizer.built:
            return tf.cast(tf.convert_to_tensor(optimizer.dynamic_scale), tf.float32)
        return tf.constant(float(optimizer.initial_scale), tf.float32)
    return None


def compute_gradients(tape, loss, variables, optimizer=None, *, scale=None):
    """``tape.gradient`` of ``loss`` scaled as ``optimizer.scale_loss`` scales it, then unscaled.

    Returns the gradients of the *unscaled* loss (``None`` kept), computed the way ``fit``
    computes them, so float16 gradients that the scale keeps from underflowing are kept.
    ``scale`` (a number) is the loss scale to use instead of the optimizer's: the scale a
    ``LossScaleOptimizer`` would hold after halving it (:func:`settle_loss_scale`).
    """
    if scale is None:
        scale = None if optimizer is None else loss_scale(optimizer)
    else:
        scale = tf.constant(float(scale), tf.float32)
    if scale is None:
        return tape.gradient(loss, variables)
    # d(scale * loss) = scale * d(loss): the scale enters as the output gradient, exactly where
    # optimizer.scale_loss puts it, so every float16 gradient below it is scaled up.
    grads = tape.gradient(loss, variables, output_gradients=tf.cast(scale, loss.dtype))
    return [None if g is None else map_values(g, lambda v: v / tf.cast(scale, v.dtype)) for g in grads]


def settle_loss_scale(gradients_at, scale: float):
    """The loss scale a ``LossScaleOptimizer`` settles on when the gradients at ``scale`` overflow.

    On a step whose scaled float16 gradients hold inf/NaN, a ``LossScaleOptimizer`` skips the
    update and halves its scale; on this batch it does so until the gradients are finite.
    ``gradients_at(s)`` returns the unscaled gradients taken at loss scale ``s``
    (:func:`compute_gradients` with ``scale=s``). Returns ``(settled scale, its gradients, number
    of halvings)``, one skipped step per halving, or ``None`` when no halving down to a scale of
    1 (the loss's own size) gives finite gradients: then the overflow is not the scale's doing
    (a NaN, or float16 gradients too large for float16 without any scale). The smallest scale is
    tried first, so that such a case costs one extra backward pass.
    """
    scale = float(scale)
    if not math.isfinite(scale) or scale < 2:
        return None
    most = int(math.floor(math.log2(scale)))  # the halvings that keep the scale at 1 or above
    last = gradients_at(scale / 2.0**most)
    if not _finite(last):
        return None
    for k in range(1, most):
        grads = gradients_at(scale / 2.0**k)
        if _finite(grads):
            return scale / 2.0**k, grads, k
    return scale / 2.0**most, last, most


def _finite(grads) -> bool:
    return bool(all_finite([g for g in grads if g is not None]).numpy())



def apply_update(optimizer, grads, variables, *, clip=None, check_finite: bool = True) -> dict:
    """Clip ``grads`` (of the unscaled loss), check them and apply them with ``optimizer``.

    Returns a dict of tensors: ``global_norm`` (before clipping, float64), ``clipped_norm``,
    ``finite``, ``applied`` and ``grads`` (the gradients the norms were taken of). ``None``
    gradients are left out of the update. With ``check_finite`` a step with NaN/inf gradients
    is skipped. A ``LossScaleOptimizer`` gets the clipped gradients multiplied back by its
    scale, so that it unscales them, skips a step that overflowed in float16 and lowers its
    scale, exactly as in ``fit``.

    Under a ``tf.distribute`` strategy with several replicas (chapter 08) the replicas'
    gradients are summed first, so that the norm, the clipping and the finite check see the
    global-batch gradient, the same on every replica; each replica then applies its share.
    """
    grads = list(grads)
    ctx = tf.distribute.get_replica_context()
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    if replicas > 1:
        present = [i for i, g in enumerate(grads) if g is not None]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
        for i, g in zip(present, reduced, strict=True):
            grads[i] = g
    norm = global_norm(grads)
    finite = all_finite(grads)
    clipped = clip_gradients(grads, clip)
    clipped_norm = global_norm(clipped)
    scale = loss_scale(optimizer)
    pairs = [(g, v) for g, v in zip(clipped, variables, strict=True) if g is not None]
    shares = [g for g, _ in pairs]
    if replicas > 1:  # a Keras optimizer sums the replicas' gradients itself
        shares = [map_values(g, lambda v: v / replicas) for g in shares]
    if scale is not None:
        shares = [map_values(g, lambda v: v * tf.cast(scale, v.dtype)) for g in shares]
    targets = [v for _, v in pairs]

    def apply(shares=shares):
        if targets:
            optimizer.apply_gradients(zip(shares, targets, strict=True))
        return tf.constant(True)

    def cond_across_replicas(strategy, finite, shares):
        # A cond whose branch synchronises replicas must run in cross-replica context (as
        # keras.optimizers.LossScaleOptimizer does); every replica holds the same `finite`.
        def apply_all():
            strategy.extended.call_for_each_replica(apply, args=(shares,))
            return tf.constant(True)

        first = strategy.experimental_local_results(finite)[0]
        return tf.cond(first, apply_all, lambda: tf.constant(False))

    if scale is not None:  # the LossScaleOptimizer checks and adapts its scale itself
        apply()
        applied = finite
    elif not check_finite:
        applied = apply()
    elif replicas == 1 or tf.__internal__.distribute.strategy_supports_no_merge_call():
        applied = tf.cond(finite, apply, lambda: tf.constant(False))
    else:
        applied = ctx.merge_call(cond_across_replicas, args=(finite, shares))
    return {"global_norm": norm, "clipped_norm": clipped_norm, "finite": finite, "applied": applied,
            "grads": grads}


