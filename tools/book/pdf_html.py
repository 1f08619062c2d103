"""One edition of the workbook as one HTML document for printing (``make pdf``, tools/book/pdf.py).

Read from the stored notebooks (chapters/*.ipynb or chapters/zh/*.ipynb), never executed:
Markdown through markdown-it (CommonMark, tables, ``$``/``$$`` math for MathJax), code
through Pygments, outputs as a saved notebook shows them (streams with their carriage returns
applied, ANSI colours as classes, each figure's stored PNG). Every heading gets a short ASCII
id (``c01`` for chapter 01, ``c01-s4`` for its fourth heading) and is a link to itself, so
that Chromium writes a named destination for it: the outline and the table of contents are
built from those. Links between chapters (``02-jacobians.ipynb#Heading``) become links inside
the document. An explorer's output is the picture of its stored state, followed by one line
saying where it moves (the site's page, or ``make lab``).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = {"en": ROOT / "chapters", "zh": ROOT / "chapters" / "zh"}
WIDGETS = ROOT / "gradlab" / "widgets"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Symbols no font on the machine draws (emoji): a PDF shows the text symbol instead of a box.
SUBSTITUTES = {"\u2705": "\u2714", "\u274c": "\u2718", "\ufe0f": ""}
WORDS = {
    "en": {
        "site": ("Explorer: the picture of its stored state. To move its controls, open "
                 "<code>{page}</code> in the book site (<code>make book</code>), or run the chapter "
                 "with <code>make lab</code>."),
        "lab": ("Explorer: the picture of its stored state. To move its controls, run the chapter "
                "with <code>make lab</code> (<code>{notebook}</code>)."),
    },
    "zh": {
        "site": ("探索器：这里是它保存时状态的图片。要拖动它的控件，请在本书网站（<code>make book</code>）"
                 "打开 <code>{page}</code>，或者用 <code>make lab</code> 运行本章。"),
        "lab": ("探索器：这里是它保存时状态的图片。要拖动它的控件，请用 <code>make lab</code> 运行本章"
                "（<code>{notebook}</code>）。"),
    },
}


@dataclasses.dataclass
class Heading:
    level: int  #: 1 for the chapter title, 2 for a section, ...
    text: str  #: plain text, for the outline and the table of contents
    id: str  #: ``c01`` or ``c01-s4``


@dataclasses.dataclass
class Chapter:
    key: str  #: ``"01"``
    path: Path
    title: str
    headings: list[Heading]
    body: str = ""
    figures: set[str] = dataclasses.field(default_factory=set)  #: sha1 of every stored PNG
    explorers: int = 0


def chapter_paths(lang: str) -> list[Path]:
    return sorted(CHAPTERS[lang].glob("[0-9][0-9]-*.ipynb"))


def explorer_classes() -> set[str]:
    """The explorer classes gradlab ships (``class X(..., Explorer)`` in gradlab/widgets/)."""
    names = set()
    for path in WIDGETS.glob("*.py"):
        names.update(re.findall(r"^class (\w+)\([^)]*\bExplorer\):", path.read_text(encoding="utf-8"), re.M))
    return names


def source(cell) -> str:
    s = cell.get("source", "")
    return s if isinstance(s, str) else "".join(s)


def text_of(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def substitute(text: str) -> str:
    for a, b in SUBSTITUTES.items():
        text = text.replace(a, b)
    return text


# ----------------------------------------------------------------------------- terminal text
def carriage_returns(text: str) -> str:
    """What a terminal (and Jupyter) shows: ``\\r`` returns to the line's start and overwrites."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        buf = ""
        for part in line.split("\r"):
            buf = part + buf[len(part):]
        lines.append(buf)
    return "\n".join(lines)


SGR = re.compile(r"\x1b\[([0-9;]*)m")
OTHER_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]")
COLOURS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]


