"""Progress on long work: one text line that a notebook redraws in place (issue 28).

Every slow gradlab call (``train_steps``, the warmup runs and sweeps, ``check_gradient``,
``per_example_gradients``, ``measure_peak``, ``gl.train.distribute.run_workers``, ...) takes
``progress=`` and reports through :class:`Progress`; for ``model.fit``, the callback
``gl.train.fit.FitProgress`` draws one. The line is plain text on stdout, redrawn with a carriage return, so

* JupyterLab and a terminal show one bar that moves (``warmup runs ▕██████░░░░▏ 3/5``);
* the stored output of a notebook is the finished line only (nbval, like JupyterLab, keeps
  what follows the last ``\\r``), and it holds no timing or other number that varies between
  runs or CPUs, so it reproduces exactly;
* nothing here imports ipywidgets or IPython: computation modules may use it.

``progress=None`` (every function's default) means "on in a notebook kernel, off elsewhere"
(tests, scripts, a worker process); ``True`` and ``False`` force it.
"""

from __future__ import annotations

import sys

__all__ = ["Progress", "check_progress", "in_notebook"]

_FULL, _EMPTY = "█", "░"


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, nbclient, nbval), where progress is on by default."""
    return "ipykernel" in sys.modules and type(sys.stdout).__module__.startswith("ipykernel")


def check_progress(progress) -> bool:
    """``progress`` as a bool: ``None`` is :func:`in_notebook`; anything but None/True/False is a ValueError."""
    if progress is None:
        return in_notebook()
    if not isinstance(progress, bool):
        raise ValueError(f"progress must be None (on in a notebook), True or False; got {progress!r}")
    return progress


class Progress:
    """A text bar ``label ▕███░░░▏ done/total note`` redrawn in place, ended by a newline.

    ``Progress(total, label, enabled=...)``; call :meth:`update` after each unit of work (an
    optional ``note`` names it: "seed 3", "post-LN, lr 3e-3"), and :meth:`close` (or leave the
    ``with`` block) at the end. ``label`` and ``note`` are already translated by the caller.
    With ``enabled=False`` every method does nothing.
    """

    def __init__(self, total: int, label: str, *, enabled: bool | None = None, width: int = 20):
        self.total = max(int(total), 1)
        self.label = label
        self.enabled = check_progress(enabled)
        self.width = width
        self.done = 0
        self._closed = False
        if self.enabled:
            self._draw("")

    def _draw(self, note: str) -> None:
        filled = round(self.width * self.done / self.total)
        bar = _FULL * filled + _EMPTY * (self.width - filled)
        tail = f" {note}" if note else ""
        sys.stdout.write(f"\r{self.label} ▕{bar}▏ {self.done}/{self.total}{tail}")
        sys.stdout.flush()

    def update(self, n: int = 1, note: str = "") -> None:
        """Count ``n`` more units done and redraw (``note`` says which one)."""
        if not self.enabled or self._closed:
            return
        self.done = min(self.done + n, self.total)
        self._draw(note)

    def close(self, note: str = "") -> None:
        """End the line (the bar as it stands, with ``note``) with a newline."""
        if not self.enabled or self._closed:
            return
        self._closed = True
        self._draw(note)
        sys.stdout.write("\n")
        sys.stdout.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
