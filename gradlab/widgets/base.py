"""The one explorer base every gradlab explorer builds on (chapters 00, 01, 02, 03, 05, 07, 09).

An explorer is controls → one change handler → compute → a figure built once and blitted →
a status line, plus a static picture that survives a save and ``snapshot()``. This module
holds all of that once; an explorer is one subclass that declares its controls and says how
to compute, what to plot and what the status line reads::

    class SquareExplorer(Explorer):
        css_name = "square"                         # .gradlab-square; parts .gradlab-square-*

        def __init__(self, x: float = 1.0):
            self.x = self.control("x", widgets.FloatSlider(value=x, min=-3, max=3))
            self.start()                            # compute, plot, status, layout, observe

        def _compute(self):                         # the state every view reads: self.report
            return {"x": self.x.value, "y": self.x.value ** 2}

        def _make_plot(self):                       # a gradlab.plots.live.LivePlot
            return SquarePlot(self.report)

        @property
        def status_text(self) -> str:
            return _("x = {x} → x² = {y}").format(x=self.report["x"], y=self.report["y"])

Everything else comes from the base: ``set(**values)`` (several controls, one recompute),
``snapshot()``, ``copy()``, ``controls``, the static PNG beside the live view
(``_repr_mimebundle_``), the CSS classes (``gradlab-<css_name>``, ``-plot``, ``-status``, and
``gradlab-<css_name>-<control>`` unless a control names its own), a layout that wraps on a
narrow screen and a figure that follows the width of the output area.

A drag in the page is drawn as drafts (issue 29): ipywidgets' front end sends the next value
only when the kernel has reported idle after the last one. The handler of a change from the
page therefore only notes it and returns; the event loop's next turn draws the controls'
latest values, so the page's next message travels while the kernel draws and a backlog
becomes one picture. A change from the page keeps the plot's background
(:attr:`gradlab.plots.live.LivePlot.draft`), is sent as a JPEG and leaves the stored picture
alone; :attr:`Explorer.settle_s` after the last one, :meth:`Explorer.settle` draws the exact
PNG and stores it. Changes made in Python are always exact.
"""

from __future__ import annotations

import asyncio
import base64
import html

import ipywidgets as widgets

try:  # the server side, installed with gradlab (an environment not reinstalled since lacks it)
    from gradlab_jupyter import store_picture
except ImportError:  # pragma: no cover - then a saved explorer keeps its display-time picture
    def store_picture(model_id, png, text, note="") -> bool:
        return False

from ..core import CLIP_MODES
from ..i18n import _, pgettext
from ..plots.gradients import STATUS_COLORS
from .sliders import ExactFloatLogSlider

__all__ = ["ClipControls", "Explorer", "FigureView", "Snapshot", "css", "rerun_note", "running_loop", "status_html"]


def rerun_note() -> str:
    """The line a saved explorer's picture carries (``gradlab_jupyter``'s pre-save hook adds it)."""
    return _("This is the explorer's picture from when the notebook was saved: "
             "run the cell again to bring back the live explorer.")


def _from_page(change) -> bool:
    """Whether ``change`` (an observer's change dict) came from the page: ipywidgets holds the
    name in the widget's ``_property_lock`` while it applies the front end's state."""
    owner = change.get("owner") if isinstance(change, dict) else None
    return owner is not None and change.get("name") in getattr(owner, "_property_lock", {})


