"""The book site as a front door, read in headless Chromium as a reader would (issue 37).

Search ranks the chapter whose title or headings hold the term first, with a section and a
snippet in each result; no page scrolls sideways on a 390 px phone (checked in test_book.py's
sweep of every page, with the 1366 px checks); the printed page has no bars or controls,
wraps its code and shows the explorer as its stored picture; the landing pages say what the
book is, where to start, what a reader needs, how long, how to run it, and offer the notebooks
(and the PDF, when built) with the outputs' TensorFlow version and date; the API reference
and the glossary are pages; the theme speaks Chinese on Chinese pages; one search box, one
navigation row, and no runaway heading ids.

Uses the ``site`` (built once per session) and ``page`` fixtures of test_book.py.
"""

from __future__ import annotations

import html.parser
import re
import subprocess
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from tests.browser.test_book import LANGS, PHONE, open_page, page, pages  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser

# ----------------------------------------------------------------------------- search
#: (edition, what a learner types, the chapter that must come first: its title or headings
#: hold the term, while the chapters Sphinx ranked first only mention it or tie alphabetically)
SEARCHES = [
    ("en", "exploding", "01-vanishing-exploding"),  # was 05 (a heading says "explodes")
    ("en", "clip", "01-vanishing-exploding"),  # was 10 (7 of 01's headings are about clipping)
    ("en", "NaN", "06-none-and-nan"),  # was 04 (06's title holds NaN)
    ("zh", "梯度爆炸", "01-vanishing-exploding"),  # was 07
    ("zh", "裁剪", "01-vanishing-exploding"),  # was 08
    ("zh", "雅可比", "02-jacobians"),  # was 04
]


def search(pg, site_dir: Path, lang: str, query: str) -> list[dict]:
    pg.goto((site_dir / lang / "search.html").as_uri() + "?q=" + urllib.parse.quote(query))
    pg.wait_for_selector("#search-results ul li a", timeout=20_000)
    pg.wait_for_function("() => /\\d/.test(document.querySelector('#search-results .search-summary')"
                         ".textContent)", timeout=20_000)  # every result listed
    return pg.evaluate("""[...document.querySelectorAll('#search-results ul.search > li')].map(li => ({
        href: li.querySelector('a').getAttribute('href'), title: li.querySelector('a').textContent,
        snippet: (li.querySelector(':scope > span') || {textContent: ''}).textContent}))""")


@pytest.mark.parametrize(("lang", "query", "chapter"), SEARCHES, ids=[q for _l, q, _c in SEARCHES])
def test_search_ranks_titles_and_headings_first(site, page, lang, query, chapter):  # noqa: F811
    results = search(page, site, lang, query)
    first = results[0]["href"].split("#")[0]
    assert first == f"{chapter}.html", [r["href"] for r in results[:5]]
    term = query.lower()[:4]  # the stem: "clip" in "clipping", "expl" in "exploding"
    top = (results[0]["title"] + results[0]["snippet"]).lower()
    assert term in top, results[0]
    for r in results[:8]:  # each result names a section (page › heading) or shows a snippet
        assert "#" in r["href"] and ("›" in r["title"] or len(r["snippet"].strip(" ()")) >= 20), r
    assert not [line for line in page.gradlab_log if "error" in line], page.gradlab_log


# ----------------------------------------------------------------------------- 390 px
# No page scrolls sideways on a 390 px phone, nothing in an article cut off: checked in the same
# sweep as the 1366 px checks, each page loaded once at 390 px, then widened to 1366 px
# (tests/browser/test_book.py::test_every_page_loads_clean_and_fits_a_phone_and_a_laptop).


