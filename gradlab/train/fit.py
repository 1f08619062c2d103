"""Gradient norms inside ``model.fit``: a training step and a callback (chapters 03, 08 and 09).

Pure computation: TensorFlow and Keras in, plain numbers out (``gl.plots.plot_grad_norm_history``
draws a logger's history).

* :class:`GradNormTrainStep` is :func:`gradlab.make_train_step`'s logic as a Keras
  ``Model.train_step`` override, so that ``model.fit`` clips, skips non-finite steps and logs
  per-layer gradient norms; :class:`GradNormSequential` is a ready Sequential with it.
* :class:`GradNormLogger` is a Keras callback that records per-layer gradient norms during
  ``fit``, from a fixed probe batch or from a :class:`GradNormTrainStep` model's logs; with
  ``log_dir`` it also writes them for TensorBoard (chapter 09), and
  :meth:`GradNormLogger.log_gradients` does the same from a custom training loop.
* :class:`FitProgress` is a Keras callback that shows ``fit``'s batches as a gradlab progress
  bar (:class:`gradlab.progress.Progress`): no timing and no loss in it, so a notebook's stored
  output reproduces, where ``verbose=1`` prints both.
"""

from __future__ import annotations

import os

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_int
from ..i18n import _
from ..progress import Progress, check_progress

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["FitProgress", "GradNormLogger", "GradNormSequential", "GradNormTrainStep"]


def _refuse_old_keywords(name: str, kwargs: dict) -> None:
    """``renamed_keywords(clip_global_norm="clip")`` for a Keras model's ``__init__``."""
    if "clip_global_norm" in kwargs:
        raise TypeError(f"{name}() takes clip= instead of clip_global_norm= (one spelling per concept across "
                        "gradlab's tools); pass clip=")


class GradNormTrainStep:
    """Mixin for ``keras.Model`` subclasses: a ``train_step`` with clipping, a non-finite check
    and per-layer gradient norms in the logs (chapter 03).

    Put it first in the bases, e.g. ``class MyModel(GradNormTrainStep, keras.Sequential)``.
    Extra constructor keywords: ``clip`` (``None`` = no clipping; a number clips the global
    norm at it; or any ``(mode, threshold)`` of :func:`gradlab.clip_gradients`) and
    ``check_finite`` (skip steps whose gradients hold NaN or inf). ``fit`` then logs, besides
    the loss and compiled metrics, ``grad_norm`` (global, before clipping), ``grad_norm/<layer>``
    for each layer and ``skipped_steps`` (non-finite steps skipped so far this epoch). These are
    values of the batch, not running means: at the end of an epoch the logs hold the last
    batch's. The epoch's ``loss`` is Keras's: the mean over the batches weighted by their size,
    so a smaller last batch counts for less, as in a plain ``fit``.
    """

    def __init__(self, *args, clip=None, check_finite: bool = True, **kwargs):
        # Keras reads this __init__'s argspec, so the old spelling is refused here, not by a wrapper
        _refuse_old_keywords(type(self).__name__, kwargs)
        super().__init__(*args, **kwargs)
        self.clip = core.check_clip(clip)
        if not isinstance(check_finite, bool):
            raise ValueError(f"check_finite must be True or False, got {check_finite!r}")
        self.check_finite = check_finite
        # A Keras metric, so fit tracks it, resets it each epoch and reports it in the logs.
        self.skipped_steps = keras.metrics.Sum(name="skipped_steps")

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        # the core's step with Keras's own compute_loss (the compiled loss + model.losses)
        p = core.forward_loss(self, x, y, loss=core.Loss(self, "compiled"), training=True,
                              sample_weight=sample_weight)
        loss, y_pred = p.loss, p.y_pred
        variables = self.trainable_variables
        # As fit does: a LossScaleOptimizer's scale multiplies the loss (mixed precision).
        grads = p.gradients(variables, self.optimizer)
        out = core.apply_update(self.optimizer, grads, variables, clip=self.clip, check_finite=self.check_finite)
        # Under a strategy (chapter 08) Keras 3 divides each replica's loss by the number of
        # replicas, and a metric reads the mean of its replicas' values: undo the division.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        self.skipped_steps.update_state(tf.cast(tf.logical_not(out["applied"]), tf.float32))
        batch = tf.shape(tf.nest.flatten(x)[0])[0]
        for metric in self.metrics:  # the documented Keras 3 way to feed the loss tracker
            if metric.name == "loss":  # weighted by the batch size, as Keras's own train_step does
                metric.update_state(loss * replicas, sample_weight=batch)
        logs = dict(self.compute_metrics(x, y, y_pred, sample_weight=sample_weight))
        logs["grad_norm"] = out["global_norm"]
        for name, norm in core.group_norms(out["grads"], core.layer_groups(self)).items():
            logs[f"grad_norm/{name}"] = norm
        return logs


