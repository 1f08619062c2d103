"""gl.setup and the quiet TensorFlow import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import gradlab as gl


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_gradlab_leaves_stderr_clean_but_working():
    proc = run_python(
        "import gradlab, tensorflow as tf, os\n"
        "gradlab.setup(0)\n"
        "print(float(tf.reduce_sum(tf.ones(3))))\n"
        "os.write(2, b'still-open\\n')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3.0"
    # fd 2 is restored after the import: later writes still arrive, and nothing else does
    assert proc.stderr == "still-open\n"


def test_plain_tensorflow_import_is_noisy():
    """The reason for the quiet import: without it TensorFlow prints absl/oneDNN lines to fd 2."""
    proc = run_python("import tensorflow as tf; tf.constant(1.0) + 1")
    assert proc.returncode == 0
    assert "absl::InitializeLog" in proc.stderr or "I0000" in proc.stderr


def test_setup_makes_random_ops_reproducible():
    gl.setup(seed=3)
    a = tf.random.normal([4]).numpy(), np.random.rand(2)
    gl.setup(seed=3)
    b = tf.random.normal([4]).numpy(), np.random.rand(2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    gl.setup(seed=4)
    assert not np.array_equal(tf.random.normal([4]).numpy(), a[0])
    gl.setup(seed=0)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_setup_rejects_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        gl.setup(seed=seed)


def test_computation_modules_do_not_import_ipywidgets():
    proc = run_python(
        "import sys, gradlab, gradlab.reports.gradients, gradlab.topics.jacobians, gradlab.topics.tracing, gradlab.exercises.checks, "
        "gradlab.reports.diagnostics, gradlab.plots, gradlab.core, gradlab.reports.causes, gradlab.engines.mlp, "
        "gradlab.models.mlp, gradlab.engines.presets, gradlab.models.rnn, gradlab.reports.time, gradlab.engines.rnn, gradlab.train.distribute, gradlab.reports.verdict, gradlab.reports.report, "
        "gradlab.reports.rules, gradlab.train.steps, gradlab.train.fit, gradlab.topics.rnn_theory, gradlab.topics.jacobian_timing, "
        "gradlab.session, gradlab.core.loss, gradlab.core.state, gradlab.topics.gradcheck, gradlab.topics.per_example, "
        "gradlab.topics.memory, gradlab.exercises.ch10, "
        "gradlab.exercises.ch00, gradlab.exercises.ch01, gradlab.exercises.ch02, gradlab.exercises.ch03, "
        "gradlab.exercises.ch04, gradlab.exercises.ch05, gradlab.exercises.ch06, gradlab.exercises.ch07, "
        "gradlab.exercises.ch08\n"
        "print('ipywidgets' in sys.modules)"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
