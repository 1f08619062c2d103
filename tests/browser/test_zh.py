"""The Chinese edition in a Chinese JupyterLab: the UI language and an explorer that speaks Chinese.

One server (``lab_server_zh``: the tier's server with the overrides ``make lab-zh`` writes,
tools/lab_zh.py) opens a two-cell scratch notebook, ``gl.setup(seed=0, lang="zh")`` and a
TangentExplorer, the Setup cell and the first explorer of every Chinese chapter. The test
checks that JupyterLab's own menus are Chinese (the language pack is installed and selected),
runs the notebook through 运行 > 运行所有单元格 as a learner with the Chinese UI does, saves,
finds no error and no widget problem, then moves the explorer's ``w`` slider from the page and
waits for its status line to say, in Chinese, where gradient descent moves ``w`` from the new
value, and for the figure to change. nbval runs the Chinese chapters themselves; this test only
adds what nbval cannot see: the Lab's language and the live widget in the page.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from . import labpage, view
from .conftest import write_notebook

pytestmark = pytest.mark.browser

SCRATCH_ZH = "scratch-zh.ipynb"
SCRATCH_ZH_SOURCE = [
    'import gradlab as gl\ngl.setup(seed=0, lang="zh")',
    "tg = gl.TangentExplorer(w=-0.5, learning_rate=0.3)\ntg",
]
CJK = re.compile(r"[\u4e00-\u9fff]")


def errors_in(path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [f"cell {i}: {o['ename']}: {o['evalue'][:200]}"
            for i, cell in enumerate(nb["cells"]) for o in cell.get("outputs", [])
            if o.get("output_type") == "error"]


@pytest.fixture
def zh_page(request, browser, lab_server_zh):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="zh-CN")
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    request.node._gl_page = pg  # the tier's failure hook saves a screenshot and the log
    request.node._gl_server = lab_server_zh
    request.node._gl_log_offset = lab_server_zh.log_path.stat().st_size
    try:
        yield pg, lab_server_zh
    finally:
        request.node._gl_page = None
        context.close()


def test_chinese_explorer_in_chinese_jupyterlab(zh_page):
    page, server = zh_page
    write_notebook(server.root / SCRATCH_ZH, SCRATCH_ZH_SOURCE)
    labpage.open_notebook(page, server, SCRATCH_ZH)
    menus = [t.strip() for t in page.locator(".lm-MenuBar-itemLabel").all_inner_texts()]
    assert "文件" in menus and "运行" in menus, f"JupyterLab's menus are not Chinese: {menus}"
    # 运行 > 运行所有单元格, as a learner using the Chinese UI does (the language pack's labels)
    t0 = time.perf_counter()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^运行$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^运行所有单元格$")).click()
    labpage.wait_all_executed(page)
    print(f"\n{SCRATCH_ZH}: 运行所有单元格 took {time.perf_counter() - t0:.1f} s")
    labpage.save(page)
    assert not errors_in(server.root / SCRATCH_ZH), errors_in(server.root / SCRATCH_ZH)

    problems = labpage.wait_widgets_rendered(page)
    assert not problems, f"{SCRATCH_ZH}: widgets did not render: {problems}"
    ex = page.locator('.jp-OutputArea-output [data-gradlab-explorer="TangentExplorer"]').first
    ex.wait_for(state="visible")
    ex.scroll_into_view_if_needed()
    labels = " ".join(ex.locator(".gradlab-control label").all_inner_texts())
    assert "学习率" in labels, f"the explorer's controls are not Chinese: {labels!r}"
    before = view.report(ex)["status_text"]
    # w = -0.50: the slope is negative, so the step goes right (向右)
    assert before.startswith("w = -0.50") and "梯度下降" in before and "向右" in before, \
        f"the explorer's status line is not the Chinese one for w = -0.50: {before!r}"
    view.set_control(ex, "w", 2.5)
    after = view.wait_report(page, ex, {"w": 2.5})["status_text"]
    assert ex.locator(".gradlab-status").inner_text().strip() == after
    assert "向左" in after, f"at w = 2.5 the slope is positive and the step goes left (向左): {after!r}"
    print(f"TangentExplorer (zh) status: {after}")
    server.shutdown_kernel_of(SCRATCH_ZH)
