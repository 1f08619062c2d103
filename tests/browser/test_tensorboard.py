"""A real TensorBoard over a log this test writes: the per-layer gradient norms and histograms show.

The test trains a two-block ``gl.build_transformer`` model for a few batches with
``gl.GradNormLogger(probe=..., every="batch", log_dir=...)``, starts this environment's
``tensorboard --logdir <log> --host 127.0.0.1 --port <free>``, and drives headless Chromium:
the scalars dashboard must list every ``grad_norm/<layer>`` tag, and the histograms dashboard
must draw the ``gradients/block_0`` histogram (an SVG path with data). The server is stopped
in every case; on a failure a screenshot and TensorBoard's log go to
``test-artifacts/browser/<test name>/``. Needs no JupyterLab server, only the session's Chromium.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests._helpers import free_port, stop_server, wait_ready

from .conftest import artifact_dir

pytestmark = pytest.mark.browser

LAYERS = ("embedding", "block_0", "block_1", "final_norm", "logits")


def _write_log(log_dir: Path) -> None:
    import keras

    import gradlab as gl
    from gradlab.models.transformer import build_transformer, markov_tokens

    model = build_transformer(2, d_model=16, num_heads=2, vocab_size=11, seq_len=6)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = markov_tokens(12, 6, 11)
    logger = gl.GradNormLogger(probe=(x[:4], y[:4]), every="batch", log_dir=log_dir / "run")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[logger])
    assert list(logger.history) == list(LAYERS)


def _tensorboard_command(log_dir: Path, port: int) -> list[str]:
    script = Path(sys.executable).parent / "tensorboard"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "tensorboard.main"]
    return [*head, "--logdir", str(log_dir), "--host", "127.0.0.1", "--port", str(port),
            "--load_fast=false", "--reload_interval", "1"]


def _wait_ready(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 180) -> None:
    def listing():
        with urllib.request.urlopen(f"{url}/data/plugins_listing", timeout=5) as r:
            return r.status == 200

    wait_ready(listing, proc, what="tensorboard", log=lambda: log_path.read_text()[-3000:], timeout=timeout,
               interval=0.5)


def test_tensorboard_shows_per_layer_gradient_norms_and_histograms(request, browser, tmp_path):
    log_dir = tmp_path / "logs"
    _write_log(log_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tb_log = tmp_path / "tensorboard.log"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with open(tb_log, "w") as out:
        proc = subprocess.Popen(_tensorboard_command(log_dir, port), stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=tmp_path)
    context = page = None
    try:
        _wait_ready(url, proc, tb_log)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{url}/#scalars", wait_until="domcontentloaded")
        for layer in LAYERS:  # the scalars dashboard lists one card per layer's gradient norm
            page.get_by_text(f"grad_norm/{layer}", exact=True).first.wait_for(state="visible")
        page.goto(f"{url}/#histograms", wait_until="domcontentloaded")
        card = page.locator("vz-histogram-timeseries").first
        page.get_by_text("gradients/block_0", exact=True).first.wait_for(state="visible")
        card.wait_for(state="attached")
        page.wait_for_function(
            """() => {
                const found = [];
                const walk = root => { for (const el of root.querySelectorAll('*')) {
                    if (el.shadowRoot) walk(el.shadowRoot);
                    if (el.tagName.toLowerCase() === 'vz-histogram-timeseries') found.push(el); } };
                walk(document);
                return found.some(el => [...(el.shadowRoot || el).querySelectorAll('path')]
                    .some(p => (p.getAttribute('d') || '').length > 20));
            }""")
    except Exception:
        folder = artifact_dir(request.node)
        folder.mkdir(parents=True, exist_ok=True)
        if page is not None:
            try:
                page.screenshot(path=str(folder / "screenshot.png"), full_page=True, timeout=15_000)
            except Exception as exc:  # noqa: BLE001 - a broken page must not hide the failure
                (folder / "screenshot-error.txt").write_text(repr(exc))
        shutil.copy(tb_log, folder / "tensorboard.log")
        raise
    finally:
        if context is not None:
            context.close()
        stop_server(proc)
    assert proc.poll() is not None, "the tensorboard server must be stopped"