def ansi_html(text: str) -> str:
    """Escape ``text`` and turn its ANSI colour codes (SGR) into ``<span class="ansi-...">``."""
    text = OTHER_ESCAPES.sub("", text)
    out, fg, bg, bold, pos, open_ = [], None, None, False, 0, False
    for m in SGR.finditer(text):
        out.append(html.escape(text[pos:m.start()], quote=False))
        pos = m.end()
        codes = [int(c) for c in m.group(1).split(";") if c] or [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                fg, bg, bold = None, None, False
            elif c == 1:
                bold = True
            elif c == 22:
                bold = False
            elif 30 <= c <= 37 or 90 <= c <= 97:
                fg = COLOURS[c % 10]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                bg = COLOURS[c % 10]
            elif c == 39:
                fg = None
            elif c == 49:
                bg = None
            elif c in (38, 48):  # 256-colour or RGB: skip its arguments, keep the default colour
                i += 2 if i + 1 < len(codes) and codes[i + 1] == 5 else 4
            i += 1
        if open_:
            out.append("</span>")
            open_ = False
        classes = ([f"ansi-{fg}-fg"] if fg else []) + ([f"ansi-{bg}-bg"] if bg else []) + (["ansi-bold"] if bold else [])
        if classes:
            out.append(f'<span class="{" ".join(classes)}">')
            open_ = True
    out.append(html.escape(text[pos:], quote=False))
    if open_:
        out.append("</span>")
    return "".join(out)


def lines_html(inner: str) -> str:
    """One ``<span class="ln">`` per line (a wrapped line hangs under its first characters).

    ``inner`` is escaped HTML whose spans never cross a line (Pygments closes its spans at
    each newline; :func:`ansi_html` is called line by line)."""
    return "".join(f'<span class="ln">{ln or " "}</span>' for ln in inner.rstrip("\n").split("\n"))


def text_block(text: str, cls: str) -> str:
    text = substitute(carriage_returns(text)).rstrip("\n")
    if not text.strip():
        return ""
    return f'<pre class="{cls}">' + lines_html("\n".join(ansi_html(ln) for ln in text.split("\n"))) + "</pre>"


# ----------------------------------------------------------------------------- the renderer
class Renderer:
    """Renders the chapters of one edition; ids and links are resolved over all of them."""

    def __init__(self, lang: str, img_dir: Path):
        self.lang = lang
        self.img_dir = img_dir
        self.md = (MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
                   .use(dollarmath_plugin, double_inline=True))
        self.md.add_render_rule("math_inline", lambda self_, tokens, idx, options, env:
                                f'<span class="math">\\({html.escape(tokens[idx].content)}\\)</span>')
        self.md.add_render_rule("math_inline_double", lambda self_, tokens, idx, options, env:
                                f'<div class="math">\\[{html.escape(tokens[idx].content)}\\]</div>')
        self.md.add_render_rule("math_block", lambda self_, tokens, idx, options, env:
                                f'<div class="math">\\[{html.escape(tokens[idx].content)}\\]</div>\n')
        self.lexer = get_lexer_by_name("ipython3")
        self.formatter = HtmlFormatter(nowrap=True)
        self.explorers = explorer_classes()
        self.jupyter_ids: dict[tuple[str, str], str] = {}  #: (chapter, Jupyter anchor) -> id
        self.chapter_ids: dict[str, str] = {}  #: notebook file name -> chapter id
        self.unresolved: list[str] = []
        from tools.book.explorers import EXPLORERS

        self.site_explorers = {(s.chapter, s.cls) for s in EXPLORERS.values()}

    # -- markdown
    def markdown(self, text: str, ch: Chapter) -> str:
        tokens = self.md.parse(substitute(text))
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open":
                level = int(tok.tag[1])
                inline = tokens[i + 1]
                plain = "".join(t.content for t in inline.children or []
                                if t.type in ("text", "code_inline", "math_inline")).strip()
                hid = f"c{ch.key}" if level == 1 and not ch.headings else f"c{ch.key}-s{len(ch.headings)}"
                tok.attrSet("id", hid)
                ch.headings.append(Heading(level, plain, hid))
                self.jupyter_ids[(ch.key, plain.replace(" ", "-"))] = hid
                if not any(t.type == "link_open" for t in inline.children or []):
                    inline.children.insert(0, _token("link_open", "a", 1, {"href": f"#{hid}", "class": "self"}))
                    inline.children.append(_token("link_close", "a", -1, {}))
            elif tok.type == "inline":
                for child in tok.children or []:
                    if child.type == "link_open" and child.attrGet("class") != "self":
                        child.attrSet("href", self.link(str(child.attrGet("href") or ""), ch))
        return self.md.renderer.render(tokens, self.md.options, {})

    def link(self, href: str, ch: Chapter) -> str:
        """``02-x.ipynb#Heading`` -> ``@@02@Heading`` (resolved in :meth:`resolve`); external kept."""
        if re.match(r"^[a-z]+:", href):
            return href
        path, _, frag = href.partition("#")
        if path and not re.fullmatch(r"\d\d-[\w.-]+\.ipynb", path):
            return "@@other@" + href  # the other edition, or a file of the repository
        key = path[:2] if path else ch.key
        return f"@@{key}@{unquote(frag)}"

    def resolve(self, body: str) -> str:
        def sub(m):
            key, frag = m.group(1), html.unescape(m.group(2))
            if key == "other":
                self.unresolved.append(frag)
                return 'href="#"'
            keys = set(self.chapter_ids.values())
            target = self.jupyter_ids.get((key, frag)) if frag else (f"c{key}" if key in keys else None)
            if target is None:
                self.unresolved.append(f"{key}#{frag}")
                return 'href="#"'
            return f'href="#{target}"'

        return re.sub(r'href="@@(\w+)@([^"]*)"', sub, body)

    # -- code cells
    def code(self, cell, ch: Chapter) -> str:
        src = substitute(source(cell)).rstrip()
        parts = ['<div class="cell code">']
        if src:
            parts.append('<pre class="src highlight">' + lines_html(highlight(src, self.lexer, self.formatter)) + "</pre>")
        outputs = merge_streams(cell.get("outputs", []))
        if outputs:
            parts.append('<div class="outputs">')
            parts += [self.output(o, ch) for o in outputs]
            parts.append("</div>")
        parts.append("</div>")
        return "".join(parts)

    def output(self, out, ch: Chapter) -> str:
        kind = out.get("output_type")
        if kind == "stream":
            return text_block(text_of(out.get("text", "")), "out " + ("err" if out.get("name") == "stderr" else "std"))
        if kind == "error":
            return text_block("\n".join(out.get("traceback", [])) or f"{out.get('ename')}: {out.get('evalue')}", "out tb")
        data = out.get("data", {})
        if "image/png" in data:
            return self.figure(data, ch)
        if "image/svg+xml" in data:
            return f'<figure class="fig">{text_of(data["image/svg+xml"])}</figure>'
        if "text/html" in data:
            return f'<div class="out html">{text_of(data["text/html"])}</div>'
        if "text/markdown" in data:
            return f'<div class="out md">{self.markdown(text_of(data["text/markdown"]), ch)}</div>'
        if "text/latex" in data:
            return f'<div class="out math">{html.escape(text_of(data["text/latex"]))}</div>'
        if "text/plain" in data:
            return text_block(text_of(data["text/plain"]), "out std")
        return ""

    def figure(self, data, ch: Chapter) -> str:
        png = base64.b64decode(text_of(data["image/png"]))
        digest = hashlib.sha1(png).hexdigest()
        ch.figures.add(digest)
        name = f"{digest[:16]}.png"
        (self.img_dir / name).write_bytes(png)
        plain = text_of(data.get("text/plain", ""))
        m = re.match(r"(\w+)\(", plain)
        is_explorer = WIDGET_VIEW in data or bool(m and m.group(1) in self.explorers)
        alt = html.escape(plain.splitlines()[0] if plain else "figure", quote=True)
        fig = f'<figure class="fig{" explorer" if is_explorer else ""}"><img src="img/{name}" alt="{alt}">'
        if is_explorer:
            ch.explorers += 1
            cls = m.group(1) if m else ""
            if (ch.key, cls) in self.site_explorers:
                note = WORDS[self.lang]["site"].format(page=f"{self.lang}/{ch.path.stem}.html")
            else:
                note = WORDS[self.lang]["lab"].format(notebook=ch.path.relative_to(ROOT).as_posix())
            fig += f'<figcaption class="explorer-note">{note}</figcaption>'
        return fig + "</figure>"

    # -- a chapter
    def chapter(self, path: Path) -> Chapter:
        nb = json.loads(path.read_text(encoding="utf-8"))
        ch = Chapter(path.name[:2], path, "", [])
        self.chapter_ids[path.name] = ch.key
        parts = []
        for cell in nb["cells"]:
            meta = cell.get("metadata", {})
            if meta.get("gradlab_nav"):
                continue  # < Previous | Contents | Next >: the PDF has its own contents and outline
            if cell["cell_type"] == "markdown":
                parts.append(f'<div class="cell md">{self.markdown(source(cell), ch)}</div>')
            elif cell["cell_type"] == "code":
                parts.append(self.code(cell, ch))
        if not ch.headings or ch.headings[0].level != 1:
            raise ValueError(f"{path.name}: the first heading must be the chapter's H1 title")
        ch.title = ch.headings[0].text
        ch.body = f'<section class="chapter" id="sec-c{ch.key}" lang="{self.html_lang}">' + "".join(parts) + "</section>"
        return ch

    @property
    def html_lang(self) -> str:
        return "zh-CN" if self.lang == "zh" else "en"


def _token(kind: str, tag: str, nesting: int, attrs: dict):
    from markdown_it.token import Token

    return Token(kind, tag, nesting, attrs=attrs)


def merge_streams(outputs: list) -> list:
    """Consecutive stream outputs of the same name as one (as Jupyter shows them)."""
    merged = []
    for o in outputs:
        if (o.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == o.get("name")):
            merged[-1] = dict(merged[-1], text=text_of(merged[-1]["text"]) + text_of(o.get("text", "")))
        else:
            merged.append(o)
    return merged


def render_edition(lang: str, img_dir: Path) -> tuple[list[Chapter], list[str]]:
    """Every chapter of ``lang``, rendered and with its links resolved; and the unresolved links."""
    img_dir.mkdir(parents=True, exist_ok=True)
    r = Renderer(lang, img_dir)
    chapters = [r.chapter(p) for p in chapter_paths(lang)]
    for ch in chapters:
        ch.body = r.resolve(ch.body)
    return chapters, r.unresolved


def pygments_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(".highlight")
