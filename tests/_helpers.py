"""Helpers several test files share (issue 38): one copy of each.

* :func:`fails`: a self-check result that fails, saying each of the given words, cleanly;
* :func:`free_port`, :func:`wait_ready` and :func:`stop_server`: a local server started by a test
  (Jupyter server, JupyterLab, TensorBoard), found ready by polling and stopped with its children.

The model matrices' registry and their snapshot of a model's state are in ``tests/_matrix.py``;
the chapter-01 engine fixture is ``engine`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable


def fails(result, *needles: str) -> None:
    """``result`` is a failed :class:`gradlab.exercises.feedback.CheckResult` whose feedback holds
    every one of ``needles``, prints as one "❌" line, and shows the learner no raw terminal colours
    or TensorFlow's "Arguments received" dump."""
    from gradlab.exercises.feedback import CheckResult

    assert isinstance(result, CheckResult), result
    assert not result and result.ok is False, result
    for needle in needles:
        assert needle in result.feedback, f"{needle!r} not in: {result.feedback}"
    assert str(result).startswith("❌"), str(result)
    assert "\x1b[" not in result.feedback and "Arguments received" not in result.feedback, result.feedback


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(probe: Callable[[], object], proc: subprocess.Popen, *, what: str, log: Callable[[], str],
               timeout: float, interval: float = 0.3) -> None:
    """Call ``probe`` until it returns something true without an ``OSError``; raise ``RuntimeError``
    with the tail of the server's ``log`` if ``proc`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log()}")
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{what} did not answer within {timeout:.0f} s:\n{log()}")


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server we started, then any of its children that outlived it (kernels; by pid)."""
    import psutil

    if proc.poll() is not None:
        return
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    proc.terminate()  # SIGTERM: a Jupyter server shuts its kernels down, then exits
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