def running_loop():
    """The running asyncio event loop (a Jupyter kernel's), or ``None`` (plain Python, pytest)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def css(widget, name: str):
    """Give ``widget`` the stable CSS class ``gradlab-<name>`` and return it."""
    widget.add_class(f"gradlab-{name}")
    return widget


def status_html(text: str, color: str = "inherit") -> str:
    """A status line: the interface's proportional font at a normal line height, wrapping.

    ipywidgets' ``HTML`` sets ``line-height`` to the height of one control (28 px), which
    double-spaces a status that wraps; the inner ``div`` resets it.
    """
    return ('<div style="font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; '
            f'line-height: 1.45; white-space: normal; color: {color}">{html.escape(text)}</div>')


class FigureView(widgets.Image):
    """A :class:`~gradlab.plots.live.LivePlot` shown as a PNG image widget; ``refresh()`` re-renders.

    The image is as wide as the output area allows, up to the figure's own width in pixels,
    and keeps its aspect ratio, so a narrow window shrinks the picture instead of clipping it.
    """

    def __init__(self, plot, *, css_name: str, **kw):
        width_px = int(plot.fig.get_figwidth() * plot.fig.dpi)
        layout = widgets.Layout(width="100%", max_width=f"{width_px}px", height="auto",
                                min_width="0", object_fit="contain")
        super().__init__(format="png", layout=layout, **kw)
        self.live_plot = plot
        css(self, css_name)
        self.refresh()

    @property
    def fig(self):
        return self.live_plot.fig

    def refresh(self) -> None:
        """Re-render: a PNG, or a JPEG while the plot is a draft (a drag; one state message either way)."""
        fmt = "jpeg" if self.live_plot.draft else "png"
        with self.hold_sync():
            self.format = fmt
            self.value = self.live_plot.render(fmt)


class Snapshot:
    """A static picture of an explorer's current state: its PNG and its timing-free text.

    Returned by ``ex.snapshot()``. A cell that changes an explorer's settings ends with it,
    so the saved notebook (GitHub, nbconvert, a closed kernel) shows every experiment, not
    only the explorer's starting state. nbval compares the text, which carries no timings.
    """

    def __init__(self, png: bytes, text: str):
        self.png = png
        self.text = text

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"image/png": base64.b64encode(self.png).decode("ascii"), "text/plain": self.text}

    def __repr__(self) -> str:
        return self.text


class Explorer(widgets.VBox):
    """Base of every explorer: see the module docstring for what a subclass implements.

    A subclass sets ``css_name``, creates its controls with :meth:`control` in ``__init__``
    (they are its public attributes), then calls :meth:`start`. It implements
    :meth:`_compute` (returns the new ``report``), :meth:`_make_plot` (a ``LivePlot``, built
    once) and :attr:`status_text`. Optional hooks: :meth:`_update_plot` (default
    ``plot.update(report)``), :meth:`_sync` (before a recompute, e.g. enable a threshold),
    :meth:`_after_change` (after it, e.g. a note), :meth:`_prepare` (checks or expands the
    values of :meth:`set`), :meth:`_text` (the timing-free text stored
    for nbval; default :attr:`status_text`), :meth:`_status_color`, :meth:`_copy_kwargs`
    (constructor keywords of :meth:`copy`) and :meth:`tracing_count`.
    """

    #: The explorer's CSS class is ``gradlab-<css_name>``; its plot ``gradlab-<css_name>-plot``.
    css_name = "explorer"
    #: The CSS name of the plot and of the status line (``None``: ``<css_name>-plot``/``-status``).
    plot_css: str | None = None
    status_css: str | None = None
    #: The CSS name of the whole explorer (``None``: ``css_name``).
    root_css: str | None = None
    #: Width of the control column; the plot takes the rest and wraps below on a narrow screen.
    controls_width = "320px"
    #: The widest a ``wide`` slider gets (see :meth:`start`).
    wide_width = "720px"
    #: Width of the controls' descriptions (ipywidgets' default, 80 px, cuts "learning rate").
    label_width = "96px"

    _muted = False
    #: Counts the changes of every explorer in this process: work ahead stops at the next one.
    turn = 0

    # ------------------------------------------------------------------ for subclasses
    def control(self, name: str, widget, *, css_name: str | None = None):
        """Register ``widget`` as control ``name`` (observed, settable with :meth:`set`)."""
        if not hasattr(self, "_controls"):
            self._controls: dict = {}
        css(widget, css_name or f"{self.css_name}-{name.replace('_', '-')}")
        if hasattr(widget, "style") and hasattr(widget.style, "description_width") \
                and not widget.style.description_width:
            widget.style.description_width = self.label_width  # "learning rate" is not cut off
        self._controls[name] = widget
        return widget

    def start(self, *, rows: tuple = (), side: tuple = (), hidden: tuple = (), wide: tuple = ()) -> None:
        """Compute, build the plot and the status, lay everything out, observe the controls.

        ``side`` are extra widgets under the controls, ``rows`` extra rows under the status
        line; controls named in ``hidden`` exist and work but are not shown (e.g. chapter 05's
        controls in chapter 01's explorer); sliders named in ``wide`` get a row of their own
        above the controls and the figure, up to :attr:`wide_width` (chapter 01's depth: 100
        values on a 108 px track moved two layers a pixel).
        """
        self.report = self._compute()
        self._plot = self._make_plot()
        self.plot = None if self._plot is None else FigureView(
            self._plot, css_name=self.plot_css or f"{self.css_name}-plot")
        self.status = css(widgets.HTML(), self.status_css or f"{self.css_name}-status")
        self._set_status()
        for widget in self._controls.values():
            widget.observe(self._on_change, names="value")
        shown = [w for n, w in self._controls.items() if n not in hidden and n not in wide]
        for name in wide:
            self._controls[name].layout.width = "100%"
            self._controls[name].layout.max_width = self.wide_width
        column = widgets.VBox([*shown, *side], layout=widgets.Layout(
            width=self.controls_width, min_width=self.controls_width, flex="0 0 auto"))
        figure = [] if self.plot is None else [
            widgets.Box([self.plot], layout=widgets.Layout(flex="1 1 360px", min_width="0"))]
        row = widgets.Box([column, *figure], layout=widgets.Layout(
            display="flex", flex_flow="row wrap", align_items="flex-start", width="100%"))
        top = [self._controls[name] for name in wide if name not in hidden]
        super().__init__([*top, row, self.status, *rows], layout=widgets.Layout(width="100%", max_width="100%"))
        css(self, self.root_css or self.css_name)

    def _compute(self):
        raise NotImplementedError

    def _make_plot(self):
        raise NotImplementedError

    @property
    def status_text(self) -> str:
        raise NotImplementedError

    def _update_plot(self) -> None:
        self._plot.update(self.report)

    def _sync(self) -> None:
        """Hook before a recompute (e.g. enable or disable a threshold slider)."""

    def _after_change(self) -> None:
        """Hook after a recompute and redraw (e.g. a note under the status line)."""

    def _status_color(self) -> str:
        return STATUS_COLORS.get(getattr(self.report, "status", None), "inherit")

    def _text(self) -> str:
        """The timing-free text stored beside the picture (nbval compares it)."""
        return self.status_text

    def _copy_kwargs(self) -> dict:
        """Constructor keywords that rebuild this explorer in its current state."""
        return {name: w.value for name, w in self._controls.items()}

    def tracing_count(self) -> int:
        """How many times the explorer's compiled functions were traced (0 if it has none)."""
        return 0

    # ------------------------------------------------------------------ the shared machinery
    @property
    def controls(self) -> tuple:
        """Every control widget, in order."""
        return tuple(self._controls.values())

    @property
    def control_names(self) -> tuple[str, ...]:
        return tuple(self._controls)

    def settings(self) -> dict:
        """``{control name: current value}``."""
        return {name: w.value for name, w in self._controls.items()}

    def set(self, **values) -> None:
        """Set several controls at once with one recompute, e.g. ``ex.set(depth=50, activation="relu")``."""
        values = self._prepare(dict(values))
        unknown = set(values) - set(self._controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; allowed: {sorted(self._controls)}")
        self._muted = True  # one recompute at the end, not one per control
        try:
            self._assign(values)
        finally:
            self._muted = False
        self._on_change()

    def _prepare(self, values: dict) -> dict:
        """Hook of :meth:`set`: check or expand ``values`` before they are assigned (e.g. a preset)."""
        return values

    def _assign(self, values: dict) -> None:
        for name, value in values.items():
            self._controls[name].value = value

    #: Seconds without a change from the page after which a drag counts as released.
    settle_s = 0.15

    def _on_change(self, change=None) -> None:
        """The one change handler: every control is observed with it.

        A change that the page sends (a learner's drag or click) is drawn as a draft: the
        report and the status line are exact, but the plot may keep wider axis limits (no
        new background per step, :attr:`~gradlab.plots.live.LivePlot.draft`) and the stored
        picture waits. :attr:`settle_s` after the page's last change, the kernel's event loop
        draws the exact picture and stores it (:meth:`settle`). A change made in Python
        (a cell, ``set``, a test) is exact and stored at once, as is everything where no
        event loop runs.
        """
        if self._muted:
            return
        loop = running_loop() if _from_page(change) else None
        if getattr(self, "_settle_handle", None) is not None:
            self._settle_handle.cancel()  # a draft restarts it once drawn; an exact change is stored
            self._settle_handle = None
        Explorer.turn += 1  # any change of any explorer stops work ahead (GradientExplorer._prefetch)
        if loop is None:
            self._draw_pending = False  # an exact change draws everything a pending draft would
            self._redraw(draft=False)
        elif not getattr(self, "_draw_pending", False):
            # The page's change is drawn on the event loop's next turn, and the handler returns
            # at once: the kernel reports idle, the page sends its next value while the kernel
            # draws, and the values that arrive meanwhile become one draft of the latest.
            self._draw_pending = True
            loop.call_soon(self._draw_draft, loop)

    def _draw_draft(self, loop) -> None:
        """Draw the controls' latest values as a draft, then (re)start the settle timer."""
        if not getattr(self, "_draw_pending", False):
            return  # an exact change drew it meanwhile
        self._draw_pending = False
        Explorer.turn += 1
        self._redraw(draft=True)
        if getattr(self, "_settle_handle", None) is not None:
            self._settle_handle.cancel()
        self._settle_handle = loop.call_later(self.settle_s, self.settle)

    def _redraw(self, *, draft: bool) -> None:
        self._sync()
        self.report = self._compute()
        if self.plot is not None:
            self._plot.draft = draft
            self._update_plot()
            self.plot.refresh()
        self._set_status()
        self._after_change()
        if not draft:
            self._store_picture()

    def settle(self) -> None:
        """Draw the exact picture of a drafted change and store it (the timer calls it; so do
        :meth:`snapshot` and the display, so neither ever shows a draft)."""
        handle, self._settle_handle = getattr(self, "_settle_handle", None), None
        if handle is not None:
            handle.cancel()  # a no-op when the timer itself calls
        if getattr(self, "_draw_pending", False):  # a change from the page not drawn yet
            self._draw_pending = False
            self._redraw(draft=False)
            return
        if handle is None:
            return
        if self.plot is not None:
            self._plot.draft = False
            if self._plot.drafted:
                self._update_plot()  # the exact limits
            if self._plot.drafted or self.plot.format != "png":
                self.plot.refresh()
        self._store_picture()

    def _store_picture(self) -> None:
        """Once displayed, leave the current picture for the server's pre-save hook (gradlab_jupyter)."""
        if getattr(self, "_displayed", False):
            store_picture(self.model_id, None if self.plot is None else self.plot.value, repr(self),
                          rerun_note())

    def _set_status(self) -> None:
        value = status_html(self.status_text, self._status_color())
        if self.status.value != value:
            self.status.value = value

    def snapshot(self) -> Snapshot:
        """A static picture of the current state (see :class:`Snapshot`)."""
        if self.plot is None:
            raise ValueError(f"{type(self).__name__} was built with plot=False: there is no figure to snapshot")
        self.settle()
        return Snapshot(self.plot.value, self._text())

    def copy(self, **overrides):
        """A new explorer of the same kind in the same state (same engine: nothing retraces).

        Chapters run their experiments on a copy, so the explorer a learner moves keeps the
        settings of the cell that built it: ``lab = ex.copy(); lab.set(depth=50); lab.snapshot()``.
        """
        return type(self)(**{**self._copy_kwargs(), **overrides})

    def _repr_mimebundle_(self, **kwargs):
        """The live view in a front end with a kernel; a static PNG and the text everywhere else.

        GitHub, nbconvert and a notebook reopened without its kernel cannot show the widget
        view; they show the PNG of the state the explorer was displayed in. From then on the
        explorer stores its latest picture after every change, and the pre-save hook that
        installing gradlab enables in Jupyter (``gradlab_jupyter``) writes that picture into
        the saved file in place of the view, with a line saying to re-run the cell: a
        reopened chapter shows the learner's last state.
        """
        self.settle()
        data = widgets.DOMWidget._repr_mimebundle_(self, **kwargs)
        data = dict((data[0] if isinstance(data, tuple) else data) or {})
        if self.plot is not None:
            data["image/png"] = base64.b64encode(self.plot.value).decode("ascii")
        data["text/plain"] = repr(self)
        self._displayed = True
        self._store_picture()
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text()})"


