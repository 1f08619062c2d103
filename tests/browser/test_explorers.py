"""Every explorer driven through the page of a real JupyterLab, through the one view's contract.

The session's scratch notebook (``scratch-explorers.ipynb``, see ``conftest.EXPLORERS_SOURCE``)
builds each explorer as its chapter does; nbval already runs the chapters. Each explorer is an
element ``[data-gradlab-explorer="<class>"]`` with form controls named after the Python controls
and a ``data-report`` after every view (tests/browser/view.py): a test sets a control as a
learner does, waits for the report of the new setting, and checks its numbers against an engine
built here, in the test's own process. The same contract is driven on the book site
(test_book.py); :func:`test_site_and_lab_show_the_same_words_and_colours` compares the two.
"""

from __future__ import annotations

import os
import statistics

import pytest

from . import view
from .conftest import ARTIFACTS, explorer

pytestmark = pytest.mark.browser


@pytest.fixture
def page_of(explorers_page):
    return explorers_page[0]


@pytest.fixture(scope="module")
def engines():
    import gradlab as gl
    from gradlab.engines.mlp import MLPGradientEngine
    from gradlab.engines.rnn import TimeGradientEngine

    gl.setup(seed=0)
    return {"mlp": MLPGradientEngine(width=64, batch_size=128, max_depth=100, seed=0),
            "rnn": TimeGradientEngine(units=32, input_dim=8, batch_size=32, seed=0)}


def _shot(name: str):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name


def test_gradient_explorer_follows_its_controls_and_equals_the_engine(page_of, engines):
    page, ex = page_of, explorer(page_of, 0)
    engine = engines["mlp"]
    steps = [("depth", 50), ("activation", "relu"), ("initializer", "he_normal"), ("depth", 7),
             ("clip_mode", "norm"), ("clip_norm", 0.1), ("clip_mode", "off"), ("activation", "sigmoid"),
             ("initializer", "glorot_uniform"), ("depth", 20)]
    want = dict(view.report(ex)["settings"])
    for name, value in steps:
        view.set_control(ex, name, value)
        want[name] = value
        rep = view.wait_report(page, ex, want)
        s = rep["settings"]
        clip = None if s["clip_mode"] == "off" else (s["clip_mode"], s["clip_norm"])
        r = engine.report(s["depth"], s["activation"], s["initializer"], clip)
        view.assert_close("signal_norms", rep["signal_norms"], r.signal_norms)
        view.assert_close("weight_norms", rep["weight_norms"], r.weight_norms)
        view.assert_close("clipped_weight_norms", rep["clipped_weight_norms"], r.clipped_weight_norms)
        assert rep["status"] == r.status, (name, value)
        assert rep["status_text"].startswith(f"depth {s['depth']} · {s['activation']} · {s['initializer']} ·")
        assert ex.locator(".gradlab-status").inner_text().strip() == rep["status_text"]
    # the lesson's two verdicts, named in the page
    view.set_control(ex, "depth", 50)
    assert view.wait_report(page, ex, {"depth": 50})["status"] == "vanishing"
    # one change at a time here; two back to back: test_two_controls_changed_back_to_back_reach_their_exact_view
    view.set_control(ex, "activation", "relu")
    view.wait_report(page, ex, {"depth": 50, "activation": "relu"}, timeout_ms=120_000)
    view.set_control(ex, "initializer", "he_normal")
    rep = view.wait_report(page, ex, {"activation": "relu", "initializer": "he_normal"}, timeout_ms=120_000)
    assert rep["status"] == "healthy"
    for name, value in (("activation", "sigmoid"), ("initializer", "glorot_uniform"), ("depth", 20)):
        view.set_control(ex, name, value)
        view.wait_report(page, ex, {name: value}, timeout_ms=120_000)


