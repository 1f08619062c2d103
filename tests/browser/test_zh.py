"""The Chinese edition in a Chinese JupyterLab: UI language, a full run, an explorer's Chinese status.

One server (``lab_server_zh``: the browser tier's server with the locale override that
``make lab-zh`` uses) opens the Chinese twin of chapter 00, the shortest chapter with an
explorer. The test checks that JupyterLab's own menus are Chinese (the language pack is
installed and selected), runs every cell, saves, finds no unexpected error, then moves the
TangentExplorer's ``w`` slider from the page and waits for its status line to say, in
Chinese, where gradient descent moves ``w`` from the new value.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from . import labpage
from .conftest import CHAPTERS

pytestmark = pytest.mark.browser

ZH00 = "chapters/zh/00-introduction.ipynb"
CJK = re.compile(r"[\u4e00-\u9fff]")


def unexpected_errors(path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and "raises-exception" not in tags:
                out.append(f"cell {i}: {o['ename']}: {o['evalue'][:200]}")
    return out


def chinese_server(request):
    """The tier's Chinese-locale server, the fixture ``lab_server_zh`` of tests/browser/conftest.py."""
    try:
        return request.getfixturevalue("lab_server_zh")
    except pytest.FixtureLookupError:
        why = "tests/browser/conftest.py has no lab_server_zh fixture (the Chinese-locale server) yet"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture
def zh_page(request, browser):
    server = chinese_server(request)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="zh-CN")
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    request.node._gl_page = pg  # the tier's failure hook saves a screenshot and the log
    request.node._gl_server = server
    request.node._gl_log_offset = server.log_path.stat().st_size
    try:
        yield pg, server
    finally:
        request.node._gl_page = None
        context.close()


@pytest.mark.skipif(not (CHAPTERS / "zh" / "00-introduction.ipynb").exists(),
                    reason="the Chinese twin of chapter 00 is not built yet")
def test_chinese_chapter_runs_in_chinese_jupyterlab(zh_page):
    page, server = zh_page
    labpage.open_notebook(page, server, ZH00)
    menus = [t.strip() for t in page.locator(".lm-MenuBar-itemLabel").all_inner_texts()]
    assert "文件" in menus and "运行" in menus, f"JupyterLab's menus are not Chinese: {menus}"
    # 运行 > 运行所有单元格, as a learner using the Chinese UI does (the language pack's labels)
    t0 = time.perf_counter()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^运行$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^运行所有单元格$")).click()
    labpage.wait_all_executed(page)
    print(f"\nzh/00-introduction: 运行所有单元格 took {time.perf_counter() - t0:.1f} s")
    labpage.save(page)
    server.executed.add(ZH00)
    assert not unexpected_errors(server.root / ZH00), unexpected_errors(server.root / ZH00)
    title = page.locator(".jp-NotebookPanel .jp-RenderedMarkdown h1").first.inner_text()
    assert CJK.search(title), f"the chapter's title is not Chinese: {title!r}"

    problems = labpage.wait_widgets_rendered(page)
    assert not problems, f"{ZH00}: widgets did not render: {problems}"
    ex = page.locator(".gradlab-tangent").first
    ex.wait_for(state="visible")
    ex.scroll_into_view_if_needed()
    before = labpage.status_text(ex, "gradlab-tangent-status")
    assert CJK.search(before), f"the explorer's status line is not Chinese: {before!r}"
    target = "1.5" if "w = 1.50" not in before else "2.5"
    ms = labpage.drive(page, ex, lambda: labpage.set_slider_by_readout(ex, "gradlab-tangent-w", target),
                       [f"w = {float(target):.2f}", "梯度下降"], status="gradlab-tangent-status",
                       plot="gradlab-tangent-plot")
    after = labpage.status_text(ex, "gradlab-tangent-status")
    assert "向左" in after or "向右" in after, after
    print(f"TangentExplorer (zh) slider to status: {ms:.0f} ms; status: {after}")
    server.shutdown_kernel_of(ZH00)
