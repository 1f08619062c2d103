"""The book site (``make book``) in headless Chromium: both editions, offline, and its explorers.

The site is built once per session from the current sources (``tools/book/build.py``, about
half a minute) unless build/book/ is newer than every input. Pages are opened from
``file://``, as a reader opening build/book/index.html would. Every page must load with no
console error, no failed request and no request to another host, and must not scroll sideways
at 1366 px; links and anchors resolve; the language switch lands on the same chapter; search
finds chapter 01 in both editions; the kernel-free explorer's controls change the plot, its
``data-report`` equals ``MLPGradientEngine().report(...)`` to the stored precision, and its
status line is the kernel's ``GradientExplorer.status_text``. The change-to-frame latency
measured in the page is printed, never asserted.
"""

from __future__ import annotations

import html.parser
import json
import math
import re
import statistics
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "book"
INPUTS = [ROOT / "chapters", ROOT / "book", ROOT / "tools" / "book"]
LANGS = ("en", "zh")
WIDTH = 1366
RTOL = 2e-4  # 5 significant digits stored; the report carries them as they are

pytestmark = pytest.mark.browser


def _newest_input() -> float:
    return max(p.stat().st_mtime for d in INPUTS for p in d.rglob("*") if p.is_file())


@pytest.fixture(scope="session")
def site() -> Path:
    """build/book/, rebuilt unless it is newer than every chapter, book/ and tools/book/ file."""
    index = SITE / "index.html"
    if not index.exists() or index.stat().st_mtime < _newest_input():
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "book" / "build.py")], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"make book failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
        print(r.stdout.strip().splitlines()[-1])
    return SITE


def pages(site: Path) -> list[Path]:
    return sorted([site / "index.html"] + [p for lang in LANGS for p in (site / lang).glob("*.html")])


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    pg = context.new_page()
    pg.gradlab_log = []  # console errors, page errors, failed requests, other hosts
    pg.gradlab_requests = []

    def on_console(msg):
        if msg.type == "error":
            pg.gradlab_log.append(f"console error: {msg.text}")

    def on_request(req):
        pg.gradlab_requests.append(req.url)
        if not req.url.startswith(("file:", "data:", "blob:", "about:")):
            pg.gradlab_log.append(f"request to another host: {req.url}")

    pg.on("console", on_console)
    pg.on("pageerror", lambda e: pg.gradlab_log.append(f"page error: {e}"))
    pg.on("requestfailed", lambda r: pg.gradlab_log.append(f"failed request: {r.url} ({r.failure})"))
    pg.on("request", on_request)
    yield pg
    context.close()


def open_page(pg, path: Path, wait_ms: int = 300):
    pg.gradlab_log.clear()
    pg.gradlab_requests.clear()
    pg.goto(path.as_uri())
    pg.wait_for_load_state("load")
    pg.wait_for_timeout(wait_ms)  # MathJax typesets after load


# --------------------------------------------------------------------------- every page
def test_every_page_loads_clean_and_fits(site, page):
    """No console error, failed request or other host; no sideways scroll at 1366 px; alt text."""
    problems = []
    for path in pages(site):
        open_page(page, path)
        rel = path.relative_to(site).as_posix()
        problems += [f"{rel}: {line}" for line in page.gradlab_log]
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > WIDTH:
            problems.append(f"{rel}: scrolls sideways ({width} px > {WIDTH} px)")
        no_alt = page.evaluate("[...document.images].filter(i => !i.alt || !i.alt.trim() "
                               "|| /[.](png|jpe?g|svg)$/.test(i.alt)).length")  # a file name is no alt text
        if no_alt:
            problems.append(f"{rel}: {no_alt} image(s) without alt text")
        data = [u for u in page.gradlab_requests if "/data/" in u]
        if data and not page.locator("[data-gradlab-explorer]").count():
            problems.append(f"{rel}: loads explorer data without an explorer: {data[:2]}")
    assert not problems, "\n".join(problems[:40])


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("canonical",)):
                self.refs.append((tag, a[key]))


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_links_and_anchors_resolve(site):
    """Every internal href/src names a file of the site, and every #anchor an id in it."""
    parsed = {p: _parse(p) for p in pages(site)}
    broken = []
    for path, links in parsed.items():
        for tag, ref in links.refs:
            url = urllib.parse.urlsplit(ref)
            if url.scheme or ref.startswith("//") or ref.startswith("mailto:"):
                continue
            target = (path.parent / urllib.parse.unquote(url.path)).resolve() if url.path else path
            if not target.exists():
                broken.append(f"{path.relative_to(site)}: <{tag}> {ref}: no such file")
                continue
            frag = urllib.parse.unquote(url.fragment)
            if frag and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if frag not in ids:
                    broken.append(f"{path.relative_to(site)}: {ref}: no id {frag!r} in {target.name}")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:40])