def test_two_controls_changed_back_to_back_reach_their_exact_view(page_of):
    """JupyterLab delivers the page's messages on a kernel subshell's thread: each pair of changes
    sent back to back reaches its exact view, and every view drawn on the way is at the page's
    depth (the work ahead once leaked depth 51 into a page at 50, or a change was dropped)."""
    page, ex = page_of, explorer(page_of, 0)
    view.set_control(ex, "depth", 50)
    view.wait_report(page, ex, {"depth": 50})
    page.evaluate("""(el) => { el.__depths = [];
      new MutationObserver(() => el.__depths.push(JSON.parse(el.getAttribute('data-report')).settings.depth))
        .observe(el, {attributes: true, attributeFilter: ['data-report']}); }""", ex.element_handle())
    for act, init in (("relu", "he_normal"), ("sigmoid", "glorot_uniform"), ("tanh", "he_normal"),
                      ("sigmoid", "glorot_uniform")):
        view.set_control(ex, "activation", act)
        view.set_control(ex, "initializer", init)
        view.wait_report(page, ex, {"depth": 50, "activation": act, "initializer": init}, timeout_ms=20_000)
    depths = ex.evaluate("el => el.__depths")
    assert len(depths) >= 4 and set(depths) == {50}, depths
    view.set_control(ex, "depth", 20)
    view.wait_report(page, ex, {"depth": 20})


def test_every_explorer_answers_its_controls(page_of, engines):
    page = page_of
    te = explorer(page, 2)
    view.set_control(te, "steps", 100)
    rep = view.wait_report(page, te, {"steps": 100})
    r = engines["rnn"].report("simple_rnn", 100, "orthogonal", 1.0, None)
    view.assert_close("time_step_norms", rep["time_step_norms"], r.time_step_norms)
    view.set_control(te, "cell", "lstm")
    assert view.wait_report(page, te, {"cell": "lstm"})["status_text"].startswith("lstm · 100 steps")

    jv = explorer(page, 3)
    view.set_control(jv, "size", 5)
    assert view.wait_report(page, jv, {"size": 5})["jacobian_shape"] == [5, 5]
    assert jv.locator("canvas.gradlab-heat").count() == 1

    tl = explorer(page, 4)
    before = view.report(tl)["traces"]
    view.set_control(tl, "value", 0.37)
    rep = view.wait_report(page, tl, {"value": 0.37})
    assert rep["traces"] == before + 1  # a new Python float: a new trace (the lesson)
    view.set_control(tl, "mode", "tensor")
    traces = view.wait_report(page, tl, {"mode": "tensor"})["traces"]
    view.set_control(tl, "value", 0.5)
    assert view.wait_report(page, tl, {"value": 0.5})["traces"] == traces  # a tensor: no new trace
    tl.locator('[name="reset"]').click()
    page.wait_for_function("(el) => JSON.parse(el.getAttribute('data-report')).traces === 1",
                           arg=tl.element_handle())

    tg = explorer(page, 5)
    from gradlab.topics.intro import slope_and_step

    view.set_control(tg, "w", 1.0)
    rep = view.wait_report(page, tg, {"w": 1.0})
    loss, slope, w_next = slope_and_step(1.0, 0.3)
    assert rep["slope"] == pytest.approx(slope, rel=1e-6) and rep["w_next"] == pytest.approx(w_next, rel=1e-6)

    tx = explorer(page, 6)
    view.set_control(tx, "num_layers", 3)
    rep = view.wait_report(page, tx, {"num_layers": 3}, timeout_ms=120_000)
    assert len(rep["layer_grad_norms"]) == 3


def test_controls_work_from_the_keyboard(page_of):
    page, ex = page_of, explorer(page_of, 0)
    depth = view.control(ex, "depth")
    start = view.report(ex)["settings"]["depth"]
    depth.focus()
    page.keyboard.press("ArrowRight")
    view.wait_report(page, ex, {"depth": start + 1})
    page.keyboard.press("ArrowLeft")
    view.wait_report(page, ex, {"depth": start})
    act = view.control(ex, "activation")
    act.focus()
    page.keyboard.press("ArrowDown")
    rep = view.wait_report(page, ex, {"depth": start})
    assert rep["settings"]["activation"] != "sigmoid" or act.input_value() != "0"
    view.set_control(ex, "activation", "sigmoid")
    view.wait_report(page, ex, {"activation": "sigmoid"})


