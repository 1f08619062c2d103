"""Chapter 11's TrainingExplorer in the page (issue 36): in JupyterLab, its controls reach the
kernel and its report equals an engine built here; the step slider and the play button move
through the run without the kernel; and on the book site, the stored runs equal the engine's and
show the same words and colours as Lab."""

from __future__ import annotations

import pytest

from . import view
from .conftest import ARTIFACTS, explorer

pytestmark = pytest.mark.browser

#: the scratch notebook's TrainingExplorer (conftest.EXPLORER_KINDS)
INDEX = 7
RTOL = 2e-4  # the site stores 5 significant digits


@pytest.fixture(scope="module")
def engine():
    import gradlab as gl
    from gradlab.engines.training import TrainingEngine

    gl.setup(seed=0)
    return TrainingEngine()


def _rows(name, page_rows, want):
    """``page_rows[l][t]`` against the engine's ``want[t, l]``."""
    assert len(page_rows) == want.shape[1], name
    for layer, row in enumerate(page_rows):
        view.assert_close(f"{name}[{layer}]", row, want[:, layer], rtol=RTOL)


def _histogram_title(root) -> str:
    return root.locator(".u-title").nth(4).text_content()


def _step(root, value: int) -> None:
    view.set_control(root, "step", value)
    root.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


@pytest.fixture
def page_of(explorers_page):
    return explorers_page[0]


def test_lab_training_explorer_runs_in_the_kernel_and_steps_in_the_page(page_of, engine):
    page, tr = page_of, explorer(page_of, INDEX)
    view.set_control(tr, "activation", "relu")
    view.set_control(tr, "initializer", "he_normal")
    view.set_control(tr, "depth", 10)
    view.set_control(tr, "learning_rate", 0.3)
    rep = view.wait_report(page, tr, {"depth": 10, "activation": "relu", "initializer": "he_normal",
                                      "learning_rate": 0.3})
    page.wait_for_function("(el) => JSON.parse(el.getAttribute('data-report')).status !== 'running'",
                           arg=tr.element_handle(), timeout=180_000)
    rep = view.report(tr)
    r = engine.run(10, "relu", "he_normal", "sgd", 0.3, None, 100)
    assert rep["diverged_at"] == r.diverged_at == 5 and rep["status"] == "diverged"
    view.assert_close("loss", rep["loss"], r.loss)
    _rows("grad_norms", rep["grad_norms"], r.grad_norms)
    assert "diverged at step 5" in tr.locator(".gradlab-status").text_content()
    # clipping saves it
    view.set_control(tr, "clip_mode", "global_norm")
    page.wait_for_function("""(el) => { const r = JSON.parse(el.getAttribute('data-report'));
        return r.settings.clip_mode === 'global_norm' && r.status !== 'running'; }""",
                           arg=tr.element_handle(), timeout=180_000)
    rep = view.report(tr)
    r = engine.run(10, "relu", "he_normal", "sgd", 0.3, ("global_norm", 1.0), 100)
    assert rep["diverged_at"] is None and rep["steps_taken"] == 100
    _rows("update_ratios", rep["update_ratios"], r.update_ratios)
    # the step moves in the page, at once: the histograms' title follows, the report stays
    draws = int(tr.get_attribute("data-draws"))
    _step(tr, 7)
    assert "step 7" in _histogram_title(tr) and int(tr.get_attribute("data-draws")) == draws + 1
    assert view.report(tr)["steps_taken"] == 100
    # play: the slider advances by itself, pause stops it
    _step(tr, 1)
    tr.locator("button.gradlab-play").click()
    page.wait_for_function("(el) => Number(el.querySelector('input[name=step]').value) >= 4",
                           arg=tr.element_handle(), timeout=10_000)
    tr.locator("button.gradlab-play").click()
    at = tr.locator("input[name=step]").input_value()
    page.wait_for_timeout(400)
    assert tr.locator("input[name=step]").input_value() == at
    assert f"step {at}" in _histogram_title(tr)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "training-explorer-lab.png").write_bytes(tr.screenshot())


def test_site_training_explorer_equals_the_engine_and_lab(page_of, site, browser, engine):
    """The stored runs on the site: the engine's numbers; at the chapter's first setting, the
    same words and colours as the Lab explorer (one module, one view)."""
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        sp = context.new_page()
        sp.goto((site / "en" / "11-watch-training.html").as_uri())
        root = sp.locator('[data-gradlab-site="TrainingExplorer"] [data-gradlab-explorer][data-report]')
        root.wait_for(state="attached", timeout=30_000)
        root.scroll_into_view_if_needed()
        on_site = view.report(root)
        r = engine.run(20, "sigmoid", "glorot_uniform", "sgd", 0.1, None, 100)
        view.assert_close("loss", on_site["loss"], r.loss, rtol=RTOL)
        _rows("grad_norms", on_site["grad_norms"], r.grad_norms)
        for control, value in (("optimizer", "adam"), ("learning_rate", 0.01), ("depth", 10),
                               ("clip_mode", "global_norm")):
            view.set_control(root, control, value)
            rep = view.wait_report(sp, root, {control: value}, timeout_ms=5_000)  # no kernel: at once
            s = rep["run"]
            want = engine.run(s["depth"], s["activation"], s["initializer"], s["optimizer"], s["learning_rate"],
                              None if s["clip"] is None else tuple(s["clip"]), s["steps"])
            _rows("update_ratios", rep["update_ratios"], want.update_ratios)
            assert rep["status"] == want.status
        _step(root, 50)
        assert "step 50" in _histogram_title(root)
        # the Lab explorer at the site's first setting: the same words and colours
        lab = explorer(page_of, INDEX)
        for control, value in (("depth", 20), ("activation", "sigmoid"), ("initializer", "glorot_uniform"),
                               ("learning_rate", 0.1), ("clip_mode", "off")):
            view.set_control(lab, control, value)
        page_of.wait_for_function("""(el) => { const r = JSON.parse(el.getAttribute('data-report'));
            return r.settings.depth === 20 && r.settings.activation === 'sigmoid' && r.settings.clip_mode === 'off'
                   && r.settings.learning_rate === 0.1 && r.status !== 'running'; }""",
                                  arg=lab.element_handle(), timeout=180_000)
        for control, value in (("optimizer", "sgd"), ("depth", 20), ("clip_mode", "off"), ("learning_rate", 0.1)):
            view.set_control(root, control, value)
        view.wait_report(sp, root, {"optimizer": "sgd", "depth": 20, "clip_mode": "off", "learning_rate": 0.1})
        assert view.report(root)["status_text"] == view.report(lab)["status_text"]
        lab_words, site_words = view.words(lab), view.words(root)
        assert set(site_words["controls"]) <= set(lab_words["controls"])
        assert {k: v for k, v in lab_words.items() if k != "controls"} == \
               {k: v for k, v in site_words.items() if k != "controls"}
        assert view.colors(lab) == view.colors(root)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "training-explorer-site.png").write_bytes(root.screenshot())
    finally:
        context.close()
