"""gradlab's gettext catalogs: extract the template, update each language, compile, check.

    python tools/catalog.py extract   # gradlab/**/*.py -> gradlab/locale/gradlab.pot (Babel)
    python tools/catalog.py update    # merge the template into every <lang>/LC_MESSAGES/gradlab.po
    python tools/catalog.py compile   # every .po -> .mo (what gradlab.i18n reads)
    python tools/catalog.py all       # the three in order (`make catalog`)
    python tools/catalog.py check     # untranslated, fuzzy, placeholder and (Chinese) typography problems,
                                      # in the catalog and in the stored outputs of chapters/zh; exit 1 if any

Every message is a call ``_("...")``, ``N_("...")`` or ``ngettext("...", "...", n)`` in
``gradlab/`` (Babel's default keywords). A comment starting ``# TRANSLATORS:`` on the line
before such a call goes into the catalog beside the message. The template keeps file names
but no line numbers, so moving code does not change it. ``update`` keeps every translation,
marks a translation whose English changed a little as *fuzzy* (``#, fuzzy`` with the old
English as ``#| msgid``): a fuzzy translation is not used until a translator has checked it
and deleted the flag. ``tests/test_i18n.py`` runs the same functions in memory.
"""

from __future__ import annotations

import argparse
import io
import re
import string
import sys
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gradlab"
LOCALE_DIR = PACKAGE / "locale"
DOMAIN = "gradlab"
TEMPLATE = LOCALE_DIR / f"{DOMAIN}.pot"
#: Catalog locales (gettext names) next to the template; English is the source language.
LOCALES = ("zh_CN",)
COMMENT_TAGS = ("TRANSLATORS:",)
HEADER = (
    "# Messages of gradlab, the helper package of the gradlab workbook.\n"
    "# Extracted by tools/catalog.py; translate in <lang>/LC_MESSAGES/gradlab.po.\n#"
)


def po_path(locale: str) -> Path:
    return LOCALE_DIR / locale / "LC_MESSAGES" / f"{DOMAIN}.po"


def mo_path(locale: str) -> Path:
    return po_path(locale).with_suffix(".mo")


def extract_template() -> Catalog:
    """The template extracted from the code now (in memory; nothing is written)."""
    catalog = Catalog(domain=DOMAIN, project="gradlab", version="0.1.0", header_comment=HEADER,
                      charset="utf-8", fuzzy=False)
    for filename, _lineno, message, comments, context in extract_from_dir(
        str(PACKAGE), method_map=[("**.py", "python")], keywords=DEFAULT_KEYWORDS,
        comment_tags=COMMENT_TAGS, strip_comment_tags=True,
    ):
        catalog.add(message, None, [(f"gradlab/{filename}", None)], auto_comments=comments,
                    context=context)
    return catalog


def read_catalog(path: Path, locale: str | None = None) -> Catalog:
    with open(path, "rb") as fh:
        return read_po(fh, locale=locale, domain=DOMAIN)


def render(catalog: Catalog) -> bytes:
    """The ``.po``/``.pot`` text of ``catalog``: sorted, file names without line numbers."""
    buf = io.BytesIO()
    write_po(buf, catalog, width=100, sort_output=True, ignore_obsolete=True,
             include_previous=True, include_lineno=False)
    return buf.getvalue()


def write_catalog(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render(catalog))


def compiled(catalog: Catalog) -> bytes:
    """The ``.mo`` bytes of ``catalog`` (fuzzy translations left out, as gettext does)."""
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    return buf.getvalue()


def _key(value):
    return tuple(value) if isinstance(value, list | tuple) else value


def read_compiled(path: Path) -> dict:
    """``{msgid: msgstr}`` of a compiled catalog (header left out; plurals as tuples)."""
    with open(path, "rb") as fh:
        mo = read_mo(fh)
    return {_key(m.id): _key(m.string) for m in mo if m.id}


def translations(catalog: Catalog) -> dict:
    """``{msgid: msgstr}`` of the translations a ``.mo`` of ``catalog`` holds (plurals as tuples)."""
    return {_key(m.id): _key(m.string) for m in catalog if m.id and not m.fuzzy and _translated(m)}


def message_ids(catalog: Catalog) -> set:
    """Every message id of a catalog: a string, or (singular, plural) for ngettext."""
    return {m.id for m in catalog if m.id}


def _translated(m: Message) -> bool:
    strings = m.string if isinstance(m.string, tuple | list) else (m.string,)
    return bool(strings) and all(s and s.strip() for s in strings)


