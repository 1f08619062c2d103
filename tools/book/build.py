"""Build the book site of both editions into build/book/ (``make book``).

Stages: (1) stage each edition's stored notebooks (never executed) under build/book-src/<lang>/
with their links rewritten to the built pages, a "run this chapter" box and, on explorer
chapters, the kernel-free explorer's mount; (2) Sphinx + MyST-NB + sphinx-book-theme, one
build per language, both at once; (3) post-process the pages: Jupyter-style heading anchors
(the notebooks link to ``#Heading-text``), the language switch and the troubleshooting link
on every page, figure alt text; (4) the explorers' data as scripts under build/book/data/,
and the root index.html. One line per stage; exit status 1 on a Sphinx error.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.book import landing  # noqa: E402
from tools.book.explorers import DATA, EXPLORERS, copy_assets, inline_module, mount_html  # noqa: E402

OUT = ROOT / "build" / "book"
SRC = ROOT / "build" / "book-src"
BOOK = ROOT / "book"
LANGS = ("en", "zh")
OTHER = {"en": "zh", "zh": "en"}
CHAPTERS = {"en": ROOT / "chapters", "zh": ROOT / "chapters" / "zh"}
#: the troubleshooting guide: a heading of chapter 04 in each edition (Jupyter-style anchor)
TROUBLESHOOTING = {"en": "Troubleshoot a training problem · 常见问题排查", "zh": "常见问题排查"}
TEXTS = {
    "en": {"switch": "中文", "switch_title": "阅读本页的中文版", "troubleshoot": "Troubleshooting guide",
           "run_title": "Run this chapter",
           "run": ("In a clone of the repository, `make lab` installs everything once and starts "
                   "JupyterLab (127.0.0.1, token); open `{path}` and choose *Run All Cells*."),
           "download": "Download the notebook ({name})",
           "bar": "Chapter navigation", "prev": "Previous", "next": "Next", "contents": "Contents"},
    "zh": {"switch": "English", "switch_title": "Read this page in English", "troubleshoot": "常见问题排查",
           "run_title": "运行本章",
           "run": ("在仓库的克隆中，`make lab` 会先安装一次所需的一切，再启动 JupyterLab（127.0.0.1，"
                   "带令牌）；打开 `{path}`，选择 *Run All Cells*（运行全部单元格）。"),
           "download": "下载本章的 notebook（{name}）",
           "bar": "章节导航", "prev": "上一章", "next": "下一章", "contents": "目录"},
}
LINK = re.compile(r"\]\(\s*(?P<path>[^)\s#]*?\.ipynb)?(?P<frag>#[^)\s]*)?\s*\)")


def log(msg: str) -> None:
    print(f"[book] {msg}", flush=True)


def chapters(lang: str) -> list[Path]:
    return sorted(CHAPTERS[lang].glob("[0-9][0-9]-*.ipynb"))


def page_of(path: str, lang: str) -> str:
    """A notebook link (``zh/01-x.ipynb``, ``../01-x.ipynb``, ``01-x.ipynb``) as a built page."""
    name = Path(path).name[: -len(".ipynb")] + ".html"
    if lang == "en" and path.startswith("zh/"):
        return f"../zh/{name}"
    if lang == "zh" and path.startswith("../"):
        return f"../en/{name}"
    return name


def rewrite_links(text: str, lang: str) -> str:
    def sub(m):
        path, frag = m.group("path"), m.group("frag") or ""
        if path is None:
            return m.group(0)
        return f"]({page_of(path, lang)}{frag})"

    return LINK.sub(sub, text)


def md_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def run_box(lang: str, nb: Path) -> str:
    t = TEXTS[lang]
    rel = nb.relative_to(ROOT).as_posix()
    return (f":::{{admonition}} {t['run_title']}\n:class: tip no-search gradlab-run\n\n"
            f"{t['run'].format(path=rel)}\n\n"
            f"{{download}}`{t['download'].format(name=nb.name)} <_notebooks/{nb.name}>`\n:::\n")


def stage(lang: str, facts: dict) -> list[str]:
    """Copy and adapt one edition's notebooks; returns the page names."""
    dst = SRC / lang
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "_notebooks").mkdir(parents=True)
    names = []
    for nb_path in chapters(lang):
        shutil.copy2(nb_path, dst / "_notebooks" / nb_path.name)
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        cells, placed = [], set()
        for i, cell in enumerate(nb["cells"]):
            if cell.get("metadata", {}).get("gradlab_nav"):
                continue  # the notebook's own "< previous | contents | next >": the page's bar says it
            if cell["cell_type"] == "markdown":
                src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                cell = dict(cell, source=rewrite_links(src, lang))
            cell.get("metadata", {}).pop("jupyter", None)  # solutions: shown, as in a rendered notebook
            cells.append(cell)
            if i == 0:
                cells.append(md_cell(run_box(lang, nb_path), "gradlab-run-box"))
            if cell["cell_type"] == "code":
                src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                for key, spec in EXPLORERS.items():
                    if spec.chapter == nb_path.name[:2] and spec.anchor in src and key not in placed:
                        if not (DATA / f"{spec.data}.json").exists():
                            log(f"no grid for {key} ({spec.data}): run `make book-data`; the page keeps its figure")
                            placed.add(key)
                            continue
                        # the cell's stored picture: hidden once the live view is drawn, printed instead of it
                        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
                        if "gradlab-explorer-static" not in tags:
                            tags.append("gradlab-explorer-static")
                        cells.append(md_cell(mount_html(spec, lang), f"gradlab-explorer-{key}"))
                        placed.add(key)
        nb["cells"] = cells
        nb.setdefault("metadata", {}).pop("widgets", None)
        (dst / nb_path.name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        names.append(nb_path.stem)
    for name, text in reference_pages(lang).items():
        (dst / f"{name}.md").write_text(text, encoding="utf-8")
    (dst / "index.md").write_text(landing.landing_md(lang, names, titles_of(lang), facts), encoding="utf-8")
    return names


def titles_of(lang: str) -> dict[str, str]:
    """Each chapter's H1, as its first markdown cell writes it."""
    out = {}
    for nb_path in chapters(lang):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            m = re.match(r"#\s+(.+)", src.strip())
            if cell["cell_type"] == "markdown" and m:
                out[nb_path.stem] = m.group(1).strip()
                break
    return out


API = ROOT / "docs" / "api.md"
MD_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)\s]+\.md)\)")
REFERENCE_NOTE = {
    "en": {"api": "", "glossary": ""},
    "zh": {"api": ("> gradlab 的 API 参考（英文原文，`docs/api.md`）：`gradlab.__all__` 中可以带到你自己项目里的"
                   "工具，每个都附有可运行的示例。\n\n"),
           "glossary": ""},
}


