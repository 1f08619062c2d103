"""Rebuild chapters from chapters/src, add navigation, Restart & Run All, save in place.

    python tools/build_notebooks.py            # every chapter
    python tools/build_notebooks.py 01 03      # only chapters whose names start with these
    python tools/build_notebooks.py --no-exec  # sources and navigation only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbformat  # noqa: E402

from tools.nbtools import SRC, add_navigation, chapter_paths, execute, notebook_from_source  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("only", nargs="*", help="chapter prefixes to execute, e.g. 01")
    ap.add_argument("--no-exec", action="store_true", help="do not execute")
    args = ap.parse_args(argv)
    paths = chapter_paths()
    nbs = [notebook_from_source(SRC / (p.stem + ".py")) for p in paths]
    add_navigation(nbs, paths)
    for path, nb in zip(paths, nbs, strict=True):
        selected = not args.only or any(path.name.startswith(o) for o in args.only)
        if not selected:
            continue  # untouched: run tools/add_navigation.py (or a full build) to refresh it
        if not args.no_exec:
            t0 = time.perf_counter()
            print(f"running {path.name} ...", flush=True)
            execute(nb, path)
            print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
        nbformat.write(nb, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
