"""The explorers' plot specs, and their picture (chapters 00, 01, 02, 03, 05, 07, 09).

An explorer describes what to draw as plain data, a *view* (:mod:`gradlab.widgets.base`): the
page's module (``gradlab/widgets/static/explorer.js``) draws it with uPlot, and
:func:`view_figure` draws the same spec with matplotlib for the places where no script runs (a
saved notebook, nbconvert, the PDF, ``snapshot()``). One spec, so the page and the picture show
the same labels, colours and series.

A ``lines`` plot: ``x``, ``series`` (``label``, ``y``, ``color``, ``width``, ``dash``, ``marker``
``"dot"``/``"open"``, ``line``, optional own ``x``), ``xlim``, ``ylim``, ``ylog``, ``xlabel``,
``ylabel``, ``title``, ``title_color``, optional ``band`` (``lo``, ``hi``, ``label``, ``color``),
``markers`` (``x``, ``at`` ``"bottom"``/``"top"``, ``label``, ``color``) and ``xticks``
(``[[x, label], ...]``). A ``heatmap``: ``z`` (rows × cols, row-major), ``rows``, ``cols``, ``zmin``,
``zmax``, ``colors`` (stops), ``title``, ``xlabel``, ``ylabel``, ``zlabel``. Colours are one
string, or ``[light, dark]`` for the page's two themes (the picture uses the light one).
Numbers are float64 in JSON; non-finite ones are the strings ``"inf"``, ``"-inf"``, ``"nan"``.

**Frames** (chapter 11's step slider): a view whose ``frames`` is ``{"control": name, "values":
[v0, v1, ...]}`` holds every value of that control at once, so the page moves it without the
kernel. A series may then carry ``frames`` (one ``y`` per frame) in place of ``y``, a plot
``titles`` (one title per frame) and ``cursor`` (a colour: a vertical line at the frame's value).
The frame shown is the one of the control's current value (the last one beyond the end):
:func:`at_frame` here, ``atFrame`` in the page.
"""

from __future__ import annotations

import math

import numpy as np

from .live import figure_png, new_figure

__all__ = ["COLORS", "STATUS_COLORS", "at_frame", "color_ramp", "decade_limits", "jsonable", "line_plot",
           "view_figure", "view_png"]

#: ``[light, dark]``: every text colour reaches a contrast of 4.5:1 on white and on #111 (dark).
STATUS_COLORS = {
    "healthy": ["#1a7f37", "#3fb950"],
    "vanishing": ["#0550ae", "#79c0ff"],
    "exploding": ["#cf222e", "#ff7b72"],
    "non-finite": ["#8250df", "#d2a8ff"],
}
#: The series colours of every explorer, ``[light, dark]``.
COLORS = {
    "signal": ["#0969da", "#58a6ff"],
    "weight": ["#bc4c00", "#f0883e"],
    "clipped": ["#1a7f37", "#3fb950"],
    "forward": ["#6e7781", "#9ea7b3"],
    "band": ["#2da44e", "#2ea043"],
    "zeros": ["#cf222e", "#ff7b72"],
    "nonfinite": ["#8250df", "#d2a8ff"],
    "accent": ["#8250df", "#d2a8ff"],
    "muted": ["#57606a", "#9ea7b3"],
}


def color_ramp(n: int, start: str = "signal", end: str = "weight") -> list[list[str]]:
    """``n`` ``[light, dark]`` colours from :data:`COLORS` ``start`` to ``end`` (layers, input side first)."""

    def mix(a: str, b: str, f: float) -> str:
        return "#" + "".join(f"{round(int(a[i:i + 2], 16) * (1 - f) + int(b[i:i + 2], 16) * f):02x}" for i in (1, 3, 5))

    return [[mix(COLORS[start][k], COLORS[end][k], i / max(n - 1, 1)) for k in (0, 1)] for i in range(n)]


def _num(v):
    v = float(v)
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def jsonable(x):
    """``x`` as JSON carries it: arrays as lists, non-finite floats as strings, NumPy scalars as Python's."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "fc":
            return [jsonable(v) for v in x.tolist()] if x.ndim > 1 else [_num(v) for v in x.tolist()]
        return jsonable(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _num(x)
    return x


def decade_limits(values, *, floor: float = 1e-300, min_step: int = 1) -> tuple[float, float]:
    """Whole-decade y-limits around the positive finite ``values`` (5 or 10 decades per step for
    a wide range, at least ``min_step``)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = (v.min(), v.max()) if v.size else (1e-12, 1.0)
    llo, lhi = np.log10(max(lo, floor)), np.log10(max(hi, floor))
    step = max(min_step, 1 if lhi - llo < 8 else 5 if lhi - llo < 30 else 10)
    lo = 10.0 ** max(np.floor(llo / step) * step, -300)
    hi = 10.0 ** min(np.ceil(lhi / step) * step, 300)
    return (float(lo), float(hi)) if hi > lo else (float(lo), float(lo) * 10)


