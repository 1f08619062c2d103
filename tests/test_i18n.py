"""gradlab speaks Chinese: complete catalogs, the same placeholders, a current template, fonts.

The catalogs (gradlab/locale/) are built by tools/catalog.py; these tests run its functions in
memory against the committed files:

- the template (gradlab.pot) holds exactly the messages the code marks today;
- every message has a Chinese translation that is not fuzzy, with the English placeholders;
- the compiled .mo is the .po's current compilation (gradlab reads only the .mo);
- gl.setup(lang=...) and GRADLAB_LANG switch the texts, and back;
- the code keeps the rules that make extraction work (literal messages, no `_` rebinding,
  English argument errors);
- a figure with every Chinese text draws without a missing glyph, from the packaged font.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from babel.messages.catalog import Catalog

from tools import catalog as cat

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

import gradlab as gl  # noqa: E402
from gradlab import fonts, i18n  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZH = "zh_CN"


@pytest.fixture(scope="module")
def extracted() -> Catalog:
    return cat.extract_template()


@pytest.fixture(scope="module")
def zh_po() -> Catalog:
    return cat.read_catalog(cat.po_path(ZH), locale=ZH)


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    i18n.set_language("en")


def listing(items, limit=40) -> str:
    shown = "\n  ".join(items[:limit])
    more = f"\n  ... and {len(items) - limit} more" if len(items) > limit else ""
    return f"\n  {shown}{more}"


# ----------------------------------------------------------------------------- the catalogs
def test_template_is_current(extracted):
    new, gone = cat.template_is_current(cat.read_catalog(cat.TEMPLATE), extracted)
    assert not new and not gone, (
        "gradlab/locale/gradlab.pot is out of date: run `python tools/catalog.py all` (make catalog)."
        + (f"\nnew in the code:{listing(sorted(map(repr, new)))}" if new else "")
        + (f"\nno longer in the code:{listing(sorted(map(repr, gone)))}" if gone else "")
    )


def test_every_message_has_a_chinese_translation(extracted, zh_po):
    p = cat.problems(zh_po, extracted)
    missing = p["untranslated"] + [f"{m} (fuzzy: check it, then delete the flag)" for m in p["fuzzy"]]
    assert not missing, (
        f"{len(missing)} of {len(cat.message_ids(extracted))} messages have no Chinese translation "
        f"in {cat.po_path(ZH).relative_to(ROOT)}:{listing(missing)}"
    )


def test_translations_keep_the_english_placeholders(zh_po):
    bad = [f"{m.id!r}: {why}" for m in zh_po if m.id for why in cat.placeholder_problems(m)]
    assert not bad, "translations whose {placeholders} differ from the English:" + listing(bad)


def test_catalog_holds_only_messages_of_the_template(extracted, zh_po):
    extra = cat.problems(zh_po, extracted)["not in the template"]
    assert not extra, "messages the code no longer has (run `make catalog`):" + listing(extra)


def test_translations_format_with_the_english_fields(zh_po):
    """Each translation formats with exactly the fields the code passes (no stray braces)."""
    for mid, text in cat.translations(zh_po).items():
        english = mid[-1] if isinstance(mid, tuple) else mid
        for s in text if isinstance(text, tuple | list) else (text,):
            names = cat.fields(english)
            if not names:
                continue
            s.format(**{n.split(".")[0].split("[")[0]: 1.0 for n in names})


def test_compiled_catalog_is_current(zh_po):
    assert cat.mo_path(ZH).is_file(), "no compiled catalog: run `python tools/catalog.py compile`"
    assert cat.read_compiled(cat.mo_path(ZH)) == cat.translations(zh_po), (
        "gradlab.mo is not the compilation of gradlab.po: run `python tools/catalog.py compile`"
    )


# ----------------------------------------------------------------------------- the checker can fail
def test_checker_reports_a_missing_translation_and_wrong_placeholders():
    template = Catalog(locale=None)
    template.add("ratio {ratio} over {depth} layers")
    template.add("healthy")
    template.add("vanishing")
    po = Catalog(locale=ZH)
    po.add("ratio {ratio} over {depth} layers", "比值 {ratio}，共 {layers} 层")  # a renamed field
    po.add("healthy", "正常")
    p = cat.problems(po, template)
    assert p["untranslated"] == ["'vanishing'"]
    assert len(p["placeholders"]) == 1 and "['depth', 'ratio']" in p["placeholders"][0]
    assert cat.fields("{n} of {total:.3g}") == ["n", "total"]
    assert cat.placeholder_problems(template.get("healthy")) == []
    positional = Catalog(locale=ZH)
    positional.add("{} layers", "{} 层")
    assert "positional" in cat.placeholder_problems(positional.get("{} layers"))[0]


# ----------------------------------------------------------------------------- switching
def translated_pair(zh_po) -> tuple[str, str]:
    for mid, text in sorted(cat.translations(zh_po).items(), key=str):
        if isinstance(mid, str) and text != mid:
            return mid, text
    pytest.fail("the Chinese catalog translates nothing yet")


def test_setup_switches_language_and_back(zh_po):
    english, chinese = translated_pair(zh_po)
    gl.setup(seed=0, lang="zh")
    assert i18n.get_language() == "zh"
    assert i18n._(english) == chinese
    gl.setup(seed=0)  # lang=None keeps the current language
    assert i18n._(english) == chinese
    gl.setup(seed=0, lang="en")
    assert i18n._(english) == english


def test_plot_text_follows_the_language():
    gl.setup(seed=0, lang="zh")
    fig = gl.plots.plot_jacobian(np.eye(3))
    zh_labels = (fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel())
    gl.setup(seed=0, lang="en")
    fig_en = gl.plots.plot_jacobian(np.eye(3))
    en_labels = (fig_en.axes[0].get_xlabel(), fig_en.axes[0].get_ylabel())
    plt.close("all")
    assert en_labels == ("input element (flattened x)", "output element (flattened y)")
    assert zh_labels != en_labels and all(any("\u4e00" <= ch <= "\u9fff" for ch in s) for s in zh_labels)


def test_unknown_language_and_missing_catalog_raise(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="lang must be one of"):
        gl.setup(seed=0, lang="fr")
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="compiled 'zh' catalog"):
        i18n.set_language("zh")
    monkeypatch.setenv("GRADLAB_LANG", "zh-CN")
    assert i18n.language_from_env() == "zh"
    monkeypatch.setenv("GRADLAB_LANG", "klingon")
    with pytest.raises(ValueError, match="GRADLAB_LANG"):
        i18n.language_from_env()


def test_environment_variable_selects_chinese_at_import(zh_po):
    english, chinese = translated_pair(zh_po)
    code = ("import sys, gradlab; from gradlab.i18n import _, get_language; "
            "sys.stdout.write(get_language() + '|' + _(sys.argv[1]))")
    env = dict(os.environ, GRADLAB_LANG="zh")
    out = subprocess.run([sys.executable, "-c", code, english], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == f"zh|{chinese}"


# ----------------------------------------------------------------------------- the code's side
def modules_that_translate() -> list[Path]:
    out = []
    for path in sorted((ROOT / "gradlab").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("i18n"):
                if any(a.name == "_" for a in node.names):
                    out.append(path)
                    break
    return out


def _names_bound(target) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def test_no_module_that_translates_rebinds_underscore():
    """`for _ in ...` or `a, _ = ...` in a function makes `_` local: `_("...")` then fails.

    (A comprehension's `for _ in` has its own scope and is harmless.)
    """
    bad = []
    for path in modules_that_translate():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
                targets = [node.target]
            elif isinstance(node, ast.With | ast.AsyncWith):
                targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
            elif isinstance(node, ast.ExceptHandler) and node.name == "_":
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            for t in targets:
                if "_" in _names_bound(t):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "`_` is the translation function here; use another throwaway name at:" + listing(bad)


def test_messages_are_literals_and_errors_stay_english():
    """Babel extracts only literal strings; argument errors are not translated (issue 22)."""
    bad = []
    for path in sorted((ROOT / "gradlab").rglob("*.py")):
        rel = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("_", "N_"):
                arg = node.args[0] if node.args else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                marked_constant = node.func.id == "_" and isinstance(arg, ast.Name | ast.Attribute | ast.Subscript)
                if len(node.args) != 1 or not (literal or marked_constant):
                    bad.append(f"{rel}:{node.lineno}: {node.func.id}() of {ast.unparse(arg) if arg else '()'}")
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                if name in ("ValueError", "TypeError") and any(
                    isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_" for n in ast.walk(node.exc)
                ):
                    bad.append(f"{rel}:{node.lineno}: a translated {name} (argument errors stay English)")
    assert not bad, "messages Babel cannot extract, or translated errors:" + listing(bad)


def test_no_message_inside_an_f_string():
    """Babel does not extract ``_("...")`` written inside an f-string: such a text never reaches the catalog."""
    bad = []
    for path in modules_that_translate():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr) and any(  # _(a_marked_constant) is fine: N_ marked it
                isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("_", "N_") and n.args
                and isinstance(n.args[0], ast.Constant) for n in ast.walk(node)
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "_() inside an f-string (hoist it into a variable first):" + listing(bad)


# ----------------------------------------------------------------------------- whole sentences
def test_chinese_translations_keep_chinese_typography(zh_po):
    """No space after 。，：；…, no ASCII ':' ';' ',' '.' right after a Chinese character, 梯度检验."""
    bad = cat.catalog_typography(zh_po)
    assert not bad, "Chinese translations that break the typography rules (tools/catalog.py):" + listing(bad)


def test_typography_checker_names_glued_fragments():
    # the glue that English joiners left in Chinese outputs (board, T01/T06/T07)
    assert cat.typography_problems("阈值 0.001。 试试 relu。") == ["a space after full-width punctuation"]
    assert cat.typography_problems("依赖这些变量: Round") == ["ASCII ':' or ';' after a Chinese character"]
    assert cat.typography_problems("没有梯度（操作 'Round'）.修正方法") == ["ASCII '.' closing a Chinese sentence"]
    assert cat.typography_problems("请设置 'a'、'b' 中的一项, 然后") == ["ASCII ',' after a Chinese character"]
    assert cat.typography_problems("梯度检查通过") and not cat.typography_problems("梯度检验通过")
    # code inside Chinese text is fine
    assert cat.typography_problems("请让计算保持在 TensorFlow 操作中：.numpy() 和 np.* 会离开梯度带。") == []


def test_typography_checker_names_what_the_chinese_reader_found():
    """Issue 37: the half-width punctuation, arrows, counts and spaces a native reader marked."""
    assert cat.typography_problems("深度 8: 增益 0.707") == ["ASCII ',', ':' or ';' before a Chinese character"]
    assert cat.typography_problems("post-LN, 无预热") == ["ASCII ',', ':' or ';' before a Chinese character"]
    assert cat.typography_problems("初始化时 -> 训练后") == ["'->' in Chinese text (write →)"]
    assert cat.typography_problems("在 Pow 中（'pow'，118 NaN）") == ["a count without its measure word (118 个 NaN)"]
    assert cat.typography_problems("1e-3 到 0.1 （梯度消失）") == ["a space before a full-width parenthesis"]
    assert cat.typography_problems("深度 6: ratio 0.000928") == ["ASCII ':' after a Chinese word and its number (深度 6：)"]
    assert cat.typography_problems("Python int（1）也会再次跟踪") == [
        "Python int / Python float in Chinese text (write Python 整数 / Python 浮点数)"]
    # what is right stays quiet: full-width marks, →, 个, code and English glued to nothing Chinese
    for fine in ("深度 8：增益 0.707，比值 0.088", "初始化时 → 训练后", "（'pow'，118 个 NaN）", "1e-3 到 0.1（梯度消失）",
                 "SGD(0.1, momentum=0.9) 的步长", "clipped, norm = tf.clip_by_global_norm(grads, c)", "{n} 个值中有 {bad} 个是 NaN",
                 "Python 整数（1）也会再次跟踪"):
        assert cat.typography_problems(fine) == [], fine


def test_joiners_follow_the_language():
    assert i18n.join_sentences("It vanishes.", "", "Try relu.") == "It vanishes. Try relu."
    assert i18n.join_sentences(["A.", "B."]) == "A. B."
    assert i18n.join_list(["a", "b", "c"]) == "a, b, c" and i18n.join_list([]) == ""
    assert i18n.join_clauses(["a", "b"]) == "a; b"
    assert i18n.end_sentence("a") == "a." and i18n.end_sentence("a.") == "a." and i18n.end_sentence("") == ""
    i18n.set_language("zh")
    assert i18n.join_sentences("梯度消失。", "试试 relu。") == "梯度消失。试试 relu。"
    assert i18n.join_list(["a", "b", "c"]) == "a、b、c"
    assert i18n.join_clauses(["甲", "乙"]) == "甲；乙"
    assert i18n.end_sentence("甲") == "甲。" and i18n.end_sentence("甲。") == "甲。"


def _composed_texts() -> list[str]:
    """Texts gradlab builds from several translated pieces (verdict + advice, finding + note, ...)."""
    import tensorflow as tf

    texts = [gl.reports.verdict.judge([1e-5, 1e-3, 1e-1, 1.0]).message,  # finding + advice
             gl.reports.verdict.judge(np.geomspace(40.0, 1.0, 100)).message,  # finding + the compounding note
             gl.reports.verdict.judge([1e-3, 1.0], names=["'dense'", "'dense_1'"]).message]
    texts.append(gl.check_gradient(lambda t: t**3, tf.constant([1.0, 2.0])).message)  # + the float64 cast note
    texts.append(gl.check_gradient(lambda t: tf.abs(t), tf.constant([0.0, 0.0, 2.0], tf.float64)).message)
    xs = tf.Variable([-4.0, 0.0, 4.0])
    texts.append(str(gl.find_nonfinite_source(lambda: tf.reduce_sum(tf.sqrt(xs * xs)), [xs])))
    v = tf.Variable([0.0, 1.0])
    texts.append(str(gl.find_nonfinite_source(lambda: tf.reduce_sum(tf.math.log(v * v)), [v])))
    c = tf.Variable([1.0, 2.0])
    texts += list(gl.explain_none_gradients(lambda: tf.reduce_sum(tf.stop_gradient(c) + tf.round(c)), [c]).values())
    return texts


def test_composed_chinese_texts_are_whole_chinese_sentences():
    i18n.set_language("zh")
    texts = _composed_texts()
    bad = [f"{why}: {t!r}" for t in texts for why in cat.typography_problems(t)]
    assert not bad, "composed Chinese texts with English glue:" + listing(bad)
    assert all(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in texts), texts
    i18n.set_language("en")
    english = _composed_texts()
    assert all("  " not in t and ". ." not in t and not t.endswith(" ") for t in english), english
    assert "below the threshold 0.001 for the total ratio. Use an initializer" in english[0]


# ----------------------------------------------------------------------------- Chinese figures
def test_cjk_font_is_the_packaged_file():
    path = fonts.cjk_font_path()
    assert path is not None and path.is_file(), "pip install -r requirements.txt (pylopdf-fonts-zh-cn)"
    assert "site-packages" in path.parts and path.parent.name == "pylopdf_fonts_zh_cn", path
    gl.setup(seed=0)
    assert matplotlib.rcParams["font.family"][-1] == fonts.CJK_FAMILY
    found = Path(font_manager.findfont(font_manager.FontProperties(family=[fonts.CJK_FAMILY]),
                                       fallback_to_default=False))
    default = Path(font_manager.findfont(font_manager.FontProperties(family=["sans-serif"])))
    # DejaVu Sans first (English figures unchanged), then the packaged file by its path: a
    # system CJK font (Debian's fonts-noto-cjk on a developer's machine) must not hide a
    # missing package, since CI's fresh machine would not have it
    assert default.name == "DejaVuSans.ttf" and found == path, (default, found)


def test_every_chinese_text_draws_without_a_missing_glyph(zh_po):
    """Every glyph a translation brings, drawn as title, label, legend and text, plus a real plot."""
    gl.setup(seed=0, lang="zh")
    chars = set("梯度消失与梯度爆炸 · 雅可比矩阵（Jacobian）：第 3 层 −1.5e-3，‖g‖₂ ≈ 2×10³")
    for mid, v in cat.translations(zh_po).items():
        english = "".join(mid) if isinstance(mid, tuple) else mid
        for s in v if isinstance(v, tuple | list) else (v,):
            # what the translation brings: characters the English does not already have (an
            # emoji such as ✅ is in neither font, in either language, and is printed, not drawn)
            chars |= {ch for ch in s if ch not in english and not ch.isspace()}
    ordered = sorted(chars)
    texts = ["".join(ordered[i:i + 60]) for i in range(0, len(ordered), 60)]  # each glyph once
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig, ax = plt.subplots(figsize=(8, 6))
        ax.set_title(texts[0])
        ax.set_xlabel(texts[-1])
        for k, s in enumerate(texts):  # one text artist per line of glyphs: one draw renders all
            ax.text(0.0, k, s, fontsize=6)
        ax.plot([0, 1], [0, 1], label=texts[len(texts) // 2])
        ax.legend()
        ax.set_ylim(-1, len(texts))
        fig.canvas.draw()
        plt.close(fig)
        fig = gl.plots.plot_jacobian(np.eye(3), title="示例：对角雅可比矩阵")
        fig.canvas.draw()
        plt.close("all")
    missing = sorted({str(w.message) for w in caught if "missing from font" in str(w.message)})
    assert not missing, "glyphs missing in a Chinese figure:" + listing(missing)


def test_pad_counts_wide_characters_as_two_columns():
    assert i18n.text_width("梯度消失") == 8 and i18n.text_width("ratio，1") == 8 and i18n.text_width("é") == 1
    assert i18n.pad("梯度", 6) == "梯度  " and i18n.pad("梯度", 6, ">") == "  梯度"
    assert i18n.pad("ab", 5, "^") == " ab  " == f"{'ab':^5}"
    assert i18n.pad("梯度消失", 3) == "梯度消失"  # wider than the column: unchanged
    with pytest.raises(ValueError, match="align"):
        i18n.pad("x", 3, "left")


def test_chinese_tables_line_up_by_display_width():
    """format_timings and format_shape_table: every row's columns start at the same display
    column in Chinese (with len() the Chinese header would stand out of line)."""
    from gradlab.topics.jacobians import ShapeRow, format_shape_table
    from gradlab.topics.tracing import StepTiming, format_timings

    gl.setup(seed=0, lang="zh")
    rows = format_timings([StepTiming("eager", 0.03, 0.01, np.ones(3)),
                           StepTiming("XLA", 0.3, 0.001, np.ones(3))]).splitlines()
    assert i18n.text_width(rows[0]) == i18n.text_width(rows[1]) == i18n.text_width(rows[2]), rows
    assert any(i18n.text_width(ch) == 2 for ch in rows[0]), "the header should be Chinese"
    fields = [f.name for f in dataclasses.fields(ShapeRow)]
    row = ShapeRow(**{f: ("(2, 3)" if f in ("target", "source") else "(2, 3, 4)") for f in fields})
    table = format_shape_table([row]).splitlines()
    starts = [[i18n.text_width(ln[:m.start()]) for m in re.finditer(r"(?<=  )\S", ln)]
              for ln in (table[0], table[2])]
    assert starts[0] == starts[1], table


def test_tidy_spacing_reads_right_for_names_and_chinese_fields():
    gl.setup(seed=0, lang="zh")
    assert i18n.tidy_spacing("'hidden_1'的信号是第 5 层 的 2 倍") == "'hidden_1' 的信号是第 5 层的 2 倍"
    chinese = gl.judge([1e-4, 1e-3, 1e-2, 0.1, 1.0]).finding
    named = gl.judge([1e-4, 1e-3, 1e-2, 0.1, 1.0], names=["'hidden_1'", "'b'", "'c'", "'d'", "'out'"]).finding
    assert "第 1 层的信号是第 5 层的" in chinese, chinese
    assert "'hidden_1' 的信号是 'out' 的" in named, named
    gl.setup(seed=0, lang="en")
    assert i18n.tidy_spacing("'a'的 b") == "'a'的 b"  # other languages: unchanged
