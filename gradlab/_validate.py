"""Argument checks shared by every gradlab module: a ValueError that names the argument,
what was given, and what is allowed."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["check_choice", "check_int", "check_positive"]


def check_choice(name: str, value, allowed: Sequence[str]) -> str:
    """``value`` must be one of the strings in ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def check_int(name: str, value, lo: int, hi: int | None = None) -> int:
    """``value`` must be an int (not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        allowed = f"{lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {allowed}; got {value}")
    return int(value)


def check_positive(name: str, value, *, allow_none: bool = False) -> float | None:
    """``value`` must be a finite number > 0 (or None when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating, np.integer))
        or not math.isfinite(value)
        or value <= 0
    ):
        allowed = "None or a finite number > 0" if allow_none else "a finite number > 0"
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return float(value)
