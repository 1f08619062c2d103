"""The Chinese edition: one translation file per chapter, aligned with its English source.

A chapter's Chinese twin ``chapters/zh/NN-slug.ipynb`` is built from the English percent
source ``chapters/src/NN-slug.py`` plus ``chapters/zh/src/NN-slug.yml``, which holds one entry
per English Markdown cell, in order::

    chapter: 02-jacobians
    cells:
    - en: |-
        ## Build a Jacobian · 示例：计算Jacobian矩阵
        ...the English text this translation was made from...
      zh: |-
        ## 计算雅可比矩阵 · 示例：计算Jacobian矩阵
        ...

Code cells are not in the file: the twin's code cells are the English ones, except that the
Setup cell's ``gl.setup(seed=0)`` becomes ``gl.setup(seed=0, lang="zh")`` so that gradlab's
own texts come out in Chinese (the language belongs to the notebook, not to the machine that
runs it), and that the labels the chapter's code prints are translated. Those come from the
file's optional ``code:`` mapping, English text -> Chinese text::

    code:
      "local derivatives:": "各层的局部导数："
      "layer {k}: ": "第 {k} 层："
      "\"of\"": "\"/\""

Each English text is replaced by its Chinese inside string literals and comments of the code
cells only (Python's tokenizer says where they are; f-string fields are left alone, see
:func:`translate_code`), so the twin's code differs from the English in nothing else, and
``tests/test_translations.py`` checks exactly that. An entry whose English text no longer
occurs in the chapter's code is *unused*: the test names it (the English label changed).
An entry is keyed by its English text, so nothing in the English source needs an id.

Each English Markdown cell gets one of three states (:func:`align`):

- ``current``: an entry's ``en`` is exactly the cell's text and its ``zh`` is filled in;
- ``stale``: the cell's text changed since the translation was made (its entry is found by
  position and similarity), or the entry carries ``stale: true`` (written by
  ``tools/translate.py update``, which also keeps the old English under ``was``);
- ``untranslated``: a new English cell, or an entry whose ``zh`` is empty.

An entry that matches no English cell any more is an *orphan* (its English cell is gone).
The build marks a stale cell in the notebook (a note above the old translation) and shows
an untranslated one in English; ``tests/test_translations.py`` fails on both, naming the
chapter and the cell. The translator's guide is ``chapters/zh/TRANSLATING.md``.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

from tools.nbtools import (
    CHAPTERS,
    NAV_KEY,
    SRC,
    ZH_SRC,
    heading_anchors,
    notebook_from_source,
)

#: Lines the build writes in Chinese even in an untranslated cell: the fixed section names.
FIXED_LINES = {
    "## Setup": "## 准备工作",
    "## Summary": "## 小结",
    "## Exercises": "## 练习",
    "## Solutions": "## 答案",
    "## Contents": "## 目录",
    "**What you will learn**": "**本章内容**",
}
FIXED_ANCHORS = {en[3:]: zh[3:] for en, zh in FIXED_LINES.items() if en.startswith("## ")}
SETUP_EN = "gl.setup(seed=0)"
SETUP_ZH = 'gl.setup(seed=0, lang="zh")'
#: Cell metadata the build writes: ``{"status": "current" | "stale" | "untranslated"}``.
STATUS_KEY = "gradlab_zh"
BANNER_KEY = "gradlab_zh_banner"
STALE_NOTE = ("> **译文待更新**：英文原文在翻译之后改过了，下面仍是旧译文"
              "（见 `chapters/zh/src/{stem}.yml`）。")
ENTRY_KEYS = {"en", "zh", "was", "stale"}
SIMILAR = 0.4  # difflib ratio above which a changed cell is paired with its old translation
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
_CHAPTER_FILE = re.compile(r"^[0-9][0-9]-[A-Za-z0-9-]+\.ipynb$")


class TranslationError(ValueError):
    """A translation file that cannot be read: its path and what is wrong with it."""


@dataclass
class Entry:
    en: str
    zh: str = ""
    was: str | None = None
    stale: bool = False


@dataclass
class Translation:
    chapter: str
    cells: list[Entry]
    orphans: list[Entry] = field(default_factory=list)
    #: English text -> Chinese text, applied to the string literals and comments of the code cells
    code: dict[str, str] = field(default_factory=dict)


@dataclass
class CellState:
    """One English Markdown cell of a chapter and the state of its translation."""

    index: int  # position among the chapter's cells (code cells counted)
    english: str
    status: str  # "current" | "stale" | "untranslated"
    entry: Entry | None = None
    reason: str = ""


# ----------------------------------------------------------------------------- the file
def translation_path(stem: str, root: Path | None = None) -> Path:
    return (root / "chapters" / "zh" / "src" if root else ZH_SRC) / f"{stem}.yml"


def load(path: Path) -> Translation:
    """Read and check a translation file; :class:`TranslationError` names what is wrong."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TranslationError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise TranslationError(f"{path}: expected a mapping with `chapter:` and a `cells:` list")
    if data.get("chapter") != path.stem:
        raise TranslationError(f"{path}: `chapter: {data.get('chapter')}` must be {path.stem!r}")

    def entries(items, where):
        out = []
        for k, item in enumerate(items or []):
            if not isinstance(item, dict) or not {"en", "zh"} <= set(item) or set(item) - ENTRY_KEYS:
                keys = sorted(item) if isinstance(item, dict) else type(item).__name__
                raise TranslationError(f"{path}: {where} entry {k + 1} must have `en` and `zh` "
                                       f"(and optionally `was`, `stale`); it has {keys}")
            for key in ("en", "zh", "was"):
                if item.get(key) is not None and not isinstance(item[key], str):
                    raise TranslationError(f"{path}: {where} entry {k + 1}: `{key}` must be text")
            out.append(Entry(en=item["en"], zh=item["zh"] or "", was=item.get("was"),
                             stale=bool(item.get("stale"))))
        return out

    code = data.get("code") or {}
    if not isinstance(code, dict) or not all(isinstance(k, str) and k and isinstance(v, str)
                                             for k, v in code.items()):
        raise TranslationError(f"{path}: `code:` must map English text to Chinese text (both strings)")
    return Translation(chapter=data["chapter"], cells=entries(data["cells"], "cells"),
                       orphans=entries(data.get("orphans"), "orphans"), code=dict(code))


