"""Plotting (matplotlib, no widgets), one module per topic.

The chapter figures of the topic modules most chapters use (``gradients``, ``jacobians``,
``recurrent``, ``tracing``) and ``figure_png`` are re-exported here (``gl.plots.plot_report``);
the others are reached through their module (``gl.plots.transformer``, ``gl.plots.gradcheck``,
``gl.plots.replicas``, ``gl.plots.traps``). :mod:`gradlab.plots.view` holds the explorers' plot
specs and draws their pictures.
"""

from . import gradients, jacobians, recurrent, tracing
from .gradients import *  # noqa: F403
from .jacobians import *  # noqa: F403
from .live import figure_png
from .recurrent import *  # noqa: F403
from .tracing import *  # noqa: F403

__all__ = [*gradients.__all__, *jacobians.__all__, *recurrent.__all__, *tracing.__all__, "figure_png"]
