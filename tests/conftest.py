"""Shared test set-up: a quiet TensorFlow, a headless matplotlib, the repo root on sys.path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gradlab  # noqa: E402,F401  (imports TensorFlow quietly before any test module does)