# ----------------------------------------------------------------------------- print
@pytest.mark.parametrize("lang", LANGS)
def test_printed_chapter(site, page, lang):  # noqa: F811
    """Print media: no bars, sidebars, search or explorer controls; every code block and
    output wraps inside its box; the explorer prints as its stored picture; no figure splits."""
    open_page(page, site / lang / "01-vanishing-exploding.html", 0)
    page.wait_for_selector('[data-gradlab-site][data-ready] [data-gradlab-explorer="GradientExplorer"]')
    static = page.locator(".tag_gradlab-explorer-static .cell_output img").first
    assert not static.is_visible()  # on screen, the live explorer replaces its picture
    page.emulate_media(media="print")
    shown = page.evaluate("""() => {
        const visible = (sel) => [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length
            && getComputedStyle(e).visibility !== 'hidden').length;
        return {bar: visible('.gradlab-bar'), header: visible('.bd-header, .bd-header-article'),
                sidebars: visible('.bd-sidebar-primary, .bd-sidebar-secondary'),
                search: visible('.search-button, .search-button-field'), copy: visible('button.copybtn'),
                controls: visible('.gradlab-kfx, .gradlab-kfx-controls, .gradlab-kfx input, .gradlab-kfx select'),
                run: visible('.gradlab-run'), footer: visible('.prev-next-area, .bd-footer')};
    }""")
    assert shown == dict.fromkeys(shown, 0), shown
    wide = page.evaluate("""() => [...document.querySelectorAll('.bd-article pre')]
        .filter(p => p.getClientRects().length && p.scrollWidth > p.clientWidth + 1)
        .map(p => `${p.scrollWidth} > ${p.clientWidth}: ${p.textContent.slice(0, 60)}`)""")
    assert not wide, f"{len(wide)} code blocks wider than their box in print: {wide[:5]}"
    assert static.is_visible() and static.evaluate("i => i.complete && i.naturalWidth > 0")
    breaks = page.evaluate("""() => [...document.querySelectorAll('.bd-article img')]
        .map(i => getComputedStyle(i).breakInside)""")
    assert breaks and set(breaks) == {"avoid"}, set(breaks)


