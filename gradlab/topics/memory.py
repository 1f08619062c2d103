"""Measure the peak memory and the time of a computation (chapter 10: ``tf.recompute_grad`` and
gradient accumulation).

The method is TensorFlow's own allocator statistics: ``tf.config.experimental.reset_memory_stats``
before the call, ``tf.config.experimental.get_memory_info(device)["peak"]`` after it. They count
the bytes of every tensor TensorFlow allocates on that device (inputs, activations kept for the
backward pass, gradients, temporaries of every op, XLA's buffers), not Python objects and not
memory that the allocator reserved but did not hand out. The docstring of ``get_memory_info``
says it supports only GPUs and TPUs and raises on a CPU (``tensorflow/python/framework/config.py``,
line 603 in TF 2.21). Measured on TF 2.21: TensorFlow's default CPU allocator indeed keeps no
statistics ("Allocator stats not available for device 'CPU:0'"), but the BFC allocator does, and
``TF_CPU_ALLOCATOR_USE_BFC=true`` selects it: it is
read once, when TensorFlow creates its CPU allocator (``ProcessState::GetCPUAllocator`` in
``tensorflow/core/common_runtime/process_state.cc``), so it must be set before TensorFlow is
imported (chapter 10's first cell sets it before ``import gradlab``).

Pure computation: no widgets, no plots.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from .._env import quiet_import_tensorflow
from ..i18n import _
from ..progress import Progress, check_progress

tf = quiet_import_tensorflow()

__all__ = ["CPU_BFC_ENV", "MemoryMeasurement", "allocator_stats_available", "default_device", "measure_peak"]

#: The environment variable that gives TensorFlow's CPU allocator its statistics.
CPU_BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


@dataclasses.dataclass(frozen=True)
class MemoryMeasurement:
    """Peak bytes allocated during one call of a function above what was allocated before it,
    and the call's time (the fastest of ``repeats`` calls, after a warm-up call)."""

    device: str
    peak_bytes: int
    before_bytes: int
    seconds: float

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / 2**20


def default_device() -> str:
    """``"GPU:0"`` when TensorFlow sees a GPU (where it places the computation), else ``"CPU:0"``."""
    return "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"


def _check_device(device) -> str:
    if device is None:
        return default_device()
    if not isinstance(device, str) or not device.strip():
        raise ValueError(f"device must be a device name such as 'CPU:0' or 'GPU:0'; got {device!r}")
    return device


def allocator_stats_available(device: str = "CPU:0") -> bool:
    """True when TensorFlow keeps allocation statistics for ``device`` (see the module docstring)."""
    device = _check_device(device)
    try:
        tf.config.experimental.get_memory_info(device)
    except ValueError:
        return False
    return True


def measure_peak(fn: Callable, *args, device: str | None = None, warmup: bool = True,
                 repeats: int = 1, progress: bool | None = None) -> MemoryMeasurement:
    """Run ``fn(*args)`` on ``device`` and measure the peak memory TensorFlow allocated there during it.

    ``device`` defaults to :func:`default_device` (the first GPU when there is one, else the
    CPU), and ``fn`` runs under ``tf.device(device)``, so the peak is that of the device that
    did the work.
    The first call (``warmup``) traces a ``tf.function`` and builds variables, so that the
    measured calls see only the computation; the peak is that of the last call, the time the
    fastest. The result of ``fn`` is converted to NumPy inside the measurement, so that
    asynchronous work is finished. Raises ``RuntimeError`` when the device keeps no statistics
    (on the CPU: ``TF_CPU_ALLOCATOR_USE_BFC=true`` was not set before TensorFlow was imported).
    ``progress`` shows a bar over the calls (:class:`gradlab.progress.Progress`; ``None``: on in a
    notebook); it is drawn between the calls, outside what is measured. Used in chapter 10.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a callable (e.g. a tf.function training step); got {type(fn).__name__}")
    device = _check_device(device)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1; got {repeats!r}")
    progress = check_progress(progress)
    if not allocator_stats_available(device):
        hint = (f" Set {CPU_BFC_ENV}=true in the environment before TensorFlow is imported (before "
                "`import gradlab`), e.g. os.environ['TF_CPU_ALLOCATOR_USE_BFC'] = 'true' in the first cell."
                if device.upper().startswith("CPU") else "")
        now = os.environ.get(CPU_BFC_ENV)
        raise RuntimeError(
            f"TensorFlow keeps no allocation statistics for {device!r} ({CPU_BFC_ENV}={now!r}).{hint}"
        )

    def run():
        with tf.device(device):
            out = fn(*args)
        for t in tf.nest.flatten(out):
            if hasattr(t, "numpy"):
                t.numpy()

    with Progress(int(warmup) + repeats, _("measuring peak memory"), enabled=progress) as bar:
        if warmup:
            run()
            bar.update(note=_("warm-up"))
        best = float("inf")
        for _repeat in range(repeats):
            tf.config.experimental.reset_memory_stats(device)
            before = tf.config.experimental.get_memory_info(device)["current"]
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
            peak = tf.config.experimental.get_memory_info(device)["peak"]
            bar.update()
    return MemoryMeasurement(device, int(peak - before), int(before), best)