def _block(key: str, text: str, indent: str) -> str:
    if text == "":
        return f"{indent}{key}: |-\n"
    lines = text.split("\n")
    # the content sits two columns deeper than its key; a first line that starts with a space
    # needs that said explicitly (YAML would read the space as deeper indentation)
    indicator = "2" if lines[0][:1] in (" ", "\t") else ""
    head = f"{indent}{key}: |{indicator}-\n"
    pad = indent + "  "
    return head + "".join(f"{pad}{ln}\n" if ln else "\n" for ln in lines)


def _entry_text(e: Entry) -> str:
    out = "- " + _block("en", e.en, "  ")[2:]
    if e.stale:
        out += "  stale: true\n"
        if e.was is not None:
            out += _diff_comment(e.was, e.en)
            out += _block("was", e.was, "  ")
    out += _block("zh", e.zh, "  ")
    return out


def english_diff(old: str, new: str) -> list[str]:
    """The lines of the English that changed: ``-old line`` / ``+new line``."""
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), "was", "en", lineterm="", n=0)
    return [ln for ln in lines if not ln.startswith(("---", "+++", "@@"))]


def _diff_comment(old: str, new: str) -> str:
    return "".join(f"  # {ln}\n" for ln in ["what changed in the English:", *english_diff(old, new)])


HEADER = """\
# Chinese prose of chapters/src/{stem}.py (how to edit: chapters/zh/TRANSLATING.md).
# One entry per English Markdown cell, in order. `en` is the English text the translation was
# made from: leave it as it is. `python tools/translate.py status {nn}` lists what is stale.
"""


def dumps(tr: Translation) -> str:
    """The file text of ``tr`` (literal blocks, so a translator edits plain text)."""
    text = HEADER.format(stem=tr.chapter, nn=tr.chapter[:2]) + f"chapter: {tr.chapter}\ncells:\n"
    text += "\n".join(_entry_text(e) for e in tr.cells)
    if tr.code:
        text += ("\n# Labels printed by the code cells: English text -> Chinese, replaced inside string\n"
                 "# literals and comments only (chapters/zh/TRANSLATING.md).\ncode:\n")
        text += "".join(f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}\n"
                        for k, v in tr.code.items())
    if tr.orphans:
        text += ("\n# Translations whose English cell is gone: reuse what helps, then delete them.\n"
                 "orphans:\n" + "\n".join(_entry_text(e) for e in tr.orphans))
    return text


