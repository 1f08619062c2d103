"""Plots for chapter 02: Jacobian heatmaps with their shapes, forward vs reverse mode timings.

matplotlib only, no widgets. :class:`JacobianPlot` builds its figure once and replaces the
image data in place (what the live :class:`~gradlab.JacobianViewer` needs);
:func:`plot_jacobian` and :func:`plot_jacobians` are the one-shot versions for a chapter cell.
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
from matplotlib.collections import LineCollection

from ..i18n import _
from .live import LIVE_DPI, new_figure

__all__ = ["JacobianPlot", "as_matrix", "block_diagonal_matrix", "plot_block_diagonals", "plot_forward_reverse",
           "plot_jacobian", "plot_jacobians"]

CMAP = "RdBu_r"


def as_matrix(j, y_ndim: int | None = None) -> tuple[np.ndarray, int]:
    """A Jacobian of shape ``y.shape + x.shape`` flattened to a 2-D ``(y.size, x.size)`` matrix.

    ``y_ndim`` is the rank of ``y``. By default it is half the rank, rounded up: a full
    Jacobian ``(*y, *x)`` of equal ranks, or a ``batch_jacobian`` ``(B, *out, *in)``, whose
    rows are then the examples' outputs stacked.
    Also returns the number of blocks per side when the Jacobian is a batched one
    ``(B, *out, B, *in)``, else 1, so the plot can draw the per-example block grid.
    """
    j = np.asarray(j, dtype=float)
    if j.ndim == 0:
        return j.reshape(1, 1), 1
    if j.ndim == 1:
        return j.reshape(1, -1), 1
    if y_ndim is None:
        y_ndim = (j.ndim + 1) // 2
    if not 1 <= y_ndim < j.ndim:
        raise ValueError(f"y_ndim must be between 1 and {j.ndim - 1} for shape {j.shape}; got {y_ndim}")
    rows = int(np.prod(j.shape[:y_ndim]))
    blocks = 1
    if y_ndim >= 2 and j.ndim - y_ndim >= 2 and j.shape[0] == j.shape[y_ndim]:
        blocks = j.shape[0]
    return j.reshape(rows, -1), blocks


def _limit(m: np.ndarray) -> float:
    finite = np.abs(m[np.isfinite(m)])
    lim = float(finite.max()) if finite.size else 1.0
    return lim if lim > 0 else 1.0


class JacobianPlot:
    """A heatmap of one Jacobian, rows = outputs, columns = inputs, with its shape in the title.

    Colours are symmetric around 0 (blue negative, red positive, white zero), so structure
    such as a diagonal or per-example blocks is visible at a glance. ``update`` swaps the data
    of the image, its block grid and its title; the axes and the colour bar are the cached
    background (one per shape and colour range).
    """

    MAX_BLOCKS = 48

    def __init__(self, j=None, *, title: str = "", y_ndim: int | None = None, figsize=(5.2, 4.0),
                 colorbar: bool = True):
        self.fig, self.ax = new_figure(figsize, layout=None, dpi=LIVE_DPI)
        self.fig.subplots_adjust(left=0.13, right=0.97 if not colorbar else 0.99, bottom=0.12,
                                 top=0.86)
        self.image = self.ax.imshow(np.zeros((1, 1)), cmap=CMAP, vmin=-1, vmax=1,
                                    interpolation="nearest", aspect="auto")
        self.ax.set_xlabel(_("input element (flattened x)"))
        self.ax.set_ylabel(_("output element (flattened y)"))
        self.ax.grid(False)
        for axis in (self.ax.xaxis, self.ax.yaxis):
            axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        self.colorbar = self.fig.colorbar(self.image, ax=self.ax, shrink=0.85, pad=0.03) if colorbar else None
        # the block grid: one line collection per direction, its segments replaced per update
        self._hlines = LineCollection([], colors="#57606a", linewidths=0.8)
        self._vlines = LineCollection([], colors="#57606a", linewidths=0.8)
        self.ax.add_collection(self._hlines)
        self.ax.add_collection(self._vlines)
        self.title = self.ax.set_title("", fontsize=10, loc="left")
        if j is not None:
            self.update(j, title=title, y_ndim=y_ndim)

    def static_key(self) -> tuple:
        return (self.image.get_clim(),)

    def update(self, j, *, title: str = "", y_ndim: int | None = None):
        """Show Jacobian ``j`` (any rank; see :func:`as_matrix`)."""
        j = np.asarray(j)
        m, blocks = as_matrix(j, y_ndim)
        rows, cols = m.shape
        lim = _limit(m)
        self.image.set_data(np.ma.masked_invalid(m))
        self.image.set_clim(-lim, lim)
        self.image.set_extent((-0.5, cols - 0.5, rows - 0.5, -0.5))
        self.ax.set_xlim(-0.5, cols - 0.5)
        self.ax.set_ylim(rows - 0.5, -0.5)
        ks = range(1, blocks) if blocks > 1 else ()
        self._hlines.set_segments([[(-0.5, k * rows / blocks - 0.5), (cols - 0.5, k * rows / blocks - 0.5)]
                                   for k in ks])
        self._vlines.set_segments([[(k * cols / blocks - 0.5, -0.5), (k * cols / blocks - 0.5, rows - 0.5)]
                                   for k in ks])
        shape = tuple(int(d) for d in j.shape)
        if j.ndim > 2:
            text = _("Jacobian shape {shape}, drawn as {rows} × {cols}").format(
                shape=shape, rows=rows, cols=cols)
        else:
            text = _("Jacobian shape {shape}").format(shape=shape)
        self.title.set_text(f"{title}\n{text}" if title else text)
        return self


def plot_jacobian(j, *, title: str = "", y_ndim: int | None = None, figsize=(5.2, 4.0)):
    """A one-shot heatmap of a Jacobian with its shape (chapter 02)."""
    return JacobianPlot(j, title=title, y_ndim=y_ndim, figsize=figsize).fig


def plot_jacobians(named: dict, *, y_ndim: int | None = None, figsize=None, shared_scale: bool = True):
    """Side-by-side heatmaps, e.g. the true per-example blocks next to ``batch_jacobian``'s.

    With ``shared_scale`` every panel uses the same colour range, so equal colours mean equal
    numbers across panels (chapter 02).
    """
    if not named:
        raise ValueError("named must map at least one title to a Jacobian; got an empty dict")
    mats = {k: as_matrix(v, y_ndim)[0] for k, v in named.items()}
    lim = _limit(np.concatenate([m.ravel() for m in mats.values()]))
    n = len(mats)
    ratios = [max(m.shape[1], 7) for m in mats.values()]  # equal cell widths, room for titles
    fig, axes = new_figure(figsize or (min(2.0 + 0.28 * sum(ratios), 10.0), 3.3), ncols=n,
                           squeeze=False, gridspec_kw={"width_ratios": ratios})
    image = None
    for ax, (name, m), (_key, raw) in zip(axes[0], mats.items(), named.items(), strict=True):
        this = lim if shared_scale else _limit(m)
        image = ax.imshow(m, cmap=CMAP, vmin=-this, vmax=this, interpolation="nearest")
        ax.grid(False)
        ax.set_title(_("{name}\nshape {shape}").format(name=name, shape=tuple(int(d) for d in np.shape(raw))),
                     fontsize=9, loc="left")
        ax.set_xlabel(_("input element"))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0][0].set_ylabel(_("output element"))
    if shared_scale and image is not None:
        fig.colorbar(image, ax=list(axes[0]), shrink=0.8)
    return fig


def block_diagonal_matrix(blocks) -> np.ndarray:
    """Per-example blocks ``(B, out, in)`` placed on the diagonal of a ``(B·out, B·in)`` matrix.

    Entries outside the blocks are NaN: ``batch_jacobian`` does not compute them. With the
    blocks drawn at the same places as in the full Jacobian, the two can be compared cell by
    cell (chapter 02).
    """
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 3:
        raise ValueError(f"blocks must have shape (batch, out, in); got shape {b.shape}")
    n, r, c = b.shape
    m = np.full((n * r, n * c), np.nan)
    for k in range(n):
        m[k * r:(k + 1) * r, k * c:(k + 1) * c] = b[k]
    return m


def plot_block_diagonals(full, blocks: dict, *, annotate: bool = True, figsize=None):
    """The full Jacobian of a batched function next to per-example blocks drawn where they belong.

    ``full`` has shape ``(B, out, B, in)``; ``blocks`` maps a title to a ``(B, out, in)`` array
    (the true diagonal blocks, what ``batch_jacobian`` returned, ...). Every panel has the full
    Jacobian's geometry and one shared colour scale; grey cells are not part of the blocks,
    and with ``annotate`` each cell shows its number, so a block of zeros reads as zeros
    rather than as an empty panel (chapter 02).
    """
    full = np.asarray(full, dtype=float)
    if full.ndim != 4 or full.shape[0] != full.shape[2]:
        raise ValueError(f"full must have shape (B, out, B, in); got shape {full.shape}")
    if not blocks:
        raise ValueError("blocks must map at least one title to a (B, out, in) array; got an empty dict")
    nb, r, __, c = full.shape
    mats = {_("full Jacobian, shape {shape}\ndrawn as {rows} × {cols}").format(
        shape=full.shape, rows=nb * r, cols=nb * c): full.reshape(nb * r, nb * c)}
    for name, b in blocks.items():
        if np.shape(b) != (nb, r, c):
            raise ValueError(f"blocks[{name!r}] must have shape {(nb, r, c)}; got {np.shape(b)}")
        mats[_("{name}, shape {shape}\nblocks drawn on the diagonal (grey: not computed)").format(
            name=name, shape=(nb, r, c))] = block_diagonal_matrix(b)
    lim = _limit(np.concatenate([m.ravel() for m in mats.values()]))
    cmap = matplotlib.colormaps[CMAP].with_extremes(bad="#d0d7de")
    fig, axes = new_figure(figsize or (3.6 * len(mats) + 0.8, 3.9), ncols=len(mats), squeeze=False)
    image = None
    for ax, (name, m) in zip(axes[0], mats.items(), strict=True):
        image = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=-lim, vmax=lim, interpolation="nearest")
        ax.grid(False)
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_xlabel(_("input element"))
        for k in range(1, nb):
            ax.axhline(k * r - 0.5, color="#57606a", lw=0.8)
            ax.axvline(k * c - 0.5, color="#57606a", lw=0.8)
        if annotate and m.size <= 400:
            for (i, j), val in np.ndenumerate(m):
                if np.isfinite(val):
                    ax.text(j, i, f"{val:.2g}" if val else "0", ha="center",
                            va="center", fontsize=6, color="white" if abs(val) > 0.6 * lim else "black")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0][0].set_ylabel(_("output element"))
    fig.colorbar(image, ax=list(axes[0]), shrink=0.8)
    return fig


def plot_forward_reverse(timing, *, figsize=(8.0, 3.3)):
    """Forward vs reverse mode over input and output sizes, from :func:`~gradlab.time_forward_reverse`."""
    fig, (a1, a2) = new_figure(figsize, ncols=2, sharey=True)
    sizes = np.asarray(timing.sizes)
    colors = {"forward": "#bc4c00", "reverse": "#0969da"}
    labels = {"forward": _("forward mode (one JVP per input)"), "reverse": _("reverse mode (one VJP per output)")}
    for ax, sweep, xlabel in (
        (a1, timing.wide_inputs, _("number of inputs n (outputs m = {m}), log scale").format(m=timing.fixed)),
        (a2, timing.wide_outputs, _("number of outputs m (inputs n = {n}), log scale").format(n=timing.fixed)),
    ):
        for mode in ("forward", "reverse"):
            ax.plot(sizes, np.asarray(sweep[mode]) * 1e3, "o-", ms=4, color=colors[mode], label=labels[mode])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xlabel)
    a1.set_ylabel(_("ms for the full Jacobian (log scale)"))
    a1.set_title(_("wide input, few outputs"), fontsize=10, loc="left")
    a2.set_title(_("few inputs, wide output"), fontsize=10, loc="left")
    a1.legend(fontsize=8, loc="upper left")
    return fig