def test_every_chapter_has_switch_run_box_and_troubleshooting(site):
    for lang in LANGS:
        other = "zh" if lang == "en" else "en"
        chapters = sorted((site / lang).glob("[0-9][0-9]-*.html"))
        assert len(chapters) == 11, chapters
        for ch in chapters:
            text = ch.read_text(encoding="utf-8")
            assert f'class="gradlab-lang-switch" href="../{other}/{ch.name}"' in text, ch
            assert 'class="gradlab-troubleshoot" href="04-summary.html#' in text, ch
            box = text.split('gradlab-run admonition">', 1)[1].split("</div>", 1)[0]
            words = re.sub(r"<[^>]+>", "", box)
            assert "make lab" in words, ch
            assert f"chapters/{'zh/' if lang == 'zh' else ''}{ch.stem}.ipynb" in words, ch
            download = re.search(r'href="(_downloads/[^"]+\.ipynb)"', box)
            assert download and (ch.parent / download.group(1)).stat().st_size > 1000, f"{ch}: no notebook download"


def test_language_switch_lands_on_the_same_chapter(site, page):
    for lang, other in (("en", "zh"), ("zh", "en")):
        for name in ("01-vanishing-exploding.html", "04-summary.html", "index.html"):
            open_page(page, site / lang / name, 0)
            page.locator(".gradlab-lang-switch").first.click()
            page.wait_for_load_state("load")
            assert page.url.endswith(f"/{other}/{name}"), (lang, name, page.url)
            assert page.evaluate("document.documentElement.lang").startswith(other), page.url


def test_troubleshooting_guide_is_one_click_away(site, page):
    for lang, word in (("en", "Troubleshoot"), ("zh", "常见问题排查")):
        open_page(page, site / lang / "07-through-time.html", 0)
        page.locator(".gradlab-troubleshoot").first.click()
        page.wait_for_load_state("load")
        frag = urllib.parse.unquote(urllib.parse.urlsplit(page.url).fragment)
        heading = page.evaluate("(id) => document.getElementById(id).parentElement.textContent", frag)
        assert page.url.split("#")[0].endswith(f"/{lang}/04-summary.html") and word in heading, (page.url, heading)


@pytest.mark.parametrize(("lang", "query", "chapter"), [("en", "vanishing", "01-vanishing-exploding.html"),
                                                       ("zh", "梯度消失", "01-vanishing-exploding.html")])
def test_search_finds_chapter_01(site, page, lang, query, chapter):
    url = (site / lang / "search.html").as_uri() + "?q=" + urllib.parse.quote(query)
    page.goto(url)
    page.wait_for_selector("#search-results ul li a", timeout=20_000)
    hrefs = page.evaluate("[...document.querySelectorAll('#search-results ul li a')].map(a => a.href)")
    assert any(h.split("#")[0].split("?")[0].endswith(f"/{lang}/{chapter}") for h in hrefs[:5]), hrefs[:8]
    assert not [line for line in page.gradlab_log if "error" in line], page.gradlab_log


# --------------------------------------------------------------------------- the explorers
def number(v) -> float:
    return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v] if isinstance(v, str) else float(v)


