"""The PDF of each edition (``make pdf`` -> build/pdf/gradlab-<lang>.pdf), read back with pypdf.

Per edition: every chapter is in the outline, with its sections, and in the text; the contents
give each chapter's page; no replacement character, no radical standing for an ideograph, no
character that no installed font draws (a box); every font embedded; an image for every
figure the notebooks store and a "where it moves" line for every explorer; every internal
link resolves to a destination, and no link points at a local file; at most 80 MB. The
Chinese PDF's text can be searched (梯度消失, with pdftotext too where poppler is installed).

The expected values come from the notebooks themselves (titles, headings, stored PNGs,
explorer outputs), not from the PDF builder. Skipped when the PDFs are not built (``make pdf``);
under ``CI=true`` a missing PDF fails.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / "build" / "pdf"
CHAPTERS = {"en": ROOT / "chapters", "zh": ROOT / "chapters" / "zh"}
MAX_BYTES = 80 * 1024 * 1024
EXPLORER_LINE = {"en": "Explorer: the picture of its stored state", "zh": "探索器：这里是它保存时状态的图片"}
RADICALS = re.compile("[\u2e80-\u2fdf]")
WS = re.compile(r"\s+")

pypdf = pytest.importorskip("pypdf", reason="pypdf is not installed: `pip install -r requirements.txt`")


def notebooks(lang: str) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) | {"_path": p}
            for p in sorted(CHAPTERS[lang].glob("[0-9][0-9]-*.ipynb"))]


def src(cell) -> str:
    s = cell.get("source", "")
    return s if isinstance(s, str) else "".join(s)


def plain(md: str) -> str:
    """A Markdown heading as text: no backticks, emphasis or link syntax."""
    md = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", md)
    return re.sub(r"[`*]", "", md).strip()


def headings(nb: dict) -> list[tuple[int, str]]:
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown" or cell.get("metadata", {}).get("gradlab_nav"):
            continue
        fence = False
        for line in src(cell).splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                out.append((len(m.group(1)), plain(m.group(2))))
    return out


def explorer_names() -> set[str]:
    tree = ast.parse((ROOT / "gradlab" / "widgets" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("gradlab/widgets/__init__.py has no __all__")


def stored(lang: str) -> tuple[set[str], int]:
    """The distinct stored PNGs of an edition, and its explorer outputs."""
    names, pngs, explorers = explorer_names(), set(), 0
    for nb in notebooks(lang):
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "image/png" not in data:
                    continue
                png = data["image/png"]
                pngs.add(hashlib.sha1(base64.b64decode(png if isinstance(png, str) else "".join(png))).hexdigest())
                text = data.get("text/plain", "")
                text = text if isinstance(text, str) else "".join(text)
                m = re.match(r"(\w+)\(", text)
                explorers += "application/vnd.jupyter.widget-view+json" in data or bool(m and m.group(1) in names)
    return pngs, explorers


@pytest.fixture(scope="module", params=["en", "zh"])
def book(request):
    lang = request.param
    path = PDF / f"gradlab-{lang}.pdf"
    if not path.exists():
        reason = f"{path.relative_to(ROOT)} is not built: run `make pdf` (about 2 minutes on 2 cores)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    reader = pypdf.PdfReader(path)
    if shutil.which("pdftotext"):  # poppler: seconds, where pypdf takes minutes over Type 3 fonts
        out = subprocess.run(["pdftotext", "-raw", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True,
                             check=True).stdout
        pages = out.split("\f")[: len(reader.pages)]
    else:
        pages = [p.extract_text() or "" for p in reader.pages]
    return {"lang": lang, "path": path, "reader": reader, "pages": pages, "text": "\n".join(pages)}


def outline(reader) -> list[tuple[object, list]]:
    """``[(chapter item, [(section item, [subsections])...])...]``."""
    def nest(items):
        out = []
        for item in items:
            if isinstance(item, list):
                out[-1] = (out[-1][0], nest(item))
            else:
                out.append((item, []))
        return out

    return nest(reader.outline)


def test_size_and_pages(book):
    assert book["path"].stat().st_size <= MAX_BYTES
    assert len(book["pages"]) > 50


def test_every_chapter_and_section_in_the_outline_and_the_text(book):
    reader, lang = book["reader"], book["lang"]
    tree = outline(reader)
    nbs = notebooks(lang)
    assert len(tree) == len(nbs), [t[0].title for t in tree]
    flat = WS.sub("", book["text"])
    last = -1
    for (item, children), nb in zip(tree, nbs, strict=True):
        hs = headings(nb)
        key = nb["_path"].name[:2]
        assert hs[0][0] == 1
        assert item.title == f"{key} · {hs[0][1]}"
        assert WS.sub("", hs[0][1]) in flat, f"chapter {key}'s title is not in the text"
        sections = [t for level, t in hs if level == 2]
        assert [c[0].title for c in children] == sections, f"chapter {key}'s sections"
        page = reader.get_destination_page_number(item)
        assert page > last, f"chapter {key} does not follow the chapter before it"
        last = page
        for sec, subs in children:
            assert reader.get_destination_page_number(sec) >= page
            for sub, _ in subs:
                assert reader.get_destination_page_number(sub) >= reader.get_destination_page_number(sec)


def test_the_contents_give_each_chapters_page(book):
    reader = book["reader"]
    tree = outline(reader)
    first = reader.get_destination_page_number(tree[0][0])
    contents = WS.sub("", "".join(book["pages"][1:first]))
    for item, _ in tree:
        key, title = item.title.split(" · ", 1)
        entry = f"{key}{WS.sub('', title)}{reader.get_destination_page_number(item) + 1}"
        assert entry in contents, f"the contents lack {entry!r}"


def test_no_replacement_characters_radicals_or_boxes(book):
    text = book["text"]
    assert "\ufffd" not in text
    mapped = "".join(cmap_text(f) for f in fonts(book["reader"]) if "/ToUnicode" in f)
    assert not RADICALS.findall(mapped), f"radicals in place of ideographs: {sorted(set(RADICALS.findall(mapped)))[:10]}"
    if shutil.which("fc-list") is None:
        pytest.skip("fontconfig's fc-list is not installed: cannot check that every character has a font")
    covered = font_coverage()
    missing = sorted({ch for ch in text if ord(ch) > 0x7e and not ch.isspace() and ord(ch) not in covered})
    assert not missing, f"characters no installed font draws (boxes in the PDF): {missing}"


def font_coverage() -> set[int]:
    """Every code point some installed font covers (fontconfig's charset ranges)."""
    out = subprocess.run(["fc-list", "--format", "%{charset}\n"], capture_output=True, text=True, check=True).stdout
    covered = set()
    for rng in re.findall(r"[0-9a-f]+(?:-[0-9a-f]+)?", out):
        lo, _, hi = rng.partition("-")
        covered.update(range(int(lo, 16), int(hi or lo, 16) + 1))
    return covered


def fonts(reader):
    """Every font dictionary used on a page, in forms and in Type 3 glyphs, once."""
    seen, out = set(), []

    def walk(res):
        if res is None:
            return
        res = res.get_object()
        for ref in list((res.get("/Font") or {}).values()) + list((res.get("/XObject") or {}).values()):
            key = getattr(ref, "idnum", id(ref))
            if key in seen:
                continue
            seen.add(key)
            obj = ref.get_object()
            if obj.get("/Type") == "/Font" or "/Subtype" in obj and obj.get("/Subtype") in ("/Type0", "/Type1", "/TrueType", "/Type3"):
                out.append(obj)
            walk(obj.get("/Resources"))

    for page in reader.pages:
        walk(page.get("/Resources"))
    return out


def embedded(font) -> bool:
    if font["/Subtype"] == "/Type3":
        return len(font.get("/CharProcs") or {}) > 0
    desc = font
    if font["/Subtype"] == "/Type0":
        desc = font["/DescendantFonts"][0].get_object()
    fd = desc.get("/FontDescriptor")
    fd = fd.get_object() if fd is not None else {}
    return any(k in fd for k in ("/FontFile", "/FontFile2", "/FontFile3"))


def test_every_font_embedded(book):
    fs = fonts(book["reader"])
    assert fs
    bare = [str(f.get("/BaseFont")) for f in fs if not embedded(f)]
    assert not bare, f"fonts not embedded: {bare}"
    if shutil.which("pdffonts"):
        rows = subprocess.run(["pdffonts", str(book["path"])], capture_output=True, text=True, check=True).stdout
        for row in rows.splitlines()[2:]:
            cols = row.split()
            assert cols[-5] == "yes", f"pdffonts: not embedded: {row}"


def test_chinese_text_is_searchable(book):
    if book["lang"] != "zh":
        pytest.skip("the Chinese edition's check")
    flat = WS.sub("", book["text"])
    for word in ("梯度消失", "梯度爆炸", "梯度裁剪"):
        assert word in flat
    cjk_fonts = [f for f in fonts(book["reader"]) if "/ToUnicode" in f and embedded(f)
                 and re.search("[\u4e00-\u9fff]", cmap_text(f))]
    assert cjk_fonts, "no embedded font maps its glyphs to Chinese characters"
    if shutil.which("pdftotext"):
        out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(book["path"]), "-"], capture_output=True,
                             text=True, check=True).stdout
        assert "梯度消失" in out


