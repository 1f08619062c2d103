"""A figure built once, updated in place and redrawn with Agg blitting: every explorer's plot.

matplotlib only, no widgets. A :class:`LivePlot` subclass builds its figure in ``__init__``,
hands the artists whose data changes to :meth:`LivePlot.animate`, and changes only their data
in ``update``. :meth:`LivePlot.render_png` then draws the static part (axes, ticks, labels,
legend) once per distinct view, caches it, and on the next render only restores the cached
background and draws the animated artists (matplotlib's blitting, the technique of
``matplotlib.animation``). The cache key is every axes' limits, the canvas size and
:meth:`LivePlot.static_key` (what else the background shows, e.g. which series the legend
lists), so a change of any of them draws a new background instead of reusing a stale one.
Used by the explorers of chapters 00, 01, 02, 03, 05, 07 and 09.
"""

from __future__ import annotations

import io
from collections import OrderedDict

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

__all__ = ["LIVE_DPI", "LivePlot", "encode_jpeg", "encode_png", "figure_png", "legend_below", "legend_handle", "new_figure"]


#: The dots per inch of every explorer's figure, whatever ``rcParams`` say: a 6.9-inch figure
#: is 621 px wide, which with the control column fits JupyterLab at 1366 px (file browser open).
LIVE_DPI = 90


def new_figure(figsize=None, *, nrows: int = 1, ncols: int = 1, layout="constrained", dpi=None, **kw):
    """A figure that belongs to no pyplot state (so nothing leaks or shows twice)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=figsize or matplotlib.rcParams["figure.figsize"], layout=layout, dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, **kw)
    return fig, axes


def encode_png(canvas) -> bytes:
    """PNG bytes of an Agg canvas's current buffer, RGB, fastest zlib level (the live explorers)."""
    from PIL import Image

    w, h = canvas.get_width_height(physical=True)
    img = Image.frombuffer("RGBA", (w, h), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="png", compress_level=1)
    return buf.getvalue()


def encode_jpeg(canvas, quality: int = 90) -> bytes:
    """JPEG bytes of an Agg canvas's current buffer: a sixth of :func:`encode_png`'s time, for
    the explorers' drafts (a drag's pictures; the exact PNG follows when it settles)."""
    from PIL import Image

    w, h = canvas.get_width_height(physical=True)
    img = Image.frombuffer("RGBA", (w, h), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = io.BytesIO()
    img.convert("RGB").save(buf, format="jpeg", quality=quality)
    return buf.getvalue()


def figure_png(fig, dpi: float | None = None, *, fast: bool = False) -> bytes:
    """Render ``fig`` to PNG bytes (deterministic: no timestamps in the metadata).

    ``fast=True`` draws the canvas once and encodes with the lightest zlib level: about a
    third of ``savefig``'s cost for the same pixels.
    """
    if fast and dpi in (None, fig.dpi):
        fig.canvas.draw()
        return encode_png(fig.canvas)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi, metadata={"Software": None})
    return buf.getvalue()


def legend_handle(artist):
    """A stand-in for ``artist`` in the legend (a legend cannot draw an animated artist)."""
    if isinstance(artist, Rectangle):
        return Patch(color=artist.get_facecolor(), alpha=artist.get_alpha(), lw=0)
    return Line2D([], [], color=artist.get_color(), ls=artist.get_linestyle(), lw=artist.get_linewidth(),
                  marker=artist.get_marker(), ms=artist.get_markersize(), mfc=artist.get_markerfacecolor(),
                  alpha=artist.get_alpha())


def legend_below(fig, handles, labels, *, axis_px: float, ncol: int = 2, fontsize: float = 8) -> None:
    """A legend under the axes with just the room it needs: the bottom margin follows its rows.

    ``axis_px`` is the height of the x axis's tick labels and label, in pixels, between the
    axes and the legend.
    """
    for leg in fig.legends[:]:
        leg.remove()
    rows = -(-len(handles) // ncol)
    row_px = fontsize * fig.dpi / 72 * 1.75
    height = fig.get_figheight() * fig.dpi
    fig.subplots_adjust(bottom=(axis_px + rows * row_px + 6) / height)
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=fontsize, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))


