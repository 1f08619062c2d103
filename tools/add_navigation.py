"""Write or amend the `< Previous | Contents | Next >` cell of every chapter notebook, in place.

Both editions: chapters/NN-slug.ipynb and the Chinese twins chapters/zh/NN-slug.ipynb, each
linking to its own neighbours and to the same chapter in the other edition. Idempotent:
running it twice changes nothing. Outputs are left alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nbformat  # noqa: E402

from tools.nbtools import add_navigation, chapter_paths, zh_chapter_paths  # noqa: E402


def main() -> int:
    for edition in (chapter_paths(), zh_chapter_paths()):
        paths = [p for p in edition if p.exists()]
        nbs = [nbformat.read(p, as_version=4) for p in paths]
        add_navigation(nbs, paths)
        for p, nb in zip(paths, nbs, strict=True):
            nbformat.write(nb, p)
            print("navigation:", p.relative_to(p.parents[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