def save(tr: Translation, path: Path) -> None:
    text = dumps(tr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    back = load(path)
    if (back.cells, back.orphans, back.code) != (tr.cells, tr.orphans, tr.code):  # never write what reads back differently
        raise TranslationError(f"{path}: the written file does not read back the same")


# ----------------------------------------------------------------------------- alignment
def markdown_cells(nb) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and not c.metadata.get(NAV_KEY)]


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def align(english: list[tuple[int, str]], tr: Translation | None) -> tuple[list[CellState], list[Entry]]:
    """The state of every English Markdown cell, and the entries that match none (orphans).

    Unchanged cells match their entries exactly (difflib's longest matching blocks). Within a
    run of changed cells, each English cell is paired, in order, with the next old entry whose
    English is at least ``SIMILAR`` alike: it is stale if that entry was translated. Others are
    new (untranslated); old entries left over are orphans.
    """
    entries = tr.cells if tr else []
    orphans = list(tr.orphans) if tr else []
    a = [text for _i, text in english]
    b = [e.en for e in entries]
    states: list[CellState | None] = [None] * len(english)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            for k in range(i2 - i1):
                states[i1 + k] = _state(english[i1 + k], entries[j1 + k])
            continue
        next_j = j1
        for i in range(i1, i2):  # pair each changed cell with the next similar old entry
            for j in range(next_j, j2):
                if _similarity(a[i], b[j]) >= SIMILAR:
                    orphans.extend(entries[next_j:j])
                    e = entries[j]
                    states[i] = (CellState(english[i][0], a[i], "stale", e,
                                           "the English changed since it was translated")
                                 if e.zh.strip() else
                                 CellState(english[i][0], a[i], "untranslated", e, "not translated yet"))
                    next_j = j + 1
                    break
            else:
                states[i] = CellState(english[i][0], a[i], "untranslated", None,
                                      "a new English cell without a translation")
        orphans.extend(entries[next_j:j2])
    return [s for s in states if s is not None], orphans


def _state(cell: tuple[int, str], e: Entry) -> CellState:
    if not e.zh.strip():
        return CellState(cell[0], cell[1], "untranslated", e, "not translated yet")
    if e.stale:
        return CellState(cell[0], cell[1], "stale", e, "marked stale: update `zh`, then delete "
                                                        "`stale` and `was`")
    return CellState(cell[0], cell[1], "current", e)


def label(text: str, words: int = 8) -> str:
    """How a report names a cell: its heading when it starts with one, else its first words."""
    first = text.strip().split("\n", 1)[0]
    if first.startswith("#"):
        return first.strip()
    flat = " ".join(text.split())
    cut = " ".join(flat.split(" ")[:words])
    return cut + (" ..." if len(cut) < len(flat) else "")


def describe(stem: str, state: CellState) -> str:
    return f"{stem}, source cell {state.index} {label(state.english)!r}: {state.status} ({state.reason})"


def chapter_report(stem: str, root: Path | None = None) -> tuple[list[CellState], list[Entry]]:
    """Align chapter ``stem``'s English source (under ``root``, default this repository)."""
    src = (root / "chapters" / "src" if root else SRC) / f"{stem}.py"
    path = translation_path(stem, root)
    tr = load(path) if path.exists() else None
    return align(markdown_cells(notebook_from_source(src)), tr)


def problems(stem: str, root: Path | None = None, *, allow_untranslated: bool = False) -> list[str]:
    """Every stale, untranslated and orphaned translation of chapter ``stem``, named."""
    states, orphans = chapter_report(stem, root)
    out = [describe(stem, s) for s in states
           if s.status == "stale" or (s.status == "untranslated" and not allow_untranslated)]
    out += [f"{stem}: translation of {label(e.en)!r} has no English cell any more (orphan)"
            for e in orphans if e.zh.strip()]  # an empty entry loses nothing
    return out


_SPAN = re.compile(r"`[^`\n]+`")