def test_a_drag_along_the_depth_draws_only_exact_reports(page_of, engines):
    """A drag at 60 moves/s: every report drawn is a setting's exact numbers, and the release
    ends on the final depth's report. The rates are printed (the timed assertion is the
    benchmark below)."""
    page, ex = page_of, explorer(page_of, 0)
    view.set_control(ex, "activation", "tanh")  # an axis the kernel has not computed yet
    view.wait_report(page, ex, {"activation": "tanh"})
    view.set_control(ex, "depth", 51)
    view.wait_report(page, ex, {"depth": 51, "activation": "tanh"})
    runs = [view.drag(ex, "depth", 51, 100), view.drag(ex, "depth", 100, 51)]
    line = "; ".join(f"{r['moves_per_s']:.0f} moves/s → {r['reports_per_s']:.1f} reports/s, settled "
                     f"{r['settle_ms']:.0f} ms after the release" for r in runs)
    print("\ndepth drag, first and second pass:", line)
    _shot("drag-rate.txt").write_text(line + "\n")
    for r, final in zip(runs, (100, 51), strict=True):
        assert r["final"] == final  # the release ends on the final depth's exact report
        assert r["moves_per_s"] > 0 and r["seen"], r["moves_per_s"]
    rep = view.report(ex)
    r = engines["mlp"].report(51, "tanh", "glorot_uniform", None)
    view.assert_close("signal_norms", rep["signal_norms"], r.signal_norms)
    for s in runs[0]["seen"][::7]:  # a sample of what was drawn on the way: exact reports
        assert s["settings"]["activation"] == "tanh"
    view.set_control(ex, "activation", "sigmoid")
    view.set_control(ex, "depth", 20)
    view.wait_report(page, ex, {"activation": "sigmoid", "depth": 20})


def test_a_change_that_needs_the_kernel_reaches_the_plot(page_of):
    page, ex = page_of, explorer(page_of, 0)
    times = []
    for value in ("relu", "tanh", "elu", "sigmoid") * 2:
        ex.evaluate("(el) => el.removeAttribute('data-latency-ms')")
        view.set_control(ex, "activation", value)
        view.wait_report(page, ex, {"activation": value})
        page.wait_for_function("(el) => el.hasAttribute('data-latency-ms')", arg=ex.element_handle())
        times.append(float(ex.get_attribute("data-latency-ms")))
    print(f"\nactivation change → drawn plot: p50 {statistics.median(times):.0f} ms, max {max(times):.0f} ms")
    assert all(t > 0 for t in times)


def test_dark_theme_keeps_text_readable(page_of):
    page, ex = page_of, explorer(page_of, 0)
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    try:
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_timeout(500)
        bg = page.evaluate("getComputedStyle(document.querySelector('.jp-OutputArea-output')).backgroundColor")
        bg = bg if "rgba(0, 0, 0, 0)" not in bg else page.evaluate(
            "getComputedStyle(document.querySelector('.jp-NotebookPanel-notebook')).backgroundColor")
        for k in range(7):
            c = view.colors(explorer(page, k))
            assert view.contrast(c["status"], bg) >= 4.5, (k, c["status"], bg)
        _shot("explorer-lab-dark.png").write_bytes(ex.screenshot())
    finally:
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'true'")
    _shot("explorer-lab-light.png").write_bytes(ex.screenshot())


@pytest.mark.skipif(os.environ.get("GRADLAB_BROWSER_BENCH") != "1",
                    reason="a timed benchmark (issue 35's targets on a quiet 2-core machine): run on demand "
                           "with make bench-browser (GRADLAB_BROWSER_BENCH=1)")
