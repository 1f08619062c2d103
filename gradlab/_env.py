"""Environment set-up shared by every chapter: a quiet TensorFlow import, seeds, plot defaults.

TensorFlow 2.21 writes absl/oneDNN start-up lines straight to file descriptor 2 while its
shared libraries load (``WARNING: All log messages before absl::InitializeLog()...``,
``I0000 ... port.cc``). ``TF_CPP_MIN_LOG_LEVEL`` does not stop them because they are printed
before the logging flags are read. In a Jupyter kernel they appear as red stderr in the first
cell, and nbval (which compares stderr) fails on them.

gradlab therefore imports TensorFlow once, with file descriptor 2 pointed at ``/dev/null`` for
the duration of the import only. Everything TensorFlow prints afterwards (real warnings and
errors) still reaches the notebook. Chapter 00 shows this decision to the learner.

The same first op fixes TensorFlow's devices: ``tf.config.set_logical_device_configuration``
fails afterwards. Set the environment variable ``GRADLAB_LOGICAL_CPUS`` (e.g. ``"2"``) before
the first ``import gradlab`` to have the CPU split into that many logical devices just before
the first op (chapter 08 uses two for ``tf.distribute.MirroredStrategy``).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys

from .fonts import use_cjk_fonts
from .i18n import set_language

__all__ = ["setup", "quiet_import_tensorflow", "split_cpu_from_env"]


@contextlib.contextmanager
def _fd2_silenced():
    """Point OS-level file descriptor 2 at /dev/null inside the block, then restore it."""
    try:
        sys.stderr.flush()
    except Exception:  # pragma: no cover - stderr may be closed in odd hosts
        pass
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


LOGICAL_CPUS_ENV = "GRADLAB_LOGICAL_CPUS"


def split_cpu_from_env(tf) -> None:
    """Split the CPU into ``$GRADLAB_LOGICAL_CPUS`` logical devices (unset or 1: no split).

    ``tf.config.set_logical_device_configuration`` raises "Virtual devices cannot be modified
    after being initialized" once any op has run, and ``import gradlab`` runs one. A chapter
    that wants two devices for ``tf.distribute.MirroredStrategy`` (chapter 08) therefore sets
    ``os.environ["GRADLAB_LOGICAL_CPUS"] = "2"`` before ``import gradlab``.
    """
    raw = os.environ.get(LOGICAL_CPUS_ENV, "").strip()
    if raw in ("", "1"):
        return
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise ValueError(f"{LOGICAL_CPUS_ENV} must be an int from 1 to 64; got {raw!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(int(raw))]
    )


def quiet_import_tensorflow():
    """Import TensorFlow (and Keras) without the C++ start-up log lines; return the module.

    Used by ``import gradlab`` itself, so every chapter that imports gradlab first gets a
    clean first cell. Importing TensorFlow a second time is free, so calling this is cheap.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # bit-identical CPU results run to run
    with _fd2_silenced():
        import keras  # noqa: F401  (its import also prints through absl on some builds)
        import tensorflow as tf

        # Logical CPU devices can only be configured before the first op initialises the
        # devices, so the split requested by GRADLAB_LOGICAL_CPUS happens here (chapter 08).
        split_cpu_from_env(tf)
        # The first op initialises the devices, which logs "failed call to cuInit" on a
        # machine without a GPU. Run one here, still silenced.
        tf.config.list_physical_devices()
        _ = tf.constant(0.0) + 1.0
    return tf


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
    tf = quiet_import_tensorflow()
    import keras
    import numpy as np

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
    import matplotlib as mpl

    _inline_figures()
    mpl.rcParams.update(
        {
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
    )
    use_cjk_fonts()  # Chinese labels draw from the packaged Noto Sans SC (gradlab/fonts.py)
