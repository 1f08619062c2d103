"""The Setup cell of every chapter: ``gl.setup(seed=0)`` seeds, quiets logs, sets plot defaults.

This is notebook-session set-up, above the computation and plotting layers: it is the one
place besides :mod:`gradlab.plots` that touches matplotlib (the rc defaults, ``%matplotlib
inline``); the quiet TensorFlow import itself is :mod:`gradlab._env`'s.
"""

from __future__ import annotations

import random

import matplotlib as mpl
import numpy as np

from ._env import quiet_import_tensorflow
from .fonts import use_cjk_fonts
from .i18n import set_language

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["PLOT_DEFAULTS", "setup"]

#: The rc parameters every chapter's figures use.
PLOT_DEFAULTS = {
    "figure.figsize": (7.0, 3.6),
    "figure.dpi": 90,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "font.size": 10,
    "svg.hashsalt": "gradlab",
}


def setup(seed: int = 0, *, quiet: bool = True, plots: bool = True, lang: str | None = None) -> None:
    """Seed Python, NumPy and TensorFlow, enable op determinism, quiet logs, set plot defaults.

    Every chapter calls ``gl.setup(seed=0)`` in its Setup cell. Re-running a chapter then
    reproduces the stored outputs that nbval compares against. ``lang`` (``"en"`` or
    ``"zh"``) switches every text gradlab shows a learner; ``None`` keeps the current one
    (``GRADLAB_LANG``, else English).
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if lang is not None:
        set_language(lang)
    random.seed(seed)
    np.random.seed(seed)
    keras.utils.set_random_seed(seed)  # seeds Python, NumPy and TensorFlow together
    tf.config.experimental.enable_op_determinism()
    np.set_printoptions(precision=4, suppress=False)
    if quiet:
        tf.get_logger().setLevel("ERROR")
        tf.autograph.set_verbosity(0)
    if plots:
        _plot_defaults()


def _inline_figures() -> None:
    """In a Jupyter kernel, show returned ``Figure`` objects as PNG (what ``%matplotlib inline`` does).

    gradlab's plotting functions return figures that belong to no pyplot state, so a cell
    shows each figure exactly once. Without the inline formatter a kernel would print only
    ``<Figure size ...>``.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is always there in a notebook
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "kernel"):
        shell.run_line_magic("matplotlib", "inline")


def _plot_defaults() -> None:
    _inline_figures()
    mpl.rcParams.update(PLOT_DEFAULTS)
    use_cjk_fonts()  # Chinese labels draw from the packaged Noto Sans SC (gradlab/fonts.py)
