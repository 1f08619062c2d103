"""Build one PDF per edition from the stored notebooks (``make pdf``): build/pdf/gradlab-<lang>.pdf.

Route: each edition is rendered as one HTML document (tools/book/pdf_html.py: the notebooks'
stored outputs, never executed) and printed by the Chromium the browser tests already use,
through Playwright; pypdf then adds the outline. Against Sphinx's LaTeX builder with XeLaTeX
and xeCJK (d2l's route) this installs nothing new (texlive-xetex with texlive-lang-chinese is
537 MB from Debian without its recommends, 1.5 GB with them), and Chromium picks a font for
every character the way a browser does (XeLaTeX drops a glyph that the chosen font lacks);
the cost is TeX's finer line breaking of English text.

Stages, one line each: (1) render both editions (cover, contents, chapters); (2) print each
in Chromium once MathJax has typeset the math (both editions at once); (3) read the page of
every heading from the named destinations Chromium writes for link targets, fill in the
contents' page numbers and print only the front pages again (the numbers sit in boxes of a
fixed width, so nothing moves: each reprinted page must hold the first print's text, numbers
aside); (4) with pypdf, put those pages in place of the first ones (keeping their links), map
the radicals Chromium writes into the text layer back to ideographs (see ``RADICALS``), add
the outline (chapters, sections, subsections), the title and the language; (5) copy the PDFs
into the built site (build/book/<lang>/gradlab-<lang>.pdf) when it exists. ``--place`` does
only (5). Exit status 1 on a link that does not resolve, a heading without a page, an image
that does not load or a formula MathJax cannot typeset.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import html
import io
import logging
import re
import shutil
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.book.pdf_html import Chapter, pygments_css, render_edition  # noqa: E402

OUT = ROOT / "build" / "pdf"
SITE = ROOT / "build" / "book"
CSS = Path(__file__).with_name("pdf.css")
MATHJAX = ROOT / "book" / "_static" / "vendor" / "mathjax" / "tex-chtml.js"
LANGS = ("en", "zh")
#: headings down to this level go into the outline; the contents list chapters and sections
OUTLINE_DEPTH = 3
TOC_DEPTH = 2
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--font-render-hinting=none"]
TEXTS = {
    "en": {"title": "gradlab", "subtitle": "Gradient problems in TensorFlow 2: an interactive workbook",
           "contents": "Contents", "edition": "English edition",
           "colophon": ("Printed from the notebooks' stored outputs (TensorFlow {tf}, Keras {keras}; "
                        "notebooks of {date}); nothing was re-executed. The explorers appear as pictures "
                        "of their stored state: move them in the book site (<code>make book</code>) or "
                        "in JupyterLab (<code>make lab</code>). The Chinese edition is "
                        "<code>gradlab-zh.pdf</code>.")},
    "zh": {"title": "gradlab", "subtitle": "TensorFlow 2 梯度问题交互手册",
           "contents": "目录", "edition": "中文版",
           "colophon": ("本书由 notebook 中保存的输出排印而成（TensorFlow {tf}，Keras {keras}；notebook 日期为 "
                        "{date}），没有重新执行任何单元格。探索器以其保存时状态的图片呈现：要拖动它们，请使用本书网站"
                        "（<code>make book</code>）或 JupyterLab（<code>make lab</code>）。英文版为 "
                        "<code>gradlab-en.pdf</code>。")},
}


logging.getLogger("pypdf").setLevel(logging.ERROR)  # "Object count exceeds trailer size": Chromium's xref, harmless


def log(msg: str) -> None:
    print(f"[pdf] {msg}", flush=True)


def pinned(name: str) -> str:
    m = re.search(rf"^{re.escape(name)}==(\S+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M)
    return m.group(1) if m else "?"


def notebooks_date(lang: str) -> str:
    folder = "chapters/zh" if lang == "zh" else "chapters"
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", f"{folder}/[0-9]*.ipynb"], cwd=ROOT,
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    if out:
        return out
    newest = max(p.stat().st_mtime for p in (ROOT / folder).glob("[0-9]*.ipynb"))
    return time.strftime("%Y-%m-%d", time.gmtime(newest))


# ----------------------------------------------------------------------------- the document
def cover(lang: str) -> str:
    t = TEXTS[lang]
    colophon = t["colophon"].format(tf=pinned("tensorflow"), keras=pinned("keras"), date=notebooks_date(lang))
    return (f'<section class="cover"><h1>{t["title"]}</h1><p class="subtitle">{html.escape(t["subtitle"])}</p>'
            f'<p>{t["edition"]}</p><p class="colophon">{colophon}</p></section>')


def toc(lang: str, chapters: list[Chapter]) -> str:
    rows = []
    for ch in chapters:
        rows.append(f'<li class="ch"><a href="#{ch.headings[0].id}"><span class="num">{ch.key}</span>'
                    f'<span class="t">{html.escape(ch.title)}</span><span class="fill"></span>'
                    f'<span class="pg" data-dest="{ch.headings[0].id}"></span></a></li>')
        for h in ch.headings[1:]:
            if h.level <= TOC_DEPTH:
                rows.append(f'<li class="sec"><a href="#{h.id}"><span class="t">{html.escape(h.text)}</span>'
                            f'<span class="fill"></span><span class="pg" data-dest="{h.id}"></span></a></li>')
    return f'<nav class="toc"><h1>{TEXTS[lang]["contents"]}</h1><ol>{"".join(rows)}</ol></nav>'


MATHJAX_CONFIG = """<script>
window.MathJax = {tex: {inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]]},
  options: {enableMenu: false}, chtml: {displayAlign: "center"}};