def assert_close(name, page_values, engine_values):
    a = [number(v) for v in page_values]
    b = [float(v) for v in engine_values]
    assert len(a) == len(b), (name, len(a), len(b))
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if math.isfinite(y):
            assert math.isfinite(x) and abs(x - y) <= RTOL * abs(y) + 1e-300, (name, k, x, y)
        else:
            assert (math.isnan(x) and math.isnan(y)) or x == y, (name, k, x, y)


def set_range(loc, value) -> None:
    """Move a range input as a drag does: set its value, fire ``input``."""
    loc.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", str(value))


def report_of(root) -> dict:
    return json.loads(root.get_attribute("data-report"))


def check_against_engine(engine, rep):
    s = rep["settings"]
    clip = None if s["clip_mode"] == "off" else (s["clip_mode"], s["clip_norm"])
    r = engine.report(s["depth"], s["activation"], s["initializer"], clip, theory=False)
    assert_close("signal_norms", rep["signal_norms"], r.signal_norms)
    assert_close("weight_norms", rep["weight_norms"], r.weight_norms)
    assert_close("clipped_weight_norms", rep["clipped_weight_norms"], r.clipped_weight_norms)
    assert rep["status"] == r.status
    return r


def plot_png(root) -> bytes:
    return root.locator(".gradlab-kfx-plot canvas").screenshot()


def explorer_page(page, site, lang):
    open_page(page, site / lang / "01-vanishing-exploding.html", 0)
    root = page.locator('[data-gradlab-explorer="GradientExplorer"]')
    assert root.count() == 1
    page.wait_for_selector('[data-gradlab-explorer="GradientExplorer"][data-ready]')
    root.scroll_into_view_if_needed()
    return root


@pytest.mark.parametrize("lang", LANGS)
def test_gradient_explorer_controls_match_the_engine(site, page, engine, lang):
    root = explorer_page(page, site, lang)
    rep = report_of(root)
    assert rep["settings"] == {"depth": 20, "activation": "sigmoid", "initializer": "glorot_uniform",
                               "clip_mode": "off", "clip_norm": 1}
    check_against_engine(engine, rep)
    steps = [("depth", lambda el: set_range(el, 50), {"depth": 50}),
             ("activation", lambda el: el.select_option("relu"), {"activation": "relu"}),
             ("initializer", lambda el: el.select_option("large_normal"), {"initializer": "large_normal"}),
             ("depth", lambda el: set_range(el, 7), {"depth": 7}),
             ("clip_mode", lambda el: el.select_option("norm"), {"clip_mode": "norm"}),
             ("clip_norm", lambda el: set_range(el, 40), {"clip_norm": 10.0}),
             ("clip_mode", lambda el: el.select_option("global_norm"), {"clip_mode": "global_norm"}),
             ("initializer", lambda el: el.select_option("he_normal"), {"initializer": "he_normal"}),
             ("clip_norm", lambda el: set_range(el, 20), {"clip_norm": 0.1})]
    before = plot_png(root)
    for name, act, expect in steps:
        act(root.locator(f'[name="{name}"]'))
        rep = report_of(root)
        for k, v in expect.items():
            assert rep["settings"][k] == pytest.approx(v), (name, rep["settings"])
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        after = plot_png(root)
        assert after != before, f"moving {name} did not change the plot"
        before = after
        check_against_engine(engine, rep)
    assert not page.gradlab_log, page.gradlab_log