def carry_code_changes(e: Entry) -> list[tuple[str, str]]:
    """For a stale entry: apply the English's renamed code spans to ``zh``; return the renames.

    A span of the old English (``e.was``) that is gone from the new one (``e.en``) is replaced,
    in the Chinese, by the most similar new span (``gl.vjp`` -> ``gl.topics.jacobians.vjp``). When the
    English changed in its code spans only, the entry is current again (``stale`` cleared):
    its prose was not touched, so neither is the translation's.
    """
    if not e.stale or e.was is None:
        return []
    old, new = _SPAN.findall(e.was), _SPAN.findall(e.en)
    came = [s for s in dict.fromkeys(new) if s not in old]
    done = []
    for gone in (s for s in dict.fromkeys(old) if s not in new):
        best = max(came, key=lambda c: _similarity(gone, c), default=None)
        if best is not None and _similarity(gone, best) > 0.6 and gone in e.zh:
            e.zh = e.zh.replace(gone, best)
            done.append((gone, best))
    leftover = [s for s in _SPAN.findall(e.zh) if s in old and s not in new]
    if _SPAN.sub("`", e.was) == _SPAN.sub("`", e.en) and not leftover:
        e.stale, e.was = False, None
    return done


# ----------------------------------------------------------------------------- the twin
_PREFIX = re.compile(r"^[A-Za-z]*")


def _fstring_literals(token: str) -> list[tuple[int, int]]:
    """The spans of ``token`` (an f-string literal) that are text: the parts outside the
    ``{fields}``, and string literals inside a field's expression; never a field's expression
    or its format spec."""
    prefix = _PREFIX.match(token).group(0)
    quote = token[len(prefix):len(prefix) + 3]
    quote = quote if quote in ('"""', "'''") else quote[0]
    start, end = len(prefix) + len(quote), len(token) - len(quote)
    spans, i, lit = [], start, start
    while i < end:
        ch = token[i]
        if ch in "{}" and token[i + 1:i + 2] == ch:  # {{ or }}
            i += 2
            continue
        if ch != "{":
            i += 1
            continue
        spans.append((lit, i))
        depth, j, spec = 1, i + 1, False
        while j < end and depth:
            c = token[j]
            if c in "'\"" and not spec:  # a string inside the expression: its text is text
                q = token[j:j + 3] if token[j:j + 3] in ('"""', "'''") else c
                k = token.find(q, j + len(q))
                spans.append((j + len(q), k))
                j = k + len(q)
                continue
            if c in "{[(":
                depth += 1
            elif c in "}])":
                depth -= 1
            elif c == ":" and depth == 1:
                spec = True
            j += 1
        i = lit = j
    spans.append((lit, end))
    return [(a, b) for a, b in spans if b > a]


def _text_spans(source: str) -> list[tuple[int, int, bool]]:
    """Character spans of ``source`` that :func:`translate_code` may change, each with whether
    it is the inside of an f-string: string literals (without prefix and quotes) and comments."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    spans = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.STRING, tokenize.COMMENT):
            continue
        base = offsets[tok.start[0] - 1] + tok.start[1]
        if tok.type == tokenize.COMMENT:
            spans.append((base, base + len(tok.string), False))
            continue
        prefix = _PREFIX.match(tok.string).group(0)
        q = 3 if tok.string[len(prefix):len(prefix) + 3] in ('"""', "'''") else 1
        spans.append((base + len(prefix) + q, base + len(tok.string) - q, "f" in prefix.lower()))
    return spans


def _is_literal(key: str) -> bool:
    """A key written as a whole string literal, quotes included (``'"of"'``): it replaces exactly
    that literal, nothing inside another one."""
    return len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'"


def _swap_literals(source: str, whole: dict[str, str], used: dict[str, int] | None) -> str:
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    out, last = [], 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING and tok.string in whole:
            a = offsets[tok.start[0] - 1] + tok.start[1]
            out += [source[last:a], whole[tok.string]]
            last = a + len(tok.string)
            if used is not None:
                used[tok.string] = used.get(tok.string, 0) + 1
    out.append(source[last:])
    return "".join(out)