class LivePlot:
    """Base of the explorers' plots: ``fig`` built once, ``update`` changes data, ``render_png`` blits.

    A subclass builds ``self.fig`` (with :func:`new_figure`, fixed margins: ``layout=None``),
    calls :meth:`animate` with the artists that change per update (lines, markers, titles,
    images), and implements ``update(state)``. Everything not animated is the background.
    ``full_draws`` counts background draws (tests and the benchmark read it).
    """

    #: How many backgrounds are kept (one per view), about 1 MB each: enough for a drag over
    #: chapter 01's depths 50-100 and back (x grows in steps of 5, y by decades).
    BACKGROUNDS = 32

    fig: Figure
    #: Set while the page drags a control (the explorer's drafts, see
    #: :class:`gradlab.widgets.base.Explorer`): ``update`` may then keep wider axis limits
    #: than the data needs, so the drag reuses cached backgrounds; it sets :attr:`drafted`
    #: when the picture differs from the exact one, which the explorer then draws once the
    #: drag settles. Drafts are sent as JPEG (:meth:`render`).
    draft = False
    drafted = False

    def animate(self, *artists) -> None:
        """Mark ``artists`` as the data drawn over the cached background on every render."""
        dynamic = list(getattr(self, "_dynamic", ()))
        for artist in artists:
            artist.set_animated(True)
            dynamic.append(artist)
        self._dynamic = tuple(dynamic)

    def static_key(self) -> tuple:
        """What the background shows besides the axes' limits (default: each legend's labels)."""
        key = []
        for ax in self.fig.axes:
            legend = ax.get_legend()
            key.append(() if legend is None else tuple(t.get_text() for t in legend.get_texts()))
        return tuple(key)

    def _view_key(self) -> tuple:
        limits = tuple((ax.get_xlim(), ax.get_ylim()) for ax in self.fig.axes)
        return (limits, self.fig.canvas.get_width_height(physical=True), self.static_key())

    def render_png(self) -> bytes:
        """The current figure as PNG bytes: cached background plus the animated artists."""
        return self.render("png")

    def render(self, format: str = "png") -> bytes:
        """The current figure as ``"png"`` or ``"jpeg"`` bytes (:func:`encode_jpeg`), blitted."""
        if format not in ("png", "jpeg"):
            raise ValueError(f"format must be 'png' or 'jpeg'; got {format!r}")
        if not hasattr(self, "_backgrounds"):
            self._backgrounds: OrderedDict = OrderedDict()
            self.full_draws = 0
        canvas = self.fig.canvas
        key = self._view_key()
        bg = self._backgrounds.get(key)
        if bg is None:
            canvas.draw()  # animated artists are left out: this is the static background
            self.full_draws += 1
            bg = canvas.copy_from_bbox(self.fig.bbox)
            self._backgrounds[key] = bg
            while len(self._backgrounds) > self.BACKGROUNDS:
                self._backgrounds.popitem(last=False)
        else:
            self._backgrounds.move_to_end(key)
            canvas.restore_region(bg)
        renderer = canvas.get_renderer()
        for artist in getattr(self, "_dynamic", ()):
            if artist.get_visible():
                artist.draw(renderer)
        return encode_png(canvas) if format == "png" else encode_jpeg(canvas)

    def full_png(self) -> bytes:
        """The same picture drawn in full, without the cache (tests compare the two)."""
        for artist in getattr(self, "_dynamic", ()):
            artist.set_animated(False)
        try:
            return figure_png(self.fig, fast=True)
        finally:
            for artist in getattr(self, "_dynamic", ()):
                artist.set_animated(True)

    def png(self, dpi: float | None = None) -> bytes:
        """The current figure as PNG bytes (blitted at the figure's own dpi)."""
        if dpi in (None, self.fig.dpi):
            return self.render_png()
        for artist in getattr(self, "_dynamic", ()):
            artist.set_animated(False)
        try:
            return figure_png(self.fig, dpi)
        finally:
            for artist in getattr(self, "_dynamic", ()):
                artist.set_animated(True)
