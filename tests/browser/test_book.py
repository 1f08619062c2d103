"""The book site (``make book``) in headless Chromium: both editions, offline, and its explorers.

The site is built once per session from the current sources (``tools/book/build.py``, about
half a minute) unless build/book/ is newer than every input. Pages are opened from
``file://``, as a reader opening build/book/index.html would. Every page must load with no
console error, no failed request and no request to another host, and must not scroll sideways
at 1366 px nor on a 390 px phone (one sweep: each page loaded at 390 px, then widened); links and anchors resolve; the language switch lands on the same chapter; search
finds chapter 01 in both editions; the kernel-free explorer's controls change the plot, its
``data-report`` equals ``MLPGradientEngine().report(...)`` to the stored precision, and its
status line is the kernel's ``GradientExplorer.status_text``. The change-to-frame latency
measured in the page is printed, never asserted.
"""

from __future__ import annotations

import html.parser
import re
import statistics
import urllib.parse
from pathlib import Path

import pytest

from . import view

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "build" / "book"
INPUTS = [ROOT / "chapters", ROOT / "book", ROOT / "tools" / "book"]
LANGS = ("en", "zh")
WIDTH = 1366
RTOL = 2e-4  # 5 significant digits stored; the report carries them as they are

pytestmark = pytest.mark.browser


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
#: A phone's width (issue 37): no page may scroll sideways or cut anything off in an article.
PHONE = 390
OVERFLOW_JS = """() => {
  const vw = document.documentElement.clientWidth, bad = [];
  const scrolls = (el) => { for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll') return true; } return false; };
  for (const el of document.querySelectorAll('.bd-article *, main *, body > *')) {
    if (el.closest('mjx-container, .math, .bd-sidebar-primary, .bd-sidebar-secondary, dialog')) continue;
    const r = el.getBoundingClientRect();
    if (!r.width) continue;
    const o = getComputedStyle(el).overflowX;
    if (r.right > vw + 1 && !scrolls(el)) bad.push(`${el.tagName}.${el.className} ends at ${Math.round(r.right)} px`);
    else if ((o === 'hidden' || o === 'clip') && el.scrollWidth > el.clientWidth + 1 && el.closest('.bd-article'))
      bad.push(`${el.tagName}.${el.className} clips ${el.scrollWidth} px into ${el.clientWidth} px`);
    if (bad.length > 3) break;
  }
  return {scroll: document.documentElement.scrollWidth, client: vw, bad};
}"""


def _laptop_problems(pg, rel: str) -> list[str]:
    """The page just opened, at 1366 px: console errors, failed requests, other hosts, width, alt text."""
    problems = [f"{rel}: {line}" for line in pg.gradlab_log]
    width = pg.evaluate("document.documentElement.scrollWidth")
    if width > WIDTH:
        problems.append(f"{rel}: scrolls sideways ({width} px > {WIDTH} px)")
    no_alt = pg.evaluate("[...document.images].filter(i => !i.alt || !i.alt.trim() "
                         "|| /[.](png|jpe?g|svg)$/.test(i.alt)).length")  # a file name is no alt text
    if no_alt:
        problems.append(f"{rel}: {no_alt} image(s) without alt text")
    data = [u for u in pg.gradlab_requests if "/data/" in u]
    if data and not pg.locator("[data-gradlab-explorer]").count():
        problems.append(f"{rel}: loads explorer data without an explorer: {data[:2]}")
    return problems


def _phone_problems(pg, rel: str) -> list[str]:
    """The 390 px page just loaded: wider than the screen, or something in an article cut off."""
    r = pg.evaluate(OVERFLOW_JS)
    problems = [f"{rel} at {PHONE} px: {b}" for b in r["bad"]]
    if r["scroll"] > r["client"]:
        problems.insert(0, f"{rel} at {PHONE} px: scrolls sideways ({r['scroll']} px > {r['client']} px)")
    return problems