def _options(values, label=_) -> list:
    """Dropdown options: the values themselves, or ``(translated label, value)`` where a catalog
    translates them (so ``ex.clip_mode.options`` reads ``["off", "value", ...]`` in English)."""
    labels = [label(v) for v in values]
    return list(values) if labels == list(values) else list(zip(labels, values, strict=True))


def _clip_label(mode: str) -> str:
    """A clip mode as the dropdown and the status line show it (itself in English)."""
    return {"value": pgettext("clip mode", "value"), "norm": pgettext("clip mode", "norm"),
            "global_norm": pgettext("clip mode", "global_norm")}.get(mode, _(mode))


class ClipControls:
    """The ``clip_mode`` and ``clip_norm`` controls of an explorer (chapters 01, 05, 07, 09)."""

    CLIP_RANGE = (1e-3, 1e3)  # the threshold slider's ends (10**-3 to 10**3)

    def clip_controls(self, clip) -> None:
        """Create ``self.clip_mode`` (off, value, norm, global_norm) and ``self.clip_norm``.

        ``clip`` is ``None`` or a checked ``(mode, threshold)``; the slider covers thresholds
        from 1e-3 to 1e3 and keeps the one passed exactly.
        """
        if clip is not None and not self.CLIP_RANGE[0] <= clip[1] <= self.CLIP_RANGE[1]:
            raise ValueError(f"clip's threshold must be from {self.CLIP_RANGE[0]:g} to {self.CLIP_RANGE[1]:g} in an "
                             f"explorer (its slider's range); got {clip!r}")
        self.clip_mode = self.control("clip_mode", widgets.Dropdown(
            options=_options(("off", *CLIP_MODES), _clip_label),
            value="off" if clip is None else clip[0], description=_("clip")),
            css_name=f"{self._clip_prefix()}clip-mode")
        # exactly the threshold passed (0.25 stays 0.25): gradlab.widgets.sliders says why
        self.clip_norm = self.control("clip_norm", ExactFloatLogSlider(
            "clip_norm", value=1.0 if clip is None else clip[1], base=10, min=-3, max=3, step=0.1,
            description=_("threshold"), readout_format=".3g", disabled=clip is None),
            css_name=f"{self._clip_prefix()}clip-norm")

    def _clip_prefix(self) -> str:
        return "" if self.css_name == "explorer" else f"{self.css_name}-"

    @property
    def clip(self):
        """The current clip setting as ``None`` or ``(mode, threshold)``."""
        if self.clip_mode.value == "off":
            return None
        return (self.clip_mode.value, float(self.clip_norm.value))

    def clip_text(self) -> str:
        """``clip off`` or ``clip global_norm ≤ 0.01``, as the status line shows it."""
        if self.clip is None:
            return _("clip off")
        return _("clip {mode} ≤ {threshold}").format(mode=_clip_label(self.clip[0]), threshold=f"{self.clip[1]:.3g}")

    def _sync_clip(self) -> None:
        disabled = self.clip_mode.value == "off"
        if self.clip_norm.disabled != disabled:  # no state message when nothing changed
            self.clip_norm.disabled = disabled
