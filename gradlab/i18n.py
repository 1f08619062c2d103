"""The one translation function for everything a learner reads from gradlab (every chapter).

Labels, status lines, verdicts, advice, report texts, findings, self-check feedback and plot
text go through :func:`_` (or are marked with :func:`N_` where they are defined at import
time and translated with :func:`_` where they are shown). Argument errors (``ValueError``,
``TypeError``) stay in English, as TensorFlow's do.

Messages use ``str.format`` fields with names, never positions, so a translation may reorder
them::

    _("the signal shrinks {gain} per layer").format(gain=f"{g:.3g}")

Catalogs are GNU gettext files under ``gradlab/locale/``: the template ``gradlab.pot``
(extracted from the code by Babel) and, per language, ``<lang>/LC_MESSAGES/gradlab.po``
(the translations) compiled to ``gradlab.mo`` (what this module reads, with the standard
library's :mod:`gettext`). ``python tools/catalog.py`` (``make catalog``) extracts, updates and
compiles them; the ``.mo`` is committed, so a plain ``pip install -e .`` needs no build step.
A new language is a new catalog plus one entry in :data:`LANGUAGES`, and nothing else.

The language comes from ``gl.setup(lang=...)``, else the ``GRADLAB_LANG`` environment
variable (read once, at ``import gradlab``), else English. The Chinese chapters call
``gl.setup(seed=0, lang="zh")`` in their Setup cell.

Several translated sentences (or list items) are never glued with an English separator
(``" "``, ``", "``, ``"; "``, ``"."``): :func:`join_sentences`, :func:`join_list`,
:func:`join_clauses` and :func:`end_sentence` take the separator from the catalog too, so a
language chooses its punctuation (Chinese joins sentences with nothing after ``。`` and lists
with ``、``).

Inside a module that imports ``_``, never use ``_`` as a throwaway name: in a function that
assigns it, ``_`` becomes local and ``_("...")`` raises ``UnboundLocalError``.
"""

from __future__ import annotations

import gettext
import os
import re
import unicodedata
from pathlib import Path

__all__ = ["DOMAIN", "LANGUAGES", "LOCALE_DIR", "N_", "_", "end_sentence", "get_language", "join_clauses",
           "join_list", "join_sentences", "ngettext", "pad", "pgettext", "tidy_spacing", "set_language", "text_width", "SENTENCE_ENDS"]

DOMAIN = "gradlab"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The languages gradlab speaks, by the short code ``gl.setup(lang=...)`` takes, and their
#: gettext catalog names. English is the source language and needs no catalog.
LANGUAGES: dict[str, str] = {"en": "en", "zh": "zh_CN"}
LANG_ENV = "GRADLAB_LANG"
#: Spellings of a language that ``GRADLAB_LANG`` also accepts (locale names, BCP 47 tags).
ALIASES = {"zh_CN": "zh", "zh-CN": "zh", "zh-cn": "zh", "zh-Hans": "zh", "zh_CN.UTF-8": "zh",
           "en_US": "en", "en-US": "en", "en_GB": "en", "C": "en"}

_state: dict = {"lang": "en", "translation": gettext.NullTranslations()}


def catalog_path(lang: str) -> Path:
    """The compiled catalog (``.mo``) gradlab reads for ``lang`` (``"zh"``)."""
    return LOCALE_DIR / LANGUAGES[lang] / "LC_MESSAGES" / f"{DOMAIN}.mo"


def set_language(lang: str) -> str:
    """Switch every later gradlab text to ``lang`` (``"en"`` or ``"zh"``); return it.

    Raises ``ValueError`` for an unknown language and ``FileNotFoundError`` when the
    language's compiled catalog is missing (a broken install), rather than falling back to
    English without a word.
    """
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {sorted(LANGUAGES)}; got {lang!r}")
    if lang == "en":
        translation: gettext.NullTranslations = gettext.NullTranslations()
    else:
        path = catalog_path(lang)
        if not path.is_file():
            raise FileNotFoundError(
                f"gradlab has no compiled {lang!r} catalog at {path}; "
                "run `python tools/catalog.py compile` (make catalog) in the repository"
            )
        with open(path, "rb") as fh:
            translation = gettext.GNUTranslations(fh)
    _state.update(lang=lang, translation=translation)
    return lang


def get_language() -> str:
    """The language gradlab currently speaks (``"en"`` or ``"zh"``)."""
    return _state["lang"]