class GradNormSequential(GradNormTrainStep, keras.Sequential):
    """A ``keras.Sequential`` whose ``fit`` clips, skips non-finite steps and logs per-layer
    gradient norms (chapter 03). ``GradNormSequential(layers, clip=1.0)``."""


class FitProgress(keras.callbacks.Callback):
    """A Keras callback: ``fit``'s progress as one bar, ``fit batches ▕███░░░▏ 5/16 epoch 2`` (chapter 09).

    ``model.fit(..., verbose=0, callbacks=[FitProgress()])``. The bar counts every batch of every
    epoch when ``fit`` knows the number of batches per epoch, else one unit per epoch; its note is
    the epoch. It holds no time and no loss (``verbose=1`` prints both, so a stored notebook
    output would change from run to run). ``progress`` (``None``: on in a notebook) as everywhere
    in gradlab; ``label`` replaces the translated ``"fit batches"``.
    """

    def __init__(self, label: str | None = None, *, progress: bool | None = None):
        super().__init__()
        if label is not None and not isinstance(label, str):
            raise ValueError(f"label must be None or a string; got {type(label).__name__}")
        self.label = label
        self.enabled = check_progress(progress)
        self._bar = None
        self._per_batch = False
        self._epoch = 0

    def on_train_begin(self, logs=None):
        epochs = int(self.params.get("epochs") or 1)
        steps = self.params.get("steps")
        self._per_batch = bool(steps)
        total = epochs * int(steps) if steps else epochs
        self._bar = Progress(total, self.label or _("fit batches"), enabled=self.enabled)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _note(self) -> str:
        return _("epoch {e}").format(e=self._epoch + 1)

    def on_train_batch_end(self, batch, logs=None):
        if self._per_batch and self._bar is not None:
            self._bar.update(note=self._note())

    def on_epoch_end(self, epoch, logs=None):
        if not self._per_batch and self._bar is not None:
            self._bar.update(note=self._note())

    def on_train_end(self, logs=None):
        if self._bar is not None:
            self._bar.close(self._note())
            self._bar = None


