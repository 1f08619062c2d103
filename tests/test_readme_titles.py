"""Both READMEs' chapter tables name each chapter as its notebook does (issue 37).

The Chinese reader found the English README spelling two Chinese titles differently from the
Chinese chapters (归一化 for 规范化, 循环网络 for 循环神经网络). Each English row must carry its
chapter's H1, each Chinese row its twin's H1, and the Chinese half of an English row must be the
twin's title, spaces aside: chapters 00-04 quote the source text's headings as it writes them
(tf.GradientTape与tf.function), where the twin follows the edition's spacing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.nbtools import chapter_paths

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\d\d) \| \[([^\]]+)\]\(([^)]+)\)", re.M)


def h1(path: Path) -> str:
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    line = "".join(first["source"]).splitlines()[0]
    assert line.startswith("# "), (path, line)
    return line[2:].strip()


def rows(readme: str) -> dict[str, tuple[str, str]]:
    return {n: (title, link) for n, title, link in ROW.findall((ROOT / readme).read_text(encoding="utf-8"))}


STEMS = [p.stem for p in chapter_paths()]


@pytest.mark.parametrize("stem", STEMS)
def test_english_readme_row_is_the_chapters_title(stem):
    title, link = rows("README.md")[stem[:2]]
    assert link == f"chapters/{stem}.ipynb", link
    assert title == h1(ROOT / "chapters" / f"{stem}.ipynb"), stem


@pytest.mark.parametrize("stem", STEMS)
def test_chinese_titles_agree_in_both_readmes(stem):
    zh_title = h1(ROOT / "chapters" / "zh" / f"{stem}.ipynb")
    title, link = rows("README.zh-CN.md")[stem[:2]]
    assert (title, link) == (zh_title, f"chapters/zh/{stem}.ipynb"), stem
    chinese_half = rows("README.md")[stem[:2]][0].split(" · ")[-1]
    assert chinese_half.replace(" ", "") == zh_title.replace(" ", ""), (chinese_half, zh_title)


def test_every_chapter_has_a_row():
    assert sorted(rows("README.md")) == sorted(rows("README.zh-CN.md")) == sorted(s[:2] for s in STEMS)
