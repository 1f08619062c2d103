"""ruff over the package, the tests, the tools and the chapters (notebooks included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "gradlab", "tests", "tools", "chapters"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