def test_every_page_loads_clean_and_fits_a_phone_and_a_laptop(site, page):
    """One sweep over every page, each loaded once, fresh, on a 390 px phone: no page is wider
    than the screen and nothing in an article is cut off (code blocks, outputs and tables scroll
    inside their own box; issue 37). The same page widened to 1366 px: no sideways scroll; and
    from its load: no console error, failed request or other host, alt text on every image, no
    explorer data without an explorer. Waits as when these were two sweeps: the phone is read
    150 ms after load, the laptop 300 ms after load (MathJax typesets after load; the explorer's
    plots follow their box through a ResizeObserver, as the dark-mode test's phone does)."""
    laptop_problems, phone_problems = [], []
    for path in pages(site):
        rel = path.relative_to(site).as_posix()
        page.set_viewport_size({"width": PHONE, "height": 844})
        open_page(page, path, wait_ms=150)  # a fresh load at 390 px
        phone_problems += _phone_problems(page, rel)
        page.set_viewport_size({"width": WIDTH, "height": 900})
        page.wait_for_timeout(150)
        laptop_problems += _laptop_problems(page, rel)
    problems = laptop_problems[:40] + phone_problems[:40]  # neither width's list hides the other's
    assert not problems, "\n".join(problems)


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
        # one page per chapter source (chapters/src), counted apart from the site
        assert len(chapters) == len(list((ROOT / "chapters" / "src").glob("[0-9][0-9]-*.py"))) == 12, chapters
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
#: (page, Python class, grid, moves: control → value, each of which changes the plot). The site
#: draws gradlab's own view module (gradlab/widgets/static/explorer.js) over stored views.
SITE_EXPLORERS = [
    ("01-vanishing-exploding.html", "GradientExplorer", "GradientExplorer",
     [("depth", 50), ("activation", "relu"), ("initializer", "large_normal"), ("depth", 7),
      ("initializer", "he_normal"), ("activation", "sigmoid")]),
    ("05-beyond-the-source.html", "GradientExplorer", "GradientExplorer05",
     [("residual", False), ("norm", "batch"), ("norm", "none"), ("depth", 14), ("dtype", "float16"),
      ("loss_scale", 32768.0), ("activation", "relu"), ("initializer", "he_normal"), ("depth", 100)]),
    ("07-through-time.html", "TimeExplorer", "TimeExplorer",
     [("steps", 200), ("cell", "lstm"), ("recurrent_initializer", "normal_2"), ("input_scale", 0.01)]),
    ("09-transformers.html", "TransformerExplorer", "TransformerExplorer",
     [("num_layers", 12), ("norm_position", "pre"), ("num_layers", 24)]),
]
#: the report's numbers each grid is checked on
FIELDS = {"GradientExplorer": ("signal_norms", "weight_norms"),
          "GradientExplorer05": ("signal_norms", "weight_norms", "predicted_signal"),
          "TimeExplorer": ("time_step_norms",), "TransformerExplorer": ("layer_grad_norms",)}


@pytest.fixture(scope="session")
def site_engines():
    import gradlab as gl
    from tools.book import grids

    gl.setup(seed=0)
    return {g: grids.make_engine(g) for _p, _c, g, _m in SITE_EXPLORERS}


def explorer_page(page, site, lang, name="01-vanishing-exploding.html", grid="GradientExplorer"):
    open_page(page, site / lang / name, 0)
    host = page.locator(f'[data-gradlab-site="{grid}"]')
    assert host.count() == 1, f"{lang}/{name}: no site explorer for {grid}"
    root = host.locator("[data-gradlab-explorer][data-report]")
    root.wait_for(state="attached", timeout=30_000)
    root.scroll_into_view_if_needed()
    return host, root


def plot_png(root) -> bytes:
    return root.locator(".gradlab-plots").screenshot()


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(("name", "cls", "grid", "moves"), SITE_EXPLORERS, ids=[g for _p, _c, g, _m in SITE_EXPLORERS])
def test_site_explorer_follows_its_controls_and_equals_the_engine(site, page, site_engines, lang, name, cls, grid,
                                                                   moves):
    from tools.book import grids
    from tools.book.engines import i18n

    host, root = explorer_page(page, site, lang, name, grid)
    assert root.get_attribute("data-gradlab-explorer") == cls
    note = host.locator(".gradlab-kfx-note").text_content()
    assert ("settings" in note) if lang == "en" else ("设置" in note), note  # says what it covers
    i18n.set_language(lang)
    try:
        ex = grids.make_explorer(grid, site_engines[grid])
        before = plot_png(root)
        for control, value in moves:
            view.set_control(root, control, value)
            rep = view.wait_report(page, root, {control: value}, timeout_ms=5_000)  # no kernel: at once
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            after = plot_png(root)
            assert after != before, f"{lang}/{name}: moving {control} to {value} did not change the plot"
            before = after
            want = grids.recompute(grid, site_engines[grid], rep["settings"])
            for f in FIELDS[grid]:
                if want[f] is None:
                    assert rep[f] is None, (f, rep[f])
                else:
                    view.assert_close(f, rep[f], want[f], rtol=RTOL)
            assert rep["status"] == want["status"]
            # the status line is the kernel's, in this language
            ex.set(**{k: rep["settings"][k] for k, _v in moves})
            assert rep["status_text"] == ex.status_text
            assert root.locator(".gradlab-status").text_content() == rep["status_text"] != ""
    finally:
        i18n.set_language("en")
    assert not page.gradlab_log, page.gradlab_log