def log_limits(values, *, pad: float = 4.0) -> tuple[float, float]:
    """y-limits for a log plot: whole decades around the values, padded by ``pad`` each way."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return (1e-12, 1.0)
    return decade_limits([v.min() / pad, v.max() * pad])


def line_plot(*, x, series: list[dict], xlabel: str, ylabel: str, title: str = "", title_color=None,
              ylog: bool = True, xlim=None, ylim=None, band: dict | None = None, markers: list | None = None,
              xticks: dict | None = None, flex: float = 1, height: int = 300, titles: list | None = None,
              cursor=None) -> dict:
    """A ``lines`` plot spec (see the module docstring); the limits default to the data's (with
    frames, pass ``ylim``: the default reads only ``y``)."""
    x = np.asarray(x, dtype=np.float64)
    if xlim is None:
        xlim = (float(x.min()) - 0.5, float(x.max()) + 0.5) if x.size else (0.0, 1.0)
    if ylim is None:
        ys = [np.asarray(s["y"], dtype=np.float64) for s in series if s.get("y") is not None]
        allv = np.concatenate(ys) if ys else np.zeros(0)
        if band is not None:
            allv = np.concatenate([allv, [band["lo"], band["hi"]]])
        if ylog:
            ylim = log_limits(allv)
        else:
            fin = allv[np.isfinite(allv)]
            lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 1.0)
            pad = 0.05 * (hi - lo or 1.0)
            ylim = (lo - pad, hi + pad)
    spec = {
        "type": "lines", "x": x,
        "series": [dict(s, y=np.asarray(s["y"], dtype=np.float64)) if s.get("y") is not None else s for s in series],
        "xlabel": xlabel, "ylabel": ylabel, "title": title, "title_color": title_color, "ylog": ylog,
        "xlim": list(xlim), "ylim": list(ylim), "band": band, "markers": markers or [],
        "xticks": [[k, v] for k, v in xticks.items()] if xticks else None, "flex": flex, "height": height,
    }
    if titles is not None:
        spec["titles"] = titles
    if cursor is not None:
        spec["cursor"] = cursor
    return jsonable(spec)


def frame_index(view: dict, value=None) -> int | None:
    """The frame of ``view`` shown at ``value`` of its frame control (default: the view's own value)."""
    frames = view.get("frames")
    if not frames or not frames.get("values"):
        return None
    values = frames["values"]
    if value is None:
        value = (view.get("values") or {}).get(frames["control"], values[-1])
    at = [k for k, v in enumerate(values) if v <= value]
    return at[-1] if at else 0


def at_frame(view: dict, value=None) -> dict:
    """``view`` with its frames resolved at ``value`` (see the module docstring): every series has
    its ``y``, every plot its ``title`` and, with a ``cursor``, ``cursor_x``."""
    k = frame_index(view, value)
    if k is None:
        return view
    x = view["frames"]["values"][k]
    plots = []
    for p in view.get("plots") or []:
        p = dict(p)
        if p.get("series") is not None:
            p["series"] = [dict(s, y=s["frames"][k]) if s.get("frames") is not None else s for s in p["series"]]
        if p.get("titles"):
            p["title"] = p["titles"][k]
        if p.get("cursor") is not None:
            p["cursor_x"] = x
        plots.append(p)
    return dict(view, plots=plots)


# --------------------------------------------------------------------------- the picture
def _light(color):
    return color[0] if isinstance(color, (list, tuple)) else color


def _f(v) -> float:
    return float(v) if not isinstance(v, str) else {"inf": math.inf, "-inf": -math.inf}.get(v, math.nan)


def _arr(values) -> np.ndarray:
    return np.array([_f(v) if v is not None else math.nan for v in values], dtype=np.float64)


def view_figure(view: dict, *, width: float = 7.4):
    """A matplotlib figure of ``view``'s plots (one panel each, side by side; more than three in
    rows of three), legend below. A view with frames is drawn at its own frame (:func:`at_frame`)."""
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    view = at_frame(view)
    plots = view.get("plots") or []
    if not plots:
        fig, ax = new_figure((width, 1.0))
        ax.set_axis_off()
        return fig
    if len(plots) > 3:
        rows = math.ceil(len(plots) / 3)
        fig, axes = new_figure((width * 1.35, 2.9 * rows + 0.6), nrows=rows, ncols=3)
        axes = np.atleast_1d(axes).ravel()
        for ax in axes[len(plots):]:
            ax.set_axis_off()
        axes = axes[:len(plots)]
    else:
        ratios = [p.get("flex", 1) for p in plots]
        fig, axes = new_figure((width, 3.9 if len(plots) == 1 else 3.6), ncols=len(plots), width_ratios=ratios)
        axes = np.atleast_1d(axes)
    handles = {}
    for ax, p in zip(axes, plots, strict=True):
        if p["type"] == "heatmap":
            cmap = LinearSegmentedColormap.from_list("view", p["colors"])
            z = _arr(p["z"]).reshape(p["rows"], p["cols"])
            im = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, vmin=_f(p["zmin"]), vmax=_f(p["zmax"]),
                           interpolation="nearest", aspect="auto")
            fig.colorbar(im, ax=ax, label=p.get("zlabel") or None)
        else:
            _draw_lines(ax, p, handles)
        ax.set_title(p.get("title") or "", fontsize=9.5, loc="left", color=_light(p.get("title_color")) or "black")
        ax.set_xlabel(p.get("xlabel") or "")
        ax.set_ylabel(p.get("ylabel") or "")
    if handles:
        items = [(Patch(color=c, alpha=0.3) if k == "band" else
                  Line2D([], [], color=c, ls="", marker="v" if k == "down" else "^" if k == "up" else "o", ms=6)
                  if k in ("down", "up", "dot") else
                  Line2D([], [], color=c, ls="--" if k == "dash" else "-", lw=2), label)
                 for label, (k, c) in handles.items()]
        fig.legend([h for h, _l in items], [lab for _h, lab in items], loc="outside lower center", ncol=2,
                   fontsize=8, frameon=False)
    return fig


