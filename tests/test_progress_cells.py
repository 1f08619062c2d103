"""Progress wherever a reader waits (issue 28): the bars of run_workers and FitProgress, and the
stored output of each long chapter cell.

Every nbval cell of more than 10 s shows progress while it runs: a bar
(:class:`gradlab.progress.Progress`) or a line per stage. The library bars are tested here with
``progress=True`` (drawn) and ``progress=False`` / the default outside a notebook (silent); the
stored notebooks are read for the finished bar of each long cell, so a cell that loses its bar
(or a notebook stored without it) fails here without re-executing anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

import gradlab as gl
from gradlab.train import distribute
from gradlab.train.fit import FitProgress

tf = gl.session.quiet_import_tensorflow()
import keras  # noqa: E402

CHAPTERS = Path(__file__).resolve().parents[1] / "chapters"
FULL = "█" * 20


def frames(text: str) -> list[str]:
    """Every state the bar line went through: the pieces between carriage returns and newlines."""
    return [f for f in re.split(r"[\r\n]", text) if f]


def final_lines(text: str) -> list[str]:
    """What a notebook and a terminal show in the end: each line's text after its last ``\\r``."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


# ----------------------------------------------------------------------------- FitProgress
def _fit(callback, *, epochs: int = 2, n: int = 10, batch_size: int = 4):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.linspace(-1, 1, 2 * n, dtype="float32").reshape(n, 2)
    model.fit(x, x[:, :1], batch_size=batch_size, epochs=epochs, verbose=0, callbacks=[callback])


def test_fit_progress_counts_every_batch_of_every_epoch(capsys):
    _fit(FitProgress(progress=True))  # 10 examples in batches of 4: 3 batches per epoch, 2 epochs
    out = capsys.readouterr().out
    seen = frames(out)
    assert seen[0] == "fit batches ▕" + "░" * 20 + "▏ 0/6"
    assert [f.split("▏ ")[1] for f in seen[1:7]] == [
        "1/6 epoch 1", "2/6 epoch 1", "3/6 epoch 1", "4/6 epoch 2", "5/6 epoch 2", "6/6 epoch 2"]
    assert final_lines(out) == [f"fit batches ▕{FULL}▏ 6/6 epoch 2", ""]
    assert not re.search(r"loss|\ds\b|ms|ETA", out)  # deterministic: no loss and no timing


def test_fit_progress_is_silent_when_off_and_outside_a_notebook(capsys):
    _fit(FitProgress(progress=False))
    _fit(FitProgress())  # None: on in a notebook kernel only, and pytest is not one
    assert capsys.readouterr().out == ""


def test_fit_progress_label_and_unknown_batch_count(capsys):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((4, 2), "float32")
    data = tf.data.Dataset.from_generator(lambda: iter([(x, x[:, :1])] * 3),
                                          output_signature=(tf.TensorSpec((None, 2)), tf.TensorSpec((None, 1))))
    model.fit(data, epochs=2, verbose=0, callbacks=[FitProgress("my run", progress=True)])
    # a generator has no length: the bar counts epochs instead of batches
    assert final_lines(capsys.readouterr().out) == [f"my run ▕{FULL}▏ 2/2 epoch 2", ""]


def test_fit_progress_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="progress must be None"):
        FitProgress(progress="yes")
    with pytest.raises(ValueError, match="label must be None or a string; got int"):
        FitProgress(3)


# ----------------------------------------------------------------------------- run_workers
class _FakeWorker:
    """Stands in for a worker process: prints the JSON line a real worker prints."""

    def __init__(self, command, env, **kwargs):
        self.index = json.loads(env["TF_CONFIG"])["task"]["index"]
        self.returncode = 0

    def communicate(self, timeout=None):
        result = {"replicas": 2, "losses": [0.5], "grad_norms": [1.0], "weights": [[1.0]],
                  "task": {"type": "worker", "index": self.index}}
        return json.dumps(result) + "\n", ""

    def poll(self):
        return 0

    def wait(self, timeout=None):
        return 0


