"""Drive one JupyterLab notebook page with Playwright: open, run all, save, read widgets.

The browser tier (tests/browser) uses these helpers the way a learner uses JupyterLab: the
menu's Run > Run All Cells, Ctrl+S, typing into a slider's readout, picking from a dropdown.
Only state checks (is the kernel idle? is the document saved?) read JupyterLab's own objects,
through ``window.jupyterapp`` (the server runs with ``--LabApp.expose_app_in_browser``).
"""

from __future__ import annotations

import re
import time
from urllib.parse import quote

# Text ipywidgets' front end shows instead of a widget while it loads or when it failed.
WIDGET_PROBLEM_TEXT = ("Loading widget...", "Loading widget…", "Error displaying widget")

_JS_PANEL = "(() => { const w = window.jupyterapp.shell.currentWidget; return w && w.context ? w : null; })()"


def open_notebook(page, server, relpath: str, *, timeout_ms: float = 90_000, kernel: bool = True) -> None:
    """Open ``relpath`` (relative to the server root) in a fresh workspace; wait for its kernel.

    ``kernel=False`` opens it without starting one (JupyterLab's "No Kernel"), as a learner
    sees a saved notebook whose kernel is gone.
    """
    workspace = f"t{time.monotonic_ns()}"  # a fresh layout: no tabs restored from another test
    if not kernel:
        page.goto(f"{server.url}/lab/workspaces/{workspace}?token={server.token}",
                  wait_until="domcontentloaded", timeout=timeout_ms)
        open_in_page(page, relpath, kernel=False, timeout_ms=timeout_ms)
        return
    url = f"{server.url}/lab/workspaces/{workspace}/tree/{quote(relpath)}?token={server.token}"
    page.goto(url, wait_until="domcontentloaded", timeout=timeout_ms)
    page.wait_for_function(
        f"""() => {{
            const app = window.jupyterapp; if (!app) return false;
            const w = {_JS_PANEL};
            if (!w || w.context.path !== {relpath!r}) return false;
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return w.context.isReady && k && k.connectionStatus === 'connected'
                && k.status === 'idle';
        }}""",
        timeout=timeout_ms,
    )
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="attached")


def open_in_page(page, relpath: str, *, kernel: bool, timeout_ms: float = 90_000) -> None:
    """Open ``relpath`` in the JupyterLab already loaded in ``page`` (no reload), with or without a kernel."""
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')",
                           timeout=timeout_ms)
    # after the layout restore: a fresh workspace restored later could replace what was opened
    page.evaluate("""async ([path, kernel]) => { await window.jupyterapp.restored;
        await window.jupyterapp.commands.execute('docmanager:open', {
        path, factory: 'Notebook',
        kernelPreference: kernel ? {shouldStart: true} : {shouldStart: false, canStart: false}}); }""",
                  [relpath, kernel])
    # Found by its path, not as the current widget: on an empty workspace JupyterLab may add its
    # Launcher after the notebook opened, and the Launcher then is the current widget.
    page.wait_for_function(
        f"""(kernel) => {{ const app = window.jupyterapp; let w = null;
            for (const x of app.shell.widgets('main')) {{
                if (x.context && x.context.path === {relpath!r}) {{ w = x; break; }} }}
            if (!w || !w.context.isReady) return false;
            if (app.shell.currentWidget !== w) {{ app.shell.activateById(w.id); return false; }}
            if (!kernel) return true;
            const k = w.sessionContext.session && w.sessionContext.session.kernel;
            return k && k.connectionStatus === 'connected' && k.status === 'idle'; }}""",
        arg=kernel, timeout=timeout_ms)
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="attached")


def close_current(page) -> None:
    """Close the current tab without saving (the tests never change what they open)."""
    page.evaluate("""async () => { const w = window.jupyterapp.shell.currentWidget;
        if (!w || !w.context) return;
        await w.context.sessionContext.shutdown();
        w.dispose(); }""")


