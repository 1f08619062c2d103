"""Conventions shared by every gradlab widget: CSS classes, PNG figure views, static fallbacks."""

from __future__ import annotations

import ipywidgets as widgets

__all__ = ["css", "ClipControlsMixin", "FigureView", "Snapshot", "SnapshotMixin", "legend_html", "static_bundle", "status_html"]


def css(widget, name: str):
    """Give ``widget`` the stable CSS class ``gradlab-<name>`` and return it."""
    widget.add_class(f"gradlab-{name}")
    return widget


class FigureView(widgets.Image):
    """A matplotlib figure shown as a PNG image widget; ``refresh()`` re-renders in place.

    The figure is built once by its owner; only its data changes between refreshes, and the
    same ``Image`` widget receives the new bytes, so nothing new is created per update.
    """

    def __init__(self, fig, *, css_name: str, render=None, **kw):
        super().__init__(format="png", **kw)
        self.fig = fig
        self._render = render  # e.g. ReportPlot.render_png: a blitted redraw of the data only
        css(self, css_name)
        self.refresh()

    def refresh(self) -> None:
        if self._render is not None:
            self.value = self._render()
            return
        from ..plots import figure_png

        self.value = figure_png(self.fig, fast=True)


def static_bundle(widget, png: bytes, text: str, **kwargs) -> dict:
    """``widget``'s mime bundle plus a static PNG and a plain-text line.

    A live front end renders the widget view; GitHub, nbconvert and any viewer without a
    kernel fall back to the PNG of the state the widget was displayed in. nbval compares
    only the text, so ``text`` must be reproducible (no timings).
    """
    import base64

    data = widgets.DOMWidget._repr_mimebundle_(widget, **kwargs)
    data = dict((data[0] if isinstance(data, tuple) else data) or {})
    data["image/png"] = base64.b64encode(png).decode("ascii")
    data["text/plain"] = text
    return data


def legend_html(items) -> str:
    """A compact HTML legend from ``(label, color, symbol)`` triples."""
    import html

    return "<br>".join(
        f'<span style="color:{c}; font-size: 14px">{s}</span> '
        f'<span style="font-size: 12px">{html.escape(label)}</span>'
        for label, c, s in items
    )


def status_html(text: str, color: str = "inherit") -> str:
    import html

    return f'<span style="color:{color}; font-family: monospace">{html.escape(text)}</span>'


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
        import base64

        return {"image/png": base64.b64encode(self.png).decode("ascii"), "text/plain": self.text}

    def __repr__(self) -> str:
        return self.text


class SnapshotMixin:
    """``snapshot()`` for explorers that have a :class:`FigureView` ``plot`` and a timing-free ``repr``."""

    def snapshot(self) -> Snapshot:
        """A static picture of the current state (see :class:`Snapshot`)."""
        plot = getattr(self, "plot", None)
        if plot is None:
            raise ValueError(f"{type(self).__name__} was built with plot=False: there is no figure to snapshot")
        return Snapshot(plot.value, repr(self))


class ClipControlsMixin:
    """The ``clip`` setting of an explorer with ``clip_mode`` and ``clip_norm`` controls (chapters 01, 07)."""

    @property
    def clip(self):
        """The current clip setting as ``None`` or ``(mode, threshold)``."""
        if self.clip_mode.value == "off":
            return None
        return (self.clip_mode.value, float(self.clip_norm.value))