def _draw_lines(ax, p: dict, handles: dict) -> None:
    x0 = _arr(p["x"])
    if p.get("ylog"):
        ax.set_yscale("log")
    band = p.get("band")
    if band:
        ax.axhspan(_f(band["lo"]), _f(band["hi"]), color=_light(band["color"]), alpha=0.14, lw=0)
        handles.setdefault(band["label"], ("band", _light(band["color"])))
    for s in p["series"]:
        x = _arr(s["x"]) if s.get("x") is not None else x0
        y = _arr(s["y"])
        shown = np.isfinite(y) & ((y > 0) if p.get("ylog") else True)
        if not shown.any():
            continue
        color = _light(s["color"])
        marker = {"dot": "o", "open": "o"}.get(s.get("marker"), None)
        ax.plot(x, np.where(shown, y, np.nan), color=color, lw=0 if s.get("line") is False else s.get("width", 1.5),
                ls=(0, tuple(d / 2 for d in s["dash"])) if s.get("dash") else "-", marker=marker, ms=3.5,
                mfc="white" if s.get("marker") == "open" else color)
        if s.get("label"):
            kind = "dot" if s.get("line") is False else "dash" if s.get("dash") else "line"
            handles.setdefault(s["label"], (kind, color))
    for m in p.get("markers") or []:
        if m["x"]:
            xs = _arr(m["x"])
            top = m.get("at") == "top"
            ax.plot(xs, np.full(xs.size, 0.97 if top else 0.03), "^" if top else "v", ms=7,
                    color=_light(m["color"]), transform=ax.get_xaxis_transform(), clip_on=False)
            handles.setdefault(m["label"], ("up" if top else "down", _light(m["color"])))
    if p.get("cursor_x") is not None:
        ax.axvline(_f(p["cursor_x"]), color=_light(p["cursor"]), lw=1, alpha=0.7)
    ax.set_xlim(*map(_f, p["xlim"]))
    ax.set_ylim(*map(_f, p["ylim"]))
    if p.get("xticks"):
        ticks = {float(k): v for k, v in p["xticks"]}
        ax.set_xticks(list(ticks), list(ticks.values()), rotation=60, fontsize=7)


def view_png(view: dict) -> bytes:
    """The PNG of :func:`view_figure`."""
    return figure_png(view_figure(view))
