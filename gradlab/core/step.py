"""The one training step of gradlab, as Keras composes it, in named parts (chapters 01, 03, 04, 07, 08).

Keras's ``Model.train_step`` is forward, ``compute_loss``, ``scale_loss``, gradient and
``optimizer.apply``. Here the same step is offered whole and in parts, so that a tool calls
the part it needs instead of putting the step together again:

* :func:`compute_loss`: the forward pass (``model(x, training=...)``, the leaf layers tapped
  on request) and the loss (:class:`gradlab.core.loss.Loss`, ``model.losses`` included), with
  the loss's shape checks (:meth:`Loss.check`) inside, so that no tool has to remember them;
* :func:`forward_loss`: :func:`compute_loss` under a ``GradientTape`` (``persistent`` and
  ``watch`` as the caller needs), returned as a :class:`Pass` whose :meth:`Pass.gradients`
  takes the gradients of any sources with the optimizer's loss scaling and unscaling
  (:func:`gradlab.core.update.compute_gradients`);
* :func:`loss_and_gradients`: both at once, for the variables;
* :func:`train_step`: the whole step: forward, loss, scaling, gradients, clipping
  (:func:`gradlab.core.clipping.clip_gradients`, one ``clip`` setting), the finite check and
  ``optimizer.apply`` (:func:`gradlab.core.update.apply_update`);
* :func:`tapped_call`: the model's own call with its leaf layers tapped, without a loss (the
  padding mask a recurrent layer receives); :func:`check_batch`: the loss's checks of a whole
  batch from a one-example inference pass (a step that runs on several replicas);
* :func:`measuring_optimizer`: the optimizer whose loss scale a measurement must use (the
  given one, else the compiled one, else for a ``mixed_float16`` model the
  ``LossScaleOptimizer`` that ``compile`` would add). Only the core builds a
  ``LossScaleOptimizer``.
"""

from __future__ import annotations

import dataclasses

from .._env import quiet_import_tensorflow
from .inputs import example_count
from .layers import Taps, tap_layers
from .state import restore, snapshot
from .update import apply_update, compute_gradients, loss_scale_optimizer

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["Pass", "check_batch", "compute_loss", "forward_loss", "loss_and_gradients", "measuring_optimizer",
           "tapped_call", "train_step"]


def measuring_optimizer(model, optimizer=None):
    """The optimizer whose loss scale a measurement of ``model``'s gradients uses.

    ``optimizer`` when given, else the compiled optimizer, else, for a ``mixed_float16`` model,
    the ``LossScaleOptimizer(SGD())`` that ``compile`` would add (its initial scale; it is never
    applied), else ``None`` (no loss scaling).
    """
    if optimizer is not None:
        return optimizer
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None and getattr(getattr(model, "dtype_policy", None), "name", "") == "mixed_float16":
        optimizer = loss_scale_optimizer(keras.optimizers.SGD())  # what compile would add
    return optimizer


def compute_loss(model, x, y, *, loss, training: bool = True, sample_weight=None, tape=None, taps: bool = False):
    """The forward pass and the loss, checked: ``(y_pred, value, taps)`` (chapters 01, 04).

    ``loss`` is a :class:`gradlab.core.loss.Loss` (:func:`gradlab.core.loss.resolve_loss`); its
    shape checks run on ``y_pred`` before the value is taken (at trace time inside a
    ``tf.function``). With ``taps`` the model's leaf-layer calls are recorded on ``tape``
    (:func:`gradlab.core.layers.tap_layers`); ``taps`` in the result is then the
    :class:`~gradlab.core.layers.Taps`, else ``None``. Call it inside the tape's context.
    """
    recorded: Taps | None = None
    if taps:
        if tape is None:
            raise ValueError("taps=True needs the tape that watches the tapped tensors (tape=...)")
        with tap_layers(model, tape) as recorded:
            y_pred = model(x, training=training)
    else:
        y_pred = model(x, training=training)
    loss.check(y, y_pred, sample_weight)
    value = loss(x, y, y_pred, training, sample_weight)
    return y_pred, value, recorded


