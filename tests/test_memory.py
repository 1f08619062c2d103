"""gradlab.topics.memory.measure_peak: TensorFlow's CPU allocator statistics with TF_CPU_ALLOCATOR_USE_BFC
(in a subprocess, since the variable is read when TensorFlow starts), and a clear error without."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from gradlab.topics.memory import allocator_stats_available, measure_peak

CHILD = r"""
import json, os
os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
import gradlab
import tensorflow as tf
from gradlab.topics.memory import measure_peak, allocator_stats_available

x = tf.ones([512, 512])  # float32: exactly 1 MiB


@tf.function
def holds(x, n):  # n buffers of 1 MiB alive at once (add_n needs them all), and the sum
    return tf.reduce_sum(tf.add_n([tf.sin(x + float(i)) for i in range(n)]))

out = {"available": allocator_stats_available("CPU:0")}
for n in (2, 8):
    m = measure_peak(holds, x, n, repeats=2)
    out[str(n)] = m.peak_bytes
import contextlib, io
text = io.StringIO()
with contextlib.redirect_stdout(text):
    out["with_bar"] = measure_peak(holds, x, 8, repeats=2, progress=True).peak_bytes
out["bar"] = text.getvalue()
out["device"], out["default"] = m.device, gradlab.topics.memory.default_device()
print(json.dumps(out))
"""


def test_peak_counts_the_bytes_a_computation_holds():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["available"] is True
    # the default device is where TensorFlow places the work: the first GPU when there is one
    assert out["device"] == out["default"] == ("GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0")
    mib = 2**20
    # n sines of 1 MiB each, all alive for add_n (which may write its result into one of them),
    # plus at most a temporary x + i and the result not yet freed or forwarded
    for n in (2, 8):
        assert n * mib <= out[str(n)] <= (n + 2) * mib + 4096, out
    # the bar is drawn between the calls: the same peak, and one line ending at 3/3 (warm-up + 2 repeats)
    assert 8 * mib <= out["with_bar"] <= 10 * mib + 4096, out
    assert out["bar"].endswith("measuring peak memory ▕████████████████████▏ 3/3\n"), out["bar"]
    assert out["bar"].count("\r") == 1 + 3 + 1


def test_without_the_bfc_allocator_the_error_says_what_to_set():
    if allocator_stats_available("CPU:0"):  # pragma: no cover - only when the test process set it
        pytest.skip("this process runs with TF_CPU_ALLOCATOR_USE_BFC")
    with pytest.raises(RuntimeError, match="TF_CPU_ALLOCATOR_USE_BFC=true"):
        measure_peak(lambda: tf.ones([2]))


@pytest.mark.parametrize("kwargs,match", [
    ({"fn": 3}, "fn must be a callable"),
    ({"device": ""}, "device must be"),
    ({"repeats": 0}, "repeats must be"),
    ({"repeats": True}, "repeats must be"),
    ({"progress": "yes"}, "progress must be None"),
])
def test_bad_arguments(kwargs, match):
    fn = kwargs.pop("fn", lambda: tf.ones([2]))
    with pytest.raises(ValueError, match=match):
        measure_peak(fn, **kwargs)
