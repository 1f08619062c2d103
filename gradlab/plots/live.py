"""The figure helpers every plot module shares: a figure outside pyplot, its PNG, a legend below.

matplotlib only, no widgets. The explorers draw in the page (gradlab/widgets/static/explorer.js);
their pictures for a saved notebook come from :mod:`gradlab.plots.view` through these helpers.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

__all__ = ["LIVE_DPI", "encode_png", "figure_png", "legend_below", "legend_handle", "new_figure"]


#: The dots per inch of the figures that stand in for a live view, whatever ``rcParams`` say.
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
    """A stand-in for ``artist`` in the legend."""
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
