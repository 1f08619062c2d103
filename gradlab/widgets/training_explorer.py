"""The live TrainingExplorer of chapter 11: watch the gradients of a run, step by step.

Two forms, one view:

* **the built-in run** (``gl.TrainingExplorer(depth=20, activation="sigmoid", ...)``): chapter
  01's MLP trained in float64 by :class:`gradlab.engines.training.TrainingEngine`, with controls
  for the depth, activation, initializer, optimizer, learning rate, clipping and steps;
* **the learner's own model** (``gl.TrainingExplorer(model, x, y, optimizer=..., steps=...)``):
  :func:`gradlab.train.watch.watch_training` on the batch, in the model's own dtype, with controls
  for the learning rate (where the optimizer's is a number), clipping and steps. The model, its
  optimizer and its state are left exactly as they were.

The ``step`` slider (with play and pause) moves through the run: the view holds every step's
histograms (its *frames*, :mod:`gradlab.plots.view`), so the page draws a step without the
kernel. A change made in the page draws the built-in run as it comes in, every
:attr:`TrainingExplorer.CHUNK` steps; a change made in Python computes the whole run before it
returns (``ex.depth.value = 12; ex.report`` is that run's).
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import check_int as _check_int
from ..core import check_clip
from ..engines.training import OPTIMIZERS, TrainingEngine, check_settings
from ..i18n import _
from ..models.mlp import ACTIVATIONS, INITIALIZERS
from ..plots.training import frame_steps, training_plots
from ..plots.view import STATUS_COLORS, view_png
from ..train.watch import copy_optimizer, watch_training
from .base import ClipControls, Explorer, running_loop
from .controls import Dropdown, Slider

__all__ = ["TrainingExplorer"]

#: The depth slider's top (the run at 50 layers takes about 1 s for 100 steps here).
MAX_DEPTH = 50
#: The learning rates on the slider (a value passed that is not one of them is added).
LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 1.0)
#: The numbers of steps on the slider (likewise).
STEPS = (10, 20, 30, 40, 50, 60, 80, 100, 150, 200)
#: The status colours of the run's findings (``[light, dark]``).
RUN_COLORS = {"healthy": STATUS_COLORS["healthy"], "diverged": STATUS_COLORS["non-finite"],
              "not-learning": STATUS_COLORS["vanishing"], "saturated": STATUS_COLORS["vanishing"],
              "dead-units": STATUS_COLORS["exploding"], "steps-too-large": STATUS_COLORS["exploding"]}


def _on_grid(lr: float) -> float:
    """``lr`` as the slider's grid value it is in float32 (an optimizer's config reads SGD(0.1)'s
    rate back as 0.10000000149011612), else itself."""
    return next((v for v in LEARNING_RATES if np.float32(v) == np.float32(lr)), lr)


def _grid(values, extra) -> list:
    return [(f"{v:g}", v) for v in sorted({*values, extra})]


class TrainingExplorer(ClipControls, Explorer):
    """A training run, per step and per layer, live (chapter 11).

    Public controls: ``depth``, ``activation``, ``initializer``, ``optimizer``, ``learning_rate``,
    ``clip_mode``, ``clip_norm``, ``steps`` and ``step`` (the step the histograms show, and the
    cursor on the curves; the view holds the histograms of every ``frame_every``-th step, every
    step by default, every 5th on the book site). On a learner's model: ``learning_rate`` (when the optimizer's is a
    number), ``clip_mode``, ``clip_norm``, ``steps`` and ``step``. :attr:`report` is a
    :class:`gradlab.reports.training.TrainingReport`; its ``status_line`` says what happened.
    """

    #: Steps per view while a run from the page comes in.
    CHUNK = 25

    def __init__(self, model=None, x=None, y=None, *, depth: int = 20, activation: str = "sigmoid",
                 initializer: str = "glorot_uniform", optimizer="sgd", learning_rate: float | None = None,
                 clip=None, steps: int = 60, loss=None, sample_weight=None, engine: TrainingEngine | None = None,
                 frame_every: int = 1):
        self.model = model
        self.frame_every = _check_int("frame_every", frame_every, 1, max(STEPS))
        if model is None:
            if x is not None or y is not None or loss is not None or sample_weight is not None:
                raise ValueError("x, y, loss and sample_weight go with a model: TrainingExplorer(model, x, y, "
                                 "optimizer=..., steps=...); the built-in run takes depth=, activation=, ...")
            learning_rate = 0.1 if learning_rate is None else learning_rate
            depth, activation, initializer, optimizer, learning_rate, clip, steps = check_settings(
                depth, activation, initializer, optimizer, learning_rate, clip, steps, max_depth=MAX_DEPTH)
            if engine is None:
                engine = TrainingEngine()
            elif not isinstance(engine, TrainingEngine) or engine.max_depth < MAX_DEPTH:
                raise ValueError(f"engine must be a TrainingEngine with max_depth >= {MAX_DEPTH}; got {engine!r}")
            self.engine = engine
        else:
            if isinstance(model, (int, float)) and not isinstance(model, bool):
                raise TypeError("TrainingExplorer's first argument is a Keras model; the built-in run's depth "
                                f"is a keyword: TrainingExplorer(depth={model})")
            if x is None or y is None:
                raise ValueError("a model needs its batch: TrainingExplorer(model, x, y, optimizer=..., steps=...)")
            if engine is not None:
                raise ValueError("engine= is for the built-in run, not for a model")
            given = {k: v for k, v, default in (("depth", depth, 20), ("activation", activation, "sigmoid"),
                                                 ("initializer", initializer, "glorot_uniform")) if v != default}
            if given:
                raise ValueError(f"{', '.join(given)} belong to the built-in run; a model is trained as it is "
                                 f"(got {given})")
            self._optimizer = copy_optimizer(optimizer)  # checks it; the one given is never stepped
            steps = _check_int("steps", steps, 1, max(STEPS))
            clip = check_clip(clip)
            lr = self._optimizer.get_config().get("learning_rate")
            if learning_rate is not None:
                if not isinstance(lr, (int, float)):
                    raise ValueError("learning_rate= needs an optimizer whose learning rate is a number, not a "
                                     "schedule")
                if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) \
                        or not math.isfinite(learning_rate) or learning_rate <= 0:
                    raise ValueError(f"learning_rate must be a positive number; got {learning_rate!r}")
                lr = learning_rate
            learning_rate = _on_grid(float(lr)) if isinstance(lr, (int, float)) else None
            self.engine = None
            self._batch = dict(x=x, y=y, loss=loss, sample_weight=sample_weight)
        if isinstance(steps, int) and not 1 <= steps <= max(STEPS):
            raise ValueError(f"steps must be from 1 to {max(STEPS)} in the explorer; got {steps}")
        if model is None:
            self.depth = self.control(Slider("depth", value=depth, min=1, max=MAX_DEPTH, integer=True,
                                             description=_("depth")))
            self.activation = self.control(Dropdown("activation", options=list(ACTIVATIONS), value=activation,
                                                    description=_("activation")))
            self.initializer = self.control(Dropdown(
                "initializer", options=[(_(label), name) for name, label in INITIALIZERS.items()],
                value=initializer, description=_("initializer")))
            self.optimizer = self.control(Dropdown("optimizer", options=list(OPTIMIZERS), value=optimizer,
                                                   description=_("optimizer")))
        if learning_rate is not None:
            self.learning_rate = self.control(Dropdown(
                "learning_rate", options=_grid(LEARNING_RATES, float(learning_rate)), value=float(learning_rate),
                description=_("learning rate"), slider=True))
        self.clip_controls(clip)
        self.steps = self.control(Dropdown("steps", options=_grid(STEPS, steps), value=steps,
                                           description=_("steps"), slider=True))
        self.step = self.control(Slider("step", value=steps, min=1, max=steps, integer=True, description=_("step"),
                                        setting=False, frame=True, play=_("play or pause")), wide=True)
        self._run_key = None
        self._token = 0
        self.cache_reports = model is None  # a model's run depends on its weights, not only the controls
        self.start()
        self._run_key = self._key()

    # --------------------------------------------------------------------- the run
    def run_settings(self) -> dict:
        """The keywords of the run shown (the built-in run's: ``TrainingExplorer(**ex.run_settings())``
        computes the same report)."""
        out = {}
        if self.model is None:
            out.update(depth=self.depth.value, activation=self.activation.value, initializer=self.initializer.value,
                       optimizer=self.optimizer.value)
        if hasattr(self, "learning_rate"):
            out["learning_rate"] = float(self.learning_rate.value)
        return dict(out, clip=self.clip, steps=self.steps.value)

    def _key(self) -> str:
        values = self._values()
        values.pop("step", None)
        return repr(sorted(values.items()))

    def _chunks(self, chunk: int):
        s = self.run_settings()
        if self.model is None:
            return self.engine.chunks(**s, chunk=chunk)
        return iter([self._watch(s)])

    def _watch(self, s: dict):
        opt = self._optimizer
        if "learning_rate" in s:
            opt = type(opt).from_config({**opt.get_config(), "learning_rate": s["learning_rate"]})
        return watch_training(self.model, optimizer=opt, steps=s["steps"], clip=s["clip"], **self._batch)

    def _compute(self):
        *_earlier, report = self._chunks(max(STEPS))
        return report

    def _sync(self) -> None:
        self._sync_clip()
        steps = int(self.steps.value)
        if self.step.max != steps:
            self.step.max = steps
            self._send_spec()
        if self.step.value > steps:  # fewer steps: the step stays in the run
            self._muted = True
            try:
                self.step.value = steps
            finally:
                self._muted = False
            self.values = self._values()

    def _after_change(self) -> None:
        self._run_key = self._key()

    def _redraw(self) -> None:
        self._token += 1  # a run coming in for older settings stops
        if self._run_key is not None and self._run_key == self._key():
            self.view = self._view()  # only the step moved: the same run, its values
            self._changed()
            return
        super()._redraw()

    def _draw_page_change(self) -> None:
        """A change from the page: the step alone needs no new run; a new built-in run is drawn
        as it comes in (one chunk per turn of the event loop)."""
        if not self._draw_pending:
            return
        self._draw_pending = False
        if self._run_key == self._key():
            self._schedule_picture()  # the page drew the step from the view's frames
            return
        key = self._key()
        cached = self._reports.get(key)
        loop = running_loop()
        if cached is not None or self.model is not None or loop is None:
            return self._redraw()
        self._token += 1
        self._sync()
        self._next_chunk(self._token, self._chunks(self.CHUNK), key)

    def _next_chunk(self, token: int, chunks, key: str) -> None:
        if token != self._token or self._key() != key:
            # newer settings came in (their draw is pending): this run's views would carry their values
            chunks.close()
            return
        report = next(chunks)
        self.report = report
        self._run_key = None if report.partial else key
        if not report.partial:
            self._reports[key] = report
            self._after_change()
        self.view = self._view()
        if report.partial:
            running_loop().call_soon(self._next_chunk, token, chunks, key)
        else:
            self._changed()

    def _on_other(self, control) -> None:
        """``ex.step.value = t`` from Python: the page moves its slider; the view already holds every step."""
        if self.values != self._values():
            self.values = self._values()
        self._schedule_picture()

    # --------------------------------------------------------------------- the view
    def _plots(self) -> list[dict]:
        return training_plots(self.report, self.frame_every)

    def _view(self) -> dict:
        view = super()._view()
        view["frames"] = {"control": "step", "values": frame_steps(self.report, self.frame_every)}
        view["layout"] = "stacked"  # six plots: the controls go above them
        return view

    def png(self) -> bytes:
        return view_png(dict(self.view, values=self._values()))

    def _report_fields(self) -> dict:
        """The run's keywords and numbers; the per-layer arrays layer by layer, ``grad_norms[l][t]``
        (the transpose of the report's ``[t, l]``: each row is also a curve of the view)."""
        r = self.report
        return {"run": r.settings, "loss": r.loss, "grad_norms": r.grad_norms.T, "update_ratios": r.update_ratios.T,
                "layer_names": list(r.layer_names), "diverged_at": r.diverged_at, "steps_taken": r.steps_taken}

    def _status_color(self):
        return RUN_COLORS.get(self.report.status)

    def _settings_text(self) -> str:
        s = self.run_settings()
        lr = f"{s['learning_rate']:g}" if "learning_rate" in s else ""
        clip = self.clip_text()
        if self.model is None:
            return _("depth {depth} · {activation} · {initializer} · {optimizer} {lr} · {clip} · {steps} steps").format(
                depth=s["depth"], activation=s["activation"], initializer=s["initializer"], optimizer=s["optimizer"],
                lr=lr, clip=clip, steps=s["steps"])
        return _("{model} · {optimizer} {lr} · {clip} · {steps} steps").format(
            model=self.model.name, optimizer=type(self._optimizer).__name__, lr=lr, clip=clip, steps=s["steps"])

    @property
    def status_text(self) -> str:
        """The settings and what happened over the run, e.g. ``depth 20 · sigmoid · ... → the first
        layer (hidden_1)'s updates are 3.1e-36 of its weights ...``."""
        return _("{settings} → {status}").format(settings=self._settings_text(), status=self.report.status_line)

    def _copy_kwargs(self) -> dict:
        s = self.run_settings()
        if self.model is None:
            return dict(s, engine=self.engine, frame_every=self.frame_every)
        return dict(s, model=self.model, optimizer=self._optimizer, frame_every=self.frame_every, **self._batch)

    def tracing_count(self) -> int:
        """How many times the built-in run's functions were traced (one per activation; 0 on a model)."""
        return self.engine.tracing_count() if self.engine is not None else 0