@pytest.mark.parametrize("lang", LANGS)
def test_gradient_explorer_status_is_the_kernels(site, page, engine, lang):
    """The page's status line is ``GradientExplorer.status_text`` in that language."""
    from tools.book.engines import GradientExplorer, i18n

    root = explorer_page(page, site, lang)
    i18n.set_language(lang)
    try:
        ex = GradientExplorer(engine=engine)
        for settings in ({"depth": 50, "activation": "sigmoid", "initializer": "glorot_uniform"},
                         {"depth": 60, "activation": "relu", "initializer": "large_normal", "clip_mode": "norm"},
                         {"depth": 12, "activation": "tanh", "initializer": "orthogonal", "clip_mode": "global_norm"}):
            for name, value in settings.items():
                loc = root.locator(f'[name="{name}"]')
                set_range(loc, value) if name == "depth" else loc.select_option(value)
            ex.set(**settings)
            rep = report_of(root)
            assert rep["status_text"] == ex.status_text
            assert root.locator(".gradlab-kfx-status").text_content() == ex.status_text
    finally:
        i18n.set_language("en")
    if lang == "zh":
        assert "梯度" in rep["status_text"] or "正常" in rep["status_text"], rep["status_text"]


def test_gradient_explorer_keyboard(site, page):
    root = explorer_page(page, site, "en")
    depth = root.locator('[name="depth"]')
    depth.focus()
    page.keyboard.press("ArrowRight")
    assert report_of(root)["settings"]["depth"] == 21
    page.keyboard.press("Tab")  # to the activation select
    assert page.evaluate("document.activeElement.name") == "activation"
    page.keyboard.press("ArrowDown")
    assert report_of(root)["settings"]["activation"] == "tanh"  # linear, sigmoid, tanh, ...: the next one
    alt = root.locator(".gradlab-kfx-plot").get_attribute("aria-label")
    assert root.locator(".gradlab-kfx-plot").get_attribute("role") == "img" and "depth 21" in alt


LATENCY_PAGES = [("01-vanishing-exploding.html", "GradientExplorer"), ("05-beyond-the-source.html", "GradientExplorer05"),
                 ("07-through-time.html", "TimeExplorer"), ("09-transformers.html", "TransformerExplorer")]


@pytest.mark.parametrize(("name", "grid"), LATENCY_PAGES, ids=[g for _n, g in LATENCY_PAGES])
def test_explorer_latency_benchmark(site, page, name, grid):
    """Change-to-frame latency in the page: printed (a benchmark, not a timed assertion).

    40 changes alternate between the explorer's first control (a slider) and its first
    select; each is timed from the input event to the next animation frame after the redraw.
    """
    open_page(page, site / "en" / name, 0)
    page.wait_for_selector(f'[data-gradlab-grid="{grid}"][data-ready]')
    ms = page.evaluate("""async (grid) => {
        const root = document.querySelector(`[data-gradlab-grid="${grid}"]`);
        const slider = root.querySelector('input[type=range]'), sel = root.querySelector('select');
        const out = [];
        for (let k = 0; k < 40; k++) {
            const el = k % 2 ? slider : sel;
            if (el === slider) slider.value = String((k * 37) % (Number(slider.max) + 1));
            else sel.selectedIndex = (sel.selectedIndex + 1) % sel.options.length;
            root.removeAttribute('data-latency-ms');
            el.dispatchEvent(new Event('input', {bubbles: true}));
            await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
            out.push(Number(root.getAttribute('data-latency-ms')));
        }
        return out;
    }""", grid)
    assert len(ms) == 40 and all(m > 0 for m in ms), ms
    print(f"\n{grid} change-to-frame latency: median {statistics.median(ms):.1f} ms, "
          f"max {max(ms):.1f} ms over {len(ms)} changes")


def test_site_size(site):
    total = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    data = sum(f.stat().st_size for f in (site / "data").glob("*"))
    print(f"\nbook site: {total / 1e6:.1f} MB, explorer data {data / 1e6:.1f} MB")
    assert total <= 150e6


# ------------------------------------------------------------------ chapters 05, 07, 09
#: (page, Python class, grid, the moves: control name → value, each of which changes the plot)
LOOKUPS = [
    ("05-beyond-the-source.html", "GradientExplorer", "GradientExplorer05",
     [("residual", False), ("norm", "batch"), ("norm", "none"), ("depth", 14), ("dtype", "float16"),
      ("loss_scale", 32768.0), ("activation", "relu"), ("initializer", "he_normal"), ("depth", 100)]),
    ("07-through-time.html", "TimeExplorer", "TimeExplorer",
     [("steps", 200), ("cell", "lstm"), ("recurrent_initializer", "normal_2"), ("input_scale", 0.01)]),
    ("09-transformers.html", "TransformerExplorer", "TransformerExplorer",
     [("num_layers", 12), ("norm_position", "pre"), ("num_layers", 24)]),
]