def translate_code(source: str, mapping: dict[str, str], used: dict[str, int] | None = None) -> str:
    """``source`` with each English text of ``mapping`` replaced by its Chinese, inside string
    literals and comments only (longest text first, one pass); ``used`` counts the replacements.

    In an f-string, an English text without ``{`` is replaced only in the text between the
    fields (:func:`_fstring_literals`); one with fields (``"layer {k}: "`` -> ``"第 {k} 层："``)
    is matched against the whole f-string, and its Chinese must keep those fields as written
    (:func:`code_differences` checks that). A text written with its quotes (``'"of"'``) replaces
    exactly that string literal, for a word too short to look for inside others.
    """
    if not mapping:
        return source
    whole = {k: v for k, v in mapping.items() if _is_literal(k)}
    if whole:
        source = _swap_literals(source, whole, used)
        mapping = {k: v for k, v in mapping.items() if k not in whole}

    def pattern(keys):
        keys = sorted(keys, key=len, reverse=True)
        return re.compile("|".join(re.escape(k) for k in keys)) if keys else None

    plain, fielded = pattern(k for k in mapping if "{" not in k), pattern(k for k in mapping if "{" in k)

    def swap(m):
        if used is not None:
            used[m.group(0)] = used.get(m.group(0), 0) + 1
        return mapping[m.group(0)]

    out, last = [], 0
    for a, b, is_f in _text_spans(source):
        text = source[a:b]
        if is_f:
            if fielded:
                text = fielded.sub(swap, text)
            if plain:
                probe = 'f"""' + text + '"""'  # to find the spans of its text between fields
                parts, at = [], 4
                for x, y in _fstring_literals(probe):
                    parts += [probe[at:x], plain.sub(swap, probe[x:y])]
                    at = y
                parts.append(probe[at:-3])
                text = "".join(parts)
        elif plain:
            text = plain.sub(swap, text)
        out += [source[last:a], text]
        last = b
    out.append(source[last:])
    return "".join(out)


def _blank_text(node):
    """An AST with every string constant emptied, except in an f-string's format spec."""
    class Blank(ast.NodeTransformer):
        def visit_FormattedValue(self, n):
            n.value = self.visit(n.value)
            return n  # format_spec kept as written

        def visit_Constant(self, n):
            return ast.Constant("") if isinstance(n.value, str) else n

    return ast.dump(Blank().visit(node))


def code_differences(english: str, chinese: str) -> list[str]:
    """How the code of ``chinese`` differs from ``english`` other than in string literals and
    comments (an empty list when it does not): Python's tokens must be the same, except
    STRING and COMMENT tokens, and each pair of STRING tokens must be the same expression
    once their text is emptied (an f-string's fields and format specs stay as written)."""
    def tokens(src):
        return [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                  tokenize.ENDMARKER) or t.type == tokenize.NEWLINE]
    a, b = tokens(english), tokens(chinese)
    if len(a) != len(b):
        return [f"{len(a)} tokens in the English, {len(b)} in the twin"]
    out = []
    for x, y in zip(a, b, strict=True):
        where = f"line {x.start[0]}"
        if x.type != y.type:
            out.append(f"{where}: {x.string!r} became {y.string!r}")
        elif x.type == tokenize.STRING:
            if _blank_text(ast.parse(x.string, mode="eval")) != _blank_text(ast.parse(y.string, mode="eval")):
                out.append(f"{where}: {x.string!r} became {y.string!r} (beyond its text)")
        elif x.type != tokenize.COMMENT and x.string != y.string:
            out.append(f"{where}: {x.string!r} became {y.string!r}")
    return out


def chinese_title(english_title_line: str) -> str:
    """``# Summary · 总结`` -> ``# 总结`` (the title of an untranslated twin)."""
    head, sep, zh = english_title_line.partition(" · ")
    return f"# {zh.strip()}" if sep and zh.strip() else head


def _untranslated(text: str, first: bool) -> str:
    lines = [FIXED_LINES.get(ln.strip(), ln) for ln in text.split("\n")]
    if first and lines and lines[0].startswith("# "):
        lines[0] = chinese_title(lines[0])
    return "\n".join(lines)


def _with_note(text: str, note: str) -> str:
    lines = text.split("\n")
    if lines and lines[0].startswith("#"):  # keep a heading (the title) the cell's first line
        return "\n".join([lines[0], "", note, *lines[1:]])
    return f"{note}\n\n{text}"


def banner(stem: str, counts: dict[str, int]) -> str:
    parts = []
    if counts.get("untranslated"):
        parts.append(f"有 {counts['untranslated']} 段正文尚未翻译，暂以英文原文显示")
    if counts.get("stale"):
        parts.append(f"有 {counts['stale']} 段译文待更新（英文原文已修改）")
    return ("> **中文版翻译进行中**：本章" + "，".join(parts) + "。代码与英文版相同，输出来自本版自己的运行。"
            f"译者请看 [翻译指南](TRANSLATING.md) 与 `chapters/zh/src/{stem}.yml`。")


