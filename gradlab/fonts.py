"""A Chinese-capable font for every figure gradlab draws (the Chinese edition, issue 22).

Matplotlib's default font, DejaVu Sans, has no CJK glyphs: Chinese labels come out as empty
boxes with a ``Glyph ... missing from font(s) DejaVu Sans`` warning. gradlab therefore depends
on the PyPI package ``pylopdf-fonts-zh-cn``, which ships Noto Sans SC (Simplified Chinese,
SIL Open Font License 1.1) as a plain OpenType file, so ``pip install`` brings the font on a
fresh machine without root and without any system font.

:func:`use_cjk_fonts` (called by ``gl.setup()``) registers that file with matplotlib and
makes it the fallback after the normal sans-serif font: ``font.family = ["sans-serif",
"Noto Sans SC"]``. DejaVu Sans still draws every Latin letter, digit and symbol, so English
figures are unchanged; only the glyphs DejaVu Sans lacks come from Noto Sans SC. A system font
of the same family is never used in its place: the file is found by its path in the package.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
from matplotlib import font_manager

try:  # a dependency of gradlab (pyproject.toml); checked, so a broken install stays usable
    import pylopdf_fonts_zh_cn
except ImportError:  # pragma: no cover - only on an install without the font package
    pylopdf_fonts_zh_cn = None

__all__ = ["CJK_FAMILY", "cjk_font_path", "use_cjk_fonts"]

#: The family name of the packaged font, as matplotlib reads it from the file.
CJK_FAMILY = "Noto Sans SC"


def cjk_font_path() -> Path | None:
    """The packaged Noto Sans SC file, or ``None`` when ``pylopdf-fonts-zh-cn`` is missing."""
    if pylopdf_fonts_zh_cn is None:
        return None
    path = Path(pylopdf_fonts_zh_cn.sans_path())
    return path if path.is_file() else None


def _registered(path: Path) -> bool:
    return any(Path(entry.fname) == path for entry in font_manager.fontManager.ttflist)


def use_cjk_fonts() -> list[str]:
    """Register the packaged CJK font and make it matplotlib's fallback; return ``font.family``.

    Idempotent and cheap after the first call (about 80 ms for the first ``addfont``). When
    the font package is missing, nothing changes: English figures are unaffected, and a
    Chinese one warns about the missing glyphs, which ``tests/test_i18n.py`` turns into a
    failure.
    """
    path = cjk_font_path()
    if path is None:
        return list(mpl.rcParams["font.family"])
    if not _registered(path):
        font_manager.fontManager.addfont(str(path))
    families = [f for f in mpl.rcParams["font.family"] if f != CJK_FAMILY] or ["sans-serif"]
    mpl.rcParams["font.family"] = [*families, CJK_FAMILY]
    return list(mpl.rcParams["font.family"])
