"""Chapter 07's TimeExplorer, driven once through the page: the cell, the steps, the input scale.

Skips, naming what is missing, only while chapter 07 does not exist yet or does not show a
TimeExplorer. Each input waits for ``.gradlab-time-status`` to name the new setting and the
verdict the chapter promises (a SimpleRNN over 200 steps with inputs of scale 1 vanishes; over
20 steps with inputs ×0.01 it is healthy), and checks that the figure's pixels changed.
"""

from __future__ import annotations

import re

import pytest

from . import labpage
from .conftest import CHAPTERS

pytestmark = pytest.mark.browser

STATUS, PLOT = "gradlab-time-status", "gradlab-time-plot"
STATUS_RE = re.compile(
    r"(?P<cell>\S+) · (?P<steps>\d+) steps · (?P<init>\S+) · input ×(?P<scale>\S+) · "
    r"(?P<clip>clip off|clip \S+ ≤ \S+) → (?P<status>[\w-]+)"
)


def _chapter() -> tuple[str | None, str]:
    found = sorted(CHAPTERS.glob("07-*.ipynb"))
    if not found:
        return None, "chapter 07 (chapters/07-*.ipynb) does not exist yet"
    if "TimeExplorer(" not in found[0].read_text():
        return None, f"{found[0].name} does not show a TimeExplorer yet"
    return f"chapters/{found[0].name}", ""


CH07, WHY07 = _chapter()


def _state(w) -> dict:
    text = labpage.status_text(w, STATUS)
    m = STATUS_RE.search(text)
    assert m, f".{STATUS} has an unexpected form: {text!r}"
    return m.groupdict()


@pytest.mark.skipif(CH07 is None, reason=WHY07)
def test_time_explorer_in_jupyterlab(page, lab_server):
    labpage.open_executed(page, lab_server, CH07)
    w = page.locator(".gradlab-time-explorer").first
    w.wait_for(state="visible")
    w.locator(f".{STATUS}").first.wait_for(state="visible")
    w.scroll_into_view_if_needed()
    latencies = {}

    def drive(name, action, needles, **kw):
        latencies[name] = labpage.drive(page, w, action, needles, status=STATUS, plot=PLOT, **kw)

    s = _state(w)
    # Start from orthogonal, inputs ×1, no clipping, whatever the chapter left behind.
    if s["init"] != "orthogonal":
        drive("initializer→orthogonal", lambda: labpage.select_option(w, "gradlab-time-initializer",
                                                                      "orthogonal (Keras default)"),
              ["· orthogonal ·"])
    if s["clip"] != "clip off":
        drive("clip→off", lambda: labpage.select_option(w, "gradlab-time-clip-mode", "off"),
              ["clip off"], plot_changes=False)
    if s["scale"] != "1":
        drive("input scale→1", lambda: labpage.set_slider_by_readout(w, "gradlab-time-input-scale", 1),
              ["· input ×1 ·"])
    if _state(w)["steps"] != "200":
        drive("steps→200", lambda: labpage.set_slider_by_readout(w, "gradlab-time-steps", 200),
              ["· 200 steps ·"])
    cell = "gru" if _state(w)["cell"] == "simple_rnn" else "simple_rnn"
    drive(f"cell→{cell}", lambda: labpage.select_option(w, "gradlab-time-cell", cell),
          [f"{cell} · 200 steps · orthogonal · input ×1 · clip off → vanishing"])
    if cell != "simple_rnn":
        drive("cell→simple_rnn", lambda: labpage.select_option(w, "gradlab-time-cell", "simple_rnn"),
              ["simple_rnn · 200 steps · orthogonal · input ×1 · clip off → vanishing"])
    drive("steps→20", lambda: labpage.set_slider_by_readout(w, "gradlab-time-steps", 20),
          ["simple_rnn · 20 steps · orthogonal · input ×1 ·"])
    drive("input scale→0.01", lambda: labpage.set_slider_by_readout(w, "gradlab-time-input-scale", 0.01),
          ["simple_rnn · 20 steps · orthogonal · input ×0.01 · clip off → healthy"])
    print("\nTimeExplorer input → status latency (ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))