def run_all_cells(page) -> None:
    """Run All Cells through JupyterLab's command (what Run > Run All Cells calls), in any UI language."""
    page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def is_dirty(page) -> bool:
    """Whether the current notebook is marked modified (the dot on its tab)."""
    return page.evaluate(f"() => {{ const w = {_JS_PANEL}; return !!(w && w.context.model.dirty); }}")


def open_file_browser(page) -> None:
    """Show JupyterLab's file browser in the left side bar, as it is on a learner's first start."""
    page.evaluate("""() => {
        const app = window.jupyterapp;
        if (!app.shell.leftCollapsed) return;
        app.commands.execute('filebrowser:activate');
    }""")
    page.locator(".jp-FileBrowser").first.wait_for(state="visible")


def overflowing(page, selector: str) -> list[dict]:
    """Elements matching ``selector`` wider than the notebook's output area, or clipping content.

    For each match: its width, the width of the output area it sits in, and its scrollWidth
    (content wider than the element is clipped or scrolls).
    """
    return page.evaluate(
        """(sel) => {
            const out = [];
            for (const el of document.querySelectorAll(sel)) {
                const area = el.closest('.jp-OutputArea-output') || el.closest('.jp-Notebook');
                const box = el.getBoundingClientRect(), a = area.getBoundingClientRect();
                const nb = el.closest('.jp-Notebook').getBoundingClientRect();
                const clipped = [...el.querySelectorAll('*')].filter((c) => c.scrollWidth > c.clientWidth + 1
                    && getComputedStyle(c).overflowX !== 'visible' && c.clientWidth > 0)
                    .map((c) => `${c.tagName.toLowerCase()}.${[...c.classList].join('.')} ${c.scrollWidth}>${c.clientWidth}`);
                out.push({cls: [...el.classList].filter((c) => c.startsWith('gradlab-')).join(' '),
                          width: box.width, right: box.right, area_right: a.right, notebook_right: nb.right,
                          area_width: a.width, scroll: el.scrollWidth, client: el.clientWidth, clipped});
            }
            return out;
        }""",
        selector,
    )


def wait_all_executed(page, *, timeout_ms: float = 240_000) -> None:
    """Wait until every code cell has an execution count and the kernel is idle, twice in a row."""
    js = f"""() => {{
        const w = {_JS_PANEL}; if (!w) return false;
        const k = w.sessionContext.session && w.sessionContext.session.kernel;
        if (!k || k.status !== 'idle') {{ window.__glIdle = 0; return false; }}
        const cells = w.content.model.cells;
        for (let i = 0; i < cells.length; i++) {{
            const c = cells.get(i);
            if (c.type === 'code' && c.sharedModel.getSource().trim() && !c.executionCount) {{
                window.__glIdle = 0; return false;
            }}
        }}
        window.__glIdle = (window.__glIdle || 0) + 1;
        return window.__glIdle >= 3;
    }}"""
    page.evaluate("() => { window.__glIdle = 0; }")
    page.wait_for_function(js, timeout=timeout_ms, polling=200)


def missing_execution_counts(page) -> list[int]:
    """Indices of non-empty code cells without an execution count (for failure messages)."""
    return page.evaluate(
        f"""() => {{
            const w = {_JS_PANEL}; const out = [];
            const cells = w.content.model.cells;
            for (let i = 0; i < cells.length; i++) {{
                const c = cells.get(i);
                if (c.type === 'code' && c.sharedModel.getSource().trim() && !c.executionCount) out.push(i);
            }}
            return out;
        }}"""
    )


def save(page, *, timeout_ms: float = 30_000) -> None:
    """Ctrl+S in the notebook, then wait until the document is no longer dirty."""
    page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    page.wait_for_function(
        f"() => {{ const w = {_JS_PANEL}; return w && !w.context.model.dirty; }}",
        timeout=timeout_ms,
    )


