"""Every gradlab import of the book tools, in one place (repoint here when modules move).

The grids (tools/book/grids.py) and their tests reach gradlab only through this module.
``ENGINE_SOURCES`` lists the files whose code decides the grids' numbers and texts: the
freshness check hashes them.
"""

from __future__ import annotations

from pathlib import Path

import gradlab as gl
from gradlab import i18n
from gradlab.advice import gradient_advice
from gradlab.engine import MLPGradientEngine
from gradlab.i18n import _
from gradlab.mlp import ACTIVATIONS, INITIALIZERS
from gradlab.plots.gradients import STATUS_COLORS
from gradlab.recurrent import TimeGradientEngine
from gradlab.transformer import TransformerGradientEngine
from gradlab.verdict import STATUS_WORDS, status_word
from gradlab.widgets.explorer import ADVANCED, LOSS_SCALES, GradientExplorer
from gradlab.widgets.time import TimeExplorer
from gradlab.widgets.transformer import TransformerExplorer

__all__ = ["TimeExplorer", "TimeGradientEngine", "TransformerExplorer", "TransformerGradientEngine",
           "ACTIVATIONS", "ADVANCED", "LOSS_SCALES", "_", "ENGINE_SOURCES", "GradientExplorer", "INITIALIZERS",
           "MLPGradientEngine", "STATUS_COLORS", "STATUS_WORDS", "gl", "gradient_advice", "i18n",
           "status_word"]

ROOT = Path(gl.__file__).resolve().parent

#: The files whose code decides each explorer's grid (relative to the gradlab package).
ENGINE_SOURCES = {
    "GradientExplorer": ["engine.py", "mlp.py", "verdict.py", "advice.py", "grads.py", "core",
                         "widgets/explorer.py", "widgets/base.py", "i18n.py", "locale"],
    "GradientExplorer05": ["engine.py", "mlp.py", "verdict.py", "advice.py", "grads.py", "core", "presets.py",
                           "widgets/explorer.py", "widgets/base.py", "i18n.py", "locale"],
    "TimeExplorer": ["recurrent.py", "verdict.py", "advice.py", "core", "widgets/time.py", "widgets/base.py",
                     "i18n.py", "locale"],
    "TransformerExplorer": ["transformer.py", "core", "widgets/transformer.py", "widgets/base.py", "i18n.py",
                            "locale"],
}
