"""Short Adam runs of a small Transformer: warmup, learning-rate sweeps and clipping (chapter 09).

Pure computation. :class:`TrainingRuns` holds one :func:`gradlab.models.transformer.build_transformer`
model, its initial weights and a fixed stream of :func:`gradlab.models.transformer.markov_tokens`
batches (a fresh batch every step, the same stream for every run), and trains it for a few
hundred steps with Adam from the same start each time. The learning rate of every step comes
from Keras's own schedule (:func:`warmup_schedule`: ``CosineDecay`` with ``warmup_target`` and
``warmup_steps``), evaluated up front and fed to the compiled step as a tensor, so runs that
differ only in the learning rate or the warmup share one traced step. Clipping and the update
are the core's (:func:`gradlab.core.apply_update`). Each step records the loss, the global
gradient norm before clipping (float64) and the learning rate it used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_choice, check_int, check_positive, renamed_keywords
from ..engines.transformer import TransformerGradientEngine
from ..i18n import _
from ..models.transformer import MAX_LAYERS, NORM_POSITIONS, markov_tokens
from ..progress import Progress, check_progress
from ..topics import tracing

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["TrainingCurve", "TrainingRuns", "clip_threshold", "warmup_schedule"]


def warmup_schedule(learning_rate: float, warmup_steps: int, total_steps: int):
    """Keras's ``CosineDecay`` used as a warmup: a linear ramp from 0 to ``learning_rate`` over
    ``warmup_steps``, then constant (``alpha=1.0``), as in the Tuning Playbook's warmup protocol.

    ``warmup_steps=0`` is the constant rate without warmup. Chapter 09.
    """
    learning_rate = check_positive("learning_rate", learning_rate)
    total_steps = check_int("total_steps", total_steps, 1)
    warmup_steps = check_int("warmup_steps", warmup_steps, 0, total_steps)
    if warmup_steps == 0:
        return keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=total_steps, alpha=1.0)
    return keras.optimizers.schedules.CosineDecay(0.0, decay_steps=max(1, total_steps - warmup_steps), alpha=1.0,
                                                  warmup_target=learning_rate, warmup_steps=warmup_steps)


def clip_threshold(grad_norms, percentile: float = 90.0) -> float:
    """The Tuning Playbook's starting clip threshold: the ``percentile`` of the gradient norms seen."""
    a = np.asarray(grad_norms, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        raise ValueError("grad_norms holds no finite gradient norm to take a percentile of")
    if not 0 < percentile < 100:
        raise ValueError(f"percentile must be between 0 and 100; got {percentile!r}")
    return float(np.percentile(a, percentile))


@dataclasses.dataclass(frozen=True)
class TrainingCurve:
    """One run, one entry per step taken (chapter 09)."""

    label: str
    losses: np.ndarray
    grad_norms: np.ndarray
    learning_rates: np.ndarray
    clip: tuple | None = None

    @property
    def clip_norm(self) -> float | None:
        """The threshold of a ``("global_norm", t)`` clip, else ``None``."""
        return self.clip[1] if self.clip is not None and self.clip[0] == "global_norm" else None

    @property
    def steps(self) -> int:
        return int(self.losses.size)

    @property
    def diverged(self) -> bool:
        """A non-finite loss, or a loss that ends above where it started."""
        return not bool(np.all(np.isfinite(self.losses))) or self.final_loss > self.losses[0]

    @property
    def final_loss(self) -> float:
        """The mean loss over the last tenth of the steps (NaN if any of them is NaN)."""
        k = max(1, self.steps // 10)
        return float(np.mean(self.losses[-k:]))

    @property
    def clipped_fraction(self) -> float:
        """The fraction of steps whose global gradient norm was above a global-norm clip threshold
        (0 without clipping, NaN for the value and norm modes, which clip tensor by tensor)."""
        if self.clip is None:
            return 0.0
        if self.clip_norm is None:
            return math.nan
        norms = self.grad_norms[np.isfinite(self.grad_norms)]
        return float(np.mean(norms > self.clip_norm)) if norms.size else math.nan

    def summary(self) -> str:
        text = _("{label}: loss {first} → {final} after {steps} steps; gradient norm median {median}, "
                 "max {max}").format(label=self.label, first=f"{self.losses[0]:.3g}", final=f"{self.final_loss:.3g}",
                                     steps=self.steps, median=f"{np.nanmedian(self.grad_norms):.3g}",
                                     max=f"{np.nanmax(self.grad_norms):.3g}")
        if self.clip_norm is not None:
            text += "; " + _("clipped at {t} on {p}% of the steps").format(
                t=f"{self.clip_norm:.3g}", p=f"{100 * self.clipped_fraction:.0f}")
        elif self.clip is not None:
            text += "; " + _("clip {mode} at {t}").format(mode=self.clip[0], t=f"{self.clip[1]:.3g}")
        return text

    def __str__(self) -> str:
        return self.summary()


class TrainingRuns:
    """Adam runs of one Transformer from the same initial weights on the same batches (chapter 09).

    The model is :func:`gradlab.models.transformer.build_transformer`'s ``(num_layers, norm_position,
    seed, **model_kwargs)``: its initial weights, and its forward pass as
    :class:`gradlab.engines.transformer.TransformerGradientEngine` writes it in plain TensorFlow (the
    tests check both against the Keras model), held in variables that Keras's ``Adam`` updates
    through :func:`gradlab.core.apply_update`. That keeps one run of a few hundred steps to a
    few seconds; the learning rate of each step is an input of the one traced step.
    ``runs.run(learning_rate, warmup_steps=..., clip=...)`` restores the initial weights,
    resets Adam and trains ``steps`` steps, each on the next batch of a fixed stream of
    :func:`gradlab.models.transformer.markov_tokens` batches; at the 1-based steps in ``outliers``
    the batch's targets are uniform random tokens instead (a corrupted batch, the cause of a
    loss spike in chapter 09). Results are cached per setting. A run
    that meets a non-finite loss or gradient stops there (that step is not applied) and the
    rest of its curve is NaN.
    """

    def __init__(self, num_layers: int = 6, norm_position: str = "pre", *, steps: int = 200,
                 batch_size: int = 16, seed: int = 0, outliers=(), **model_kwargs):
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.steps = check_int("steps", steps, 1, 100_000)
        self.batch_size = check_int("batch_size", batch_size, 1, 100_000)
        self.num_layers = check_int("num_layers", num_layers, 1, MAX_LAYERS)
        self.norm_position = norm_position
        unknown = set(model_kwargs) - {"d_model", "num_heads", "ff_dim", "vocab_size", "seq_len",
                                       "embedding_initializer", "scale_embedding"}
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)} for the model; allowed: those of "
                             "gl.build_transformer")
        self.model_kwargs = {**model_kwargs, "seed": seed}
        self.engine = TransformerGradientEngine(max_layers=self.num_layers, batch_size=1, **self.model_kwargs)
        kw = self.engine.model_kwargs
        start = self.engine.initial_weights()
        self._initial = [tf.convert_to_tensor(t) for t in _flat(start)]
        self.variables = [tf.Variable(t, trainable=True) for t in self._initial]
        self._weights = _unflat(start, self.variables)
        x, y = markov_tokens(self.steps * self.batch_size, kw["seq_len"], kw["vocab_size"], seed=seed + 1)
        y = y.reshape(self.steps, self.batch_size, kw["seq_len"])
        self.outliers = tuple(check_int("outliers", at, 1, self.steps) for at in outliers)
        for k, at in enumerate(self.outliers):   # an outlier batch: the same inputs, random targets
            y[at - 1] = markov_tokens(self.batch_size, kw["seq_len"], kw["vocab_size"], targets="random",
                                      seed=seed + 100 + k)[1]
        self.x = tf.constant(x.reshape(self.steps, self.batch_size, kw["seq_len"]))
        self.y = tf.constant(y)
        self.name = _("{position}-LN, {blocks} blocks").format(position=norm_position, blocks=num_layers)
        self.optimizer = keras.optimizers.Adam(0.0)
        self.optimizer.build(self.variables)
        self._start = core.snapshot_variables(self.variables, self.optimizer)  # what every run starts from
        self._steps: dict = {}
        self._cache: dict = {}

    def model(self):
        """The Keras model these runs train (a fresh :func:`~gradlab.models.transformer.build_transformer`)."""
        return self.engine.model(self.num_layers, self.norm_position)

    def loss(self, x, y):
        """The mean sparse cross-entropy of the current weights on ``(x, y)`` (a tensor)."""
        logits, __ = self.engine.forward(x, self._weights, self.num_layers,
                                         1.0 if self.norm_position == "pre" else 0.0)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    def _step(self, clip):
        if clip not in self._steps:
            optimizer, variables = self.optimizer, self.variables

            @tf.function
            def step(x, y, learning_rate):
                optimizer.learning_rate = learning_rate
                with tf.GradientTape() as tape:
                    value = self.loss(x, y)
                grads = core.compute_gradients(tape, value, variables, optimizer)
                out = core.apply_update(optimizer, grads, variables, clip=clip, check_finite=True)
                return value, out["global_norm"], out["finite"]

            self._steps[clip] = step
        return self._steps[clip]

    def tracing_count(self) -> int:
        """How many times the training steps have been traced, all clip modes together."""
        return tracing.total_tracing_count(self._steps.values())

    def _reset(self) -> None:
        """Back to the initial weights and a fresh Adam (the core's restore)."""
        core.restore(self._start)

    def _key(self, learning_rate, warmup_steps, clip, steps):
        learning_rate = check_positive("learning_rate", learning_rate)
        steps = self.steps if steps is None else check_int("steps", steps, 1, self.steps)
        warmup_steps = check_int("warmup_steps", warmup_steps, 0, steps)
        return (learning_rate, warmup_steps, core.check_clip(clip), steps)

    @renamed_keywords(clip_norm="clip")
    def cached(self, learning_rate: float = 1e-3, warmup_steps: int = 0, clip=None, *,
               steps: int | None = None) -> TrainingCurve | None:
        """The run of :meth:`run` with these arguments if it has been run, else ``None``."""
        return self._cache.get(self._key(learning_rate, warmup_steps, clip, steps))

    @renamed_keywords(clip_norm="clip")
    def run(self, learning_rate: float = 1e-3, warmup_steps: int = 0, clip=None, *, steps: int | None = None,
            progress: bool | None = None, on_step: Callable[[int, int], None] | None = None) -> TrainingCurve:
        """Train from the initial weights (chapter 09).

        ``clip`` is the one clip keyword of gradlab: a number ``t`` clips the global norm at ``t``
        (``("global_norm", t)``), or any ``(mode, t)`` of :func:`gradlab.clip_gradients`.
        ``progress`` (``None``: on in a notebook) shows a bar ``step k/n``; ``on_step(step, steps)``
        is called after each step (an explorer's own progress bar).
        """
        key = self._key(learning_rate, warmup_steps, clip, steps)
        if on_step is not None and not callable(on_step):
            raise ValueError(f"on_step must be None or a callable on_step(step, steps); got {on_step!r}")
        learning_rate, warmup_steps, clip, steps = key
        bar = Progress(steps, _("training steps"), enabled=check_progress(progress))
        if key in self._cache:
            if on_step is not None:
                on_step(steps, steps)
            bar.update(steps)
            bar.close()
            return self._cache[key]
        schedule = warmup_schedule(learning_rate, warmup_steps, steps)
        rates = np.array([float(schedule(i)) for i in range(steps)], dtype=np.float64)
        self._reset()
        losses, norms = self._train(self._step(clip), rates, on_step, bar)
        label = (_("{name}, lr {lr}, warmup {warmup}") if warmup_steps else _("{name}, lr {lr}")).format(
            name=self.name, lr=f"{learning_rate:.3g}", warmup=warmup_steps)
        curve = TrainingCurve(label, losses, norms, rates, clip)
        self._cache[key] = curve
        self._reset()
        return curve

    def _train(self, step, rates, on_step, bar):
        """The steps of one run; a non-finite loss or gradient stops it (the rest stays NaN)."""
        steps = rates.size
        losses = np.full(steps, np.nan)
        norms = np.full(steps, np.nan)
        for i in range(steps):
            loss, norm, finite = step(self.x[i], self.y[i], tf.constant(rates[i], tf.float32))
            losses[i], norms[i] = float(loss.numpy()), float(norm.numpy())
            if on_step is not None:
                on_step(i + 1, steps)
            bar.update()
            if not (bool(finite.numpy()) and math.isfinite(losses[i])):
                break
        bar.close()
        return losses, norms

    def sweep(self, learning_rates, warmup_steps: int = 0, clip=None, *, steps: int | None = None,
              progress: bool | None = None) -> dict:
        """``{learning_rate: TrainingCurve}``: one :meth:`run` per rate, with a bar ``run k/n`` (chapter 09)."""
        rates = list(learning_rates)
        if not rates:
            raise ValueError("learning_rates must hold at least one learning rate")
        out = {}
        with Progress(len(rates), _("learning-rate sweep"), enabled=check_progress(progress)) as bar:
            for lr in rates:
                out[lr] = self.run(lr, warmup_steps, clip, steps=steps, progress=False)
                bar.update(note=_("lr {lr}").format(lr=f"{lr:.3g}"))
        return out


def _flat(weights: dict) -> list:
    """Every weight as one list: embeddings, each block's weights block by block, final norm, head."""
    blocks = [t[i] for i in range(int(weights["blocks"][0].shape[0])) for t in weights["blocks"]]
    return [weights["token"], weights["position"], *blocks, *weights["final"], *weights["head"]]


def _unflat(template: dict, values: list) -> dict:
    """:func:`_flat`'s list back as :meth:`TransformerGradientEngine.forward`'s ``weights`` (unrolled blocks)."""
    k, depth = len(template["blocks"]), int(template["blocks"][0].shape[0])
    blocks = [values[2 + i * k:2 + (i + 1) * k] for i in range(depth)]
    rest = values[2 + depth * k:]
    return {"token": values[0], "position": values[1], "multiplier": template["multiplier"],
            "block_list": blocks, "final": tuple(rest[:2]), "head": tuple(rest[2:4])}
