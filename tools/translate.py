"""The translator's tool for the Chinese edition (guide: chapters/zh/TRANSLATING.md).

    python tools/translate.py status          # every chapter: current / stale / untranslated / orphaned
    python tools/translate.py status 02 -v    # one chapter, every cell that needs work, with diffs
    python tools/translate.py init 03         # start chapters/zh/src/03-*.yml: every cell untranslated
    python tools/translate.py update 02       # realign with the English: mark stale, add new cells

``update`` never loses a translation: a changed English cell keeps its Chinese text, gets
``stale: true`` and the old English under ``was`` (with the difference as a comment). Code in
backticks renamed in the English (``gl.vjp`` -> ``gl.topics.jacobians.vjp``) is renamed in the Chinese
too, and a cell whose English changed only in such code is current again; a new
English cell gets an empty ``zh``; a translation whose English cell is gone moves to
``orphans:`` at the end of the file. Then edit the ``zh`` texts, delete ``stale``/``was``,
and rebuild the twin: ``python tools/build_notebooks.py --lang zh 02``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools import zh  # noqa: E402
from tools.nbtools import SRC, notebook_from_source  # noqa: E402


def stems(prefixes: list[str]) -> list[str]:
    every = [p.stem for p in sorted(SRC.glob("[0-9][0-9]-*.py"))]
    if not prefixes:
        return every
    chosen = [s for s in every if any(s.startswith(p) for p in prefixes)]
    if not chosen:
        raise SystemExit(f"no chapter starts with {prefixes}; chapters: {', '.join(every)}")
    return chosen


def status(prefixes: list[str], verbose: bool) -> int:
    bad = 0
    for stem in stems(prefixes):
        if not zh.translation_path(stem).exists():
            print(f"{stem}: no translation yet (python tools/translate.py init {stem[:2]})")
            continue
        states, orphans = zh.chapter_report(stem)
        counts = {k: sum(s.status == k for s in states) for k in ("current", "stale", "untranslated")}
        print(f"{stem}: {counts['current']} current, {counts['stale']} stale, "
              f"{counts['untranslated']} untranslated, {sum(bool(o.zh.strip()) for o in orphans)} orphaned")
        for s in states:
            if s.status != "current":
                bad += 1
                print("   ", zh.describe(stem, s))
                if verbose and s.status == "stale" and s.entry is not None:
                    old = s.entry.was if s.entry.was is not None else s.entry.en
                    print("".join(f"        {ln}\n" for ln in zh.english_diff(old, s.english)), end="")
        for e in (o for o in orphans if o.zh.strip()):
            bad += 1
            print(f"    orphan: {zh.label(e.en)!r} (its English cell is gone)")
    return 1 if bad else 0


def init(prefixes: list[str]) -> int:
    for stem in stems(prefixes):
        path = zh.translation_path(stem)
        if path.exists():
            print(f"{path.relative_to(zh.CHAPTERS.parent)} exists: use `update`")
            continue
        cells = zh.markdown_cells(notebook_from_source(SRC / f"{stem}.py"))
        zh.save(zh.Translation(stem, [zh.Entry(en=text) for _i, text in cells]), path)
        print(f"wrote {path.relative_to(zh.CHAPTERS.parent)}: {len(cells)} cells to translate")
    return 0


def update(prefixes: list[str]) -> int:
    for stem in stems(prefixes):
        path = zh.translation_path(stem)
        if not path.exists():
            print(f"{stem}: no translation file; `init` it first")
            continue
        states, orphans = zh.chapter_report(stem)
        cells = []
        for s in states:
            e = s.entry
            if s.status == "stale" and not (e.stale and e.en == s.english):
                was = e.was if e.stale and e.was is not None else e.en
                e = zh.Entry(en=s.english, zh=e.zh, was=was, stale=True)
            elif s.status == "untranslated" and (e is None or e.en != s.english):
                e = zh.Entry(en=s.english)
            for gone, came in zh.carry_code_changes(e):
                print(f"    {stem}: {gone} -> {came} (code renamed in the English; carried over)")
            cells.append(e)
        kept = [e for e in orphans if e.zh.strip()]
        zh.save(zh.Translation(stem, cells, kept, zh.load(path).code), path)
        counts = {k: sum(s.status == k for s in states) for k in ("stale", "untranslated")}
        print(f"{stem}: {counts['stale']} stale, {counts['untranslated']} untranslated, "
              f"{len(kept)} orphaned")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["status", "init", "update"])
    ap.add_argument("chapters", nargs="*", help="chapter prefixes, e.g. 02 (default: every chapter)")
    ap.add_argument("-v", "--verbose", action="store_true", help="status: show what changed")
    args = ap.parse_args(argv)
    if args.command == "status":
        return status(args.chapters, args.verbose)
    if not args.chapters:
        ap.error(f"{args.command} needs chapter prefixes, e.g. 02")
    return init(args.chapters) if args.command == "init" else update(args.chapters)


if __name__ == "__main__":
    raise SystemExit(main())
