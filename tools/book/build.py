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
           "run_title": "Run this chapter", "landing": "gradlab · gradient problems in TensorFlow 2",
           "run": ("In a clone of the repository, `make lab` installs everything once and starts "
                   "JupyterLab (127.0.0.1, token); open `{path}` and choose *Run All Cells*."),
           "download": "Download the notebook ({name})",
           "intro": ("Why do gradients vanish, explode, come back `None`, or run slowly in TensorFlow 2, "
                     "and what do you do about it? One chapter per question: read the stored outputs "
                     "here, move the explorers' controls in the page, or run the notebooks yourself.")},
    "zh": {"switch": "English", "switch_title": "Read this page in English", "troubleshoot": "常见问题排查",
           "run_title": "运行本章", "landing": "gradlab · TensorFlow 2 梯度问题交互手册",
           "run": ("在仓库的克隆中，`make lab` 会先安装一次所需的一切，再启动 JupyterLab（127.0.0.1，"
                   "带令牌）；打开 `{path}`，选择 *Run All Cells*（运行全部单元格）。"),
           "download": "下载本章的 notebook（{name}）",
           "intro": ("TensorFlow 2 中的梯度为什么会消失、爆炸、变成 `None` 或者算得很慢？遇到了又该怎么办？"
                     "每章回答一个问题：在这里阅读保存的输出，在页面里拖动探索器的控件，或者自己运行 notebook。")},
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
    return (f":::{{admonition}} {t['run_title']}\n:class: tip gradlab-run\n\n"
            f"{t['run'].format(path=rel)}\n\n"
            f"{{download}}`{t['download'].format(name=nb.name)} <_notebooks/{nb.name}>`\n:::\n")


def stage(lang: str) -> list[str]:
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
                        cells.append(md_cell(mount_html(spec, lang), f"gradlab-explorer-{key}"))
                        placed.add(key)
        nb["cells"] = cells
        nb.setdefault("metadata", {}).pop("widgets", None)
        (dst / nb_path.name).write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
        names.append(nb_path.stem)
    t = TEXTS[lang]
    lines = [f"# {t['landing']}", "", t["intro"], "", "```{toctree}", ":maxdepth: 1", ""]
    lines += names + ["```", ""]
    (dst / "index.md").write_text("\n".join(lines), encoding="utf-8")
    return names


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


def sphinx(lang: str) -> subprocess.Popen:
    env = dict(os.environ, GRADLAB_BOOK_LANG=lang, PYTHONHASHSEED="0")
    if lang == "zh":
        env["GRADLAB_BOOK_ZH_DICT"] = str(zh_dictionary())
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(BOOK),
           "-d", str(ROOT / "build" / "book-doctrees" / lang), str(SRC / lang), str(OUT / lang)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# ------------------------------------------------------------------------ post-processing
HEADING = re.compile(r"<(h[1-6])>(.*?)<a class=\"headerlink\"", re.S)
TAGS = re.compile(r"<[^>]+>")


def jupyter_id(inner_html: str) -> str:
    """The anchor JupyterLab gives a heading: its text with spaces replaced by ``-``."""
    return html.unescape(TAGS.sub("", inner_html)).strip().replace(" ", "-")


def add_anchors(page: str) -> str:
    def sub(m):
        hid = html.escape(jupyter_id(m.group(2)), quote=True)
        return f'<{m.group(1)}><span class="gradlab-anchor" id="{hid}"></span>{m.group(2)}<a class="headerlink"'

    return HEADING.sub(sub, page)


def bar(lang: str, name: str, exists_other: bool) -> str:
    t = TEXTS[lang]
    other = OTHER[lang]
    target = f"../{other}/{name}" if exists_other else f"../{other}/index.html"
    trouble = "04-summary.html#" + html.escape(TROUBLESHOOTING[lang].replace(" ", "-"), quote=True)
    return (f'<nav class="gradlab-bar" aria-label="{html.escape(t["switch_title"])}">'
            f'<a class="gradlab-troubleshoot" href="{trouble}">{html.escape(t["troubleshoot"])}</a>'
            f'<a class="gradlab-lang-switch" href="{target}" hreflang="{other}" lang="{other}" '
            f'title="{html.escape(t["switch_title"])}">{html.escape(t["switch"])}</a></nav>')


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
    for page in root.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        text = inline_module(text)
        text = add_anchors(text)
        text = alt_texts(text, lang)
        marker = '<article class="bd-article">'
        if marker in text:
            text = text.replace(marker, marker + bar(lang, page.name, page.name in others), 1)
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


def root_index() -> None:
    parts = []
    for lang in LANGS:
        t = TEXTS[lang]
        parts.append(f'<li lang="{lang}"><a href="{lang}/index.html">{html.escape(t["landing"])}</a>'
                     f'<p>{html.escape(t["intro"].replace("`", ""))}</p></li>')
    (OUT / "index.html").write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>gradlab · book</title>"
        "<style>body{font-family:system-ui,'Noto Sans CJK SC',sans-serif;max-width:46rem;margin:3rem auto;"
        "padding:0 1rem;line-height:1.5}li{margin:1.5rem 0}a{font-size:1.3rem}</style></head>"
        "<body><h1>gradlab</h1><ul>" + "".join(parts) + "</ul></body></html>\n", encoding="utf-8")


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
    if OUT.exists():
        shutil.rmtree(OUT)
    for lang in LANGS:
        names = stage(lang)
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
    size = data_scripts()
    root_index()
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    log(f"explorer data {size / 1e6:.1f} MB; site {total / 1e6:.1f} MB in {OUT.relative_to(ROOT)}; "
        f"{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