def _(message: str) -> str:
    """``message`` in the current language (itself when there is no translation)."""
    return _state["translation"].gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form of a message for count ``n``, in the current language."""
    return _state["translation"].ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    """``message`` in the current language, as translated in ``context`` (``msgctxt``): for a
    word the catalog must translate two ways, such as ``"norm"`` in the clip dropdown (a vector
    norm) and in the normalization dropdown (a layer)."""
    return _state["translation"].pgettext(context, message)


def N_(message: str) -> str:
    """Mark ``message`` for translation without translating it now (module-level constants)."""
    return message


def language_from_env() -> str:
    """The language ``GRADLAB_LANG`` asks for (``"en"`` when unset)."""
    value = os.environ.get(LANG_ENV, "en").strip() or "en"
    value = ALIASES.get(value, value)
    if value not in LANGUAGES:
        raise ValueError(f"{LANG_ENV} must be one of {sorted(LANGUAGES)}; got {value!r}")
    return value


def _fold(parts, template: str, first: str, rest: str) -> str:
    items = [str(p).strip() for p in parts if p is not None and str(p).strip()]
    if not items:
        return ""
    text = items[0]
    for item in items[1:]:
        text = template.format(**{first: text, rest: item})
    return text


def join_sentences(*sentences) -> str:
    """Whole sentences one after the other, joined as the current language joins them.

    English puts a space between ``"It vanishes."`` and ``"Try relu."``; Chinese puts nothing
    after ``。``. Empty parts are skipped; one iterable argument is taken as the sentences. Each
    part must already be a whole sentence with its own full stop (see :func:`end_sentence`).
    """
    if len(sentences) == 1 and not isinstance(sentences[0], str):
        sentences = tuple(sentences[0])
    # TRANSLATORS: how two whole sentences follow each other ("{sentence}{next}" in Chinese: no space after 。)
    return _fold(sentences, _("{sentence} {next}"), "sentence", "next")


def join_list(items) -> str:
    """A list of names or short phrases (``"a, b, c"`` in English, ``"a、b、c"`` in Chinese)."""
    # TRANSLATORS: the separator between the items of a list of names ("{items}、{item}" in Chinese)
    return _fold(items, _("{items}, {item}"), "items", "item")


def join_clauses(items) -> str:
    """Clauses of one sentence that each could stand alone (``"a; b"``; ``"a；b"`` in Chinese)."""
    # TRANSLATORS: the separator between clauses of one sentence ("{clauses}；{clause}" in Chinese)
    return _fold(items, _("{clauses}; {clause}"), "clauses", "clause")


#: How a sentence may already end, in the languages gradlab speaks.
SENTENCE_ENDS = (".", "。", "?", "？", "!", "！", "…")


def end_sentence(text: str) -> str:
    """``text`` closed by the language's full stop (``"a."``, ``"a。"`` in Chinese), unless it already
    ends a sentence."""
    text = str(text).rstrip()
    if not text or text.endswith(SENTENCE_ENDS):
        return text
    # TRANSLATORS: a clause made a whole sentence by the language's full stop ("{sentence}。" in Chinese)
    return _("{sentence}.").format(sentence=text)


def text_width(text) -> int:
    """How many terminal columns ``text`` takes: a wide or full-width character (East Asian
    width ``W`` or ``F``: Chinese characters, full-width punctuation such as ``，``) takes two,
    a combining mark none, any other character one. ``len("梯度") == 2``, ``text_width("梯度") == 4``."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in str(text))


def pad(text, width: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``width`` display columns (:func:`text_width`), for tables
    whose cells may hold Chinese: ``f"{name:<12}"`` counts characters, so a row with ``"梯度消失"``
    would stand 4 columns out of line; ``pad(name, 12)`` does not. ``align`` is ``"<"`` (left),
    ``">"`` (right) or ``"^"`` (centre, as ``str.format``: the odd space goes to the right);
    text already wider than ``width`` comes back unchanged."""
    if align not in ("<", ">", "^"):
        raise ValueError(f"align must be '<', '>' or '^'; got {align!r}")
    text = str(text)
    room = max(0, int(width) - text_width(text))
    if align == "<":
        return text + " " * room
    if align == ">":
        return " " * room + text
    return " " * (room // 2) + text + " " * (room - room // 2)


_CJK = "\u4e00-\u9fff"
_LATIN = "A-Za-z0-9'\"`"
_GLUED = re.compile(rf"(?<=[{_CJK}])(?=[{_LATIN}])|(?<=[{_LATIN}])(?=[{_CJK}])")
_SPLIT = re.compile(rf"(?<=[{_CJK}]) (?=[{_CJK}])")


def tidy_spacing(text: str) -> str:
    """In Chinese, the spacing of a message whose fields may be Chinese or code: one space
    between a Chinese character and a Latin letter, digit or quote (``'hidden_1'的`` ->
    ``'hidden_1' 的``), none between two Chinese characters (``第 1 层 的`` -> ``第 1 层的``).

    A translation writes ``{first} 的信号`` once, and reads right whether ``first`` is a layer's
    name (``'hidden_1'``) or gradlab's own ``第 1 层``. Other languages come back unchanged.
    """
    if get_language() != "zh":
        return text
    return _SPLIT.sub("", _GLUED.sub(" ", str(text)))
