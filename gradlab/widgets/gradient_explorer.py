"""The live GradientExplorer of chapters 01 and 05: depth, activation, initializer, clipping,
and (chapter 05, ``advanced=True``) residual connections, normalization, mixed precision, loss
scaling and paper presets."""

from __future__ import annotations

import math

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from ..engines.mlp import MLPGradientEngine, check_mode
from ..engines.presets import PRESETS, QUANTITIES, compare_preset
from ..i18n import N_, _
from ..models.mlp import ACTIVATIONS, DTYPES, INITIALIZERS, NORMS
from ..plots.gradients import loss_scale_text, report_plot
from ..plots.view import COLORS, STATUS_COLORS
from ..reports.advice import compare_with_paper, gradient_advice
from ..reports.gradients import check_clip
from ..reports.verdict import status_word
from .base import ClipControls, Explorer
from .controls import Checkbox, Dropdown, Slider

__all__ = ["GradientExplorer", "LOSS_SCALES"]

EXPLORER_MAX_DEPTH = 100
#: The loss-scale factors the explorer offers: 1 (off) and the powers of two up to 2^24.
LOSS_SCALES: tuple[float, ...] = tuple(2.0**k for k in range(25))
#: Chapter 05's controls: shown with ``advanced=True`` (or when one of them is set).
ADVANCED = ("residual", "norm", "dtype", "loss_scale")
#: The status line's word for each normalization (whole messages, one per choice).
NORM_TEXTS = {"batch": N_("batch norm"), "layer": N_("layer norm")}


def _loss_scale_label(v: float) -> str:
    k = int(math.log2(v))
    return _("1 (off)") if k == 0 else f"2^{k} = {int(v):,}"


def check_loss_scale(value) -> float:
    """``value`` must be one of :data:`LOSS_SCALES` (1 meaning off)."""
    v = check_mode(loss_scale=value)[3]
    if v not in LOSS_SCALES:
        raise ValueError(f"loss_scale must be a power of two from 1 (off) to 2**24; got {value!r}")
    return v


