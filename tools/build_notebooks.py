"""Rebuild chapters from chapters/src, add navigation, Restart & Run All, save in place.

    python tools/build_notebooks.py                # every chapter, both editions
    python tools/build_notebooks.py 01 03          # only chapters whose names start with these
    python tools/build_notebooks.py --lang en 09   # only the English chapter 09
    python tools/build_notebooks.py --lang zh 02   # only the Chinese twin of chapter 02
    python tools/build_notebooks.py --no-exec      # sources and navigation only
    python tools/build_notebooks.py --prose --lang zh 02   # new prose, same code: keep the outputs

The Chinese twin chapters/zh/NN-slug.ipynb is built from the same source plus its translation
chapters/zh/src/NN-slug.yml (tools/zh.py); chapters without a translation file have no twin.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbformat  # noqa: E402

from tools.nbtools import (  # noqa: E402
    SRC,
    add_navigation,
    chapter_paths,
    execute,
    notebook_from_source,
    zh_chapter_paths,
)
from tools.zh import build_twins  # noqa: E402


def editions(lang: str) -> list[tuple[list[Path], list]]:
    """(paths, notebooks with navigation) of the editions ``lang`` asks for, nothing executed."""
    paths = chapter_paths()
    english = [notebook_from_source(SRC / (p.stem + ".py")) for p in paths]
    add_navigation(english, paths)
    out = [(paths, english)] if lang in ("en", "all") else []
    if lang in ("zh", "all"):
        zh_paths = zh_chapter_paths()
        twins = build_twins([p.stem for p in zh_paths],
                            english={p.stem: nb for p, nb in zip(paths, english, strict=True)})
        zh_nbs = [twins[p.stem] for p in zh_paths]
        add_navigation(zh_nbs, zh_paths)
        out.append((zh_paths, zh_nbs))
    return out


def with_stored_outputs(nb, path: Path):
    """``nb`` with the outputs of the stored notebook at ``path``, whose code must be the same.

    For a change of prose only (a translation, a typo): Markdown cells do not change what the
    code prints, so the stored Restart & Run All still holds. Any change to a code cell, its
    tags or their number needs a real run.
    """
    old = nbformat.read(path, as_version=4)
    old_code = [c for c in old.cells if c.cell_type == "code"]
    new_code = [c for c in nb.cells if c.cell_type == "code"]
    key = [(c.source, c.metadata.get("tags", [])) for c in new_code]
    if [(c.source, c.metadata.get("tags", [])) for c in old_code] != key:
        raise SystemExit(f"{path}: its code cells changed; rebuild it without --prose")
    for new, stored in zip(new_code, old_code, strict=True):
        new.outputs, new.execution_count = stored.outputs, stored.execution_count
    nb.metadata = old.metadata
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("only", nargs="*", help="chapter prefixes to execute, e.g. 01")
    ap.add_argument("--lang", choices=["en", "zh", "all"], default="all",
                    help="which edition to build (default: both)")
    ap.add_argument("--no-exec", action="store_true", help="do not execute")
    ap.add_argument("--prose", action="store_true",
                    help="refresh Markdown and navigation only, keeping the stored outputs")
    args = ap.parse_args(argv)
    for paths, nbs in editions(args.lang):
        for path, nb in zip(paths, nbs, strict=True):
            selected = not args.only or any(path.name.startswith(o) for o in args.only)
            if not selected:
                continue  # untouched: run tools/add_navigation.py (or a full build) to refresh it
            if args.prose:
                nb = with_stored_outputs(nb, path)
            elif not args.no_exec:
                t0 = time.perf_counter()
                print(f"running {path.relative_to(path.parents[1])} ...", flush=True)
                execute(nb, path)
                print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
            nbformat.write(nb, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