def zh_notebook(stem: str, root: Path | None = None):
    """The Chinese twin of chapter ``stem`` before navigation and execution."""
    src = (root / "chapters" / "src" if root else SRC) / f"{stem}.py"
    nb = notebook_from_source(src)
    path = translation_path(stem, root)
    states, _orphans = align(markdown_cells(nb), load(path) if path.exists() else None)
    counts: dict[str, int] = {}
    for s in states:
        cell = nb.cells[s.index]
        counts[s.status] = counts.get(s.status, 0) + 1
        if s.status == "current":
            cell.source = s.entry.zh
        elif s.status == "stale":
            cell.source = _with_note(s.entry.zh, STALE_NOTE.format(stem=stem))
        else:
            cell.source = _untranslated(s.english, first=s.index == 0)
        cell.metadata[STATUS_KEY] = {"status": s.status}
    setup = next((c for c in nb.cells if c.cell_type == "code"), None)
    if setup is None or setup.source.count(SETUP_EN) != 1:
        raise ValueError(f"{src}: the Setup cell must call {SETUP_EN} exactly once")
    setup.source = setup.source.replace(SETUP_EN, SETUP_ZH)
    mapping = load(path).code if path.exists() else {}
    for c in nb.cells:
        if c.cell_type == "code":
            c.source = translate_code(c.source, mapping)
    if counts.get("untranslated") or counts.get("stale"):
        note = nbformat.v4.new_markdown_cell(banner(stem, counts))
        note.metadata[BANNER_KEY] = True
        note["id"] = "zh-status"
        nb.cells.insert(1, note)
    return nb


def english_code(nb) -> list[str]:
    """The code cells of a twin with the Setup edit undone (its labels stay translated:
    compare with :func:`code_differences`)."""
    return [c.source.replace(SETUP_ZH, SETUP_EN, 1) if i == 0 else c.source
            for i, c in enumerate(c for c in nb.cells if c.cell_type == "code")]


# ----------------------------------------------------------------------------- links
def resolve_links(twins: dict[str, object], english: dict[str, object]) -> None:
    """Point the twins' links where they resolve, in place.

    A link to a chapter (``06-none-and-nan.ipynb``, with or without ``#anchor``) stays in the
    Chinese edition when that chapter has a twin with that heading, and goes to the English
    chapter (``../06-none-and-nan.ipynb``) otherwise; ``#Solutions`` and the other fixed
    section anchors become their Chinese names; other relative links get ``../``.
    """
    zh_anchors = {stem: heading_anchors(nb) for stem, nb in twins.items()}
    en_anchors = {stem: heading_anchors(nb) for stem, nb in english.items()}

    def target(stem: str, link: str) -> str:
        if re.match(r"^[a-z]+:", link):
            return link  # http:, mailto:
        file, _, anchor = link.partition("#")
        if file.startswith("../"):
            return link  # already written relative to chapters/zh/
        if file and not _CHAPTER_FILE.match(file):
            return "../" + link  # written relative to chapters/, as in the English chapter
        dest = Path(file).stem if file else stem
        if dest in zh_anchors:
            if not anchor or anchor in zh_anchors[dest]:
                return link
            if FIXED_ANCHORS.get(anchor) in zh_anchors[dest]:
                return f"{file}#{FIXED_ANCHORS[anchor]}"
        if dest in en_anchors and (not anchor or anchor in en_anchors[dest]):
            return f"../{dest}.ipynb" + (f"#{anchor}" if anchor else "")
        return link  # broken either way: tests/test_chapters.py names it

    for stem, nb in twins.items():
        for cell in nb.cells:
            if cell.cell_type == "markdown" and not (cell.metadata.get(NAV_KEY) or cell.metadata.get(BANNER_KEY)):
                cell.source = _LINK.sub(lambda m, s=stem: f"[{m.group(1)}]({target(s, m.group(2))})",
                                        cell.source)


def build_twins(stems: list[str], english: dict[str, object] | None = None,
                root: Path | None = None) -> dict[str, object]:
    """The twins of ``stems`` with resolved links (no navigation, no outputs)."""
    twins = {stem: zh_notebook(stem, root) for stem in stems}
    src = root / "chapters" / "src" if root else SRC
    english = english or {p.stem: notebook_from_source(p) for p in sorted(src.glob("[0-9][0-9]-*.py"))}
    resolve_links(twins, english)
    return twins


__all__ = ["CHAPTERS", "CellState", "Entry", "Translation", "TranslationError", "align",
           "build_twins", "carry_code_changes", "chapter_report", "code_differences", "describe", "dumps", "english_code", "english_diff", "label", "load",
           "problems", "resolve_links", "save", "translate_code", "translation_path", "zh_notebook"]