</script>"""


def document(lang: str) -> tuple[Path, list[Chapter]]:
    """Write build/pdf/<lang>/book.html (with its images beside it); returns it and the chapters."""
    folder = OUT / lang
    if folder.exists():
        shutil.rmtree(folder)
    chapters, unresolved = render_edition(lang, folder / "img")
    if unresolved:
        raise SystemExit(f"[pdf] {lang}: links that do not resolve: {unresolved[:10]}")
    body = [cover(lang), toc(lang, chapters)]
    for ch in chapters:
        body.append(ch.body.replace('<section class="chapter"', f'<section class="chapter" data-key="{ch.key}"', 1)
                    .replace(">", f'><p class="chapter-number">{ch.key}</p>', 1))
    page = ("<!DOCTYPE html>\n"
            f'<html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
            f"<title>{TEXTS[lang]['title']} · {html.escape(TEXTS[lang]['subtitle'])}</title>"
            f'<link rel="stylesheet" href="{CSS.as_uri()}"><style>{pygments_css()}</style>'
            f'{MATHJAX_CONFIG}<script src="{MATHJAX.as_uri()}"></script></head>'
            f"<body>{''.join(body)}</body></html>\n")
    path = folder / "book.html"
    path.write_text(page, encoding="utf-8")
    return path, chapters


# ----------------------------------------------------------------------------- printing
async def ready(page) -> None:
    """Wait for MathJax's typesetting, the web fonts and every image."""
    await page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=120_000)
    await page.evaluate("MathJax.startup.promise")
    await page.evaluate("document.fonts.ready.then(() => true)")
    await page.wait_for_function("Array.from(document.images).every(i => i.complete)", timeout=120_000)
    failed = await page.evaluate("Array.from(document.images).filter(i => !i.naturalWidth).map(i => i.src)")
    if failed:
        raise SystemExit(f"[pdf] images that did not load: {failed[:5]}")
    errors = await page.evaluate("document.querySelectorAll('mjx-merror, .MathJax_Error').length")
    if errors:
        raise SystemExit(f"[pdf] MathJax could not typeset {errors} formulas")


async def print_pdf(page, pages: str = "") -> bytes:
    return await page.pdf(prefer_css_page_size=True, print_background=True, page_ranges=pages)


async def print_edition(browser, lang: str, path: Path, chapters: list[Chapter]) -> tuple[bytes, bytes, dict]:
    """The whole book with empty page numbers in its contents, then its front pages again with them."""
    t0 = time.time()
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(path.as_uri(), wait_until="load", timeout=600_000)
    await ready(page)
    whole = await print_pdf(page)
    dests = destinations(whole)
    wanted = [h.id for ch in chapters for h in ch.headings if h.level <= OUTLINE_DEPTH]
    missing = [i for i in wanted if i not in dests]
    if missing:
        raise SystemExit(f"[pdf] {lang}: headings without a destination: {missing[:10]}")
    await page.evaluate("""(numbers) => {
        for (const el of document.querySelectorAll('.toc .pg')) el.textContent = numbers[el.dataset.dest];
    }""", {k: v[0] + 1 for k, v in dests.items()})
    front_pages = dests[chapters[0].headings[0].id][0]
    front = await print_pdf(page, f"1-{front_pages}")
    await context.close()
    log(f"{lang}: printed in {time.time() - t0:.0f} s")
    return whole, front, dests


