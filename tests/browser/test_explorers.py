"""Every explorer driven through the page of a real JupyterLab, without re-running a chapter.

The session's scratch notebook (``scratch-explorers.ipynb``, see ``conftest.EXPLORERS_SOURCE``)
builds each explorer as its chapter does; nbval already runs the chapters themselves. Each
input waits for the explorer's status line to name the new setting (and, where the lesson
promises one, the verdict: sigmoid at depth 50 vanishes, relu with he_normal is healthy),
checks that the figure's pixels changed, and records the in-page latency from the input event
(Enter in a readout, ``change`` of a ``<select>``, a click) to the status text changing.
"""

from __future__ import annotations

import os
import re
import statistics
import time

import pytest

from . import labpage
from .conftest import ARTIFACTS, explorer

pytestmark = pytest.mark.browser

STATUS_RE = re.compile(
    r"depth (?P<depth>\d+) · (?P<activation>\S+) · (?P<initializer>\S+) · "
    r"(?P<mode>(?:(?:residual|\w+ norm|float16|bfloat16|loss scale \S+) · )*)"
    r"(?P<clip>clip off|clip \S+ ≤ \S+) → (?P<status>[\w-]+)"
)
TIME_RE = re.compile(
    r"(?P<cell>\S+) · (?P<steps>\d+) steps · (?P<init>\S+) · input ×(?P<scale>\S+) · "
    r"(?P<clip>clip off|clip \S+ ≤ \S+) → (?P<status>[\w-]+)"
)
JAC_RE = re.compile(r"(?P<name>\S+) · n=(?P<n>\d+) → jacobian shape \((?P<shape>[^)]*)\)")
TRACE_RE = re.compile(r"(?P<mode>python float|tensor) · value (?P<value>\S+) → traces: (?P<traces>\d+)")


@pytest.fixture
def ex(explorers_page):
    """Chapter 01's GradientExplorer (the scratch notebook's first explorer)."""
    page, _server = explorers_page
    return explorer(page, 0)


@pytest.fixture
def page_of(explorers_page):
    return explorers_page[0]


def state(ex) -> dict:
    text = labpage.status_text(ex, "gradlab-status")
    m = STATUS_RE.search(text)
    assert m, f"status text has an unexpected form: {text!r}"
    return m.groupdict()


def change(page, ex, action, needles, **kw):
    return labpage.drive(page, ex, action, needles, **kw)


def set_depth(page, ex, depth: int, needles=()):
    return change(page, ex, lambda: labpage.set_slider_by_readout(ex, "gradlab-depth", depth),
                  [f"depth {depth} ·", *needles])


def select(page, ex, css, value, needles, **kw):
    return change(page, ex, lambda: labpage.select_option(ex, css, value), needles, **kw)


