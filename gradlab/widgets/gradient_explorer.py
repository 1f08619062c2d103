"""The live GradientExplorer of chapters 01 and 05: depth, activation, initializer, clipping,
and (chapter 05, ``advanced=True``) residual connections, normalization, mixed precision, loss
scaling and paper presets."""

from __future__ import annotations

import html
import math
from collections import OrderedDict

import ipywidgets as widgets

from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from ..engines.mlp import MLPGradientEngine, check_mode
from ..engines.presets import PRESETS, QUANTITIES, compare_preset
from ..i18n import N_, _
from ..models.mlp import ACTIVATIONS, DTYPES, INITIALIZERS, NORMS
from ..plots.gradients import ReportPlot, loss_scale_text
from ..reports.advice import compare_with_paper, gradient_advice
from ..reports.gradients import check_clip
from ..reports.verdict import status_word
from .base import ClipControls, Explorer, css, running_loop
from .sliders import ExactIntSlider

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

    css_name = "explorer"
    plot_css = "plot"
    status_css = "status"

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
        self.depth = self.control("depth", ExactIntSlider(
            "depth", value=depth, min=1, max=EXPLORER_MAX_DEPTH, description=_("depth")), css_name="depth")
        self.activation = self.control("activation", widgets.Dropdown(
            options=list(ACTIVATIONS), value=activation, description=_("activation")),
            css_name="activation")
        self.initializer = self.control("initializer", widgets.Dropdown(
            options=[(_(label), name) for name, label in INITIALIZERS.items()], value=initializer,
            description=_("initializer")), css_name="initializer")
        self.clip_controls(clip)
        self.show_forward = self.control("show_forward", widgets.Checkbox(
            value=show_forward, description=_("forward std"), indent=False), css_name="show-forward")
        self.residual = self.control("residual", widgets.Checkbox(
            value=residual, description=_("residual h + a"), indent=False), css_name="residual")
        self.norm = self.control("norm", widgets.Dropdown(
            options=list(NORMS), value=norm, description=_("norm")), css_name="norm")
        self.dtype = self.control("dtype", widgets.Dropdown(
            options=list(DTYPES), value=dtype, description=_("dtype")), css_name="dtype")
        self.loss_scale = self.control("loss_scale", widgets.Dropdown(
            options=[(_loss_scale_label(v), v) for v in LOSS_SCALES], value=loss_scale,
            description=_("loss scale")), css_name="loss-scale")
        # A preset is not a setting of its own: it sets the others (see _on_preset).
        self.preset = css(widgets.Dropdown(
            options=[(_("(none)"), "")] + [(_(p.title), key) for key, p in PRESETS.items()],
            value="", description=_("preset"), layout=widgets.Layout(width="100%", max_width="560px")),
            "preset")
        self.preset.style.description_width = "60px"
        self.preset_note = css(widgets.HTML(), "preset-note")
        self.preset_result = None
        self.advice = None
        rows = (widgets.VBox([self.preset, self.preset_note]),) if advanced else ()
        self._reports: OrderedDict = OrderedDict()  # settings -> report: a drag back over depths recomputes nothing
        self.start(rows=rows, hidden=() if advanced else ADVANCED, wide=("depth",))
        self.preset.observe(self._on_preset, names="value")
        if preset:
            self.preset.value = preset

    # --------------------------------------------------------------------- the base's hooks
    #: How many reports the explorer keeps (the engine's are deterministic per setting).
    REPORTS = 256

    def _key(self, depth: int) -> tuple:
        return (depth, self.activation.value, self.initializer.value, self.clip, self.residual.value,
                self.norm.value, self.dtype.value, float(self.loss_scale.value))

    def _report_for(self, key: tuple):
        report = self._reports.get(key)
        if report is None:
            report = self._reports[key] = self.engine.report(
                key[0], key[1], key[2], key[3], residual=key[4], norm=key[5], dtype=key[6], loss_scale=key[7])
            while len(self._reports) > self.REPORTS:
                self._reports.popitem(last=False)
        else:
            self._reports.move_to_end(key)
        return report

    def _compute(self):
        return self._report_for(self._key(self.depth.value))

    def _prefetch(self) -> None:
        """Compute the other depths' reports ahead, nearest first, one per turn of the event loop.

        It starts once a change from the page has settled (starting at display, every explorer of
        a notebook computed ahead for depths of its own, and the one dragged next found few of its
        own: a first drag re-plotted 9.5/s instead of 10.7-12). One report per turn (about 20 ms),
        so a message from the page waits at most one report, and any change of any explorer in
        the kernel stops it (:attr:`Explorer.turn`): work ahead never competes with a drag. The
        next drag then finds its depths computed. Never runs outside a kernel.
        """
        loop = running_loop()
        if loop is None:
            return
        turn = Explorer.turn
        here = self.depth.value
        depths = sorted(range(self.depth.min, self.depth.max + 1), key=lambda d: (abs(d - here), -d))
        keys = iter([self._key(d) for d in depths[1:]])

        def step():
            if turn != Explorer.turn or getattr(self, "_settle_handle", None) is not None:
                return  # a newer change (a drag goes on, or a new one) stops it
            for key in keys:
                if key not in self._reports:
                    self._reports[key] = self.engine.report(
                        key[0], key[1], key[2], key[3], residual=key[4], norm=key[5], dtype=key[6],
                        loss_scale=key[7])
                    self._reports.move_to_end(key, last=False)  # evicted before what was shown
                    loop.call_soon(step)
                    return

        loop.call_soon(step)

    def _make_plot(self):
        return ReportPlot(self.report, show_forward=self.show_forward.value, live=True)

    def _update_plot(self) -> None:
        self._plot.update(self.report, show_forward=self.show_forward.value)

    def _sync(self) -> None:
        self._sync_clip()

    def _after_change(self) -> None:
        self._update_preset()

    def settle(self) -> None:
        """The base's settle (the exact picture after a drag or a click), then :meth:`_prefetch`."""
        pending = getattr(self, "_settle_handle", None) is not None or getattr(self, "_draw_pending", False)
        super().settle()
        if pending:
            self._prefetch()

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
               for name, w in self._controls.items() if isinstance(w, widgets.Dropdown)}
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
    def _on_preset(self, change) -> None:
        if self._muted:
            return
        if change["new"]:
            self.set(preset=change["new"])
        else:
            self._on_change()

    def _update_preset(self) -> None:
        key = self.preset.value
        if key and any(getattr(self, n).value != v for n, v in PRESETS[key].settings.items()):
            self._muted = True  # the settings left the preset: deselect it, no recompute
            try:
                self.preset.value = key = ""
            finally:
                self._muted = False
        self.preset_result = compare_preset(key, self.report) if key else None
        note = "" if self.preset_result is None else preset_note_html(self.preset_result)
        if self.preset_note.value != note:
            self.preset_note.value = note

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


def preset_note_html(result) -> str:
    """The preset note under the explorer: the full title, the comparison, the paper's argument."""
    p = result.preset
    c = compare_with_paper(result)
    color = "#1a7f37" if c.agrees else "#cf222e"
    return (f'<div style="font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; '
            f'line-height: 1.45; white-space: normal"><b>{html.escape(_(p.title))}</b>: '
            f"{html.escape(_(QUANTITIES[p.quantity]))}: "
            f'<span style="color: {color}">{html.escape(c.text)}</span><br>'
            f'<span style="font-size: 12px">{html.escape(_(p.paper_text))}<br>'
            f"<i>{html.escape(p.citation)}</i></span></div>")


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