def cmap_text(font) -> str:
    """The characters a font's ToUnicode map gives its glyphs (the destinations, not the codes)."""
    data = font["/ToUnicode"].get_object().get_data().decode("latin-1")
    dsts = re.findall(r"^<[0-9A-Fa-f]+>\s*<([0-9A-Fa-f]+)>\s*$", data, re.M)
    dsts += re.findall(r"^<[0-9A-Fa-f]+>\s*<[0-9A-Fa-f]+>\s*<([0-9A-Fa-f]+)>\s*$", data, re.M)
    return "".join(bytes.fromhex(h).decode("utf-16-be", errors="ignore") for h in dsts if len(h) % 4 == 0)


def images(reader) -> set:
    seen, found = set(), set()

    def walk(res):
        if res is None:
            return
        res = res.get_object()
        for ref in (res.get("/XObject") or {}).values():
            key = getattr(ref, "idnum", id(ref))
            if key in seen:
                continue
            seen.add(key)
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                found.add(key)
            else:
                walk(obj.get("/Resources"))

    for page in reader.pages:
        walk(page.get("/Resources"))
    return found


def test_every_stored_figure_and_explorer(book):
    pngs, explorers = stored(book["lang"])
    assert len(images(book["reader"])) >= len(pngs)
    assert WS.sub("", book["text"]).count(WS.sub("", EXPLORER_LINE[book["lang"]])) == explorers