class GradNormLogger(keras.callbacks.Callback):
    """A Keras callback that records per-layer gradient norms during ``fit`` (chapter 03).

    Two sources, chosen by ``probe``:

    * ``probe=(x, y)`` or ``(x, y, sample_weight)``: every ``every_n`` epochs
      (``every="epoch"``) or batches (``every="batch"``), one ``GradientTape`` on this fixed
      batch measures the gradient of the model's compiled loss plus ``model.losses``
      (inference mode, so dropout does not add noise), scaled and unscaled by the optimizer's
      loss scale under mixed precision, as ``fit`` takes it. A model compiled without a loss is
      measured with the mean squared error; a model with its own ``train_step`` must then be
      compiled with the loss it trains with (its real loss is unknown here), else the probe
      raises a ``ValueError``. ``y`` is required. The probe changes nothing ``fit`` reports:
      the loss trackers that ``compute_loss`` updates and the states of stateful recurrent
      layers are put back after each probe.
    * ``probe=None``: reads the ``grad_norm/<layer>`` entries that a :class:`GradNormTrainStep`
      model puts in the logs (the norms of the training batch itself).

    :attr:`history` maps each layer name to its list of norms, :attr:`steps` holds the epoch
    (1-based) or global batch number of each entry; ``gl.plots.plot_grad_norm_history(logger.history,
    steps=logger.steps)`` draws them.

    ``log_dir`` (chapter 09): every entry is also written with ``tf.summary`` to an event file
    in ``log_dir`` for TensorBoard (``tensorboard --logdir <log_dir>``): each layer's gradient
    norm as the scalar ``grad_norm/<layer>`` and, where the gradient itself is known (a probe,
    or :meth:`log_gradients`), its values as the histogram ``gradients/<layer>``, at the step
    of :attr:`steps`. The file is flushed after every entry and closed when training ends.
    In a custom loop, call :meth:`log_gradients` with the model, its gradients and the step.
    """

    def __init__(self, probe=None, *, every: str = "epoch", every_n: int = 1, log_dir=None):
        super().__init__()
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise ValueError(f"log_dir must be None or a directory path; got {type(log_dir).__name__}")
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self._writer = None
        if every not in ("epoch", "batch"):
            raise ValueError(f"every must be 'epoch' or 'batch'; got {every!r}")
        self.every = every
        self.every_n = check_int("every_n", every_n, 1)
        if probe is not None:
            if not isinstance(probe, (tuple, list)) or len(probe) not in (2, 3):
                raise ValueError(f"probe must be None or an (x, y) or (x, y, sample_weight) tuple; got "
                                 f"{type(probe).__name__}")
        self.probe = probe  # converted against the model (as fit converts) when training begins
        self.history: dict[str, list[float]] = {}
        self.steps: list[int] = []
        self._batches = 0
        self._probe_fn = None
        self._probe_data = None

    # ------------------------------------------------------------------ Keras hooks
    def on_train_begin(self, logs=None):
        self._probe_fn = None
        if self.probe is None and not isinstance(self.model, GradNormTrainStep) and not core.has_custom_train_step(
                self.model):
            raise ValueError(
                f"GradNormLogger() without a probe reads the 'grad_norm/<layer>' entries a GradNormTrainStep model "
                f"puts in the logs, and model {self.model.name!r} is a plain Keras model, which logs none: pass "
                "probe=(x, y), or train a model with GradNormTrainStep (gl.GradNormSequential)"
            )
        if self.probe is not None:
            x, y = core.coerce_batch(self.model, self.probe[0], self.probe[1])
            sw = core.coerce_sample_weight(self.probe[2] if len(self.probe) == 3 else None, y)
            self._probe_data = (x, y, sw)

    def on_epoch_end(self, epoch, logs=None):
        if self.every == "epoch" and (epoch + 1) % self.every_n == 0:
            self._record(epoch + 1, logs)

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self.every == "batch" and self._batches % self.every_n == 0:
            self._record(self._batches, logs)

    def on_train_end(self, logs=None):
        self.close()

    # ------------------------------------------------------------------ TensorBoard
    def log_gradients(self, model, grads, step: int) -> dict:
        """Record (and with ``log_dir`` write) per-layer norms of ``grads`` at ``step``; a custom loop's hook.

        ``grads`` are the gradients of ``model.trainable_variables`` in that order (``None``
        for a variable the loss does not reach), as ``tape.gradient(loss,
        model.trainable_variables)`` returns them. Returns ``{layer: norm}`` (float64). Chapter 09.
        """
        core.check_model(model, built=True)
        grads = list(grads)
        variables = model.trainable_variables
        if len(grads) != len(variables):
            raise ValueError(f"grads holds {len(grads)} gradients but model {model.name!r} has {len(variables)} "
                             "trainable variables: pass tape.gradient(loss, model.trainable_variables)")
        step = check_int("step", step, 0)
        groups = core.layer_groups(model)
        norms = {k: float(v) for k, v in core.group_norms(grads, groups).items()}
        self._store(step, norms, _layer_values(grads, groups))
        return norms

    def _layer_values(self, grads, groups):
        return _layer_values(grads, groups) if self.log_dir is not None else None

    def _store(self, step: int, norms: dict, values: dict | None) -> None:
        for name, value in norms.items():
            self.history.setdefault(name, []).append(value)
        self.steps.append(step)
        if self.log_dir is None:
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            for name, value in norms.items():
                tf.summary.scalar(f"grad_norm/{name}", value, step=step)
            for name, value in (values or {}).items():
                tf.summary.histogram(f"gradients/{name}", value, step=step)
        self._writer.flush()

    def close(self) -> None:
        """Close the event file (a later entry opens a new one in the same ``log_dir``)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # ------------------------------------------------------------------ internals
    def _make_probe_fn(self):
        model = self.model
        if not model.built or not model.trainable_variables:
            raise ValueError(
                f"GradNormLogger: model {model.name!r} has no trainable variables to measure (is it "
                "built? give it a keras.Input, or call it on a batch before fit)"
            )
        groups = core.layer_groups(model)
        variables = model.trainable_variables
        loss = core.resolve_loss(model)
        if loss.default_for_custom_step:
            raise ValueError(
                f"GradNormLogger(probe=...): model {model.name!r} has its own train_step and no compiled "
                "loss, so the probe cannot know the loss it trains with; compile it with that loss "
                "(model.compile(optimizer, loss=...)), or log from a GradNormTrainStep model (probe=None)"
            )
        optimizer = core.measuring_optimizer(model)  # mixed_float16 without one: what compile adds

        @tf.function
        def probe_norms(x, y, sw):
            # mixed precision: the loss scaled by the optimizer's loss scale, the gradients
            # unscaled, so float16 gradients do not underflow (as fit takes them)
            _value, grads = core.loss_and_gradients(model, x, y, loss=loss, variables=variables,
                                                    optimizer=optimizer, training=False, sample_weight=sw)
            return core.group_norms(grads, groups), self._layer_values(grads, groups)

        x, y, sw = self._probe_data
        # eagerly first: a y that does not fit the loss, or a loss that is not a scalar, is a
        # short ValueError here instead of one wrapped in the tf.function's traceback
        saved = core.snapshot(model, False, weights=False)
        try:
            core.compute_loss(model, x, y, loss=loss, training=False, sample_weight=sw)
        finally:
            core.restore(saved)
        return probe_norms

    def _record(self, step: int, logs) -> None:
        if self.probe is not None:
            if self._probe_fn is None:  # built lazily: a model without an Input is built by fit
                self._probe_fn = self._make_probe_fn()
            # the probe must not move what fit reports: loss trackers, stateful RNN states
            saved = core.snapshot(self.model, False, weights=False)
            try:
                norms, values = self._probe_fn(*self._probe_data)
                norms = {k: float(v) for k, v in norms.items()}
            finally:
                core.restore(saved)
        else:
            logs = logs or {}
            norms = {k[len("grad_norm/"):]: float(v) for k, v in logs.items()
                     if k.startswith("grad_norm/")}
            values = None  # the logs hold norms only: no histograms
            if not norms:
                raise ValueError(
                    "GradNormLogger found no 'grad_norm/<layer>' entries in the logs: pass "
                    "probe=(x, y), or train a model with GradNormTrainStep (gl.GradNormSequential)"
                )
        if not norms:
            raise ValueError(f"GradNormLogger: model {self.model.name!r} has no layer with trainable weights")
        self._store(step, norms, values)


def _layer_values(grads, groups) -> dict:
    """``{layer: every gradient value of the layer, flattened}`` (``IndexedSlices`` made dense)."""
    out = {}
    for name, idx in groups:
        parts = [tf.reshape(tf.convert_to_tensor(grads[i]), [-1]) for i in idx if grads[i] is not None]
        if parts:
            out[name] = tf.concat([tf.cast(p, tf.float32) for p in parts], axis=0)
    return out
