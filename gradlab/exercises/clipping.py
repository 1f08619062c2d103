"""The experiment behind the clipped-step self-checks (chapters 03 and 07).

A clipped step is told from an unclipped or always-rescaled one by running it twice: on a batch
whose gradient norm is above the threshold, and on one whose norm is below it. The second batch
is made from the first by scaling the residual: the mean-squared-error gradient is linear in
``y - model(x)``, so scaling the residual scales the gradient's global norm exactly.
"""

from __future__ import annotations

from collections.abc import Callable

from .._env import quiet_import_tensorflow
from ..core import mean_squared_error, true_global_norm

tf = quiet_import_tensorflow()

__all__ = ["raw_gradient_norm", "targets_with_gradient_norm"]


def raw_gradient_norm(model, x, y) -> float:
    """The float64 global norm of the mean-squared-error gradient of ``model`` on ``(x, y)``, unclipped."""
    with tf.GradientTape() as tape:
        loss = mean_squared_error(y, model(x))
    return true_global_norm(tape.gradient(loss, model.trainable_variables))


def targets_with_gradient_norm(make_model: Callable, x, y, norm: float):
    """``(targets, raw norm)``: targets for which a fresh ``make_model()``'s MSE gradient has global norm ``norm``.

    ``make_model`` must build the same (seeded) model each call: the check hands the learner a
    fresh copy of it. Chapters 03 and 07's clipped-step checks use it for the batch below the
    threshold.
    """
    model = make_model()
    raw = raw_gradient_norm(model, x, y)
    pred = model(x)
    return pred + (norm / raw) * (y - pred), raw
