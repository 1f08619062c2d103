"""The tiny one-parameter example of chapter 00: a loss, its slope from GradientTape, one step."""

from __future__ import annotations

import numpy as np

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()

__all__ = ["toy_loss", "slope_and_step"]


def toy_loss(w):
    """The chapter-00 loss of one weight: ``(3w - 6)² / 9 + 0.5·sin(2w)``, minimum near w = 2."""
    return (3.0 * w - 6.0) ** 2 / 9.0 + 0.5 * tf.sin(2.0 * w)


def slope_and_step(w: float, learning_rate: float = 0.1):
    """Return ``(loss, dloss/dw, w_next)`` at ``w``; the slope comes from ``tf.GradientTape``."""
    for name, v in (("w", w), ("learning_rate", learning_rate)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not np.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if learning_rate < 0:
        raise ValueError(f"learning_rate must be >= 0, got {learning_rate}")
    wt = tf.constant(float(w))
    with tf.GradientTape() as tape:
        tape.watch(wt)
        loss = toy_loss(wt)
    g = float(tape.gradient(loss, wt).numpy())
    return float(loss.numpy()), g, float(w) - learning_rate * g