def test_site_explorer_keyboard(site, page):
    _host, root = explorer_page(page, site, "en")
    depth = view.control(root, "depth")
    depth.focus()
    page.keyboard.press("ArrowRight")
    assert view.report(root)["settings"]["depth"] == 21
    page.keyboard.press("Tab")  # to the activation select
    assert page.evaluate("document.activeElement.name") == "activation"
    page.keyboard.press("ArrowDown")
    assert view.report(root)["settings"]["activation"] == "tanh"  # linear, sigmoid, tanh, ...: the next one
    plot = root.locator(".gradlab-plot").first
    assert plot.get_attribute("role") == "img" and "depth 21" in plot.get_attribute("aria-label")


def test_site_explorer_works_from_a_file_url_without_any_request(site, page):
    """Opened from file://, the page imports the module's inline text from a blob: nothing is
    fetched but the page's own files."""
    _host, root = explorer_page(page, site, "en")
    assert all(u.startswith(("file:", "data:", "blob:")) for u in page.gradlab_requests), page.gradlab_requests
    view.set_control(root, "depth", 60)
    assert view.report(root)["settings"]["depth"] == 60


@pytest.mark.parametrize("lang", LANGS)
def test_site_explorer_in_dark_mode_and_on_a_phone(site, page, lang):
    _host, root = explorer_page(page, site, lang)
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    page.wait_for_timeout(300)
    bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
    c = view.colors(root)
    assert view.contrast(c["status"], bg) >= 4.5, (c, bg)
    for sw in c["legend"]:
        assert view.contrast(sw, bg) >= 3.0, (sw, bg)  # graphics: 3:1
    page.evaluate("document.documentElement.dataset.theme = 'light'")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(300)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= 390, f"the page scrolls sideways at 390 px ({wide} px)"
    box = root.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 391, box


LATENCY_PAGES = [(p, g) for p, _c, g, _m in SITE_EXPLORERS]


@pytest.mark.parametrize(("name", "grid"), LATENCY_PAGES, ids=[g for _n, g in LATENCY_PAGES])
def test_explorer_latency_benchmark(site, page, name, grid):
    """Change-to-frame latency in the page: printed (a benchmark, not a timed assertion).

    40 changes alternate between the explorer's first slider and its first select; each is
    timed from the input event to the frame that showed its view (``data-latency-ms``).
    """
    _host, root = explorer_page(page, site, "en", name, grid)
    ms = root.evaluate("""async (root) => {
        const slider = root.querySelector('input[type=range]:not([disabled])'), sel = root.querySelector('select');
        const out = [];
        for (let k = 0; k < 40; k++) {
            const el = k % 2 ? slider : sel;
            if (el === slider) slider.value = String((k * 37) % (Number(slider.max) + 1));
            else sel.selectedIndex = (sel.selectedIndex + 1) % sel.options.length;
            root.removeAttribute('data-latency-ms');
            el.dispatchEvent(new Event(el === slider ? 'input' : 'change', {bubbles: true}));
            const t = performance.now();
            while (!root.hasAttribute('data-latency-ms') && performance.now() - t < 2000)
                await new Promise(r => requestAnimationFrame(r));
            out.push(Number(root.getAttribute('data-latency-ms')));
        }
        return out;
    }""")
    assert len(ms) == 40 and all(m > 0 for m in ms), ms
    print(f"\n{grid} change-to-frame latency: median {statistics.median(ms):.1f} ms, "
          f"max {max(ms):.1f} ms over {len(ms)} changes")


def test_site_size(site):
    total = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    data = sum(f.stat().st_size for f in (site / "data").glob("*"))
    print(f"\nbook site: {total / 1e6:.1f} MB, explorer data {data / 1e6:.1f} MB")
    assert total <= 150e6


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