def tapped_call(model, x, *, training: bool = True) -> Taps:
    """The model's own call on ``x`` with every leaf layer tapped (no loss, no gradient): the
    calls, their inputs, outputs and masks (:func:`gradlab.core.layers.tap_layers`)."""
    with tf.GradientTape() as tape, tap_layers(model, tape) as taps:
        model(x, training=training)
    return taps


def check_batch(model, x, y, *, loss, sample_weight=None) -> None:
    """The loss's shape checks for a whole batch from a one-example inference pass, nothing
    changed (every state put back): what a step that runs on several replicas checks eagerly,
    before anything is traced, where a full training pass cannot run outside the strategy."""
    n = example_count(x)
    saved = snapshot(model, weights=False)
    try:
        pred = model(tf.nest.map_structure(lambda t: t[:1], x), training=False)
    finally:
        restore(saved)
    loss.check(y, tf.nest.map_structure(lambda p: tf.TensorSpec([n, *p.shape[1:]], p.dtype), pred), sample_weight)


@dataclasses.dataclass
class Pass:
    """One forward pass and its loss under a tape (:func:`forward_loss`)."""

    tape: object
    y_pred: object
    loss: object
    taps: Taps | None = None

    @property
    def calls(self) -> list:
        """The tapped layer calls (``[]`` without taps)."""
        return [] if self.taps is None else self.taps.calls

    def gradients(self, sources, optimizer=None, *, scale=None) -> list:
        """Gradients of the loss with respect to ``sources`` (``None`` kept), taken of the loss
        scaled by ``optimizer``'s loss scale (or by ``scale``) and unscaled, as ``fit`` takes them."""
        return compute_gradients(self.tape, self.loss, list(sources), optimizer, scale=scale)


def forward_loss(model, x, y, *, loss, training: bool = True, sample_weight=None, taps: bool = False,
                 persistent: bool = False, watch=()) -> Pass:
    """:func:`compute_loss` under a new ``GradientTape`` (``persistent``, watching ``watch`` too)."""
    with tf.GradientTape(persistent=persistent) as tape:
        for t in watch:
            tape.watch(t)
        y_pred, value, recorded = compute_loss(model, x, y, loss=loss, training=training,
                                               sample_weight=sample_weight, tape=tape, taps=taps)
    return Pass(tape, y_pred, value, recorded)


def loss_and_gradients(model, x, y, *, loss, variables=None, optimizer=None, training: bool = True,
                       sample_weight=None):
    """``(loss value, gradients of variables)``: one forward pass, the loss, scaled gradients unscaled.

    ``variables`` defaults to ``model.trainable_variables``; ``None`` gradients are kept.
    """
    variables = list(model.trainable_variables if variables is None else variables)
    p = forward_loss(model, x, y, loss=loss, training=training, sample_weight=sample_weight)
    return p.loss, p.gradients(variables, optimizer)


def train_step(model, optimizer, x, y, *, loss, variables=None, clip=None, check_finite: bool = True,
               sample_weight=None, training: bool = True) -> dict:
    """The whole step: forward, loss (checked), loss scaling, gradients, clipping and the update.

    Returns :func:`gradlab.core.update.apply_update`'s dict (``global_norm`` before clipping,
    ``clipped_norm``, ``finite``, ``applied``, ``grads``) with ``loss`` added. ``clip`` is a
    validated :func:`gradlab.core.clipping.check_clip` setting; ``variables`` defaults to the
    model's trainable variables.
    """
    variables = list(model.trainable_variables if variables is None else variables)
    value, grads = loss_and_gradients(model, x, y, loss=loss, variables=variables, optimizer=optimizer,
                                      training=training, sample_weight=sample_weight)
    out = apply_update(optimizer, grads, variables, clip=clip, check_finite=check_finite)
    out["loss"] = value
    return out