@pytest.fixture(scope="session")
def lookup_engines():
    import gradlab as gl
    from tools.book import grids

    gl.setup(seed=0)
    return {g: grids.make_engine(g) for _p, _c, g, _m in LOOKUPS}


def move(root, control: dict, value) -> None:
    loc = root.locator(f'[name="{control["name"]}"]')
    k = control["values"].index(value)
    if control["kind"] == "range":
        set_range(loc, k)
    elif control["kind"] == "checkbox":
        if loc.is_checked() != bool(value):
            loc.focus()
            loc.press("Space")  # the keyboard, as a reader without a mouse
    else:
        loc.select_option(str(k))


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(("name", "cls", "grid", "moves"), LOOKUPS, ids=[g for _p, _c, g, _m in LOOKUPS])
def test_lookup_explorer_controls_match_the_engine(site, page, lookup_engines, lang, name, cls, grid, moves):
    from tools.book import grids

    data = json.loads((ROOT / "book" / "data" / f"{grid}.json").read_text(encoding="utf-8"))
    controls = {c["name"]: c for c in data["controls"]}
    open_page(page, site / lang / name, 0)
    root = page.locator(f'[data-gradlab-explorer="{cls}"][data-gradlab-grid="{grid}"]')
    assert root.count() == 1, f"{lang}/{name}: no kernel-free {cls}"
    page.wait_for_selector(f'[data-gradlab-grid="{grid}"][data-ready]')
    root.scroll_into_view_if_needed()
    note = root.locator(".gradlab-kfx-note").text_content()
    assert ("settings" in note) if lang == "en" else ("设置" in note), note  # says what it covers
    before = plot_png(root)
    for control, value in moves:
        move(root, controls[control], value)
        rep = report_of(root)
        assert rep["settings"][control] == value, (control, rep["settings"])
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        after = plot_png(root)
        assert after != before, f"{lang}/{name}: moving {control} to {value} did not change the plot"
        before = after
        want = grids.recompute(grid, lookup_engines[grid], rep["settings"])
        for f in data["fields"]:
            if want[f] is None:
                assert rep[f] is None, (f, rep[f])
            else:
                assert_close(f, rep[f], want[f])
        assert rep["status"] == want["status"]
        assert root.locator(".gradlab-kfx-status").text_content() == rep["status_text"] != ""
    assert not page.gradlab_log, page.gradlab_log


@pytest.mark.parametrize("lang", LANGS)
def test_math_code_and_outputs_render(site, page, lang):
    """MathJax (vendored) typesets, code is highlighted with a copy button, stored figures show."""
    open_page(page, site / lang / "01-vanishing-exploding.html", 0)
    page.wait_for_selector("mjx-container", timeout=30_000)
    counts = page.evaluate("""() => ({
        math: document.querySelectorAll('mjx-container').length,
        code: document.querySelectorAll('div.cell_input div.highlight pre').length,
        highlighted: document.querySelectorAll('div.cell_input div.highlight pre span.k, div.cell_input div.highlight pre span.nn').length,
        copy: document.querySelectorAll('button.copybtn').length,
        figures: [...document.querySelectorAll('div.cell_output img')].filter(i => i.complete && i.naturalWidth > 0).length,
        outputs: document.querySelectorAll('div.cell_output').length})""")
    assert counts["math"] >= 5 and counts["code"] >= 10 and counts["highlighted"] >= 10, counts
    assert counts["copy"] >= counts["code"] and counts["figures"] >= 3 and counts["outputs"] >= 10, counts
    assert not page.gradlab_log, page.gradlab_log
