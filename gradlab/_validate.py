"""Argument checks shared by every gradlab module: a ValueError that names the argument,
what was given, and what is allowed."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["check_choice", "check_int", "check_positive", "renamed_keywords"]


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


def renamed_keywords(**old_to_new: str) -> Callable:
    """Decorator: calling with an old keyword spelling raises a ``TypeError`` that names the new one.

    ``@renamed_keywords(loss_fn="loss", clip_global_norm="clip")`` on a function (or on a
    class's ``__init__``) keeps one spelling per concept in the public API (issue 27) while a
    learner's older code gets told what to write instead of "unexpected keyword argument".
    """
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    name = fn.__qualname__.removesuffix(".__init__")
                    raise TypeError(f"{name}() takes {new}= instead of {old}= (one spelling per concept "
                                    f"across gradlab's tools); pass {new}=")
            return fn(*args, **kwargs)

        inner.renamed_keywords = dict(old_to_new)
        return inner

    return wrap