def widget_problems(page) -> list[str]:
    """Visible texts of widget outputs that are still loading or failed to display."""
    return page.evaluate(
        """(needles) => {
            const out = [];
            for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
                const t = el.innerText || '';
                for (const n of needles) if (t.includes(n)) out.push(t.trim().slice(0, 200));
            }
            return out;
        }""",
        list(WIDGET_PROBLEM_TEXT),
    )


def wait_widgets_rendered(page, *, timeout_ms: float = 30_000) -> list[str]:
    """Wait until no widget output shows its loading or error text; return what is left."""
    deadline = time.monotonic() + timeout_ms / 1000
    problems = widget_problems(page)
    while problems and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        problems = widget_problems(page)
    return problems


def widget_view_count(page) -> int:
    """How many ipywidgets views are rendered in the notebook's outputs."""
    return page.locator(".jp-OutputArea-output .jupyter-widgets").count()


# ----------------------------------------------------------------------------- widget controls
def status_text(scope, css_class: str) -> str:
    return scope.locator(f".{css_class}").first.inner_text().strip()


def set_slider_by_readout(scope, css_class: str, value) -> None:
    """Type ``value`` into a slider's readout and press Enter (IntSlider, FloatLogSlider...)."""
    readout = scope.locator(f".{css_class} .widget-readout").first
    readout.scroll_into_view_if_needed()
    readout.click()
    readout.press("Control+a")
    readout.type(str(value))
    readout.press("Enter")


def select_option(scope, css_class: str, value: str) -> None:
    """Pick ``value`` in a Dropdown's ``<select>``: the option labelled ``value`` or ``value (...)``."""
    select = scope.locator(f".{css_class} select").first
    select.scroll_into_view_if_needed()
    # ipywidgets writes option labels with non-breaking spaces.
    labels = [t.replace("\xa0", " ").strip() for t in select.locator("option").all_inner_texts()]
    matches = [i for i, t in enumerate(labels)
               if t == value or t.startswith(value + " ") or t.startswith(value + ":")]
    if not matches:
        raise AssertionError(f".{css_class}: no option {value!r} among {labels}")
    select.select_option(index=matches[0])


def selected_label(scope, css_class: str) -> str:
    select = scope.locator(f".{css_class} select").first
    return select.evaluate("(s) => s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : ''")