_FIELD = re.compile(r"(?<!\{)\{([^{}]*)\}")


def fields(text: str) -> list[str]:
    """The ``str.format`` fields of ``text``, sorted (``"{n} of {total:.3g}"`` -> ['n', 'total'])."""
    try:
        names = [name for _lit, name, _spec, _conv in string.Formatter().parse(text) if name is not None]
    except ValueError:  # a lone brace: compare the raw {...} groups instead
        names = _FIELD.findall(text)
    return sorted(names)


def placeholder_problems(m: Message) -> list[str]:
    """Why the translation of ``m`` does not carry exactly the English fields (empty: it does)."""
    ids = m.id if isinstance(m.id, tuple) else (m.id,)
    strings = m.string if isinstance(m.string, tuple | list) else (m.string,)
    out = []
    english = fields(ids[-1])  # the plural form has every field
    for name in english:
        if name == "" or name.isdigit():
            out.append(f"positional field {{{name}}} in the English (name every field)")
    for s in strings:
        if s and fields(s) != english:
            out.append(f"fields {fields(s)} in the translation, {english} in the English")
    return out


# Chinese typography (zh_CN): full-width punctuation carries no space after it, and ASCII
# punctuation never follows a Chinese character (the glue of English fragments shows as both).
_CJK = "\u3400-\u9fff\u3000-\u303f\uff00-\uffef"
TYPOGRAPHY_RULES: dict[str, re.Pattern] = {
    "a space after full-width punctuation": re.compile("[。，、；：！？（）“”][ \t]"),
    "ASCII ':' or ';' after a Chinese character": re.compile(f"[{_CJK}][:;]"),
    "ASCII ',' after a Chinese character": re.compile(f"[{_CJK}],"),
    "ASCII '.' closing a Chinese sentence": re.compile(f"[{_CJK}]\\.(?=$|\\s|[{_CJK}])"),
    "ASCII ',', ':' or ';' before a Chinese character": re.compile(f"(?<![{_CJK}])[,:;] ?[\u3400-\u9fff]"),
    "ASCII ':' after a Chinese word and its number (深度 6：)": re.compile(r"[\u3400-\u9fff] [\w.+-]+: (?![\u3400-\u9fff])"),
    "'->' in Chinese text (write →)": re.compile("->"),
    "a count without its measure word (118 个 NaN)": re.compile(r"(?<![\w.{])\d+ (?:NaN|Inf|inf)\b"),
    "a space before a full-width parenthesis": re.compile(r"[\w)\]] （"),
    "梯度检查 (the glossary's term for gradient check is 梯度检验)": re.compile("梯度检查"),
    "Python int / Python float in Chinese text (write Python 整数 / Python 浮点数)": re.compile(r"(?i)python (?:int|float)\b"),
}


def typography_problems(text: str) -> list[str]:
    """The Chinese typography rules ``text`` breaks (names of :data:`TYPOGRAPHY_RULES`)."""
    return [name for name, rule in TYPOGRAPHY_RULES.items() if rule.search(text)]


#: The rules for a stored output line of a Chinese notebook: only lines with Chinese characters
#: are read (code, tracebacks and English API messages keep their ASCII punctuation).
OUTPUT_RULES = ("ASCII ':' or ';' after a Chinese character", "ASCII ',' after a Chinese character",
                "ASCII ',', ':' or ';' before a Chinese character",
                "ASCII ':' after a Chinese word and its number (深度 6：)", "'->' in Chinese text (write →)",
                "a count without its measure word (118 个 NaN)", "a space before a full-width parenthesis")
_HAS_CHINESE = re.compile("[\u3400-\u9fff]")


