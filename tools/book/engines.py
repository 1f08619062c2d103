"""Every gradlab import of the book tools, in one place (repoint here when modules move).

The grids (tools/book/grids.py) and their tests reach gradlab only through this module.
``ENGINE_SOURCES`` lists the files whose code decides the grids' numbers and texts: the
freshness check hashes them.
"""

from __future__ import annotations

from pathlib import Path

import gradlab as gl
from gradlab import i18n
from gradlab.engines.mlp import MLPGradientEngine
from gradlab.engines.rnn import TimeGradientEngine
from gradlab.engines.training import TrainingEngine
from gradlab.engines.transformer import TransformerGradientEngine
from gradlab.i18n import _
from gradlab.models.mlp import ACTIVATIONS, INITIALIZERS
from gradlab.plots.view import STATUS_COLORS
from gradlab.reports.advice import gradient_advice
from gradlab.reports.verdict import STATUS_WORDS, status_word
from gradlab.widgets.gradient_explorer import ADVANCED, LOSS_SCALES, GradientExplorer
from gradlab.widgets.time_explorer import TimeExplorer
from gradlab.widgets.training_explorer import TrainingExplorer
from gradlab.widgets.transformer_explorer import TransformerExplorer

__all__ = ["TimeExplorer", "TimeGradientEngine", "TrainingEngine", "TrainingExplorer", "TransformerExplorer", "TransformerGradientEngine",
           "ACTIVATIONS", "ADVANCED", "LOSS_SCALES", "_", "ENGINE_SOURCES", "GradientExplorer", "INITIALIZERS",
           "MLPGradientEngine", "STATUS_COLORS", "STATUS_WORDS", "gl", "gradient_advice", "i18n",
           "status_word"]

ROOT = Path(gl.__file__).resolve().parent

#: The files whose code decides each explorer's grid (relative to the gradlab package).
ENGINE_SOURCES = {
    "GradientExplorer": ["engines/mlp.py", "models/mlp.py", "reports/verdict.py", "reports/base.py",
                         "reports/advice.py", "reports/gradients.py", "core", "widgets/gradient_explorer.py",
                         "widgets/base.py", "widgets/controls.py", "plots/view.py", "i18n.py", "locale"],
    "GradientExplorer05": ["engines/mlp.py", "models/mlp.py", "reports/verdict.py", "reports/base.py",
                           "reports/advice.py", "reports/gradients.py", "core", "engines/presets.py",
                           "widgets/gradient_explorer.py", "widgets/base.py", "widgets/controls.py", "plots/view.py", "i18n.py", "locale"],
    "TimeExplorer": ["engines/rnn.py", "models/rnn.py", "reports/time.py", "reports/verdict.py", "reports/base.py",
                     "reports/advice.py", "core", "widgets/time_explorer.py", "widgets/base.py", "widgets/controls.py", "plots/view.py", "i18n.py",
                     "locale"],
    "TransformerExplorer": ["engines/transformer.py", "models/transformer.py", "reports/transformer.py", "core",
                            "widgets/transformer_explorer.py", "widgets/base.py", "widgets/controls.py", "plots/view.py", "i18n.py", "locale"],
    "TrainingExplorer": ["engines/training.py", "engines/mlp.py", "models/mlp.py", "reports/training.py", "core",
                         "widgets/training_explorer.py", "widgets/base.py", "widgets/controls.py", "plots/view.py",
                         "plots/training.py", "i18n.py", "locale"],
}