def destinations(pdf: bytes) -> dict[str, tuple[int, float, float]]:
    """``{id: (page index, left, top)}`` of the named destinations Chromium wrote."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    out = {}
    for name, dest in reader.named_destinations.items():
        out[str(name).lstrip("/")] = (reader.get_destination_page_number(dest), float(dest.left or 0),
                                      float(dest.top or 0))
    return out


def splice(writer, front) -> None:
    """Put the front pages printed with their page numbers in place of the first ones, keeping
    the first pages' links (the contents' entries: same layout, so the same rectangles)."""
    from pypdf.generic import NameObject

    n = len(front.pages)
    olds = [writer.pages[i] for i in range(n)]
    for i, (old, new) in enumerate(zip(olds, front.pages, strict=True)):
        if DIGITS.sub("", old.extract_text()) != DIGITS.sub("", new.extract_text()):
            raise SystemExit(f"[pdf] front page {i + 1} differs from the first print beyond its page numbers")
        added = writer.insert_page(new, i)
        if "/Annots" in old:
            added[NameObject("/Annots")] = old["/Annots"]
    for _ in range(n):
        writer.remove_page(n)


DIGITS = re.compile(r"[\d\s]+")


#: Kangxi radicals and the CJK radicals supplement: Chromium's ToUnicode maps a character whose glyph
#: a radical shares (言 U+8A00 and ⾔ U+2F94 are one glyph in Noto CJK) to the radical, so the text
#: copied or searched would hold ⾔ where the book says 言. The workbook uses no radicals.
RADICALS = re.compile("[\u2e80-\u2fdf]")
HEX = r"<([0-9A-Fa-f]+)>"


def _utf16(hexstr: str) -> str:
    return bytes.fromhex(hexstr).decode("utf-16-be", errors="replace")


def _hex16(text: str) -> str:
    return text.encode("utf-16-be").hex().upper()


def fixed_cmap(text: str) -> str | None:
    """A ToUnicode CMap with each radical replaced by its unified ideograph (NFKC), or None."""
    mapping: dict[str, str] = {}
    for block in re.findall(r"beginbfchar(.*?)endbfchar", text, re.S):
        for src, dst in re.findall(HEX + r"\s*" + HEX, block):
            mapping[src] = _utf16(dst)
    for block in re.findall(r"beginbfrange(.*?)endbfrange", text, re.S):
        for lo, hi, rest in re.findall(HEX + r"\s*" + HEX + r"\s*(<[0-9A-Fa-f]+>|\[[^\]]*\])", block):
            width, a, b = len(lo), int(lo, 16), int(hi, 16)
            dsts = re.findall(HEX, rest)
            for k in range(b - a + 1):
                if rest.startswith("["):
                    value = _utf16(dsts[k]) if k < len(dsts) else ""
                else:
                    base = _utf16(dsts[0])
                    value = base[:-1] + chr(ord(base[-1]) + k) if base else ""
                mapping[f"{a + k:0{width}X}"] = value
    if not any(RADICALS.search(v) for v in mapping.values()):
        return None
    head = text[: text.index("endcodespacerange") + len("endcodespacerange")]
    tail = text[text.index("endcmap"):]
    table = radical_table()
    items = [(src, "".join(table.get(c, unicodedata.normalize("NFKC", c)) for c in v) if RADICALS.search(v) else v)
             for src, v in mapping.items()]
    blocks = []
    for i in range(0, len(items), 100):
        chunk = items[i:i + 100]
        blocks.append(f"{len(chunk)} beginbfchar\n" + "".join(f"<{s}> <{_hex16(v)}>\n" for s, v in chunk)
                      + "endbfchar\n")
    return head + "\n" + "".join(blocks) + tail


@functools.cache
def radical_table() -> dict[str, str]:
    """Radical -> the ideograph that shares its glyph in the CJK fonts Chromium used (Noto CJK SC).

    NFKC maps the Kangxi radicals (U+2F00-2FD5) but not the supplement (⻅ U+2EC5 is 见)."""
    from fontTools.ttLib import TTFont

    table: dict[str, str] = {}
    for family in ("Noto Sans CJK SC", "Noto Serif CJK SC", "Noto Sans Mono CJK SC"):
        found = subprocess.run(["fc-match", "-f", "%{file}:%{index}", family], capture_output=True, text=True).stdout
        path, _, index = found.rpartition(":")
        if not path:
            continue
        cmap = TTFont(path, fontNumber=int(index or 0), lazy=True).getBestCmap()
        by_glyph: dict[str, int] = {}
        for cp, glyph in sorted(cmap.items()):
            if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF:
                by_glyph.setdefault(glyph, cp)
        for cp, glyph in cmap.items():
            if 0x2E80 <= cp <= 0x2FDF and glyph in by_glyph:
                table.setdefault(chr(cp), chr(by_glyph[glyph]))
    return table


def fix_radicals(writer) -> int:
    """Rewrite every font's ToUnicode map that names a radical; returns how many were rewritten."""
    seen, fixed = set(), 0

    def walk(resources):
        nonlocal fixed
        if resources is None:
            return
        resources = resources.get_object()
        for font in (resources.get("/Font") or {}).values():
            ref = getattr(font, "idnum", None)
            font = font.get_object()
            if ref in seen:
                continue
            seen.add(ref)
            if "/ToUnicode" in font:
                stream = font["/ToUnicode"].get_object()
                new = fixed_cmap(stream.get_data().decode("latin-1"))
                if new is not None:
                    stream.set_data(new.encode("latin-1"))
                    fixed += 1
            walk(font.get("/Resources"))
        for xobj in (resources.get("/XObject") or {}).values():
            ref = getattr(xobj, "idnum", None)
            if ref in seen:
                continue
            seen.add(ref)
            walk(xobj.get_object().get("/Resources"))

    for page in writer.pages:
        walk(page.get("/Resources"))
    return fixed