def output_texts(notebook: dict):
    """(execution count, text) for every stored text output of a notebook (streams, text/plain)."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            yield cell.get("execution_count"), "".join(text) if isinstance(text, list) else text


def notebook_typography(path: Path) -> list[str]:
    """``[n] rule: line`` for every stored output line of the notebook at ``path`` that has Chinese
    characters and breaks one of :data:`OUTPUT_RULES` (each line once)."""
    import json

    out, seen = [], set()
    for count, text in output_texts(json.loads(Path(path).read_text(encoding="utf-8"))):
        for line in text.splitlines():
            if (count, line) in seen or not _HAS_CHINESE.search(line):
                continue
            seen.add((count, line))
            out += [f"[{count}] {name}: {line.strip()[:160]!r}" for name in OUTPUT_RULES
                    if TYPOGRAPHY_RULES[name].search(line)]
    return out


def catalog_typography(catalog: Catalog) -> list[str]:
    """``msgid: rule`` for every Chinese translation that breaks a typography rule."""
    out = []
    for m in catalog:
        if not m.id:
            continue
        for s in m.string if isinstance(m.string, tuple | list) else (m.string,):
            for why in typography_problems(s or ""):
                out.append(f"{m.id!r}: {why} in {s!r}")
    return out


def problems(catalog: Catalog, template: Catalog) -> dict[str, list[str]]:
    """What keeps ``catalog`` from translating every message of ``template`` correctly."""
    wanted = message_ids(template)
    found = {m.id: m for m in catalog if m.id}
    out: dict[str, list[str]] = {"untranslated": [], "fuzzy": [], "placeholders": [],
                                 "not in the template": []}
    for mid in sorted(wanted, key=str):
        m = found.get(mid)
        if m is None or not _translated(m):
            out["untranslated"].append(repr(mid))
        elif m.fuzzy:
            out["fuzzy"].append(repr(mid))
        for why in placeholder_problems(m) if m is not None else []:
            out["placeholders"].append(f"{mid!r}: {why}")
    out["not in the template"] = [repr(mid) for mid in sorted(set(found) - wanted, key=str)]
    return out


def template_is_current(written: Catalog, extracted: Catalog) -> tuple[set, set]:
    """(messages in the code but not in the template, messages in the template but not in the code)."""
    a, b = message_ids(extracted), message_ids(written)
    return a - b, b - a


# ----------------------------------------------------------------------------- commands
def _without_date(data: bytes) -> bytes:
    return re.sub(rb'"POT-Creation-Date: [^"]*"\n', b"", data)


def cmd_extract() -> None:
    template = extract_template()
    old = TEMPLATE.read_bytes() if TEMPLATE.exists() else b""
    if _without_date(render(template)) != _without_date(old):  # no churn when nothing changed
        write_catalog(template, TEMPLATE)
    print(f"{TEMPLATE.relative_to(ROOT)}: {len(message_ids(template))} messages")


def cmd_update() -> None:
    template = read_catalog(TEMPLATE)
    for locale in LOCALES:
        path = po_path(locale)
        if path.exists():
            catalog = read_catalog(path, locale=locale)
        else:
            catalog = Catalog(locale=locale, domain=DOMAIN, project="gradlab", version="0.1.0",
                              header_comment=HEADER, charset="utf-8", fuzzy=False)
        catalog.update(template, update_creation_date=False)
        write_catalog(catalog, path)
        p = problems(catalog, template)
        print(f"{path.relative_to(ROOT)}: {len(message_ids(template))} messages, "
              f"{len(p['untranslated'])} untranslated, {len(p['fuzzy'])} fuzzy")


def cmd_compile() -> None:
    for locale in LOCALES:
        catalog = read_catalog(po_path(locale), locale=locale)
        mo_path(locale).write_bytes(compiled(catalog))
        print(f"{mo_path(locale).relative_to(ROOT)}: {len(translations(catalog))} translations")


def cmd_check() -> int:
    template = extract_template()
    bad = 0
    missing, extra = template_is_current(read_catalog(TEMPLATE), template)
    if missing or extra:
        bad += 1
        print(f"gradlab.pot is out of date ({len(missing)} new, {len(extra)} gone): "
              "run `python tools/catalog.py all`")
    for locale in LOCALES:
        catalog = read_catalog(po_path(locale), locale=locale)
        found = problems(catalog, template)
        if locale.startswith("zh"):
            found["typography"] = catalog_typography(catalog)
            found["typography in stored outputs"] = [
                f"{nb.relative_to(ROOT)} {item}" for nb in sorted((ROOT / "chapters" / "zh").glob("*.ipynb"))
                for item in notebook_typography(nb)]
        for kind, items in found.items():
            if items:
                bad += 1
                print(f"{locale}: {len(items)} {kind}:")
                for item in items:
                    print("   ", item)
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["extract", "update", "compile", "all", "check"])
    args = ap.parse_args(argv)
    if args.command == "check":
        return cmd_check()
    if args.command in ("extract", "all"):
        cmd_extract()
    if args.command in ("update", "all"):
        cmd_update()
    if args.command in ("compile", "all"):
        cmd_compile()
    return 0


if __name__ == "__main__":
    sys.exit(main())