class GradientExplorer(ClipControls, Explorer):
    """Move the sliders and watch the per-layer gradient norms vanish, explode or stay healthy.

    Public controls: ``depth``, ``activation``, ``initializer``, ``clip_mode``, ``clip_norm``,
    ``show_forward`` (chapter 01) and ``residual``, ``norm``, ``dtype``, ``loss_scale``,
    ``preset`` (chapter 05; shown with ``advanced=True``, which any of their keywords implies).
    Setting any control's ``value`` recomputes :attr:`report` before the assignment returns, so
    ``ex.depth.value = 50; ex.report`` is current. Choosing a preset sets the other controls to
    a paper's setting and shows the paper's number beside the measured one
    (``ex.preset_result``). ``engine=`` shares an :class:`MLPGradientEngine` (and its traced
    functions) with the chapter's own cells. The status line's advice comes from the current
    settings (:func:`gradlab.reports.advice.gradient_advice`): it never recommends what is selected.
    """

    def __init__(
        self,
        depth: int = 20,
        activation: str = "sigmoid",
        initializer: str = "glorot_uniform",
        clip=None,
        width: int = 64,
        batch_size: int = 128,
        seed: int = 0,
        *,
        show_forward: bool = True,
        residual: bool = False,
        norm: str = "none",
        dtype: str = "float32",
        loss_scale: float = 1,
        preset: str | None = None,
        advanced: bool | None = None,
        engine: MLPGradientEngine | None = None,
    ):
        depth = _check_int("depth", depth, 1, EXPLORER_MAX_DEPTH)
        _check_choice("activation", activation, ACTIVATIONS)
        _check_choice("initializer", initializer, tuple(INITIALIZERS))
        clip = check_clip(clip)
        residual, norm, dtype, _scale = check_mode(residual, norm, dtype)
        loss_scale = check_loss_scale(loss_scale)
        if preset is not None:
            _check_choice("preset", preset, ("", *PRESETS))
        if advanced is not None and not isinstance(advanced, bool):
            raise ValueError(f"advanced must be True, False or None; got {advanced!r}")
        if not isinstance(show_forward, bool):
            raise ValueError(f"show_forward must be True or False; got {show_forward!r}")
        if advanced is None:
            advanced = bool(residual or norm != "none" or dtype != "float32" or loss_scale != 1 or preset)
        self.advanced = advanced
        if engine is None:
            engine = MLPGradientEngine(width=width, batch_size=batch_size, max_depth=EXPLORER_MAX_DEPTH,
                                       seed=seed)
        elif not isinstance(engine, MLPGradientEngine) or engine.max_depth < EXPLORER_MAX_DEPTH:
            raise ValueError(f"engine must be an MLPGradientEngine with max_depth >= {EXPLORER_MAX_DEPTH}; "
                             f"got {engine!r}")
        self.engine = engine  # shared with the chapter's own engine: its traces are reused
        self.depth = self.control(Slider(
            "depth", value=depth, min=1, max=EXPLORER_MAX_DEPTH, integer=True, description=_("depth")), wide=True)
        self.activation = self.control(Dropdown(
            "activation", options=list(ACTIVATIONS), value=activation, description=_("activation")))
        self.initializer = self.control(Dropdown(
            "initializer", options=[(_(label), name) for name, label in INITIALIZERS.items()], value=initializer,
            description=_("initializer")))
        self.clip_controls(clip)
        self.show_forward = self.control(Checkbox(
            "show_forward", value=show_forward, description=_("forward std")))
        self.residual = self.control(Checkbox("residual", value=residual, description=_("residual h + a")))
        self.norm = self.control(Dropdown("norm", options=list(NORMS), value=norm, description=_("norm")))
        self.dtype = self.control(Dropdown("dtype", options=list(DTYPES), value=dtype, description=_("dtype")))
        self.loss_scale = self.control(Dropdown(
            "loss_scale", options=[(_loss_scale_label(v), v) for v in LOSS_SCALES], value=loss_scale,
            description=_("loss scale")))
        # A preset is not a setting of its own: it sets the others (see _on_preset).
        self.preset = self.control(Dropdown(
            "preset", options=[(_("(none)"), "")] + [(_(p.title), key) for key, p in PRESETS.items()],
            value="", description=_("preset"), setting=False), hidden=not advanced)
        self.preset_result = None
        self.advice = None
        self.start(hidden=() if advanced else ADVANCED)
        if preset:
            self.set(preset=preset)

    # --------------------------------------------------------------------- the base's hooks
    axis_control = "depth"
    compute_ahead = True

    def _compute(self):
        return self.engine.report(self.depth.value, self.activation.value, self.initializer.value, self.clip,
                                  residual=self.residual.value, norm=self.norm.value, dtype=self.dtype.value,
                                  loss_scale=float(self.loss_scale.value))

    def _key(self) -> str:
        # the forward-std checkbox and the preset change what is drawn, not the report
        v = self._values()
        v.pop("show_forward", None)
        v.pop("preset", None)
        if v.get("clip_mode") == "off":
            v.pop("clip_norm", None)
        return repr(sorted(v.items()))

    def _plots(self) -> list[dict]:
        return [report_plot(self.report, show_forward=self.show_forward.value)]

    def _notes(self) -> list:
        lines = []
        if self.report.loss_scale != 1:
            lines.append([{"text": _("gradients shown unscaled (divided by the loss scale {scale})").format(
                scale=loss_scale_text(self.report.loss_scale)), "color": COLORS["muted"], "small": True}])
        if self.preset_result is not None:
            lines.extend(preset_note_lines(self.preset_result))
        return lines

    def _report_fields(self) -> dict:
        r = self.report
        return {"signal_norms": r.signal_norms, "weight_norms": r.weight_norms,
                "clipped_weight_norms": r.clipped_weight_norms, "activation_stds": r.activation_stds,
                "predicted_signal": getattr(r, "predicted_signal", None), "ratio": r.ratio}

    def _sync(self) -> None:
        self._sync_clip()

    def _after_change(self) -> None:
        self._update_preset()

    def _copy_kwargs(self) -> dict:
        kw = self.settings()
        kw["clip"] = self.clip
        del kw["clip_mode"], kw["clip_norm"]
        return dict(kw, engine=self.engine, advanced=self.advanced)

    def tracing_count(self) -> int:
        """How many times the engine's functions were traced (0 new ones per control change)."""
        return self.engine.tracing_count()

    # --------------------------------------------------------------------- public helpers
    def labels(self) -> dict:
        """``{control: {value: dropdown label}}`` of every dropdown and checkbox."""
        out = {name: {v: lab for lab, v in _pairs(w.options)}
               for name, w in self._controls.items() if isinstance(w, Dropdown) and w.setting}
        out["residual"] = {True: _("residual h + a"), False: _("no residual")}
        return out

    @property
    def status_text(self) -> str:
        """The status line in plain words, e.g. ``depth 50 · sigmoid · ... → vanishing: ...``.

        Chapter 05's modes appear only when they differ from the defaults
        (``depth 14 · sigmoid · glorot_uniform · float16 · clip off → ...``); the advice
        after the finding comes from the current settings and names dropdown labels.
        """
        r = self.report
        shown = [n for n in self.control_names if self.advanced or n not in ADVANCED]
        self.advice = gradient_advice(r, {**self.settings(), "width": self.engine.width}, self.labels(),
                                      shown=shown, loss_scales=LOSS_SCALES)  # width: σ=0.01/σ=1 variances
        mode = f"{_mode_text(r)} · " if _mode_text(r) else ""
        return _("depth {depth} · {activation} · {initializer} · {mode}{clip} → {status}: {advice}").format(
            depth=self.depth.value, activation=self.activation.value, initializer=self.initializer.value,
            mode=mode, clip=self.clip_text(), status=status_word(r.status), advice=self.advice.text)

    def _prepare(self, values: dict) -> dict:
        """``set(preset=key, ...)`` applies a paper preset first; the other values then override it."""
        if "loss_scale" in values:
            values["loss_scale"] = check_loss_scale(values["loss_scale"])
        preset = values.pop("preset", None)
        if preset is None:
            return values
        _check_choice("preset", preset, ("", *PRESETS))
        self._muted = True
        try:
            self.preset.value = preset
        finally:
            self._muted = False
        return {**(PRESETS[preset].settings if preset else {}), **values}

    # --------------------------------------------------------------------- internals
    def _on_other(self, control) -> None:
        """``ex.preset.value = key`` in Python applies the preset, as ``set(preset=key)`` does."""
        self.set(preset=control.value)

    def _on_page_preset(self) -> None:
        """The page chose a preset: apply its settings (the base then draws them)."""
        key = self.preset.value
        if key:
            self._muted = True
            try:
                for name, value in PRESETS[key].settings.items():
                    self._controls[name].value = value
            finally:
                self._muted = False

    def _update_preset(self) -> None:
        key = self.preset.value
        if key and any(getattr(self, n).value != v for n, v in PRESETS[key].settings.items()):
            self._muted = True  # the settings left the preset: deselect it, no recompute
            try:
                self.preset.value = key = ""
            finally:
                self._muted = False
        self.preset_result = compare_preset(key, self.report) if key else None

    def _text(self) -> str:
        if self.preset_result is None:
            return self.status_text
        return self.status_text + "\n" + preset_note_text(self.preset_result)


