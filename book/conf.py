"""Sphinx configuration of the book site (``make book``; tools/book/build.py stages the sources).

One configuration for both editions: tools/book/build.py runs Sphinx once per language on a
staged copy of ``chapters/`` (en) or ``chapters/zh/`` (zh) with ``-D language=...``. The
notebooks are rendered from their stored outputs (``nb_execution_mode = "off"``), and nothing
is fetched from the network: MathJax is vendored, intersphinx is not used, the theme's assets
are its own, and widget views (which would need a CDN) are dropped for their static PNG.
"""

from __future__ import annotations

import os
import sys

BOOK = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BOOK)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # tools.book.search_sections, the search page's sections
LANG = os.environ.get("GRADLAB_BOOK_LANG", "en")

project = "gradlab"
author = "gradlab"
copyright = "gradlab authors"
language = "zh_CN" if LANG == "zh" else "en"
# The theme's own strings that its catalogs leave in English for zh ("Color mode", "System
# Settings", "Toggle primary sidebar", ...): book/locale/zh_CN/LC_MESSAGES/sphinx.po, compiled
# by build.py into build/ (these catalogs come before the themes' own).
locale_dirs = [os.environ["GRADLAB_BOOK_LOCALE"]] if os.environ.get("GRADLAB_BOOK_LOCALE") else []

extensions = ["myst_nb", "sphinx_copybutton", "sphinx.ext.mathjax", "tools.book.search_sections"]
exclude_patterns = ["_build", "_notebooks", "**.ipynb_checkpoints", "src", "*.md.txt"]
master_doc = "index"
smartquotes = False  # headings as the notebooks write them: their Jupyter anchors keep the plain quote
templates_path = [os.path.join(BOOK, "_templates")]
html_static_path = [os.path.join(BOOK, "_static")]

# ---------------------------------------------------------------- notebooks (MyST-NB)
nb_execution_mode = "off"  # the stored outputs, exactly what nbval checked
nb_merge_streams = True
nb_ipywidgets_js = {}  # no require.js / widget manager from a CDN: explorers store a PNG
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]
# Links are written by the notebooks as files (NN-slug.ipynb#Heading); build.py rewrites them
# to the built pages and anchors, so MyST leaves every href as written.
myst_all_links_external = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "html_image"]
myst_dmath_double_inline = True
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

# ---------------------------------------------------------------- math: vendored MathJax 3
mathjax_path = "vendor/mathjax/tex-chtml.js"
mathjax3_config = {"tex": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]]},
                   "options": {"enableMenu": False}}

# ---------------------------------------------------------------- theme
html_theme = "sphinx_book_theme"
html_title = "gradlab · 梯度问题交互手册" if LANG == "zh" else "gradlab · gradient problems in TensorFlow 2"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "home_page_in_toc": True,
    "navigation_with_keys": False,
    "search_bar_text": "搜索…" if LANG == "zh" else "Search this edition…",
    # one search box: the sidebar's (the header repeated it; the article's bar has the button)
    "navbar_persistent": [],
    # one navigation row per chapter: build.py's bar at the top (previous, contents, next,
    # troubleshooting, the other language); the notebooks' own nav cell and the theme's
    # previous/next footer are left out
    "show_prev_next": False,
}
html_context = {"default_mode": "light"}
html_css_files = ["gradlab/book.css"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_search_language = "zh" if LANG == "zh" else "en"
# Chinese search: jieba, with the workbook's glossary terms as words (梯度消失, 梯度裁剪, ...), so a
# reader's query for a term finds it; build.py writes the dictionary (tools/book/build.py).
html_search_options = {"dict": os.environ["GRADLAB_BOOK_ZH_DICT"]} if os.environ.get("GRADLAB_BOOK_ZH_DICT") else {}
html_show_search_summary = False  # summaries fetch() each page, which a file:// page may not
# Ranking and snippets from the sections that tools/book/search_sections.py stores at build
# time: a page whose title or headings hold the word comes first (Sphinx's own scores tie them)
html_search_scorer = os.path.join(BOOK, "search-scorer.js")
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_selector = "div.cell_input div.highlight pre, div.highlight pre"