@pytest.fixture
def fake_workers(monkeypatch):
    monkeypatch.setattr(distribute.subprocess, "Popen", _FakeWorker)
    monkeypatch.setattr(distribute, "reference_run",
                        lambda **kw: {"replicas": 1, "losses": [0.5], "grad_norms": [1.0], "weights": [[1.0]]})


def test_run_workers_shows_one_stage_per_worker_and_the_reference(fake_workers, capsys):
    run = distribute.run_workers(3, batch=12, progress=True)
    assert [w["task"]["index"] for w in run.workers] == [0, 1, 2]
    seen = [f.split("▏ ", 1)[1] for f in frames(capsys.readouterr().out)]
    assert seen == ["0/4", "0/4 3 workers started", "1/4 worker 0", "2/4 worker 1", "3/4 worker 2", "4/4 one process", "4/4"]


def test_run_workers_is_silent_when_off_and_outside_a_notebook(fake_workers, capsys):
    distribute.run_workers(2, progress=False)
    distribute.run_workers(2)
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="progress must be None"):
        distribute.run_workers(2, progress=1)


# ----------------------------------------------------------------------------- stored notebooks
#: (notebook, a piece of the long cell's source, the bar it must end with, how many such bars).
#: Each of these cells runs for more than about 7 s (measured with nbval --durations, report of
#: issue 28); cells that print a line per stage instead (chapter 08's fit comparisons) are not listed.
LONG_CELLS = [
    ("03-tape-and-function", '"-c", probe]', "probe in a fresh Python process", "1/1", 1),
    ("03-tape-and-function", '"-c", fit_probe]', "probe in a fresh Python process", "1/1", 1),
    ("08-distributed", "gl.train.distribute.run_workers(2", "multi-worker training", "3/3", 1),
    ("09-transformers", "with Progress(len(SEEDS_40)", "post-LN, 12 blocks", "40/40", 1),
    ("09-transformers", "curves[position, w] = trainers", "training steps", "100/100", 4),
    ("09-transformers", "sweep[label] = trainers", "learning-rate sweep", "", 4),
    ("09-transformers", "clipped = trainers[6, \"post\"].run", "training steps", "100/100", 1),
    ("09-transformers", "gl.train.fit.FitProgress()", "fit batches", "8/8 epoch 2", 1),
    ("10-checking-and-memory", "gl.per_example_gradients(stacked, xs_seq", "per-example gradients", "6/6 jacobian", 1),
]


def _cell(notebook: str, piece: str):
    nb = nbformat.read(CHAPTERS / f"{notebook}.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and piece in c.source]
    assert len(cells) == 1, f"{notebook}: {len(cells)} code cells contain {piece!r}"
    return cells[0]


@pytest.mark.parametrize("notebook, piece, label, end, count", LONG_CELLS,
                         ids=[f"{nb}:{label}" for nb, _p, label, _e, _c in LONG_CELLS])
def test_long_cells_store_a_finished_bar(notebook, piece, label, end, count):
    cell = _cell(notebook, piece)
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    finished = re.compile(rf"^{re.escape(label)} ▕{FULL}▏ (\d+)/\1\b ?(.*)$")
    bars = [m for m in map(finished.match, final_lines(text)) if m]
    assert len(bars) == count, f"{notebook}: the cell with {piece!r} stores {len(bars)} finished {label!r} bars"
    if end:
        assert all(m.group(0).endswith(end) for m in bars), [m.group(0) for m in bars]


# ----------------------------------------------------------------------------- time_pfor_vs_loop
def test_pfor_timing_shows_one_stage_per_size(capsys):
    timing = gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=(4, 8), repeats=1, progress=True)
    assert list(timing.sizes) == [4, 8]
    seen = [f.split("▏ ", 1)[1] for f in frames(capsys.readouterr().out)]
    assert seen == ["0/2", "1/2 n = 4", "2/2 n = 8", "2/2"]
    gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=(4,), repeats=1, progress=False)
    gl.topics.jacobian_timing.time_pfor_vs_loop(sizes=(4,), repeats=1)
    assert capsys.readouterr().out == ""