def reference_pages(lang: str) -> dict[str, str]:
    """gradlab's API reference (docs/api.md) and the Chinese edition's glossary, as pages of
    both editions; a link to a Markdown file the site does not publish keeps its text."""
    out = {}
    for name, path in (("api", API), ("glossary", GLOSSARY)):
        text = MD_LINK.sub(lambda m: m.group(1), path.read_text(encoding="utf-8"))
        head, _, body = text.partition("\n")
        out[name] = f"{head}\n\n{REFERENCE_NOTE[lang][name]}{body}"
    return out


GLOSSARY = ROOT / "chapters" / "zh" / "GLOSSARY.md"
CJK = re.compile(r"[\u4e00-\u9fff]{2,}")


def zh_dictionary() -> Path:
    """A jieba user dictionary: the Chinese terms of the glossary's table (梯度消失, 梯度爆炸, ...)."""
    words = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) > 3 and CJK.search(cols[2]):
            words += [w for w in CJK.findall(cols[2]) if w not in words]
    path = SRC / "zh-search-dict.txt"
    path.write_text("".join(f"{w} 100000\n" for w in words), encoding="utf-8")
    return path


#: jieba's own start-up lines (it loads its dictionary for the Chinese search index)
JIEBA = re.compile(r"(Building prefix dict|Loading model|Prefix dict has been built|Dumping model)")


LOCALE = BOOK / "locale"


def theme_catalog() -> Path:
    """book/locale/*/LC_MESSAGES/sphinx.po compiled (Babel) into build/book-locale/: the
    theme's strings in Chinese (Sphinx reads these catalogs before the themes' own)."""
    from babel.messages import mofile, pofile

    out = ROOT / "build" / "book-locale"
    for po in sorted(LOCALE.glob("*/LC_MESSAGES/*.po")):
        mo = out / po.relative_to(LOCALE).with_suffix(".mo")
        mo.parent.mkdir(parents=True, exist_ok=True)
        with po.open("rb") as f:
            catalog = pofile.read_po(f)
        with mo.open("wb") as f:
            mofile.write_mo(f, catalog)
    return out