def finish(whole: bytes, front: bytes, lang: str, chapters: list[Chapter], dests: dict, out: Path) -> int:
    """The numbered front pages, the outline, title and language; returns the number of pages."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit, NameObject, TextStringObject

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(whole)))
    splice(writer, PdfReader(io.BytesIO(front)))
    fix_radicals(writer)
    for ch in chapters:
        parents: dict[int, object] = {}
        for h in ch.headings:
            if h.level > OUTLINE_DEPTH:
                continue
            page, left, top = dests[h.id]
            title = f"{ch.key} · {h.text}" if h.level == 1 else h.text
            parent = next((parents[k] for k in range(h.level - 1, 0, -1) if k in parents), None)
            item = writer.add_outline_item(title=title, page_number=page, parent=parent, fit=Fit.xyz(left, top), is_open=False)
            parents = {k: v for k, v in parents.items() if k < h.level}
            parents[h.level] = item
    t = TEXTS[lang]
    writer.add_metadata({"/Title": f"{t['title']} · {t['subtitle']}", "/Author": "gradlab authors",
                         "/Subject": t["edition"]})
    writer._root_object[NameObject("/Lang")] = TextStringObject("zh-CN" if lang == "zh" else "en")
    writer.page_mode = "/UseOutlines"
    writer.compress_identical_objects(remove_duplicates=True, remove_unreferenced=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        writer.write(fh)
    return len(writer.pages)


def chromium() -> str:
    import os

    env = os.environ.get("GRADLAB_CHROMIUM")
    for candidate in ([env] if env else []) + ["/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(candidate) if candidate else None
        if path:
            return path
    raise SystemExit("[pdf] no Chromium found: `apt-get install -y chromium` (.ci/run does it), "
                     "or set GRADLAB_CHROMIUM")


async def print_all(docs: dict) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium(), headless=True, args=CHROMIUM_ARGS)
        try:
            results = await asyncio.gather(*(print_edition(browser, lang, path, chs)
                                             for lang, (path, chs) in docs.items()))
        finally:
            await browser.close()
    return dict(zip(docs, results, strict=True))


def place() -> list[Path]:
    """Copy each built PDF into the built site, beside its edition's pages."""
    placed = []
    for lang in LANGS:
        pdf, site = OUT / f"gradlab-{lang}.pdf", SITE / lang
        if pdf.exists() and site.is_dir():
            shutil.copy2(pdf, site / pdf.name)
            placed.append(site / pdf.name)
    return placed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", choices=LANGS, action="append", help="one edition (default: both)")
    ap.add_argument("--place", action="store_true", help="only copy built PDFs into build/book/<lang>/")
    args = ap.parse_args(argv)
    if args.place:
        for p in place():
            log(f"placed {p.relative_to(ROOT)}")
        return 0
    t0 = time.time()
    langs = args.lang or list(LANGS)
    docs = {}
    for lang in langs:
        docs[lang] = document(lang)
        chs = docs[lang][1]
        log(f"{lang}: rendered {len(chs)} chapters, {sum(len(c.figures) for c in chs)} figures, "
            f"{sum(c.explorers for c in chs)} explorers, {time.time() - t0:.0f} s")
    printed = asyncio.run(print_all(docs))
    for lang, (whole, front, dests) in printed.items():
        out = OUT / f"gradlab-{lang}.pdf"
        (OUT / lang / "whole.pdf").write_bytes(whole)  # the two prints, for a look when a check fails
        (OUT / lang / "front.pdf").write_bytes(front)
        pages = finish(whole, front, lang, docs[lang][1], dests, out)
        log(f"{lang}: {out.relative_to(ROOT)}: {pages} pages, {out.stat().st_size / 1e6:.1f} MB")
    for p in place():
        log(f"placed {p.relative_to(ROOT)}")
    log(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
