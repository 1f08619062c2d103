"""The TransformerExplorer of chapter 09: depth, norm position, learning rate, warmup, clipping."""

from __future__ import annotations

import keras
import numpy as np

from .._validate import check_choice, check_int, check_positive
from ..core import check_clip
from ..engines.transformer import TransformerGradientEngine
from ..i18n import _
from ..models.transformer import NORM_POSITIONS
from ..plots.view import COLORS, decade_limits, line_plot
from ..train.warmup import TrainingRuns
from .base import ClipControls, Explorer
from .controls import Button, Dropdown, Progress, Slider

__all__ = ["TransformerExplorer"]

_LR_RANGE = (-4.0, -1.0)  # log10 of the learning rate: 1e-4 to 0.1
#: The learning rates the slider offers: 1, 2, 3 and 5 per decade from 1e-4 to 0.1; a value
#: given to the constructor or to ``set`` joins them (the slider never rounds it away).
LEARNING_RATES: tuple[float, ...] = tuple(float(f"{m}e{e}") for e in range(-4, -1) for m in (1, 2, 3, 5)) + (0.1,)


def _lr_options(extra=()) -> list[tuple[str, float]]:
    return [(f"{v:g}", v) for v in sorted({*LEARNING_RATES, *map(float, extra)})]


class TransformerExplorer(ClipControls, Explorer):
    """Each block's gradient at initialization, live, and the first training steps on demand (chapter 09).

    Public controls: ``num_layers``, ``norm_position``, ``learning_rate``, ``warmup_steps``,
    ``clip_mode`` and ``clip_norm``. Setting a control's ``value`` recomputes :attr:`report`
    (a :class:`gradlab.reports.transformer.TransformerReport`: ``report.layer_grad_norms`` holds each
    block's float64 gradient norm, earliest block first) from the engine's one ``tf.function``
    (no retrace). :attr:`model` is the Keras model measured (compiled with sparse categorical
    cross-entropy from logits), :attr:`data` the ``(x, y)`` batch. The button (or
    :meth:`run_steps`) trains the first ``steps`` steps with and without warmup, with a progress
    bar; the runs are cached per setting and shown whenever the controls return to it.
    """

    axis_control = "num_layers"

    def __init__(self, num_layers: int = 6, norm_position: str = "pre", learning_rate: float = 1e-3,
                 warmup_steps: int = 50, clip=None, *, steps: int = 200, batch_size: int = 16,
                 engine: TransformerGradientEngine | None = None, runs: dict | None = None, seed: int = 0):
        if engine is not None and not isinstance(engine, TransformerGradientEngine):
            raise ValueError(f"engine must be a TransformerGradientEngine or None; got {type(engine).__name__}")
        self.engine = engine or TransformerGradientEngine(seed=seed)
        num_layers = check_int("num_layers", num_layers, 1, self.engine.max_layers)
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        learning_rate = check_positive("learning_rate", learning_rate)
        if not 10 ** _LR_RANGE[0] <= learning_rate <= 10 ** _LR_RANGE[1]:
            raise ValueError(f"learning_rate must be 1e-4 to 0.1; got {learning_rate}")
        self.steps = check_int("steps", steps, 10, 5000)
        warmup_steps = check_int("warmup_steps", warmup_steps, 0, self.steps // 2)
        clip = check_clip(clip)
        self.batch_size = check_int("batch_size", batch_size, 1, 4096)
        self.seed = check_int("seed", seed, 0)
        self._runs: dict = {} if runs is None else runs      # (num_layers, position) -> TrainingRuns, shared by copies
        self._models: dict = {}
        self.num_layers = self.control(Slider("num_layers", value=num_layers, min=1, max=self.engine.max_layers,
                                              integer=True, description=_("blocks")))
        self.norm_position = self.control(Dropdown(
            "norm_position", options=[(_("pre-LN"), "pre"), (_("post-LN"), "post")], value=norm_position,
            description=_("LayerNorm")))
        # the grid of rates as a slider over its values; a value given joins them, never rounded
        self.learning_rate = self.control(Dropdown(
            "learning_rate", options=_lr_options([learning_rate]), value=float(learning_rate),
            description=_("learning rate"), slider=True))
        self.warmup_steps = self.control(Slider("warmup_steps", value=warmup_steps, min=0, max=self.steps // 2,
                                                integer=True, description=_("warmup")))
        self.clip_controls(clip)
        self.run_button = self.control(Button(
            "run", description=_("run the first {steps} steps").format(steps=self.steps)))
        self.progress = self.control(Progress("progress", max=2 * self.steps))
        self.run_button.on_click(lambda button: self.run_steps())
        self.start()

    # ------------------------------------------------------------------ what the learner reads
    @property
    def model(self):
        """The Keras model whose gradients :attr:`report` holds (built on first use, compiled)."""
        key = (self.num_layers.value, self.norm_position.value)
        if key not in self._models:
            model = self.engine.model(*key)
            model.compile(optimizer=keras.optimizers.Adam(self.learning_rate.value),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            self._models[key] = model
        return self._models[key]

    @property
    def data(self):
        """The ``(x, y)`` batch of token sequences the per-block norms are measured on."""
        return self.engine.data

    @property
    def runs(self):
        """``(with_warmup, without_warmup)`` for the current setting, or ``None`` if not run yet."""
        trainer = self._runs.get((self.num_layers.value, self.norm_position.value))
        if trainer is None:
            return None
        warm = trainer.cached(warmup_steps=self.warmup_steps.value, **self._setting())
        plain = trainer.cached(warmup_steps=0, **self._setting())
        return None if warm is None or plain is None else (warm, plain)

    def _setting(self) -> dict:
        return dict(learning_rate=float(self.learning_rate.value), clip=self.clip)

    def run_steps(self):
        """Train the first steps with and without warmup for the current setting (cached); returns them."""
        key = (self.num_layers.value, self.norm_position.value)
        if key not in self._runs:
            self._runs[key] = TrainingRuns(*key, steps=self.steps, batch_size=self.batch_size,
                                           **self.engine.model_kwargs)
        trainer = self._runs[key]
        self.progress.value = 0
        done = 0

        def tick(step, steps):
            self.progress.value = done + step

        warm = trainer.run(warmup_steps=self.warmup_steps.value, progress=False, on_step=tick, **self._setting())
        done = self.steps
        plain = trainer.run(warmup_steps=0, progress=False, on_step=tick, **self._setting())
        self.progress.value = 2 * self.steps
        self.invalidate()  # the views along the axis now show runs
        self._on_change()
        return warm, plain

    # ------------------------------------------------------------------ the explorer's hooks
    def _prepare(self, values: dict) -> dict:
        """``set(learning_rate=...)``: a rate in range joins the slider's options, unrounded."""
        if "learning_rate" in values:
            lr = check_positive("learning_rate", values["learning_rate"])
            if not 10 ** _LR_RANGE[0] <= lr <= 10 ** _LR_RANGE[1]:
                raise ValueError(f"learning_rate must be 1e-4 to 0.1; got {lr}")
            values["learning_rate"] = lr = float(lr)
            offered = [v for _label, v in self.learning_rate.options]
            if lr not in offered:
                self._muted = True
                try:
                    current = self.learning_rate.value
                    self.learning_rate.options = _lr_options([*offered, lr])
                    self.learning_rate.value = current
                finally:
                    self._muted = False
        return values

    def _sync(self) -> None:
        self._sync_clip()

    def _compute(self):
        return self.engine.report(self.num_layers.value, self.norm_position.value)

    def _key(self) -> str:
        return repr((self.num_layers.value, self.norm_position.value))  # the report's only inputs

    def _plots(self) -> list[dict]:
        r = self.report
        n = np.asarray(r.layer_grad_norms, dtype=np.float64)
        ffn = np.asarray(r.ffn_grad_norms, dtype=np.float64)
        x = np.arange(1, n.size + 1)
        blocks = line_plot(
            x=x, series=[{"label": _("all of the block's variables"), "y": n, "color": COLORS["signal"], "width": 1.8,
                          "marker": "dot"},
                         {"label": _("second FFN kernel"), "y": ffn, "color": COLORS["accent"], "width": 1.2,
                          "dash": [4, 3], "marker": "dot"}],
            xlabel=_("block (1 = nearest the input)"), ylabel=_("gradient norm at initialization (log scale)"),
            title=self._title(), xlim=(0.5, max(n.size, 2) + 0.5), ylim=decade_limits(np.concatenate([n, ffn])),
            flex=1.15)
        runs = self.runs
        if runs is None:
            return [blocks]
        steps = np.arange(1, max(c.losses.size for c in runs) + 1)
        colors = (COLORS["signal"], COLORS["weight"])
        labels = (_("with warmup"), _("without warmup"))
        loss = line_plot(x=steps, series=[{"label": lab, "y": c.losses, "color": col, "width": 1.3}
                                          for lab, c, col in zip(labels, runs, colors, strict=True)],
                         xlabel=_("training step"), ylabel=_("loss"), ylog=False, flex=1, height=240)
        clip = self.clip
        series = [{"label": lab, "y": c.grad_norms, "color": col, "width": 1.0}
                  for lab, c, col in zip(labels, runs, colors, strict=True)]
        if clip is not None and clip[0] == "global_norm":
            series.append({"label": _("clip threshold (dotted)"), "y": np.full(steps.size, clip[1]),
                           "color": COLORS["muted"], "width": 1.2, "dash": [2, 3]})
        norms = line_plot(x=steps, series=series, xlabel=_("training step"), ylabel=_("gradient norm"), flex=1,
                          height=240)
        return [blocks, loss, norms]

    def _report_fields(self) -> dict:
        r = self.report
        return {"layer_grad_norms": r.layer_grad_norms, "ffn_grad_norms": r.ffn_grad_norms, "ratio": r.ratio}

    def _title(self) -> str:
        return _("{position}-LN, {blocks} blocks: last/first {ratio}").format(
            position=self.norm_position.value, blocks=self.num_layers.value, ratio=f"{self.report.ratio:.3g}")

    def _status_color(self):
        return None

    def _head(self) -> str:
        r = self.report
        return _("{position}-LN · {blocks} blocks → gradient norm of block 1 {first}, of block {blocks} {last} "
                 "(last/first {ratio})").format(position=self.norm_position.value, blocks=r.num_layers,
                                                first=f"{r.layer_grad_norms[0]:.3g}",
                                                last=f"{r.layer_grad_norms[-1]:.3g}", ratio=f"{r.ratio:.3g}")

    def _text(self) -> str:
        """The stored text (nbval compares it): the deterministic norms at initialization only.

        The losses of a short training run depend on float rounding (a run at the edge of
        stability can learn on one CPU and stall on another), so they stay in the live status.
        """
        return self._head()

    @property
    def status_text(self) -> str:
        head = self._head()
        runs = self.runs
        if runs is None:
            return head
        warm, plain = runs
        return head + " · " + _("lr {lr}, {clip}: loss after {steps} steps {warm} with {warmup} warmup steps, "
                                "{plain} without").format(
            lr=f"{self.learning_rate.value:.2g}", clip=self.clip_text(), steps=self.steps,
            warm=f"{warm.final_loss:.3g}", warmup=self.warmup_steps.value, plain=f"{plain.final_loss:.3g}")

    def tracing_count(self) -> int:
        return self.engine.tracing_count()

    def _copy_kwargs(self) -> dict:
        return dict(num_layers=self.num_layers.value, norm_position=self.norm_position.value,
                    learning_rate=float(self.learning_rate.value), warmup_steps=self.warmup_steps.value,
                    clip=self.clip, steps=self.steps, batch_size=self.batch_size, engine=self.engine,
                    runs=self._runs, seed=self.seed)