def sphinx(lang: str) -> subprocess.Popen:
    env = dict(os.environ, GRADLAB_BOOK_LANG=lang, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    if lang == "zh":
        env["GRADLAB_BOOK_ZH_DICT"] = str(zh_dictionary())
        env["GRADLAB_BOOK_LOCALE"] = str(theme_catalog())
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(BOOK),
           "-d", str(ROOT / "build" / "book-doctrees" / lang), str(SRC / lang), str(OUT / lang)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# ------------------------------------------------------------------------ post-processing
#: a heading with its permalink; the text may not cross another heading's end (the theme's
#: hidden print header is an <h1> without a permalink: it must not swallow the page's table
#: of contents up to the first real heading)
HEADING = re.compile(r"<(h[1-6])>((?:(?!</h[1-6]>).)*?)<a class=\"headerlink\"", re.S)
TAGS = re.compile(r"<[^>]+>")


def jupyter_id(inner_html: str) -> str:
    """The anchor JupyterLab gives a heading: its text with spaces replaced by ``-``."""
    return html.unescape(TAGS.sub("", inner_html)).strip().replace(" ", "-")


def add_anchors(page: str) -> str:
    def sub(m):
        hid = html.escape(jupyter_id(m.group(2)), quote=True)
        return f'<{m.group(1)}><span class="gradlab-anchor" id="{hid}"></span>{m.group(2)}<a class="headerlink"'

    return HEADING.sub(sub, page)


def bar(lang: str, name: str, exists_other: bool, order: list[str], titles: dict[str, str]) -> str:
    """The page's one navigation row: previous, contents, next (chapters), the troubleshooting
    guide and the same page in the other language."""
    t = TEXTS[lang]
    other = OTHER[lang]
    target = f"../{other}/{name}" if exists_other else f"../{other}/index.html"
    trouble = "04-summary.html#" + html.escape(TROUBLESHOOTING[lang].replace(" ", "-"), quote=True)
    chapter = []
    stem = name[: -len(".html")]
    if stem in order:
        k = order.index(stem)

        def link(kind: str, j: int) -> str:
            text = f"{order[j][:2]} · {titles.get(order[j], order[j]).split(' · ')[0]}"
            shown = f"< {text}" if kind == "prev" else f"{text} >"
            return (f'<a class="gradlab-{kind}" href="{order[j]}.html" rel="{kind}" '
                    f'title="{html.escape(t[kind])}: {html.escape(text)}">{html.escape(shown)}</a>')

        if k > 0:
            chapter.append(link("prev", k - 1))
        chapter.append(f'<a class="gradlab-contents" href="index.html">{html.escape(t["contents"])}</a>')
        if k + 1 < len(order):
            chapter.append(link("next", k + 1))
    return (f'<nav class="gradlab-bar" aria-label="{html.escape(t["bar"])}">'
            f'<span class="gradlab-bar-chapters">{"".join(chapter)}</span>'
            f'<span class="gradlab-bar-other"><a class="gradlab-troubleshoot" href="{trouble}">'
            f'{html.escape(t["troubleshoot"])}</a>'
            f'<a class="gradlab-lang-switch" href="{target}" hreflang="{other}" lang="{other}" '
            f'title="{html.escape(t["switch_title"])}">{html.escape(t["switch"])}</a></span></nav>')


IMG = re.compile(r"<img\b([^>]*?)\s*/?>")
ALT = re.compile(r'\salt="([^"]*)"')
CELL = re.compile(r'(<div class="cell(?: [^"]*)? docutils container">)')
PRE = re.compile(r'<div class="cell_input.*?<pre>(.*?)</pre>', re.S)
ALT_LABEL = {"en": "Stored output of the code cell", "zh": "代码单元格的保存输出"}


def _fix_imgs(chunk: str, code: str | None, lang: str) -> str:
    label = ALT_LABEL[lang] + (f": {code}" if code else "")

    def sub(m):
        attrs = m.group(1)
        alt = ALT.search(attrs)
        if alt and alt.group(1).strip() and not alt.group(1).startswith("_images/"):
            return m.group(0)  # the author's own alt text
        attrs = ALT.sub("", attrs)
        return f'<img{attrs} alt="{html.escape(label, quote=True)}" />'

    return IMG.sub(sub, chunk)


def alt_texts(page: str, lang: str) -> str:
    """Every figure gets alt text: a stored output's image is named by the cell that drew it
    (MyST-NB writes the image's file name, which says nothing)."""
    parts = CELL.split(page)
    out = [_fix_imgs(parts[0], None, lang)]
    for i in range(1, len(parts), 2):
        chunk = parts[i + 1]
        m = PRE.search(chunk)
        lines = html.unescape(TAGS.sub("", m.group(1))).strip().splitlines() if m else []
        code = next((ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), None)
        out.append(parts[i] + _fix_imgs(chunk, code, lang))
    return "".join(out)


def postprocess(lang: str) -> int:
    root = OUT / lang
    n = 0
    others = {p.name for p in (OUT / OTHER[lang]).glob("*.html")}
    copy_assets(root / "_static")
    order = [p.stem for p in chapters(lang)]
    titles = titles_of(lang)
    for page in root.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        text = inline_module(text)
        text = add_anchors(text)
        text = alt_texts(text, lang)
        marker = '<article class="bd-article">'
        if marker in text:
            text = text.replace(marker, marker + bar(lang, page.name, page.name in others, order, titles), 1)
        page.write_text(text, encoding="utf-8")
        n += 1
    return n


def fix_search(lang: str) -> None:
    """Sphinx 9.0.4's Chinese search names ``ChineseStemmer`` but ships only the English stemmer
    it uses for Latin words (``sphinx/search/zh.py``): point it at that one."""
    path = OUT / lang / "_static" / "language_data.js"
    text = path.read_text(encoding="utf-8")
    if "var ChineseStemmer" not in text and "window.Stemmer = ChineseStemmer;" in text:
        path.write_text(text.replace("window.Stemmer = ChineseStemmer;", "window.Stemmer = EnglishStemmer;"),
                        encoding="utf-8")


def keep_pdfs() -> list[tuple[Path, Path]]:
    """``make pdf``'s files survive the rebuild: moved aside before build/book/ is emptied."""
    kept = []
    for pdf in sorted(OUT.glob(f"*/{landing.PDF.format(lang='*')}")):
        aside = ROOT / "build" / f"kept-{pdf.parent.name}-{pdf.name}"
        os.replace(pdf, aside)
        kept.append((aside, pdf))
    return kept


def data_scripts() -> int:
    """Each explorer's grid as a script (pages opened from file:// cannot fetch JSON)."""
    from tools.book.explorers import data_files

    dst = OUT / "data"
    dst.mkdir(parents=True, exist_ok=True)
    size = 0
    for src, var in data_files():
        out = dst / (src.stem + ".js")
        body = src.read_text(encoding="utf-8").strip()
        out.write_text(f"(window.GRADLAB_DATA = window.GRADLAB_DATA || {{}})[{json.dumps(var)}] = {body};\n",
                       encoding="utf-8")
        size += out.stat().st_size
    return size


def main() -> int:
    t0 = time.time()
    kept = keep_pdfs() if OUT.exists() else []
    if OUT.exists():
        shutil.rmtree(OUT)
    for aside, pdf in kept:
        pdf.parent.mkdir(parents=True, exist_ok=True)
        os.replace(aside, pdf)
    for lang in LANGS:  # make pdf's own output (build/pdf/), when the site has none yet
        name = landing.PDF.format(lang=lang)
        if not (OUT / lang / name).exists() and (ROOT / "build" / "pdf" / name).exists():
            (OUT / lang).mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / "build" / "pdf" / name, OUT / lang / name)
    facts = {lang: landing.facts(lang, OUT) for lang in LANGS}
    for lang in LANGS:
        names = stage(lang, facts[lang])
        log(f"staged {len(names)} {lang} chapters from {CHAPTERS[lang].relative_to(ROOT)} (stored outputs)")
    procs = {lang: sphinx(lang) for lang in LANGS}
    failed = False
    for lang, p in procs.items():
        out, _ = p.communicate()
        warnings = [line for line in out.splitlines() if line.strip() and not JIEBA.match(line)]
        for line in warnings[:40]:
            print(f"  [{lang}] {line}")
        if p.returncode:
            failed = True
        log(f"sphinx {lang}: exit {p.returncode}, {len(warnings)} warning lines, {time.time() - t0:.0f} s")
    if failed:
        return 1
    shutil.rmtree(OUT / "jupyter_execute", ignore_errors=True)  # MyST-NB's copy of the outputs
    for lang in LANGS:
        fix_search(lang)
        log(f"post-processed {postprocess(lang)} {lang} pages")
    for lang in LANGS:
        z = landing.write_zip(lang, OUT / lang)
        f = facts[lang]
        log(f"{lang}: {z.name} {z.stat().st_size / 1e6:.1f} MB; PDF {'linked' if f['pdf'] else 'absent (make pdf)'}; "
            f"outputs of TensorFlow {f['versions'].get('tensorflow')}, {f['date']}; core path: {f['time']}")
    size = data_scripts()
    (OUT / "index.html").write_text(landing.root_index(OUT, facts), encoding="utf-8")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    log(f"explorer data {size / 1e6:.1f} MB; site {total / 1e6:.1f} MB in {OUT.relative_to(ROOT)}; "
        f"{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