def test_bench_drag_rate_settle_and_click(page_of):
    """Issue 35: a first pass over depths the kernel has not computed shows ≥ 25 reports a second;
    a drag over the whole depth range, once the kernel has sent it, ≥ 45; the last report settles
    within 200 ms of the release; a change that needs the kernel reaches the plot in ≤ 50 ms
    (median). (A drag moves 60 times a second, so the first pass and the way back together could
    not reach 45 a second unless the first pass alone did.)"""
    page, ex = page_of, explorer(page_of, 0)
    lines, checks = [], []
    for activation in ("elu", "selu"):  # two fresh axes
        view.set_control(ex, "activation", activation)
        view.set_control(ex, "depth", 51)
        view.wait_report(page, ex, {"depth": 51, "activation": activation})
        first, back = view.drag(ex, "depth", 51, 100), view.drag(ex, "depth", 100, 51)
        page.wait_for_timeout(4000)  # the kernel sends the rest of the axis meanwhile
        whole = [view.drag(ex, "depth", 1, 100), view.drag(ex, "depth", 100, 1)]
        rate = sum(w["distinct"] for w in whole) / sum(w["span_s"] for w in whole)
        settle = max(first["settle_ms"], back["settle_ms"], *(w["settle_ms"] for w in whole))
        lines.append(f"{activation}: first pass {first['reports_per_s']:.1f}/s, back {back['reports_per_s']:.1f}/s, "
                     f"whole range {rate:.1f}/s, settle at most {settle:.0f} ms")
        checks += [first["reports_per_s"] >= 25, rate >= 45, settle <= 200]
    times = []  # clicks to an activation not computed before at this initializer and depth
    view.set_control(ex, "depth", 37)
    for initializer in ("he_normal", "large_normal"):
        view.set_control(ex, "initializer", initializer)
        view.wait_report(page, ex, {"initializer": initializer, "depth": 37})
        for value in ("relu", "tanh", "sigmoid", "linear", "elu", "selu"):
            if view.report(ex)["settings"]["activation"] == value:
                continue
            ex.evaluate("(el) => el.removeAttribute('data-latency-ms')")
            view.set_control(ex, "activation", value)
            view.wait_report(page, ex, {"activation": value})
            page.wait_for_function("(el) => el.hasAttribute('data-latency-ms')", arg=ex.element_handle())
            times.append(float(ex.get_attribute("data-latency-ms")))
    lines.append(f"activation change → drawn plot: p50 {statistics.median(times):.0f} ms, max {max(times):.0f} ms")
    print("\n" + "\n".join(lines))
    _shot("drag-bench.txt").write_text("\n".join(lines) + "\n")
    assert all(checks) and statistics.median(times) <= 50, lines


def test_site_and_lab_show_the_same_words_and_colours(page_of, site, browser):
    """Chapter 01's explorer at its first setting: the same labels, series, colours and status
    line in JupyterLab (the kernel's view) and on the book site (the stored view), one module."""
    page, ex = page_of, explorer(page_of, 0)
    view.set_control(ex, "activation", "sigmoid")
    view.set_control(ex, "initializer", "glorot_uniform")
    view.set_control(ex, "depth", 20)
    lab = view.wait_report(page, ex, {"depth": 20, "activation": "sigmoid", "initializer": "glorot_uniform",
                                      "clip_mode": "off"})
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        sp = context.new_page()
        sp.goto((site / "en" / "01-vanishing-exploding.html").as_uri())
        root = sp.locator('[data-gradlab-site="GradientExplorer"] [data-gradlab-explorer][data-report]')
        root.wait_for(state="attached")
        root.scroll_into_view_if_needed()
        on_site = view.report(root)
        assert on_site["settings"]["depth"] == 20 and on_site["status_text"] == lab["status_text"]
        view.assert_close("signal_norms", on_site["signal_norms"], lab["signal_norms"], rtol=2e-4)
        lab_words, site_words = view.words(ex), view.words(root)
        # the site offers the grid's controls only (clipping needs the notebook)
        assert set(site_words["controls"]) <= set(lab_words["controls"])
        assert {k: v for k, v in lab_words.items() if k != "controls"} == \
               {k: v for k, v in site_words.items() if k != "controls"}
        assert view.colors(ex) == view.colors(root)
        _shot("explorer-site-light.png").write_bytes(root.screenshot())
    finally:
        context.close()
