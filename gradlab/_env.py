"""A quiet TensorFlow import and the CPU split, before gradlab's first op (every chapter).

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
import sys

__all__ = ["LOGICAL_CPUS_ENV", "quiet_import_tensorflow", "split_cpu_from_env"]


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
    # Even with the oneDNN graph rewrites off, TensorFlow's float32 matmul and convolution on
    # x86 call oneDNN's sgemm, which picks its kernel (and so its summation order) by the CPU's
    # instruction set: AVX-512 and AVX2 machines differ in the last bit, and a 200-step
    # training run grows that bit into the printed digits (issue 28). Cap oneDNN at AVX2, the
    # kernels every x86 CPU of the last decade has, so that all of them agree with the stored
    # outputs; a value you set yourself wins. The explorers' engines do not rely on this: they
    # round float64 products to float32 (gradlab.engines.mlp.matmul32), the same on any CPU.
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
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
