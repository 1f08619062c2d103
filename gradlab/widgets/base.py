"""The one explorer base every gradlab explorer builds on (chapters 00, 01, 02, 03, 05, 07, 09).

An explorer is a controller in Python and one view in the page (anywidget's pattern): the
controller holds the controls (:mod:`gradlab.widgets.controls`), one change handler, the
computation, ``report`` and the status line from the catalog; the view, ``static/explorer.js``,
draws the numbers it is sent with uPlot and nothing else. The same module draws the book
site's explorers from stored views (``tools/book``). A subclass declares its controls and says
how to compute, what to plot and what the status line reads::

    class SquareExplorer(Explorer):
        def __init__(self, x: float = 1.0):
            self.x = self.control(Slider("x", value=x, min=-3, max=3, step=0.1))
            self.start()                     # compute, send the first view, observe the controls

        def _compute(self):                  # the state every view reads: self.report
            return {"x": self.x.value, "y": self.x.value ** 2}

        def _plots(self):                    # what to draw: plot specs (gradlab.plots.view)
            return [line_plot(...)]

        @property
        def status_text(self) -> str:
            return _("x = {x} → x² = {y}").format(**self.report)

**The kernel computes, the page draws.** After every change the kernel sends a *view*: the
controls' values, the report's numbers (``data-report``), the status line, notes and plot specs,
every number float64 in JSON (non-finite ones as ``"inf"``, ``"-inf"``, ``"nan"``). An explorer
with an :attr:`Explorer.axis` (depth, sequence length, blocks) also computes the other points of
that axis for the current settings ahead of time, nearest first and one per turn of the kernel's
event loop (so a message from the page waits at most one point), and sends them as they come;
the page then moves along the axis without waiting for the kernel.

A change from the page returns at once and is drawn on the event loop's next turn, so the page's
next message travels while the kernel computes, and a backlog becomes one view of the latest
values. A change made in Python (a cell, ``set``, a test) is computed before it returns.

**Pictures only where no script runs.** ``_repr_mimebundle_`` carries an ``image/png`` of the
state displayed (GitHub, nbconvert, the PDF), ``snapshot()`` returns one, and once displayed the
explorer leaves a picture of its latest state for ``gradlab_jupyter``'s pre-save hook
:attr:`Explorer.picture_delay_s` after the last change (never during a drag), so a saved chapter
reopens with its pictures. The picture is drawn by :func:`gradlab.plots.view.view_figure` from
the same view: the same labels, colours and series as the page.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import threading
import time
from collections import OrderedDict
from pathlib import Path

import anywidget
import numpy as np
import traitlets

try:  # the server side, installed with gradlab (an environment not reinstalled since lacks it)
    from gradlab_jupyter import store_picture
except ImportError:  # pragma: no cover - then a saved explorer keeps its display-time picture
    def store_picture(model_id, png, text, note="") -> bool:
        return False

from ..core import CLIP_MODES
from ..i18n import _, pgettext
from ..plots.view import STATUS_COLORS, jsonable, view_png
from .controls import Button, Control, Dropdown, Slider

__all__ = ["ClipControls", "Explorer", "Snapshot", "rerun_note", "running_loop", "STATIC"]

#: The view's files, shipped inside the package: the module, its CSS and the vendored uPlot.
STATIC = Path(__file__).with_name("static")


def _read(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def rerun_note() -> str:
    """The line a saved explorer's picture carries (``gradlab_jupyter``'s pre-save hook adds it)."""
    return _("This is the explorer's picture from when the notebook was saved: "
             "run the cell again to bring back the live explorer.")


def running_loop():
    """The running asyncio event loop (a Jupyter kernel's), or ``None`` (plain Python, pytest)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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


class _Ahead:
    """The kernel's work ahead: one point of one explorer's axis per turn of the event loop.

    The explorer a learner touched last goes first; any change of an explorer restarts its own
    list (nearest the new value first). Never runs outside an event loop.
    """

    def __init__(self):
        self.work: OrderedDict = OrderedDict()  # explorer -> iterator of axis values
        self.scheduled = None  # the loop a step is scheduled on
        self.waiting: dict = {}  # explorer -> the timer of a delayed start

    def start(self, explorer, values, delay_s: float = 0.0) -> None:
        """Compute ``values`` ahead for ``explorer``, from now or after ``delay_s`` without a change."""
        self.stop(explorer)
        loop = running_loop()
        if delay_s > 0 and loop is not None:
            self.waiting[explorer] = loop.call_later(delay_s, self._begin, explorer, values)
        else:
            self._begin(explorer, values)

    def _begin(self, explorer, values) -> None:
        self.waiting.pop(explorer, None)
        self.work[explorer] = iter(values)  # last = touched last = first served
        self._schedule()

    def stop(self, explorer) -> None:
        self.work.pop(explorer, None)
        timer = self.waiting.pop(explorer, None)
        if timer is not None:
            timer.cancel()

    def _schedule(self, idle_s: float = 0.0) -> None:
        loop = running_loop()
        # a step scheduled on another loop (one closed since: a test's) never comes
        if loop is not None and self.scheduled is not loop and self.work:
            self.scheduled = loop
            loop.call_later(idle_s, self.step)

    def step(self) -> None:
        self.scheduled = None
        t0 = time.perf_counter()
        while self.work:
            explorer = next(reversed(self.work))
            for value in self.work[explorer]:
                if explorer._send_point(value):
                    # leave the loop idle a tenth as long as the point took: a message from the page
                    # arrives on a kernel subshell's thread and is queued for this loop (see
                    # Explorer._elsewhere), so it goes through between two points anyway
                    self._schedule(max(0.002, 0.1 * (time.perf_counter() - t0)))
                    return
            self.work.pop(explorer, None)  # its axis is done


AHEAD = _Ahead()


class Explorer(anywidget.AnyWidget):
    """Base of every explorer: see the module docstring for what a subclass implements.

    A subclass creates its controls with :meth:`control` in ``__init__`` (they are its public
    attributes), then calls :meth:`start`. It implements :meth:`_compute` (returns the new
    ``report``), :meth:`_plots` (plot specs) and :attr:`status_text`. Optional hooks:
    :meth:`_notes` (lines under the status), :meth:`_report_fields` (``data-report``),
    :meth:`_sync` (before a recompute, e.g. enable a threshold), :meth:`_after_change` (after
    it), :meth:`_prepare` (checks or expands the values of :meth:`set`), :meth:`_text` (the
    timing-free text stored for nbval; default :attr:`status_text`), :meth:`_status_color`,
    :meth:`_copy_kwargs` (constructor keywords of :meth:`copy`) and :meth:`tracing_count`.
    """

    _esm = traitlets.Unicode(_read("explorer.js")).tag(sync=True)
    _css = traitlets.Unicode(_read("explorer.css") + "\n" + _read("uPlot.min.css")).tag(sync=True)
    #: uPlot's source, for a page that has no uPlot of its own (the view imports it once)
    _lib = traitlets.Unicode(_read("uPlot.iife.min.js")).tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)
    spec = traitlets.List().tag(sync=True)
    values = traitlets.Dict().tag(sync=True)
    view = traitlets.Dict().tag(sync=True)
    axis = traitlets.Unicode("").tag(sync=True)

    #: The control the page moves along without waiting ("": none): the site sends the page every
    #: stored point of it; its values are :meth:`_axis_values`.
    axis_control = ""
    #: Whether the kernel computes the axis ahead: only where a point costs milliseconds (a new
    #: Transformer depth builds a model, seconds: computing it ahead would hold a click that long).
    compute_ahead = False
    #: Whether reports are cached by settings (``False`` where a report depends on more than the
    #: controls, e.g. call timings or training runs).
    cache_reports = True
    #: Seconds without a change before the work ahead starts after a change off the axis.
    ahead_delay_s = 0.25
    #: How many reports are cached.
    REPORTS = 512
    #: Seconds after the last change before the picture for a save is drawn and stored.
    picture_delay_s = 0.3

    _muted = False

    # ------------------------------------------------------------------ for subclasses
    def control(self, widget: Control, *, wide: bool = False, hidden: bool = False) -> Control:
        """Register ``widget`` (observed, settable with :meth:`set`); ``wide`` gives it a row of
        its own above the figure, ``hidden`` keeps it working but not shown."""
        if not hasattr(self, "_controls"):
            self._controls: dict = {}
            self._layout: dict = {}
        self._controls[widget.name] = widget
        self._layout[widget.name] = {"wide": wide, "hidden": hidden}
        return widget

    def start(self, *, hidden: tuple = (), wide: tuple = ()) -> None:
        """Compute, send the first view, observe the controls.

        ``hidden`` controls exist and work but are not shown (chapter 05's controls in chapter
        01's explorer); ``wide`` ones get a row of their own above the figure (chapter 01's
        depth: 100 values need a long track).
        """
        for name in hidden:
            self._layout[name]["hidden"] = True
        for name in wide:
            self._layout[name]["wide"] = True
        self._reports: OrderedDict = OrderedDict()
        self._epoch = 0
        self._displayed = False
        self._picture_handle = None
        self._draw_pending = False
        self._home = (running_loop(), threading.get_ident())  # see _elsewhere
        self.report = self._cached_compute()
        super().__init__(kind=type(self).__name__, axis=self.axis_control)
        self.add_class("gradlab-explorer")
        with self.hold_sync():
            self._send_spec()
            self.values = self._values()
            self.view = self._view()
        for widget in self._controls.values():
            if widget.kind == "progress":
                widget.observe(self._on_spec, names="value")
            elif widget.kind != "button":
                widget.observe(self._on_change, names="value")
            widget.observe(self._on_spec, names=["disabled", "options", "description"])
        self.observe(self._on_values, names="values")
        self.on_msg(self._on_msg)

    def _compute(self):
        raise NotImplementedError

    def _plots(self) -> list[dict]:
        raise NotImplementedError

    @property
    def status_text(self) -> str:
        raise NotImplementedError

    def _notes(self) -> list:
        """Lines under the status: each a list of ``{"text", "color"?, "bold"?, "italic"?, "small"?}``."""
        return []

    def _report_fields(self) -> dict:
        """The report's numbers for ``data-report`` (``{name: array or number}``)."""
        return {}

    def _on_other(self, control) -> None:
        """Hook: a control that is not a setting changed in Python (default: redraw)."""
        self._draw_pending = False
        self._redraw()

    def _sync(self) -> None:
        """Hook before a recompute (e.g. enable or disable a threshold slider)."""

    def _after_change(self) -> None:
        """Hook after a recompute (e.g. a preset note)."""

    def _status_color(self):
        return STATUS_COLORS.get(getattr(self.report, "status", None))

    def _text(self) -> str:
        """The timing-free text stored beside the picture (nbval compares it)."""
        return self.status_text

    def _copy_kwargs(self) -> dict:
        """Constructor keywords that rebuild this explorer in its current state."""
        return self.settings()

    def _axis_values(self) -> list:
        """Every value of :attr:`axis_control` (a slider's whole range by default)."""
        c = self._controls[self.axis_control]
        return list(range(int(c.min), int(c.max) + 1))

    def tracing_count(self) -> int:
        """How many times the explorer's compiled functions were traced (0 if it has none)."""
        return 0

    # ------------------------------------------------------------------ the shared machinery
    @property
    def controls(self) -> tuple:
        """Every control, in order."""
        return tuple(self._controls.values())

    @property
    def control_names(self) -> tuple[str, ...]:
        return tuple(self._controls)

    def settings(self) -> dict:
        """``{control name: current value}`` of the controls that are settings."""
        return {name: w.value for name, w in self._controls.items() if w.setting}

    def _values(self) -> dict:
        return {name: jsonable(w.value) for name, w in self._controls.items() if w.kind not in ("button", "progress")}

    def set(self, **values) -> None:
        """Set several controls at once with one recompute, e.g. ``ex.set(depth=50, activation="relu")``."""
        values = self._prepare(dict(values))
        unknown = set(values) - set(self._controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; allowed: {sorted(self._controls)}")
        self._muted = True  # one recompute at the end, not one per control
        try:
            for name, value in values.items():
                self._controls[name].value = value
        finally:
            self._muted = False
        self._on_change()

    def _prepare(self, values: dict) -> dict:
        """Hook of :meth:`set`: check or expand ``values`` before they are assigned (e.g. a preset)."""
        return values

    def _key(self) -> str:
        return json.dumps(self._values(), sort_keys=True, default=str)

    def _cached_compute(self):
        if not self.cache_reports:
            return self._compute()
        key = self._key()
        report = self._reports.get(key)
        if report is None:
            report = self._reports[key] = self._compute()
            while len(self._reports) > self.REPORTS:
                self._reports.popitem(last=False)
        else:
            self._reports.move_to_end(key)
        return report

    def invalidate(self) -> None:
        """Views sent before are stale (something beside the controls changed): the page drops them."""
        self._epoch += 1
        self._sent = set()

    def _view(self) -> dict:
        """What the page draws for the current report (see ``static/explorer.js``)."""
        values = self._values()
        status_text = self.status_text
        report = {"settings": values, **{k: jsonable(v) for k, v in self._report_fields().items()},
                  "status": getattr(self.report, "status", None), "status_text": status_text}
        return {"values": values, "epoch": self._epoch, "report": report,
                "status": {"text": status_text, "color": self._status_color()},
                "notes": self._notes(), "plots": self._plots()}

    def _on_change(self, change=None) -> None:
        """The one change handler of a change made in Python: recompute, send, store."""
        if self._muted:
            return
        owner = change.get("owner") if isinstance(change, dict) else None
        if owner is not None and not owner.setting:
            return self._on_other(owner)
        self._draw_pending = False
        self._redraw()
        if self.values != self._values():
            self.values = self._values()

    def _redraw(self) -> None:
        self._sync()
        self.report = self._cached_compute()
        self._after_change()
        self.view = self._view()
        self._changed()

    def _changed(self) -> None:
        """After every view: restart the work ahead and the picture timer."""
        if self.axis_control and self.compute_ahead and self.cache_reports and self._displayed:
            here = self._controls[self.axis_control].value
            previous = getattr(self, "_last_axis", here)
            self._last_axis = here
            ahead = 1 if here >= previous else -1  # the direction the axis last moved in
            # Along the axis (a drag) the next points are wanted at once. After another change (a
            # click) the learner often clicks again: a point computed meanwhile would hold that
            # click's report back (about 30 ms more measured in the page), so the work starts
            # after a pause.
            AHEAD.start(self, sorted(self._axis_values(), key=lambda v: _ahead_rank(v - here, ahead)),
                        delay_s=0.0 if here != previous else self.ahead_delay_s)
        self._schedule_picture()

    def _elsewhere(self, handler, *args) -> bool:
        """Whether this is another thread than the explorer's own; then ``handler(*args)`` is
        scheduled on the explorer's loop instead.

        JupyterLab 4.4+ with ipykernel 7 delivers the page's messages on a kernel subshell's thread,
        while the explorer's work ahead, redraws and pictures run on the loop of the thread that
        built it. Handled there, a page change read the controls while the work ahead had moved
        the axis (the page got depth 51 at 50), or was dropped as muted: two controls changed
        back to back could leave the page on the first one's view.
        """
        loop, thread = self._home
        if loop is None or threading.get_ident() == thread or loop.is_closed():
            return False
        loop.call_soon_threadsafe(handler, *args)
        return True

    def _on_values(self, change) -> None:
        """The page changed values: apply them to the controls and draw on the loop's next turn."""
        if self._elsewhere(self._on_values, change) or self._muted:
            return
        new = change["new"]
        changed = False
        self._muted = True
        try:
            for name, value in new.items():
                control = self._controls.get(name)
                if control is None or control.kind in ("button", "progress") or jsonable(control.value) == value:
                    continue
                try:
                    control.value = value
                    changed = True
                except ValueError:
                    pass  # put back below
        finally:
            self._muted = False
        if "preset" in new and getattr(self, "_on_page_preset", None) and changed:
            self._on_page_preset()
        # Send the controls' values back only where they differ from what the page sent (a value
        # put back, a preset) and no newer message from the page is on its way here: ipywidgets
        # sets the trait on the page's thread at once, so `self.values` may already hold the next
        # message's values, and sending this one's would move the page back to them.
        if self.values == new and new != self._values():
            self.values = self._values()
        if not changed:
            return
        AHEAD.stop(self)  # its list was for the settings before; the redraw starts a new one
        loop = running_loop()
        if loop is None:
            self._redraw()
        elif not self._draw_pending:
            self._draw_pending = True
            loop.call_soon(self._draw_page_change)

    def _draw_page_change(self) -> None:
        if self._draw_pending:
            self._draw_pending = False
            self._redraw()

    def _on_spec(self, change=None) -> None:
        self._send_spec()

    def _send_spec(self) -> None:
        self.spec = [dict(w.spec(), wide=self._layout[n]["wide"], hidden=self._layout[n]["hidden"])
                     for n, w in self._controls.items()]

    def _on_msg(self, widget, content, buffers) -> None:
        if self._elsewhere(self._on_msg, widget, content, buffers):
            return
        if isinstance(content, dict) and content.get("type") == "click":
            control = self._controls.get(content.get("name"))
            if isinstance(control, Button):
                control.click()

    def _send_point(self, value) -> bool:
        """Compute the view at ``value`` of the axis (other settings as they are) and send it to
        the page; ``False`` (nothing computed) when it is cached already or not displayed."""
        control = self._controls[self.axis_control]
        if value == control.value:
            return False
        saved_value, saved_report = control.value, self.report
        self._muted = True
        try:
            control.value = value
            key = self._key()
            if key in self._reports and key in getattr(self, "_sent", set()):
                return False
            self.report = self._cached_compute()
            view = self._view()
        finally:
            control.value = saved_value
            self.report = saved_report
            self._muted = False
        self._sent = getattr(self, "_sent", set())
        self._sent.add(key)
        self.send({"type": "points", "views": [view]})
        return True

    # ------------------------------------------------------------------ pictures
    def _schedule_picture(self) -> None:
        if not self._displayed:
            return
        loop = running_loop()
        if self._picture_handle is not None:
            self._picture_handle.cancel()
            self._picture_handle = None
        if loop is None:
            self._store_picture()
        else:
            self._picture_handle = loop.call_later(self.picture_delay_s, self._store_picture)

    def _store_picture(self) -> None:
        """Leave the current picture for the server's pre-save hook (gradlab_jupyter)."""
        self._picture_handle = None
        store_picture(self.model_id, self.png(), repr(self), rerun_note())

    def png(self) -> bytes:
        """The current state as a PNG (the picture of :meth:`snapshot`)."""
        return view_png(self.view)

    def snapshot(self) -> Snapshot:
        """A static picture of the current state (see :class:`Snapshot`)."""
        if self._draw_pending:
            self._draw_page_change()
        return Snapshot(self.png(), self._text())

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
        if self._draw_pending:
            self._draw_page_change()
        data = super()._repr_mimebundle_(**kwargs)
        data = dict((data[0] if isinstance(data, tuple) else data) or {})
        png = self.png()
        data["image/png"] = base64.b64encode(png).decode("ascii")
        data["text/plain"] = repr(self)
        self._displayed = True
        store_picture(self.model_id, png, repr(self), rerun_note())
        self._changed()  # work ahead along the axis from here
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text()})"


def _ahead_rank(offset, direction: int) -> tuple:
    """The order of the work ahead: the points a drag moving in ``direction`` reaches next come
    first, four to one against the points behind it (a drag over new points meets the points in
    its direction; the ones behind wait for the way back), nearest first, ties in ``direction``."""
    behind = offset * direction < 0
    return (abs(offset) * (4 if behind else 1), behind)


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
        self.clip_mode = self.control(Dropdown(
            "clip_mode", options=_options(("off", *CLIP_MODES), _clip_label),
            value="off" if clip is None else clip[0], description=_("clip")))
        self.clip_norm = self.control(Slider(
            "clip_norm", value=1.0 if clip is None else float(clip[1]), min=-3, max=3, step=0.1, log=True,
            description=_("threshold"), disabled=clip is None))

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
        if self.clip_norm.disabled != disabled:
            self.clip_norm.disabled = disabled


def _finite(x) -> bool:
    return isinstance(x, (int, float, np.floating)) and math.isfinite(float(x))