def test_gradient_explorer_controls(page_of, ex):
    page, latencies = page_of, {}
    s = state(ex)
    # Start from sigmoid + glorot_uniform + no clipping, whatever the chapter left behind.
    if s["activation"] != "sigmoid":
        latencies["activation→sigmoid"] = select(page, ex, "gradlab-activation", "sigmoid",
                                                 ["· sigmoid ·"])
    if s["initializer"] != "glorot_uniform":
        latencies["initializer→glorot_uniform"] = select(
            page, ex, "gradlab-initializer", "glorot_uniform", ["· glorot_uniform ·"])
    if s["clip"] != "clip off":
        latencies["clip→off"] = select(page, ex, "gradlab-clip-mode", "off", ["clip off"])
    if state(ex)["depth"] == "50":
        latencies["depth→20"] = set_depth(page, ex, 20)

    latencies["depth→50 (sigmoid)"] = set_depth(
        page, ex, 50, ["· sigmoid · glorot_uniform · clip off → vanishing"])
    ex.screenshot(path=str(_shot("explorer-sigmoid-glorot_uniform-depth50.png")))

    latencies["activation→relu"] = select(page, ex, "gradlab-activation", "relu",
                                          ["depth 50 · relu · glorot_uniform ·"])
    latencies["initializer→he_normal"] = select(
        page, ex, "gradlab-initializer", "he_normal",
        ["depth 50 · relu · he_normal · clip off → healthy"])
    ex.screenshot(path=str(_shot("explorer-relu-he_normal-depth50.png")))

    modes = [m for m in labpage.select_values(ex, "gradlab-clip-mode") if m != "off"]
    assert modes, "the clip-mode dropdown offers no clipping mode"
    mode = "global_norm" if "global_norm" in modes else modes[0]
    latencies[f"clip-mode→{mode}"] = select(page, ex, "gradlab-clip-mode", mode,
                                            [f"clip {mode} ≤"], plot_changes=False)
    latencies["clip-norm→0.01"] = change(
        page, ex, lambda: labpage.set_slider_by_readout(ex, "gradlab-clip-norm", 0.01),
        [f"clip {mode} ≤ 0.01 →"], plot_changes=False)
    latencies["clip-mode→off"] = select(page, ex, "gradlab-clip-mode", "off",
                                        ["· relu · he_normal · clip off → healthy"],
                                        plot_changes=False)
    print("\ninput → status latency (ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))


def click_checkbox(page, ex, css, needles, **kw):
    box = ex.locator(f".{css} input[type=checkbox]").first
    return change(page, ex, lambda: box.click(), needles, events=("click", "change"), **kw)


def test_gradient_explorer_chapter05_controls(page_of):
    """Drive residual, norm, dtype, loss scale and a preset from the page; check status and pixels."""
    page, latencies = page_of, {}
    ex = explorer(page, 1)
    s = state(ex)
    base = [("gradlab-activation", "sigmoid"), ("gradlab-initializer", "glorot_uniform")]
    for css, value in base:
        if s[css.split("-")[1]] != value:
            select(page, ex, css, value, [f"· {value} ·"])
    if s["clip"] != "clip off":
        select(page, ex, "gradlab-clip-mode", "off", ["clip off"], plot_changes=False)
    for css, value in [("gradlab-dtype", "float32"), ("gradlab-norm", "none"), ("gradlab-loss-scale", "1")]:
        if labpage.selected_label(ex, css).replace("\xa0", " ").split(" ")[0] != value:
            select(page, ex, css, value, ["→"], plot_changes=False)
    if "residual" in state(ex)["mode"]:
        click_checkbox(page, ex, "gradlab-residual", ["glorot_uniform · clip off"])
    if state(ex)["depth"] != "50":
        set_depth(page, ex, 50)
    assert state(ex)["status"] == "vanishing"
    latencies["residual on"] = click_checkbox(
        page, ex, "gradlab-residual", ["depth 50 · sigmoid · glorot_uniform · residual · clip off → healthy"])
    latencies["residual off"] = click_checkbox(page, ex, "gradlab-residual", ["glorot_uniform · clip off"])
    latencies["norm→batch"] = select(page, ex, "gradlab-norm", "batch",
                                     ["· batch norm · clip off → healthy"])
    latencies["norm→none"] = select(page, ex, "gradlab-norm", "none", ["glorot_uniform · clip off"])
    set_depth(page, ex, 14)
    latencies["dtype→float16"] = select(page, ex, "gradlab-dtype", "float16",
                                        ["depth 14 · sigmoid · glorot_uniform · float16 · clip off",
                                         "exactly 0"])
    ex.screenshot(path=str(_shot("explorer05-float16-depth14.png")))
    latencies["loss-scale→2^15"] = select(page, ex, "gradlab-loss-scale", "2^15",
                                          ["float16 · loss scale 2^15 · clip off"])
    latencies["dtype→bfloat16"] = select(page, ex, "gradlab-dtype", "bfloat16",
                                         ["bfloat16 · loss scale 2^15 ·"])
    latencies["preset→Saxe"] = select(page, ex, "gradlab-preset", "Saxe et al. 2014",
                                      ["depth 100 · linear · orthogonal · clip off → healthy"])
    note = labpage.status_text(ex, "gradlab-preset-note")
    assert "paper 1, measured 1: agrees" in note and "Saxe" in note, note
    # every preset's full name fits its dropdown (both Micikevicius presets used to read the same)
    cut = ex.locator(".gradlab-preset select").first.evaluate("""(s) => {
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = getComputedStyle(s).font;
        const room = s.clientWidth - 28;  // the arrow and the padding
        return [...s.options].map((o) => [o.text, ctx.measureText(o.text).width])
            .filter(([t, w]) => w > room).map(([t, w]) => `${t} (${Math.round(w)} > ${room} px)`);
    }""")
    assert not cut, f"preset names cut off in the dropdown: {cut}"
    latencies["preset→Micikevicius fp16"] = select(page, ex, "gradlab-preset", "Micikevicius et al. 2018 · float16, no",
                                                   ["depth 14 · sigmoid · glorot_uniform · float16 · clip off"])
    note = labpage.status_text(ex, "gradlab-preset-note")
    assert "5 layers are exactly 0: agrees" in note, note
    print("\nchapter 05 input → status latency (ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))


DRAG_JS = """(root) => {
    // Time-stamp every change of the status text while the depth slider is dragged.
    const status = root.querySelector('.gradlab-status');
    window.__glDrag = [];
    const obs = new MutationObserver(() => window.__glDrag.push([performance.now(), status.innerText]));
    obs.observe(status, {subtree: true, childList: true, characterData: true});
    window.__glDragStop = () => obs.disconnect();
}"""


def drag_depth(page, ex, start: int, stop: int, seconds: float = 2.0) -> dict:
    """Drag the depth slider's handle from ``start`` to ``stop`` with the mouse, as a learner does.

    Returns the status updates per second during the drag and the time from the mouse release
    to the status naming the final depth (``settle_ms``).
    """
    track = ex.locator(".gradlab-depth .noUi-target, .gradlab-depth .slider").first
    box = track.bounding_box()
    lo, hi = 1, 100

    def x_of(d):
        return box["x"] + (d - lo) / (hi - lo) * box["width"]

    y = box["y"] + box["height"] / 2
    ex.evaluate("(root) => (" + DRAG_JS + ")(root)")
    steps = max(2, abs(stop - start))  # one layer per move, as fast as the page takes them
    page.mouse.move(x_of(start), y)
    page.mouse.down()
    t_start = page.evaluate("() => performance.now()")
    for i in range(1, steps + 1):
        page.mouse.move(x_of(start + (stop - start) * i / steps), y)
        page.wait_for_timeout(seconds * 1000 / steps / 4)
    page.mouse.up()
    t_up = page.evaluate("() => performance.now()")
    # settled: no new status for 1 s after the release
    log, quiet_since = [], time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page.wait_for_timeout(100)
        new = page.evaluate("() => window.__glDrag")
        if len(new) != len(log):
            log, quiet_since = new, time.monotonic()
        elif time.monotonic() - quiet_since > 1.0:
            break
    page.evaluate("() => window.__glDragStop()")
    during = [t for t, _ in log if t_start <= t <= t_up]
    after = [t for t, _ in log if t > t_up]
    final = log[-1][1].split(" · ")[0] if log else "?"
    return {
        "moves_per_s": steps / ((t_up - t_start) / 1000),
        "updates_per_s": len(during) / ((t_up - t_start) / 1000),
        "settle_ms": (after[-1] - t_up) if after else 0.0,  # 0: the last update came before release
        "final": final,
    }


def _shot(name: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


@pytest.mark.skipif(os.environ.get("GRADLAB_BROWSER_BENCH") != "1",
                    reason="browser benchmark runs on demand: make bench-browser "
                           "(GRADLAB_BROWSER_BENCH=1)")
def test_bench_explorer_slider_latency(page_of, ex):
    page = page_of
    s = state(ex)
    if s["activation"] != "sigmoid":
        select(page, ex, "gradlab-activation", "sigmoid", ["· sigmoid ·"])
    if s["initializer"] != "glorot_uniform":
        select(page, ex, "gradlab-initializer", "glorot_uniform", ["· glorot_uniform ·"])
    if s["clip"] != "clip off":
        select(page, ex, "gradlab-clip-mode", "off", ["clip off"], plot_changes=False)
    if state(ex)["depth"] != "50":
        set_depth(page, ex, 50)
    samples = []
    for i in range(30):  # depth 49, 50, 51, 50, 49, ...: every change differs from the last
        depth = (49, 50, 51, 50)[i % 4]
        samples.append(change(page, ex,
                              lambda d=depth: labpage.set_slider_by_readout(ex, "gradlab-depth", d),
                              [f"depth {depth} ·"], plot_changes=False))
    samples.sort()
    p50 = statistics.median(samples)
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    line = (f"browser slider→status latency at depth ~50, {len(samples)} changes: "
            f"p50 {p50:.0f} ms, p95 {p95:.0f} ms (min {samples[0]:.0f}, max {samples[-1]:.0f})")
    print("\n" + line)
    # activation dropdown at depth 50: click-to-status, p50 over 10 changes
    acts = [select(page, ex, "gradlab-activation", a, [f"depth 50 · {a} ·"])
            for a in ("tanh", "sigmoid") * 5]
    line2 = f"activation dropdown→status at depth 50: p50 {statistics.median(acts):.0f} ms"
    print(line2)
    # a mouse drag of the depth slider at depth 100 (first drag right after Run All, then again)
    set_depth(page, ex, 100)
    drags = [drag_depth(page, ex, 100, 80), drag_depth(page, ex, 80, 100), drag_depth(page, ex, 100, 80)]
    line3 = "depth drag at depth 80-100: " + "; ".join(
        f"{d['moves_per_s']:.0f} mouse moves/s → {d['updates_per_s']:.1f} updates/s, settled {d['settle_ms']:.0f} ms after release ({d['final']})"
        for d in drags)
    print(line3)
    _shot("bench.txt").write_text("\n".join([line, line2, line3]) + "\n")


# ----------------------------------------------------------------------------- the other explorers
def _parse(w, status_class, pattern):
    text = labpage.status_text(w, status_class)
    m = pattern.search(text)
    assert m, f".{status_class} has an unexpected form: {text!r}"
    return m.groupdict()


def test_time_explorer_controls(page_of):
    """Chapter 07's promise: a SimpleRNN over 200 steps with inputs ×1 vanishes; 20 steps ×0.01 is healthy."""
    page, latencies = page_of, {}
    w = explorer(page, "gradlab-time-explorer")
    status, plot = "gradlab-time-status", "gradlab-time-plot"

    def drive(name, action, needles, **kw):
        latencies[name] = labpage.drive(page, w, action, needles, status=status, plot=plot, **kw)

    s = _parse(w, status, TIME_RE)
    assert (s["cell"], s["steps"], s["init"], s["clip"]) == ("simple_rnn", "50", "orthogonal", "clip off")
    drive("steps→200", lambda: labpage.set_slider_by_readout(w, "gradlab-time-steps", 200),
          ["simple_rnn · 200 steps · orthogonal · input ×1 · clip off → vanishing"])
    drive("cell→gru", lambda: labpage.select_option(w, "gradlab-time-cell", "gru"),
          ["gru · 200 steps · orthogonal · input ×1 · clip off →"])
    drive("cell→simple_rnn", lambda: labpage.select_option(w, "gradlab-time-cell", "simple_rnn"),
          ["simple_rnn · 200 steps ·"])
    drive("initializer→identity", lambda: labpage.select_option(w, "gradlab-time-initializer", "identity"),
          ["· identity · input ×1 ·"])
    text = labpage.status_text(w, status)  # issue 20: no "orthogonal, identity" while identity is selected
    assert "identity (per gate)" not in text and "orthogonal, identity" not in text, text
    drive("steps→20", lambda: labpage.set_slider_by_readout(w, "gradlab-time-steps", 20),
          ["simple_rnn · 20 steps · identity ·"])
    drive("input scale→0.01", lambda: labpage.set_slider_by_readout(w, "gradlab-time-input-scale", 0.01),
          ["simple_rnn · 20 steps · identity · input ×0.01 · clip off → healthy"])
    print("\nTimeExplorer input → status latency (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))


def test_jacobian_viewer_controls(page_of):
    page = page_of
    w = explorer(page, "gradlab-jacobian")
    status, plot = "gradlab-jacobian-status", "gradlab-jacobian-plot"
    s = _parse(w, status, JAC_RE)
    ms_fn = labpage.drive(page, w, lambda: labpage.select_option(w, "gradlab-jacobian-function", "dense_batch"),
                          [f"dense_batch · n={s['n']} → jacobian shape ("], status=status, plot=plot)
    ms_n = labpage.drive(page, w, lambda: labpage.set_slider_by_readout(w, "gradlab-jacobian-size", 5),
                         ["dense_batch · n=5 → jacobian shape (4, 3, 4, 5)"], status=status, plot=plot)
    print(f"\nJacobianViewer latency (ms): function {ms_fn:.0f}, size {ms_n:.0f}")


def test_tracing_lab_controls(page_of):
    page, latencies = page_of, {}
    w = explorer(page, "gradlab-tracing")
    status, plot = "gradlab-tracing-status", "gradlab-tracing-plot"

    def traces():
        return int(_parse(w, status, TRACE_RE)["traces"])

    assert _parse(w, status, TRACE_RE)["mode"] == "python float"
    for value in ("0.83", "0.61"):  # a Python float is part of the signature: a new trace each
        n = traces()
        latencies[f"float {value}"] = labpage.drive(
            page, w, lambda v=value: labpage.set_slider_by_readout(w, "gradlab-tracing-value", v),
            [f"python float · value {value} → traces: {n + 1}"], status=status, plot=plot)
    latencies["mode→tensor"] = labpage.drive(
        page, w, lambda: labpage.click_toggle(w, "gradlab-tracing-mode", "tensor"),
        ["tensor · value 0.61 → traces:"], status=status, plot_changes=False, events=("click",))
    n = traces()
    for value in ("0.42", "0.27"):  # a tensor is not: one trace serves every value
        latencies[f"tensor {value}"] = labpage.drive(
            page, w, lambda v=value: labpage.set_slider_by_readout(w, "gradlab-tracing-value", v),
            [f"tensor · value {value} → traces: {n} ·"], status=status, plot_changes=False)
    print("\nTracingLab latency (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in latencies.items()))


def test_tangent_explorer_controls(page_of):
    page = page_of
    w = explorer(page, "gradlab-tangent")
    ms = labpage.drive(page, w, lambda: labpage.set_slider_by_readout(w, "gradlab-tangent-w", 3.5),
                       ["w = 3.50:", "to the left"], status="gradlab-tangent-status", plot="gradlab-tangent-plot")
    print(f"\nTangentExplorer latency (ms): w {ms:.0f}")


REPLOT_JS = """(root) => {
    // Time-stamp every new picture (the plot image's src) and every status text while dragging.
    const img = root.querySelector('img.gradlab-plot, .gradlab-plot img');
    const status = root.querySelector('.gradlab-status');
    window.__glReplots = [];
    window.__glStatus = [];
    const a = new MutationObserver(() => window.__glReplots.push(performance.now()));
    a.observe(img, {attributes: true, attributeFilter: ['src']});
    const b = new MutationObserver(() => window.__glStatus.push([performance.now(), status.innerText]));
    b.observe(status, {subtree: true, childList: true, characterData: true});
    window.__glReplotStop = () => { a.disconnect(); b.disconnect(); };
}"""


#: The drag itself, paced by the page's clock (Playwright's round trips manage about 25 moves/s
#: on a busy machine): mousedown on the handle, one mousemove every 1/rate s, mouseup, the
#: events noUiSlider (ipywidgets' slider) listens to. Returns [start, release] times.
DRAG_AT_RATE_JS = """async (root, [start, stop, rate]) => {
    const track = root.querySelector('.gradlab-depth .noUi-target');
    const handle = track.querySelector('.noUi-handle');
    const box = track.getBoundingClientRect();
    const at = (d, buttons) => ({bubbles: true, cancelable: true, view: window, button: 0, buttons,
                                 clientX: box.left + (d - 1) / 99 * box.width, clientY: box.top + box.height / 2});
    handle.dispatchEvent(new MouseEvent('mousedown', at(start, 1)));
    const t0 = performance.now(), moves = Math.abs(stop - start), root_el = document.documentElement;
    for (let i = 1; i <= moves; i++) {
        const due = t0 + i * 1000 / rate;
        while (performance.now() < due) await new Promise((r) => setTimeout(r, due - performance.now()));
        root_el.dispatchEvent(new MouseEvent('mousemove', at(start + (stop - start) * i / moves, 1)));
    }
    const tUp = performance.now();
    root_el.dispatchEvent(new MouseEvent('mouseup', at(stop, 0)));
    return [t0, tUp, moves];
}"""


def drag_at_rate(page, ex, start: int, stop: int, moves_per_s: float = 60.0) -> dict:
    """Drag the depth handle from ``start`` to ``stop``, one move every 1/``moves_per_s`` s (in the page).

    Returns the moves and re-plots per second during the drag (new pictures of the plot), the
    time from the release to the last picture or status (``settle_ms``), and the final depth.
    """
    ex.evaluate("(root) => (" + REPLOT_JS + ")(root)")
    t0, t_up, moves = ex.evaluate("(root, args) => (" + DRAG_AT_RATE_JS + ")(root, args)",
                                  [start, stop, moves_per_s])
    final = int(ex.locator(".gradlab-depth .widget-readout").first.inner_text().strip())
    deadline = time.monotonic() + 15
    log, replots = [], []
    while time.monotonic() < deadline:  # until the status names the final depth and 1 s passes quietly
        page.wait_for_timeout(200)
        log = page.evaluate("() => window.__glStatus")
        replots = page.evaluate("() => window.__glReplots")
        last = max([t for t, _ in log] + replots + [t_up])
        if log and log[-1][1].startswith(f"depth {final} ·") and \
                page.evaluate("() => performance.now()") - last > 1000:
            break
    page.evaluate("() => window.__glReplotStop()")
    during = [t for t in replots if t0 <= t <= t_up]
    return {"moves_per_s": moves / ((t_up - t0) / 1000), "replots_per_s": len(during) / ((t_up - t0) / 1000),
            "settle_ms": max(0.0, max([t for t, _ in log] + replots) - t_up), "final": final,
            "status": log[-1][1] if log else labpage.status_text(ex, "gradlab-status")}


@pytest.mark.skipif(os.environ.get("GRADLAB_BROWSER_BENCH") != "1",
                    reason="a timed benchmark (issue 29's drag rate; quiet 2-core machine: a first drag over "
                           "50-100 re-plots 10.7-14 times a second, a second one 17-19, settling in 250-410 ms): "
                           "run on demand with make bench-browser (GRADLAB_BROWSER_BENCH=1)")
def test_depth_drag_replots_ten_times_a_second_and_settles_within_half_a_second(page_of, ex):
    """Issue 29: dragging chapter 01's depth at 60 moves/s over 50-100 re-plotted 1-4 times a second.

    Measured in the page: new pictures of the plot per second while the mouse moves, and the
    time from the release to the last picture and the status of the final depth.
    """
    page = page_of
    if state(ex)["depth"] != "50":
        set_depth(page, ex, 50)
    runs = [drag_at_rate(page, ex, 50, 100), drag_at_rate(page, ex, 100, 50)]
    line = "depth drag at 60 moves/s: " + "; ".join(
        f"{r['moves_per_s']:.0f} moves/s → {r['replots_per_s']:.1f} re-plots/s, settled {r['settle_ms']:.0f} ms "
        f"after the release (depth {r['final']})" for r in runs)
    print("\n" + line)
    _shot("drag-rate.txt").write_text(line + "\n")
    for r in runs:
        assert r["final"] == (100 if r is runs[0] else 50), r   # the handle followed the mouse
        assert r["status"].startswith(f"depth {r['final']} ·"), r
        assert r["moves_per_s"] >= 50, r                      # the drag itself ran at the asked rate
        assert r["replots_per_s"] >= 10, line
        assert r["settle_ms"] <= 500, line