def click_toggle(scope, css_class: str, label: str) -> None:
    """Click the button labelled ``label`` of a ToggleButtons widget."""
    scope.locator(f".{css_class} button", has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")).click()


def select_values(scope, css_class: str) -> list[str]:
    return [t.replace("\xa0", " ").strip()
            for t in scope.locator(f".{css_class} select option").all_inner_texts()]


ARM_LATENCY_JS = """([root, statusSel, needles, events]) => {
    // Record performance.now() at the user's input (Enter key / change / click, capture phase)
    // and when the status text first contains every needle: the in-page input-to-status latency.
    const status = root.querySelector(statusSel);
    const state = {t0: null, t1: null, text: null};
    window.__glLatency = state;
    const onInput = (e) => {
        if (state.t0 !== null) return;
        if (e.type === 'keydown' && e.key !== 'Enter') return;
        state.t0 = performance.now();
    };
    for (const ev of events) root.addEventListener(ev, onInput, true);
    const check = () => {
        const t = status.innerText;
        if (state.t0 !== null && state.t1 === null && needles.every((n) => t.includes(n))) {
            state.t1 = performance.now(); state.text = t;
            obs.disconnect();
            for (const ev of events) root.removeEventListener(ev, onInput, true);
        }
    };
    const obs = new MutationObserver(check);
    obs.observe(status, {subtree: true, childList: true, characterData: true});
}"""


def arm_latency(root, status_selector: str, needles: list[str],
                events=("keydown", "change")) -> None:
    """Before an input inside ``root`` (a Locator), start timing until the status names ``needles``.

    The clock starts at the first of ``events`` inside ``root`` (``keydown`` counts only for
    Enter), so typing into a readout is timed from the Enter that commits it.
    """
    root.evaluate(
        "(root, args) => (" + ARM_LATENCY_JS + ")([root, args[0], args[1], args[2]])",
        [status_selector, list(needles), list(events)],
    )


def wait_latency(page, *, timeout_ms: float = 30_000) -> tuple[float, str]:
    """Wait for the armed status change; return (latency in ms, status text)."""
    page.wait_for_function("() => window.__glLatency && window.__glLatency.t1 !== null",
                           timeout=timeout_ms, polling="raf")
    state = page.evaluate("() => window.__glLatency")
    return state["t1"] - state["t0"], state["text"]


IMG_DIGEST_JS = """async (img) => {
    // SHA-256 of the decoded RGBA pixels of an <img>, plus its size.
    if (!img.complete) await new Promise((r) => img.addEventListener('load', r, {once: true}));
    await img.decode().catch(() => {});
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const data = ctx.getImageData(0, 0, c.width, c.height).data;
    const h = await crypto.subtle.digest('SHA-256', data);
    return [c.width, c.height, Array.from(new Uint8Array(h)).map((b) => b.toString(16).padStart(2, '0')).join('')];
}"""


def image_digest(scope, css_class: str) -> tuple[int, int, str]:
    """(width, height, sha256 of decoded pixels) of the figure image inside ``.css_class``."""
    img = scope.locator(f"img.{css_class}, .{css_class} img").first
    return tuple(img.evaluate(IMG_DIGEST_JS))


def run_notebook(page, server, relpath: str, *, timeout_ms: float = 300_000) -> float:
    """Open ``relpath``, Run All Cells, wait until all ran and the kernel is idle, save.

    Returns the seconds from the click to idle. Records ``relpath`` in ``server.executed``.
    """
    open_notebook(page, server, relpath)
    t0 = time.perf_counter()
    run_all_cells(page)
    try:
        wait_all_executed(page, timeout_ms=timeout_ms)
    except Exception as exc:
        raise AssertionError(
            f"{relpath}: not every cell ran within {timeout_ms / 1000:.0f} s; code cells without "
            f"an execution count: {missing_execution_counts(page)}"
        ) from exc
    elapsed = time.perf_counter() - t0
    save(page)
    server.executed.add(relpath)
    return elapsed


def open_executed(page, server, relpath: str) -> None:
    """Open ``relpath`` with live widgets: reuse its kernel if a test already ran it, else run it.

    Reopening a notebook whose kernel is alive reconnects to that kernel; ipywidgets then
    restores the live widget models, so the saved widget outputs render and respond.
    """
    if relpath in server.executed:
        open_notebook(page, server, relpath)
        if widget_view_count(page) and not wait_widgets_rendered(page, timeout_ms=20_000):
            return
    run_notebook(page, server, relpath)


def drive(page, ex, action, needles, *, plot_changes=True, timeout_ms=30_000,
           status="gradlab-status", plot="gradlab-plot", events=("keydown", "change")):
    """Do ``action`` inside widget ``ex``; wait until its status contains every needle.

    Returns the input-to-status latency in ms; with ``plot_changes``, also asserts that the
    pixels of the widget's figure (``img.<plot>``) changed.
    """
    before = image_digest(ex, plot) if plot_changes else None
    arm_latency(ex, f".{status}", needles, events)
    action()
    try:
        ms, text = wait_latency(page, timeout_ms=timeout_ms)
    except Exception as exc:
        raise AssertionError(
            f"status never showed {needles}; it reads {status_text(ex, status)!r}"
        ) from exc
    if plot_changes:
        deadline = time.monotonic() + 10
        after = image_digest(ex, plot)
        while after == before and time.monotonic() < deadline:
            page.wait_for_timeout(100)
            after = image_digest(ex, plot)
        assert after != before, f"the plot's pixels did not change for {needles} ({text!r})"
    return ms
