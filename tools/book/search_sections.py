"""A Sphinx extension: each page's sections as text, for the search page's ranking and snippets.

Sphinx's search index (``searchindex.js``) says only *which* pages hold a word, and whether
*some* heading of the page holds it: every heading counts like the page's title (score 15),
every mention elsewhere scores 5, and ties go alphabetically by title. So "exploding" put
chapter 05 ("Beyond the source...") above chapter 01 ("Vanishing and exploding gradients"),
since a heading of 05 says "explodes". Its snippets (``html_show_search_summary``) fetch()
each result's page, which a page opened from ``file://`` may not do.

This extension writes ``_static/gradlab/search-sections.js`` at build time: for each page,
``[section id, heading, prose]`` per section (the prose without code cells, their outputs
or raw HTML), and loads it on ``search.html`` only. ``book/search-scorer.js`` (Sphinx's
``html_search_scorer``) reads it to rank a page by where the term stands (its title, its
headings, how often in its prose) and to give each result the best section and a snippet.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

SKIP = (nodes.raw, nodes.comment, nodes.literal_block, nodes.title)


def _is_code_cell(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and "cell" in node.get("classes", ())


def _prose(node: nodes.Node, out: list[str]) -> None:
    """The text under ``node``, without subsections, code cells, literal blocks or raw HTML."""
    for child in node.children:
        if isinstance(child, nodes.section) or isinstance(child, SKIP) or _is_code_cell(child):
            continue
        if "no-search" in getattr(child, "get", lambda *_: ())("classes", ()):
            continue
        if isinstance(child, nodes.Text):
            out.append(child.astext())
        else:
            _prose(child, out)


def sections_of(doctree: nodes.document) -> list[list[str]]:
    rows = []
    for sec in doctree.findall(nodes.section):
        title = next((c for c in sec.children if isinstance(c, nodes.title)), None)
        if title is None or not sec["ids"]:
            continue
        words: list[str] = []
        _prose(sec, words)
        rows.append([sec["ids"][0], " ".join(title.astext().split()), " ".join(" ".join(words).split())])
    return rows


def collect(app, doctree, docname) -> None:
    if not hasattr(app.env, "gradlab_sections"):
        app.env.gradlab_sections = {}
    app.env.gradlab_sections[docname] = sections_of(doctree)


def write(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    data = getattr(app.env, "gradlab_sections", {})
    out = Path(app.outdir) / "_static" / "gradlab" / "search-sections.js"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({k: data[k] for k in sorted(data)}, ensure_ascii=False, separators=(",", ":"))
    out.write_text(f"window.GRADLAB_SEARCH_SECTIONS = {body};\n", encoding="utf-8")


def on_page(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file("gradlab/search-sections.js")  # this page only (Sphinx >= 3.5)


def setup(app):
    app.connect("doctree-resolved", collect)
    app.connect("html-page-context", on_page)
    app.connect("build-finished", write)
    return {"parallel_read_safe": True, "parallel_write_safe": False}
