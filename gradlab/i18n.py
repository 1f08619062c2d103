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

Inside a module that imports ``_``, never use ``_`` as a throwaway name: in a function that
assigns it, ``_`` becomes local and ``_("...")`` raises ``UnboundLocalError``.
"""

from __future__ import annotations

import gettext
import os
from pathlib import Path

__all__ = ["DOMAIN", "LANGUAGES", "LOCALE_DIR", "N_", "_", "get_language", "ngettext", "set_language"]

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