def test_links_resolve(book):
    reader = book["reader"]
    names = {str(k) for k in reader.named_destinations}
    internal, bad, local = 0, [], []
    for i, page in enumerate(reader.pages):
        for annot in page.get("/Annots") or []:
            a = annot.get_object()
            if a.get("/Subtype") != "/Link":
                continue
            dest = a.get("/Dest")
            action = a.get("/A")
            if action is not None:
                action = action.get_object()
                if action.get("/S") == "/URI":
                    uri = str(action["/URI"])
                    if not re.match(r"https?://", uri):
                        local.append(uri)
                    continue
                dest = action.get("/D")
            if dest is None:
                bad.append((i + 1, "no destination"))
                continue
            internal += 1
            if isinstance(dest, (str, bytes)) or hasattr(dest, "decode"):
                if str(dest) not in names and f"/{dest}" not in names:
                    bad.append((i + 1, str(dest)))
            elif not dest[0].get_object().get("/Type") == "/Page":
                bad.append((i + 1, repr(dest)))
    assert not bad, f"links whose destination is missing: {bad[:10]}"
    assert not local, f"links to local files: {local[:5]}"
    md_links = sum(len(re.findall(r"\]\((?:\d\d-[\w.-]+\.ipynb)?#[^)]+\)|\]\(\d\d-[\w.-]+\.ipynb\)", src(c)))
                   for nb in notebooks(book["lang"]) for c in nb["cells"]
                   if c["cell_type"] == "markdown" and not c.get("metadata", {}).get("gradlab_nav"))
    assert internal >= md_links > 0
