"""The book's front door: each edition's landing page, the site's root page, the downloads.

Everything here is read from the repository at build time, deterministically: the stored
outputs' TensorFlow and Keras versions (chapter 00 prints them; requirements.txt pins them),
the date the notebooks were last committed (git), chapter 01's time for its core path (its
own text), whether a PDF of the edition exists (``make pdf`` writes build/book/<lang>/
gradlab-<lang>.pdf), and a zip of the edition's notebooks with fixed timestamps.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = {"en": ROOT / "chapters", "zh": ROOT / "chapters" / "zh"}
PDF = "gradlab-{lang}.pdf"  #: make pdf's file, beside the edition's pages
ZIP = "gradlab-{lang}-notebooks.zip"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  #: every member's timestamp: the same zip from the same notebooks


def notebooks(lang: str) -> list[Path]:
    return sorted(CHAPTERS[lang].glob("[0-9][0-9]-*.ipynb"))


def versions(lang: str) -> dict[str, str]:
    """TensorFlow and Keras of the stored outputs: chapter 00's printed line, else the pins."""
    out = {}
    nb = json.loads(notebooks(lang)[0].read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            text = "".join(o.get("text", ""))
            m = re.search(r"TensorFlow (\S+) · Keras (\S+)", text)
            if m and not out:
                out = {"tensorflow": m.group(1), "keras": m.group(2)}
    if not out:
        pins = dict(re.findall(r"^(tensorflow|keras)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
        out = {k: pins[k] for k in ("tensorflow", "keras") if k in pins}
    return out


def stored_date(lang: str) -> str | None:
    """The date (YYYY-MM-DD) of the last commit of the edition's notebooks, or None outside git."""
    rel = CHAPTERS[lang].relative_to(ROOT).as_posix()
    try:
        r = subprocess.run(["git", "log", "-1", "--format=%cs", "--", f"{rel}/[0-9][0-9]-*.ipynb"],
                           cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    date = r.stdout.strip()
    return date if r.returncode == 0 and re.fullmatch(r"\d{4}-\d\d-\d\d", date) else None


def core_time(lang: str) -> str | None:
    """Chapter 01's own words for how long its core path takes ("about an hour")."""
    if lang == "en":
        src = next((ROOT / "chapters" / "src").glob("01-*.py")).read_text(encoding="utf-8")
        src = re.sub(r"\n#\s*", " ", src)  # the markdown cell's comment lines, joined
        m = re.search(r"core path ends with.*?(about (?:an hour|\d+ minutes))", src)
    else:
        src = next((ROOT / "chapters" / "zh" / "src").glob("01-*.yml")).read_text(encoding="utf-8")
        m = re.search(r"本章主线[^。]*?((?:大约需要|约) ?(?:一小时|\d+ ?分钟))", src)
    return m.group(1) if m else None


def write_zip(lang: str, out_dir: Path) -> Path:
    """All the edition's notebooks (stored outputs) in one zip, byte-identical from the same files."""
    path = out_dir / ZIP.format(lang=lang)
    folder = f"gradlab-{lang}-notebooks"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for nb in notebooks(lang):
            info = zipfile.ZipInfo(f"{folder}/{nb.name}", date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, nb.read_bytes())
    return path


TEXT = {
    "en": {
        "start": "Start here",
        "start_body": ("Begin with [00 · {t00}](00-introduction.html): it builds `tf.GradientTape` from zero. Then "
                       "[01 · {t01}](01-vanishing-exploding.html). Chapters 00–04 follow the source text; 05–11 go "
                       "beyond it and can be read in any order. Something wrong with your training right now? "
                       "Go to the [troubleshooting guide]({trouble})."),
        "need": "What you need",
        "need_body": ("- To read: this site, in any browser; it works offline.\n"
                      "- To follow: Python and NumPy, and the idea of training a network by gradient descent. "
                      "No calculus beyond the chain rule; chapter 00 introduces `tf.GradientTape` and Keras models "
                      "from the start.\n"
                      "- To run: a clone of the repository, Python 3.10 or newer and about 3 GB of disk "
                      "(TensorFlow). No GPU: every chapter runs on a CPU."),
        "time": "How long",
        "time_body": ("Each chapter has a core path, up to its summary and exercises, and an optional part after "
                      "them. Chapter 01's core path takes {time}."),
        "run": "How to run it",
        "run_body": ("In a clone of the repository, `make lab` installs everything once and starts JupyterLab "
                     "(127.0.0.1, with a token) at chapter 00; `make lab-zh` opens the Chinese edition in JupyterLab's "
                     "Chinese interface. Every chapter page has a *Run this chapter* box and a download of its "
                     "notebook; the explorers on these pages also move without a kernel."),
        "downloads": "Downloads",
        "pdf": "The whole edition as a PDF ({name})",
        "zip": "All {n} notebooks of this edition, with their stored outputs ({name}); they import gradlab, "
               "so run them in a clone (`make lab`)",
        "stored": "The stored outputs",
        "stored_body": ("Every output on these pages is a notebook's stored output from a fresh Restart & Run All "
                        "with TensorFlow {tensorflow} and Keras {keras}{date}; the tests re-run the notebooks and "
                        "compare them (nbval). Nothing here is executed again."),
        "date": ", stored on {date}",
        "chapters": "Chapters",
        "reference": "Reference",
    },
    "zh": {
        "start": "从这里开始",
        "start_body": ("先读 [00 · {t00}](00-introduction.html)：它从零开始介绍 `tf.GradientTape`。然后读 "
                       "[01 · {t01}](01-vanishing-exploding.html)。第 00–04 章对应原文的各节；第 05–11 章是原文之外的"
                       "内容，可以按任意顺序阅读。训练现在就出了问题？直接看[常见问题排查]({trouble})。"),
        "need": "需要什么",
        "need_body": ("- 阅读：本网站，任何浏览器都可以，离线也能用。\n"
                      "- 读懂：会用 Python 和 NumPy，知道神经网络是靠梯度下降训练的。除了链式法则不需要更多微积分；"
                      "第 00 章从头介绍 `tf.GradientTape` 和 Keras 模型。\n"
                      "- 运行：仓库的一份克隆、Python 3.10 或更新版本，以及约 3 GB 磁盘空间（TensorFlow）。"
                      "不需要 GPU：每一章都能在 CPU 上运行。"),
        "time": "需要多长时间",
        "time_body": "每章都有一条主线（到小结和练习为止），之后是选读部分。第 01 章的主线需要{time}。",
        "run": "如何运行",
        "run_body": ("在仓库的克隆中，`make lab` 会先安装一次所需的一切，再在第 00 章启动 JupyterLab（127.0.0.1，带令牌）；"
                     "`make lab-zh` 以 JupyterLab 的中文界面打开中文版。每一章的页面都有“运行本章”框和该章 notebook 的"
                     "下载链接；页面中的探索器不需要内核也能拖动。"),
        "downloads": "下载",
        "pdf": "本版本的 PDF（{name}）",
        "zip": "本版本全部 {n} 个 notebook，含保存的输出（{name}）；它们会导入 gradlab，请在仓库的克隆中运行（`make lab`）",
        "stored": "保存的输出",
        "stored_body": ("这些页面上的每个输出都是 notebook 在全新的“重启并运行全部”（Restart & Run All）后保存的输出，"
                        "所用版本为 TensorFlow {tensorflow} 与 Keras {keras}{date}；测试会重新运行 notebook 并逐一比较"
                        "（nbval）。这里不会再执行任何代码。"),
        "date": "，保存于 {date}",
        "chapters": "章节",
        "reference": "参考",
    },
}
TROUBLE = {"en": "04-summary.html#Troubleshoot-a-training-problem-·-常见问题排查", "zh": "04-summary.html#常见问题排查"}
LANDING = {"en": "gradlab · gradient problems in TensorFlow 2", "zh": "gradlab · TensorFlow 2 梯度问题交互手册"}
INTRO = {
    "en": ("Why do gradients vanish, explode, come back `None`, or run slowly in TensorFlow 2, and what do you do "
           "about it? An interactive workbook, one chapter per question: read the stored outputs here, move the "
           "explorers' controls in the page, or run the notebooks yourself. Every claim sits next to a cell whose "
           "output shows it."),
    "zh": ("TensorFlow 2 中的梯度为什么会消失、爆炸、变成 `None` 或者算得很慢？遇到了又该怎么办？这是一本交互式手册，"
           "每章回答一个问题：在这里阅读保存的输出，在页面里拖动探索器的控件，或者自己运行 notebook。每个论断旁边都有"
           "一个代码单元格，它的输出就是证据。"),
}


def facts(lang: str, out_dir: Path) -> dict:
    """What the landing pages say that is read from the repository (and the built site)."""
    return {"versions": versions(lang), "date": stored_date(lang), "time": core_time(lang),
            "pdf": (out_dir / lang / PDF.format(lang=lang)).exists(), "n": len(notebooks(lang))}


def landing_md(lang: str, names: list[str], titles: dict[str, str], f: dict) -> str:
    t = TEXT[lang]
    short = {k: v.split(" · ")[0] for k, v in titles.items()}
    lines = [f"# {LANDING[lang]}", "", INTRO[lang], "",
             f"## {t['start']}", "", t["start_body"].format(t00=short.get("00-introduction", ""),
                                                            t01=short.get("01-vanishing-exploding", ""),
                                                            trouble=TROUBLE[lang]), "",
             f"## {t['need']}", "", t["need_body"], ""]
    if f["time"]:
        lines += [f"## {t['time']}", "", t["time_body"].format(time=f["time"]), ""]
    lines += [f"## {t['run']}", "", t["run_body"], "", f"## {t['downloads']}", ""]
    if f["pdf"]:
        name = PDF.format(lang=lang)
        lines.append(f"- [{t['pdf'].format(name=name)}]({name})")
    name = ZIP.format(lang=lang)
    lines += [f"- [{t['zip'].format(n=f['n'], name=name)}]({name})", ""]
    v = f["versions"]
    date = t["date"].format(date=f["date"]) if f["date"] else ""
    lines += [f"## {t['stored']}", "", t["stored_body"].format(tensorflow=v.get("tensorflow", "?"),
                                                               keras=v.get("keras", "?"), date=date), ""]
    lines += [f"## {t['chapters']}", "", "```{toctree}", ":maxdepth: 1", ""] + names + ["```", ""]
    lines += [f"## {t['reference']}", "", "```{toctree}", ":maxdepth: 1", "", "api", "glossary", "```", ""]
    return "\n".join(lines)


ROOT_CSS = """
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--bg:#fff;--card:#f6f8fa;--line:#d1d9e0;--link:#0550ae}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;--card:#151b23;--line:#3d444d;--link:#4493f8}}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI','Noto Sans CJK SC','PingFang SC','Microsoft YaHei',sans-serif;
color:var(--fg);background:var(--bg);max-width:62rem;margin:0 auto;padding:2rem 1rem 3rem;line-height:1.6}
h1{font-size:2rem;margin:0 0 .25rem}.tagline{color:var(--muted);margin:0 0 2rem}
a{color:var(--link)}code{font-size:.9em;overflow-wrap:anywhere}
.editions{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,24rem),1fr));gap:1.25rem}
.edition{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1.25rem 1.4rem}
.edition h2{margin:0 0 .5rem;font-size:1.35rem}.edition p{margin:.5rem 0}
.start{display:inline-block;margin:.5rem 0;padding:.45rem .9rem;border-radius:6px;background:var(--link);
color:#fff;text-decoration:none;font-weight:600}
.edition ul{padding-left:1.2rem;margin:.5rem 0}.meta{color:var(--muted);font-size:.9rem}
@media print{.start{background:none;color:var(--fg);border:1px solid var(--line)}}
"""
ROOT_TEXT = {
    "en": {"start": "Start reading: 00 · Introduction", "contents": "All chapters", "zip": "Notebooks (zip)",
           "pdf": "PDF", "stored": "Stored outputs: TensorFlow {tensorflow}, Keras {keras}{date}.",
           "date": ", {date}", "time": "Chapter 01's core path: {time}. No GPU needed.", "api": "API reference",
           "glossary": "Chinese glossary"},
    "zh": {"start": "开始阅读：00 · 引言", "contents": "全部章节", "zip": "全部 notebook（zip）", "pdf": "PDF",
           "stored": "保存的输出：TensorFlow {tensorflow}、Keras {keras}{date}。", "date": "，{date}",
           "time": "第 01 章的主线需要{time}。不需要 GPU。", "api": "API 参考", "glossary": "术语表"},
}


def root_index(out_dir: Path, all_facts: dict[str, dict]) -> str:
    cards = []
    for lang in ("en", "zh"):
        t, f = ROOT_TEXT[lang], all_facts[lang]
        v = f["versions"]
        intro = html.escape(INTRO[lang].replace("`", ""))
        links = [f'<a href="{lang}/index.html">{t["contents"]}</a>',
                 f'<a href="{lang}/{ZIP.format(lang=lang)}">{t["zip"]}</a>']
        if f["pdf"]:
            links.insert(1, f'<a href="{lang}/{PDF.format(lang=lang)}">{t["pdf"]}</a>')
        links += [f'<a href="{lang}/api.html">{t["api"]}</a>', f'<a href="{lang}/glossary.html">{t["glossary"]}</a>']
        meta = t["stored"].format(tensorflow=v.get("tensorflow", "?"), keras=v.get("keras", "?"),
                                  date=t["date"].format(date=f["date"]) if f["date"] else "")
        time = f'<p class="meta">{html.escape(t["time"].format(time=f["time"]))}</p>' if f["time"] else ""
        cards.append(
            f'<section class="edition" lang="{lang}"><h2><a href="{lang}/index.html">{html.escape(LANDING[lang])}</a>'
            f'</h2><p>{intro}</p><a class="start" href="{lang}/00-introduction.html">{t["start"]}</a>{time}'
            f'<ul><li>{"</li><li>".join(links)}</li></ul><p class="meta">{html.escape(meta)}</p></section>')
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            "<title>gradlab · gradient problems in TensorFlow 2 · 梯度问题交互手册</title>"
            f"<style>{ROOT_CSS}</style></head><body><header><h1>gradlab</h1>"
            '<p class="tagline">An interactive workbook on gradient problems in TensorFlow 2 · '
            '<span lang="zh">TensorFlow 2 梯度问题交互手册</span></p></header>'
            f'<main class="editions">{"".join(cards)}</main></body></html>\n')
