"""Chapter 02's interactive Jacobian viewer: pick a function and a size, see J and its cost."""

from __future__ import annotations

import numpy as np

from .._validate import check_int as _check_int
from ..i18n import _
from ..plots.jacobians import as_matrix
from ..plots.view import jsonable
from ..topics.jacobian_timing import JacobianBench
from ..topics.jacobians import JACOBIAN_FUNCTIONS, jacobian_function
from .base import Explorer
from .controls import Dropdown, Slider

__all__ = ["JacobianViewer"]

VIEWER_MIN_SIZE = 2
VIEWER_MAX_SIZE = 48


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


class JacobianViewer(Explorer):
    """Choose a function and a size; see the Jacobian as a heatmap and what each method cost.

    Public controls: ``function`` (Dropdown of :data:`~gradlab.JACOBIAN_FUNCTIONS`) and
    ``size`` (IntSlider, the length of ``x``, or of each example for the batched Dense layer).
    Setting a control's ``value`` recomputes :attr:`jacobian` (NumPy), :attr:`run` (all three
    methods and their timings) and :attr:`status_text` before the assignment returns. The
    page draws the matrix on a canvas from the numbers sent; the compiled Jacobian functions
    have shape-free signatures, so a new size does not retrace. Used in chapter 02.
    """

    #: a report holds timings: each change is measured afresh
    cache_reports = False
    #: RdBu reversed: blue negative, white zero, red positive (matplotlib's "RdBu_r" stops)
    COLORS = ["#053061", "#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582",
              "#d6604d", "#b2182b", "#67001f"]

    def __init__(self, function: str = "softmax", size: int = 8, seed: int = 0, *,
                 bench: JacobianBench | None = None):
        jacobian_function(function)
        size = _check_int("size", size, VIEWER_MIN_SIZE, VIEWER_MAX_SIZE)
        if bench is not None and not isinstance(bench, JacobianBench):
            raise ValueError(f"bench must be a JacobianBench or None; got {bench!r}")
        self.bench = bench or JacobianBench(seed=seed)
        self.function = self.control(Dropdown(
            "function", options=[(f"{f.name}: {_(f.label)}", f.name) for f in JACOBIAN_FUNCTIONS.values()],
            value=function, description=_("function")))
        self.size = self.control(Slider("size", value=size, min=VIEWER_MIN_SIZE, max=VIEWER_MAX_SIZE, integer=True,
                                        description=_("size n")))
        self.start()

    # --------------------------------------------------------------------- the base's hooks
    def _compute(self):
        self.run = self.bench.run(self.function.value, int(self.size.value))
        self.jacobian = self.run.jacobian
        return self.run

    def _plots(self) -> list[dict]:
        m, _blocks = as_matrix(np.asarray(self.jacobian), len(self.run.y_shape))
        finite = np.abs(m[np.isfinite(m)])
        lim = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        return [jsonable({"type": "heatmap", "z": m.astype(np.float64).ravel(), "rows": m.shape[0], "cols": m.shape[1],
                          "zmin": -lim, "zmax": lim, "colors": self.COLORS, "title": self._plot_title(),
                          "xlabel": _("input element (flattened x)"), "ylabel": _("output element (flattened y)"),
                          "zlabel": ""})]

    def _notes(self) -> list:
        spec = JACOBIAN_FUNCTIONS[self.run.name]
        r = self.run
        return [[{"text": t}] for t in (
            _(spec.description), _("x shape {x}, y shape {y}").format(x=r.x_shape, y=r.y_shape),
            _("batch_jacobian shape {shape}").format(shape=tuple(r.batch_jacobian.shape)),
            _("the three methods agree to {tol}").format(tol=f"{r.max_disagreement:.1g}"))]

    def _report_fields(self) -> dict:
        return {"jacobian_shape": list(np.shape(self.jacobian)), "max_disagreement": self.run.max_disagreement}

    def _status_color(self):
        return None

    def _text(self) -> str:
        """Timing-free on purpose: nbval compares it, and timings change from run to run."""
        return self.description_text

    def _copy_kwargs(self) -> dict:
        return dict(self.settings(), bench=self.bench)

    def tracing_count(self) -> int:
        """How many times the viewer's compiled functions have been traced so far."""
        return self.bench.tracing_count()

    # --------------------------------------------------------------------- public helpers
    @property
    def times(self) -> dict:
        """Seconds per method for the current setting: jacobian, batch_jacobian, loop."""
        return dict(self.run.times)

    @property
    def description_text(self) -> str:
        """The status line without timings, e.g. ``softmax · n=8 → jacobian shape (8, 8)``."""
        r = self.run
        return _("{name} · n={n} → jacobian shape {shape}").format(
            name=r.name, n=r.n, shape=tuple(self.jacobian.shape))

    @property
    def status_text(self) -> str:
        """The status line in plain words, timings included."""
        t = self.run.times
        return _("{description} · jacobian {jacobian} · batch_jacobian {batch} · loop {loop}").format(
            description=self.description_text, jacobian=_ms(t["jacobian"]),
            batch=_ms(t["batch_jacobian"]), loop=_ms(t["loop"]))

    # --------------------------------------------------------------------- internals
    def _plot_title(self) -> str:
        return _(JACOBIAN_FUNCTIONS[self.run.name].label)
