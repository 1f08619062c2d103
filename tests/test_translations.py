"""The Chinese edition cannot drift: every translation is current, or a test names the cell.

For each chapter with a translation file (chapters/zh/src/NN-slug.yml), every English Markdown
cell of chapters/src/NN-slug.py must have a current Chinese translation: one made from exactly
today's English text. An English cell that changed (stale), a new one (untranslated) and a
translation whose English cell is gone (orphan) fail here, with the chapter and the cell's
heading or first words. ``python tools/translate.py status`` prints the same list.

Chapters still waiting for their translator are listed in NOT_YET_TRANSLATED: their missing
translations are allowed (a stale or orphaned one never is). The final state of issue 22
empties that list, and a test fails when it names a chapter that no longer needs it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tools import zh
from tools.nbtools import CHAPTERS, SRC, chapter_paths, notebook_from_source, zh_chapter_paths

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = [p.stem for p in chapter_paths()]
TWINS = [p.stem for p in zh_chapter_paths()]
#: Chapters whose translation has not been written yet (they may lack a twin, or show English
#: prose in their twin). Each entry must go once its chapter is translated.
NOT_YET_TRANSLATED = {
}
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_allowance_names_only_real_chapters_that_need_it():
    """The allowance shrinks to nothing: a translated chapter must leave it."""
    prefixes = {s[:2] for s in EXPECTED}
    stale_entries = [s for s in NOT_YET_TRANSLATED if s in EXPECTED and s in TWINS and not any(
        st.status == "untranslated" for st in zh.chapter_report(s)[0])]
    assert not stale_entries, f"fully translated, remove from NOT_YET_TRANSLATED: {stale_entries}"
    unknown = [s for s in NOT_YET_TRANSLATED if s not in EXPECTED and s[:2] in prefixes]
    assert not unknown, f"NOT_YET_TRANSLATED names chapters under another name: {unknown}"


def test_every_chapter_has_a_twin_or_an_allowance():
    missing = [s for s in EXPECTED if s not in TWINS and s not in NOT_YET_TRANSLATED]
    assert not missing, f"chapters without a Chinese twin: {missing} (python tools/translate.py init NN)"


@pytest.mark.parametrize("stem", TWINS)
def test_translation_file_reads(stem):
    tr = zh.load(zh.translation_path(stem))
    assert tr.chapter == stem and tr.cells


@pytest.mark.parametrize("stem", TWINS)
def test_translation_is_current(stem):
    problems = zh.problems(stem, allow_untranslated=stem in NOT_YET_TRANSLATED)
    assert not problems, (
        f"the Chinese translation of {stem} is behind the English "
        f"(python tools/translate.py status {stem[:2]} -v; update, translate, rebuild):\n  "
        + "\n  ".join(problems)
    )


# ----------------------------------------------------------------------------- a temporary copy
@pytest.fixture
def copy_of_02(tmp_path):
    """chapters/src/02-jacobians.py and its translation in a scratch repository layout."""
    stem = "02-jacobians"
    (tmp_path / "chapters" / "src").mkdir(parents=True)
    (tmp_path / "chapters" / "zh" / "src").mkdir(parents=True)
    shutil.copy(SRC / f"{stem}.py", tmp_path / "chapters" / "src")
    shutil.copy(zh.translation_path(stem), tmp_path / "chapters" / "zh" / "src")
    return tmp_path, stem


def english_source(root: Path, stem: str) -> Path:
    return root / "chapters" / "src" / f"{stem}.py"


def test_an_edited_english_cell_fails_and_is_named(copy_of_02):
    root, stem = copy_of_02
    assert zh.problems(stem, root) == [], "the committed translation of 02 must be current"
    src = english_source(root, stem)
    text = src.read_text(encoding="utf-8")
    old = "# A list of targets is treated the same way"
    assert old in text
    src.write_text(text.replace(old, "# A list of targets (or a tuple) is treated the same way"), encoding="utf-8")
    problems = zh.problems(stem, root)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{stem}, source cell ") and "'A list of targets (or a tuple)" in problems[0]
    assert "stale" in problems[0]
    # the build marks the cell, and keeps the old translation under the note
    twin = zh.zh_notebook(stem, root)
    marked = [c for c in twin.cells if c.metadata.get(zh.STATUS_KEY, {}).get("status") == "stale"]
    assert len(marked) == 1 and marked[0].source.startswith("> **译文待更新**")
    assert "中文版翻译进行中" in twin.cells[1].source


def test_a_new_cell_and_a_removed_cell_are_named(copy_of_02):
    root, stem = copy_of_02
    src = english_source(root, stem)
    text = src.read_text(encoding="utf-8")
    anchor = "# %% [markdown]\n# ## Use persistent tapes with care"
    assert anchor in text
    text = text.replace(anchor, "# %% [markdown]\n# A brand-new paragraph about tapes.\n\n" + anchor)
    gone = "# %% [markdown]\n# Use `ZERO` only when you *know* the source is unused. It also hides the six bugs above.\n"
    assert gone in text
    src.write_text(text.replace(gone, ""), encoding="utf-8")
    problems = zh.problems(stem, root)
    assert any("'A brand-new paragraph about tapes.'" in p and "untranslated" in p for p in problems), problems
    assert any("Use `ZERO` only when" in p and "orphan" in p for p in problems), problems
    assert len(problems) == 2, problems


def test_update_keeps_the_old_translation_and_marks_it(copy_of_02, monkeypatch):
    root, stem = copy_of_02
    src = english_source(root, stem)
    text = src.read_text(encoding="utf-8")
    src.write_text(text.replace("# A list of targets is treated the same way",
                                "# A list of targets is handled the same way"), encoding="utf-8")
    states, orphans = zh.chapter_report(stem, root)
    (stale,) = [s for s in states if s.status == "stale"]
    path = zh.translation_path(stem, root)
    tr = zh.load(path)
    k = next(i for i, e in enumerate(tr.cells) if e.en == stale.entry.en)
    tr.cells[k] = zh.Entry(en=stale.english, zh=stale.entry.zh, was=stale.entry.en, stale=True)
    zh.save(tr, path)
    text = path.read_text(encoding="utf-8")
    assert "stale: true" in text and "-A list of targets is treated" in text.replace("  # ", "")
    still = zh.problems(stem, root)
    assert len(still) == 1 and "marked stale" in still[0]
    tr = zh.load(path)
    tr.cells[k] = zh.Entry(en=tr.cells[k].en, zh=tr.cells[k].zh)  # the translator is done
    zh.save(tr, path)
    assert zh.problems(stem, root) == []


# ----------------------------------------------------------------------------- the twins' content
@pytest.mark.parametrize("stem", TWINS)
def test_code_cells_differ_from_the_english_only_in_text(stem):
    """The twin's code is the English code: the same Python tokens, except string literals and
    comments (its labels, translated from the yml's ``code:``), and even inside an f-string
    only the text differs, never a field or a format spec."""
    english = [c.source for c in notebook_from_source(SRC / f"{stem}.py").cells if c.cell_type == "code"]
    twin = zh.zh_notebook(stem)
    chinese = zh.english_code(twin)
    assert len(chinese) == len(english)
    bad = [f"code cell {k}: {d}" for k, (en, cn) in enumerate(zip(english, chinese, strict=True))
           for d in zh.code_differences(en, cn)]
    assert not bad, f"{stem}: the twin's code differs from the English beyond its text:\n  " + "\n  ".join(bad)
    assert [c.source for c in twin.cells if c.cell_type == "code"][0].count(zh.SETUP_ZH) == 1


@pytest.mark.parametrize("stem", TWINS)
def test_every_code_label_is_used_and_translated(stem):
    """Each entry of the yml's ``code:`` still finds its English text in the chapter's code
    (an English label that changed leaves it unused: update the entry), and says something new."""
    mapping = zh.load(zh.translation_path(stem)).code
    used: dict[str, int] = {}
    for c in notebook_from_source(SRC / f"{stem}.py").cells:
        if c.cell_type == "code":
            zh.translate_code(c.source, mapping, used)
    unused = [k for k in mapping if k not in used]
    assert not unused, f"{stem}: `code:` entries whose English text is not in the code any more: {unused}"
    same = [k for k, v in mapping.items() if v == k]
    assert not same, f"{stem}: `code:` entries translated to themselves: {same}"


def test_code_translation_changes_text_only():
    """translate_code replaces inside literals and comments, never in code or f-string fields;
    code_differences catches a changed name, number or format spec."""
    src = ('gain = 1\nprint(f"gain {gain:.3g} · {r.status}", "gain")  # gain per layer\n'
           "d = {'gain': gain}\n")
    out = zh.translate_code(src, {"gain": "增益", "status": "状态"})
    assert out == ('gain = 1\nprint(f"增益 {gain:.3g} · {r.status}", "增益")  # 增益 per layer\n'
                   "d = {'增益': gain}\n")
    assert zh.code_differences(src, out) == []
    assert zh.code_differences(src, out.replace("{gain:.3g}", "{gain:.2g}"))  # a format spec
    assert zh.code_differences(src, out.replace("{r.status}", "{r.ratio}"))  # a field
    assert zh.code_differences(src, out.replace("gain = 1", "gain = 2"))  # a number
    assert zh.code_differences(src, out.replace('print(', 'print(1, '))  # a token more


def test_the_code_mapping_survives_an_update(copy_of_02):
    root, stem = copy_of_02
    path = zh.translation_path(stem, root)
    tr = zh.load(path)
    tr.code = {'A: "x"': "甲：“x”", "b\\n": "乙"}
    zh.save(tr, path)
    assert zh.load(path).code == tr.code


@pytest.mark.parametrize("stem", [s for s in TWINS if s not in NOT_YET_TRANSLATED])
def test_translated_twin_reads_in_chinese(stem):
    twin = zh.zh_notebook(stem)
    prose = [c.source for c in twin.cells if c.cell_type == "markdown"]
    chinese = [p for p in prose if CJK.search(re.sub(r"`[^`]*`|\$[^$]*\$", "", p))]
    assert len(chinese) >= 0.95 * len(prose), f"{stem}: {len(prose) - len(chinese)} cells without Chinese"
    lines = [ln.strip() for p in prose for ln in p.splitlines()]
    for heading in ("## 准备工作", "## 小结", "## 练习", "**本章内容**"):
        assert heading in lines, f"{stem}: no {heading!r} (GLOSSARY-zh.md's fixed section names)"
    english = " ".join(c.source for c in twin.cells if c.cell_type == "markdown")
    assert "## Setup" not in english and "## Summary" not in english


def glossary() -> list[tuple[str, str]]:
    """(English, 中文) rows of chapters/zh/GLOSSARY.md's term table."""
    rows = []
    for line in (CHAPTERS / "zh" / "GLOSSARY.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and line.startswith("|") and not set(cells[0]) <= set("-: ") and cells[0] != "English":
            rows.append((cells[0], cells[1]))
    return rows


@pytest.mark.parametrize("stem", [s for s in TWINS if s not in NOT_YET_TRANSLATED])
def test_translated_twin_uses_the_glossary_terms(stem):
    """Where a glossary term's topic is taught in English, the Chinese uses the glossary's word."""
    english = " ".join(c.source for c in notebook_from_source(SRC / f"{stem}.py").cells
                       if c.cell_type == "markdown").lower()
    chinese = " ".join(c.source for c in zh.zh_notebook(stem).cells if c.cell_type == "markdown")
    def norm(s: str) -> str:  # "Kaiming（He）初始化" and "Kaiming 初始化" compare equal; a link's text counts
        s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # "[引言](00-introduction.ipynb)一章" reads 引言一章
        return re.sub(r"（[^）\u4e00-\u9fff]*）|\s", "", s)  # drop an English gloss, keep a Chinese aside

    text = norm(chinese)
    missing = []
    for en, zh_term in glossary():
        variants = [" ".join(re.sub(r"\([^)]*\)", "", v).split()).lower() for v in en.split(" / ")]
        if any(len(v) > 3 and re.search(rf"\b{re.escape(v)}", english) for v in variants):
            if not any(norm(t) and norm(t) in text for t in zh_term.split(" / ")):
                missing.append(f"{en} -> {zh_term}")
    assert not missing, f"{stem}: glossary terms taught in English but not used in Chinese: {missing}"


# ----------------------------------------------------------------------------- make lab-zh
def test_lab_zh_opens_the_chinese_chapter_00_in_chinese(tmp_path):
    """`make lab-zh`: the language pack is installed, the override selects it, the URL exists."""
    import importlib.metadata
    import json
    import subprocess

    from tools import lab_zh

    pack = importlib.metadata.version("jupyterlab-language-pack-zh-cn")
    lab = importlib.metadata.version("jupyterlab")
    assert pack.split(".")[0] == lab.split(".")[0] == "4", (pack, lab)
    kept = lab_zh.overrides({"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}})
    assert kept["@jupyterlab/translation-extension:plugin"] == {"locale": "zh_CN"}
    assert kept["@jupyterlab/notebook-extension:tracker"] == {"windowingMode": "none"}
    written = json.loads((lab_zh.write_settings(tmp_path) / "overrides.json").read_text())
    assert written["@jupyterlab/translation-extension:plugin"]["locale"] == "zh_CN"
    dry = subprocess.run(["make", "-n", "lab-zh"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "--LabApp.app_settings_dir=" in dry.stdout
    url = re.search(r"default_url=/lab/tree/(\S+\.ipynb)", dry.stdout).group(1)
    assert url == "chapters/zh/00-introduction.ipynb" and (ROOT / url).exists()


def test_update_carries_renamed_code_and_keeps_prose_changes_stale():
    renamed = zh.Entry(en="Use `gl.jacobians.vjp(f)` here.", zh="这里用 `gl.vjp(f)`。",
                       was="Use `gl.vjp(f)` here.", stale=True)
    assert zh.carry_code_changes(renamed) == [("`gl.vjp(f)`", "`gl.jacobians.vjp(f)`")]
    assert renamed.zh == "这里用 `gl.jacobians.vjp(f)`。" and not renamed.stale and renamed.was is None
    reworded = zh.Entry(en="Now call `gl.jacobians.vjp(f)` twice.", zh="这里用 `gl.vjp(f)`。",
                        was="Use `gl.vjp(f)` here.", stale=True)
    zh.carry_code_changes(reworded)
    assert reworded.stale and "`gl.jacobians.vjp(f)`" in reworded.zh, "prose changed: a translator must look"


# ----------------------------------------------------------------------------- phrasing rules
#: "多出 3 倍" reads as 4 times as much, "大了 3 倍"/"高出 3 倍"/"增长 1.04 倍" are read both ways:
#: a multiple is written "是……的 N 倍", "N 倍于", "变为原来的 N 倍" or "乘以 N".
AMBIGUOUS_MULTIPLE = re.compile(
    r"(多出|高出|大了|多了|高了|增长了?|增加了?|变化|翻了)\s*(约\s*)?(\{\w+\}|[0-9.]+|\$[^$]+\$|[a-zA-Z]|"
    r"[一二三四五六七八九十几两数百千万]+)\s*倍")
#: A quoted name or a repr field glued to Chinese: "'hidden_1'的信号" (GLOSSARY-zh.md: a space
#: between Chinese and Latin text).
GLUED = re.compile(r"(?:'[^'\s]{1,40}'|\{\w+!r\})(?=[\u4e00-\u9fff])|(?<=[\u4e00-\u9fff])(?:'[^'\s]{1,40}'|\{\w+!r\})")
#: The verdict "healthy" is 正常 everywhere (GLOSSARY-zh.md); 健康 is not used for it.
OTHER_VERDICT_WORD = "健康"
PO = ROOT / "gradlab" / "locale" / "zh_CN" / "LC_MESSAGES" / "gradlab.po"


def chinese_texts() -> list[tuple[str, str]]:
    """(where, text) for every Chinese text: each msgstr of the catalog and each zh of a yml
    (its code labels included)."""
    from tools import catalog as cat

    out = []
    for m in cat.read_catalog(PO, "zh_CN"):
        if m.id and m.string:
            for s in (m.string if isinstance(m.string, tuple | list) else (m.string,)):
                out.append((f"gradlab.po msgid {m.id!r}"[:90], s))
    for stem in TWINS:
        tr = zh.load(zh.translation_path(stem))
        out += [(f"{stem} cell {zh.label(e.en)!r}", e.zh) for e in tr.cells]
        out += [(f"{stem} code label {k!r}", v) for k, v in tr.code.items()]
    return out


def test_no_ambiguous_multiples():
    bad = [f"{where}: {m.group(0)!r}" for where, text in chinese_texts() for m in AMBIGUOUS_MULTIPLE.finditer(text)]
    assert not bad, "write a multiple as 是……的 N 倍 or 乘以 N:\n  " + "\n  ".join(bad)


def test_no_quoted_name_glued_to_chinese():
    bad = [f"{where}: {m.group(0)!r}" for where, text in chinese_texts() for m in GLUED.finditer(text)]
    assert not bad, "a space between a quoted name and Chinese text:\n  " + "\n  ".join(bad)


def test_one_word_for_the_healthy_verdict():
    bad = [where for where, text in chinese_texts() if OTHER_VERDICT_WORD in text]
    assert not bad, f"the verdict 'healthy' is 正常 (GLOSSARY-zh.md), not {OTHER_VERDICT_WORD}: {bad}"
    from tools import catalog as cat

    assert cat.read_catalog(PO, "zh_CN").get("healthy").string == "正常"


def test_epoch_is_lun():
    """"epoch" is 轮 (with "(epoch)" at its first use), not 轮次, 周期 or the bare English word."""
    bad = [f"{where}: {m.group(0)!r}" for where, text in chinese_texts()
           for m in re.finditer(r"轮次|周期|个 epoch|每个 epoch|一个 epoch", text)]
    assert not bad, bad


def test_the_playbook_is_named_in_chinese():
    """"Tuning Playbook" stands only in parentheses after 调优手册 (its first use)."""
    bad = [where for where, text in chinese_texts()
           if re.search(r"(?<!调优手册（)(?<!Deep Learning )Tuning Playbook", text)]
    assert not bad, bad


@pytest.mark.parametrize("stem", TWINS)
def test_stored_chinese_outputs_keep_chinese_typography(stem):
    """Output lines with Chinese use full-width punctuation and →, a measure word before a count of
    NaN, and no space before （ (tools/catalog.py OUTPUT_RULES; the stored outputs the book shows)."""
    from tools import catalog as cat

    bad = cat.notebook_typography(CHAPTERS / "zh" / f"{stem}.ipynb")
    assert not bad, f"{stem}: fix the label in chapters/zh/src/{stem}.yml or the catalog:\n  " + "\n  ".join(bad)


def test_output_typography_reads_only_chinese_lines(tmp_path):
    import json

    from tools import catalog as cat

    cell = {"cell_type": "code", "execution_count": 7, "source": "", "metadata": {}, "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["lr 0.3：w 0 -> 0.90，损失 4.000 -> 1.697\n",
                                                            "dy/dx: 6.0\n", "SGD, momentum=0.9: [0 2]\n"]},
        {"output_type": "execute_result", "execution_count": 7, "metadata": {},
         "data": {"text/plain": "深度 8: 增益 0.707, 比值 0.088"}}]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    found = cat.notebook_typography(path)
    assert [f.split(": '")[0] for f in found] == ["[7] '->' in Chinese text (write →)",
                                                "[7] ASCII ',', ':' or ';' before a Chinese character"], found
    assert not any("dy/dx" in f or "momentum" in f for f in found)


def test_the_rules_catch_what_they_forbid():
    assert AMBIGUOUS_MULTIPLE.search("稠密梯度多出 {factor} 倍") and AMBIGUOUS_MULTIPLE.search("损失高出 30 倍")
    assert AMBIGUOUS_MULTIPLE.search("每层增长约 1.04 倍") and AMBIGUOUS_MULTIPLE.search("大了 $10^8$ 倍")
    assert not AMBIGUOUS_MULTIPLE.search("损失是出发时的 30 倍") and not AMBIGUOUS_MULTIPLE.search("每层乘以 1.04")
    assert GLUED.search("'hidden_1'的信号") and GLUED.search("层{name!r}的") and not GLUED.search("'hidden_1' 的信号")