# ----------------------------------------------------------------------------- landing pages
def _pin(name: str) -> str:
    return re.search(rf"^{name}==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)


def _git_date(rel: str) -> str | None:
    r = subprocess.run(["git", "log", "-1", "--format=%cs", "--", f"{rel}/[0-9][0-9]-*.ipynb"],
                       cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or None


@pytest.mark.parametrize("lang", LANGS)
def test_edition_landing_page(site, page, lang):  # noqa: F811
    open_page(page, site / lang / "index.html", 0)
    text = page.locator(".bd-article").inner_text()
    words = {"en": ["Start here", "What you need", "How long", "How to run it", "Downloads", "make lab",
                    "No GPU", "about 80 minutes", "00 · Introduction"],
             "zh": ["从这里开始", "需要什么", "需要多长时间", "如何运行", "下载", "make lab", "不需要 GPU",
                    "约 80 分钟", "00 · 引言"]}[lang]
    assert [w for w in words if w not in text] == [], text[:2000]
    assert f"TensorFlow {_pin('tensorflow')}" in text and f"Keras {_pin('keras')}" in text
    date = _git_date("chapters" if lang == "en" else "chapters/zh")
    assert date is None or date in text, date
    links = page.evaluate("[...document.querySelectorAll('.bd-article a')].map(a => a.getAttribute('href'))")
    zips = [h for h in links if h.endswith(".zip")]
    assert zips == [f"gradlab-{lang}-notebooks.zip"], links
    with zipfile.ZipFile(site / lang / zips[0]) as z:
        names = sorted(Path(n).name for n in z.namelist())
    src = ROOT / "chapters" / ("zh" if lang == "zh" else "")
    assert names == sorted(p.name for p in src.glob("[0-9][0-9]-*.ipynb")), names
    pdf = f"gradlab-{lang}.pdf"
    assert (pdf in links) == (site / lang / pdf).exists(), (pdf, links)  # linked when it was built
    for target in ("00-introduction.html", "api.html", "glossary.html", "04-summary.html"):
        assert any(h and h.split("#")[0] == target for h in links), (target, links)
    assert not page.gradlab_log, page.gradlab_log


def test_root_landing_page(site, page):  # noqa: F811
    open_page(page, site / "index.html", 0)
    cards = page.locator("section.edition")
    assert cards.count() == 2
    assert page.evaluate("getComputedStyle(document.body).fontFamily").startswith("system-ui")  # styled
    for lang in LANGS:
        card = page.locator(f'section.edition[lang="{lang}"]')
        hrefs = card.evaluate("c => [...c.querySelectorAll('a')].map(a => a.getAttribute('href'))")
        for want in (f"{lang}/index.html", f"{lang}/00-introduction.html", f"{lang}/gradlab-{lang}-notebooks.zip"):
            assert want in hrefs, (lang, hrefs)
        assert all((site / h).exists() for h in hrefs), hrefs
        assert _pin("tensorflow") in card.inner_text()
    assert not page.gradlab_log, page.gradlab_log


# ----------------------------------------------------------------------------- reference pages
@pytest.mark.parametrize("lang", LANGS)
def test_api_reference_and_glossary_are_pages(site, page, lang):  # noqa: F811
    open_page(page, site / lang / "api.html", 0)
    headings = page.evaluate("[...document.querySelectorAll('.bd-article h3')].map(h => h.textContent)")
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    want = [m for m in re.findall(r"^### `([a-z_]+)\(", api, re.M)]
    assert want and all(any(h.startswith(w + "(") for h in headings) for w in want), (want, headings[:5])
    open_page(page, site / lang / "glossary.html", 0)
    body = page.locator(".bd-article").inner_text()
    assert "梯度消失" in body and "vanishing gradient" in body and "雅可比矩阵" in body
    nav = page.evaluate("[...document.querySelectorAll('.bd-sidebar-primary a')].map(a => a.getAttribute('href'))")
    assert "api.html" in nav and any(h in ("#", "glossary.html") for h in nav), nav


# ----------------------------------------------------------------------------- theme, bars, anchors
THEME_EN = ("Color mode", "System Settings", "Toggle primary sidebar", "Toggle secondary sidebar")


def test_theme_speaks_chinese_on_chinese_pages(site, page):  # noqa: F811
    for path in sorted((site / "zh").glob("*.html")):
        text = path.read_text(encoding="utf-8")
        left = [s for s in THEME_EN if s in text]
        assert not left, f"zh/{path.name}: {left}"
    open_page(page, site / "zh" / "01-vanishing-exploding.html", 0)
    titles = page.evaluate("""() => ({mode: document.querySelector('.theme-switch-button').ariaLabel,
        primary: document.querySelector('.bd-header-article .primary-toggle').ariaLabel,
        auto: document.querySelector('.theme-change-button[data-mode=auto]').textContent.trim()})""")
    assert titles == {"mode": "颜色模式", "primary": "显示或隐藏章节导航", "auto": "跟随系统"}, titles
    en = (site / "en" / "01-vanishing-exploding.html").read_text(encoding="utf-8")
    assert all(s in en for s in THEME_EN[:3])  # the English pages keep the theme's English


@pytest.mark.parametrize("lang", LANGS)
def test_one_search_box_and_one_navigation_row(site, page, lang):  # noqa: F811
    for width in (1366, PHONE):
        page.set_viewport_size({"width": width, "height": 900})
        for name in ("01-vanishing-exploding.html", "index.html"):
            open_page(page, site / lang / name, 0)
            counts = page.evaluate("""() => {
                const visible = (sel) => [...document.querySelectorAll(sel)].filter(e => e.getClientRects().length
                    && getComputedStyle(e).visibility !== 'hidden').length;
                const navCell = [...document.querySelectorAll('.bd-article p')].filter(p =>
                    /[|｜]\\s*(Contents|目录)\\s*[|｜]/.test(p.textContent)).length;
                return {search: visible('.search-button-field, .bd-search input'), bars: visible('nav.gradlab-bar'),
                        footer: visible('.prev-next-area'), navCell};
            }""")
            assert counts["search"] <= 1 and counts["bars"] == 1 and counts["footer"] == 0, (width, name, counts)
            assert counts["navCell"] == 0, (width, name, counts)
            if width == 1366:
                assert counts["search"] == 1, (name, counts)
    open_page(page, site / lang / "01-vanishing-exploding.html", 0)
    bar = page.evaluate("""() => [...document.querySelectorAll('nav.gradlab-bar a')]
        .map(a => [a.className, a.getAttribute('href')])""")
    assert bar[:3] == [["gradlab-prev", "00-introduction.html"], ["gradlab-contents", "index.html"],
                       ["gradlab-next", "02-jacobians.html"]], bar


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"])


def test_heading_anchors_are_their_headings(site):  # noqa: F811
    """Every id is short (the print header's <h1> no longer swallows the table of contents
    up to the first real heading), and each chapter's H1 carries its Jupyter anchor."""
    for path in pages(site):
        p = _Ids()
        p.feed(path.read_text(encoding="utf-8"))
        long_ids = [i[:60] for i in p.ids if len(i) > 400]  # the longest heading (an API signature) is ~200
        assert not long_ids, f"{path.relative_to(site)}: {long_ids}"
    text = (site / "en" / "01-vanishing-exploding.html").read_text(encoding="utf-8")
    assert '<h1><span class="gradlab-anchor" id="Vanishing-and-exploding-gradients-·-梯度消失与梯度爆炸的检测与处理">' in text