def preset_note_text(result) -> str:
    """``preset <full title>: <quantity>: paper …, measured …: agrees … · <citation>``."""
    p = result.preset
    return _("preset {title}: {quantity}: {comparison} · {citation}").format(
        title=_(p.title), quantity=_(QUANTITIES[p.quantity]), comparison=compare_with_paper(result).text,
        citation=p.citation)


def preset_note_lines(result) -> list:
    """The preset note under the explorer: the full title, the comparison, the paper's argument."""
    p = result.preset
    c = compare_with_paper(result)
    return [[{"text": _(p.title), "bold": True}, {"text": ": " + _(QUANTITIES[p.quantity]) + ": "},
             {"text": c.text, "color": STATUS_COLORS["healthy"] if c.agrees else STATUS_COLORS["exploding"]}],
            [{"text": _(p.paper_text), "small": True}],
            [{"text": p.citation, "italic": True, "small": True}]]


def _pairs(options):
    return [(o, o) if not isinstance(o, tuple) else o for o in options]


def _mode_text(report) -> str:
    """The non-default modes in words, e.g. ``residual · batch norm · float16 · loss scale 2^15``."""
    parts = [_("residual")] if report.residual else []
    if report.norm != "none":  # whole messages: "{norm} norm" read "batch 范数" in Chinese
        parts.append(_(NORM_TEXTS[report.norm]))
    if report.dtype != "float32":
        parts.append(report.dtype)
    if report.loss_scale != 1:
        parts.append(_("loss scale {scale}").format(scale=loss_scale_text(report.loss_scale)))
    return " · ".join(parts)

