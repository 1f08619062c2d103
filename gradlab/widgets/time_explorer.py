"""The live TimeExplorer of chapter 07: cell, sequence length, recurrent initializer, input scale, clipping."""

from __future__ import annotations

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from .._validate import check_positive as _check_positive
from ..engines.rnn import TimeGradientEngine
from ..i18n import _
from ..models.rnn import CELLS, MAX_STEPS, RECURRENT_INITIALIZERS
from ..plots.recurrent import time_plots
from ..reports.advice import time_advice
from ..reports.gradients import check_clip
from ..reports.verdict import status_word
from .base import ClipControls, Explorer
from .controls import Dropdown, Slider

__all__ = ["TimeExplorer"]

MIN_STEPS = 5
_SCALE_RANGE = (-2.0, 1.0)  # log10 of the input scale: 0.01 to 10


class TimeExplorer(ClipControls, Explorer):
    """Drag the sequence length and watch the gradient at the first time step vanish (chapter 07).

    Public controls: ``cell``, ``steps``, ``recurrent_initializer``, ``input_scale``,
    ``clip_mode`` and ``clip_norm``. Setting any control's ``value`` recomputes :attr:`report`
    (a :class:`gradlab.reports.time.TimeReport`) before the assignment returns. The page draws
    the numbers sent; no control change retraces the engine's ``tf.function``.
    ``engine=`` shares a :class:`~gradlab.engines.rnn.TimeGradientEngine` (``ex.copy()`` does).
    """

    axis_control = "steps"

    def __init__(self, cell: str = "simple_rnn", steps: int = 50, units: int = 32,
                 recurrent_initializer: str = "orthogonal", clip=None, seed: int = 0, *,
                 input_scale: float = 1.0, input_dim: int = 8, batch_size: int = 32,
                 engine: TimeGradientEngine | None = None):
        _check_choice("cell", cell, tuple(CELLS))
        steps = _check_int("steps", steps, MIN_STEPS, MAX_STEPS)
        _check_choice("recurrent_initializer", recurrent_initializer, tuple(RECURRENT_INITIALIZERS))
        input_scale = _check_positive("input_scale", input_scale)
        if not 10 ** _SCALE_RANGE[0] <= input_scale <= 10 ** _SCALE_RANGE[1]:
            raise ValueError(f"input_scale must be 0.01 to 10; got {input_scale}")
        clip = check_clip(clip)
        if engine is None:
            engine = TimeGradientEngine(units=units, input_dim=input_dim, batch_size=batch_size,
                                        max_steps=MAX_STEPS, seed=seed)
        elif not isinstance(engine, TimeGradientEngine) or engine.max_steps < MAX_STEPS:
            raise ValueError(f"engine must be a TimeGradientEngine with max_steps >= {MAX_STEPS}; "
                             f"got {engine!r}")
        self.engine = engine
        self.cell = self.control(Dropdown("cell", options=list(CELLS), value=cell, description=_("cell")))
        self.steps = self.control(Slider("steps", value=steps, min=MIN_STEPS, max=MAX_STEPS, integer=True,
                                         description=_("steps")))
        self.recurrent_initializer = self.control(Dropdown(
            "recurrent_initializer", options=[(_(label), name) for name, label in RECURRENT_INITIALIZERS.items()],
            value=recurrent_initializer, description=_("recurrent")))
        self.input_scale = self.control(Slider(
            "input_scale", value=input_scale, min=_SCALE_RANGE[0], max=_SCALE_RANGE[1], step=0.1, log=True,
            description=_("input scale")))
        self.clip_controls(clip)
        self.advice = None
        self.start()

    # --------------------------------------------------------------------- the base's hooks
    def _compute(self):
        return self.engine.report(self.cell.value, self.steps.value, self.recurrent_initializer.value,
                                  float(self.input_scale.value), self.clip)

    def _plots(self) -> list[dict]:
        return time_plots(self.report)

    def _report_fields(self) -> dict:
        r = self.report
        return {"time_step_norms": r.time_step_norms, "weight_norms": r.weight_norms,
                "clipped_weight_norms": r.clipped_weight_norms, "ratio": r.ratio}

    def _sync(self) -> None:
        self._sync_clip()

    def _copy_kwargs(self) -> dict:
        kw = self.settings()
        kw["clip"] = self.clip
        del kw["clip_mode"], kw["clip_norm"]
        return dict(kw, engine=self.engine)

    def tracing_count(self) -> int:
        """How many times the engine's functions were traced (0 new ones per control change)."""
        return self.engine.tracing_count()

    # --------------------------------------------------------------------- public helpers
    def labels(self) -> dict:
        """``{control: {value: dropdown label}}`` of every dropdown."""
        out = {}
        for name, w in self._controls.items():
            if isinstance(w, Dropdown):
                out[name] = {o[1] if isinstance(o, tuple) else o: o[0] if isinstance(o, tuple) else o
                             for o in w.options}
        return out

    @property
    def status_text(self) -> str:
        """The status line, e.g. ``simple_rnn · 50 steps · orthogonal · input ×1 · clip off → vanishing: ...``."""
        r = self.report
        self.advice = time_advice(r, self.settings(), self.labels())
        return _("{cell} · {steps} steps · {init} · input ×{scale} · {clip} → {status}: {advice}").format(
            cell=self.cell.value, steps=self.steps.value, init=self.recurrent_initializer.value,
            scale=f"{self.input_scale.value:.3g}", clip=self.clip_text(), status=status_word(r.status),
            advice=self.advice.text)
