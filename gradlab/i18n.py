"""The one translation function for everything a learner reads from gradlab (every chapter).

Labels, status lines, verdicts, advice, report texts, findings, self-check feedback and plot
text go through :func:`_` (or are marked with :func:`N_` where they are defined at import
time and translated with :func:`_` where they are shown). Argument errors (``ValueError``,
``TypeError``) stay in English, as TensorFlow's do.

Messages use ``str.format`` fields with names, never positions, so a translation may reorder
them::

    _("the signal shrinks {gain} per layer").format(gain=f"{g:.3g}")

Catalogs are GNU gettext ``.po``/``.mo`` files under ``gradlab/locale/<lang>/LC_MESSAGES/``,
domain ``gradlab``; a new language is a new catalog and nothing else. The language comes
from ``gl.setup(lang=...)``, else the ``GRADLAB_LANG`` environment variable, else English.
"""

from __future__ import annotations

import gettext
import os
from pathlib import Path

__all__ = ["DOMAIN", "LANGUAGES", "LOCALE_DIR", "N_", "_", "get_language", "ngettext", "set_language"]

DOMAIN = "gradlab"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The languages gradlab speaks, by the short code ``gl.setup(lang=...)`` takes, and their
#: gettext catalog names.
LANGUAGES: dict[str, str] = {"en": "en", "zh": "zh_CN"}
LANG_ENV = "GRADLAB_LANG"

_state = {"lang": "en", "translation": gettext.NullTranslations()}


def set_language(lang: str) -> str:
    """Switch every later gradlab text to ``lang`` (``"en"`` or ``"zh"``); return it."""
    if lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {sorted(LANGUAGES)}; got {lang!r}")
    if lang == "en":
        translation = gettext.NullTranslations()
    else:
        translation = gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[LANGUAGES[lang]],
                                          fallback=True)
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
    value = {"zh_CN": "zh", "zh-CN": "zh", "zh-cn": "zh"}.get(value, value)
    if value not in LANGUAGES:
        raise ValueError(f"{LANG_ENV} must be one of {sorted(LANGUAGES)}; got {value!r}")
    return value
