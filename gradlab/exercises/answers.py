"""Reading a number from a learner's answer: :func:`as_number_answer`, :func:`as_int_answer`.

A Python or NumPy number, a 0-d array, a tensor or a variable is read as the number it holds;
``None``, a bool, a string, NaN or inf and a container of several values get feedback that
says what was given and what is expected. :func:`is_float_number` tells a Python/NumPy number
(which the tape cannot follow) from a tensor.

Layer 8 (exercises). Used by chapters 01, 05, 06, 07 and 09.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..i18n import _, join_sentences
from .feedback import CheckResult, clean_message, short_repr

__all__ = ["as_int_answer", "as_number_answer", "is_float_number"]


def is_float_number(value) -> bool:
    """True for a Python or NumPy number (not a tensor): a value the tape cannot follow."""
    return isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, (bool, np.bool_))


def _first_value(answer) -> str:
    try:
        return repr(np.asarray(answer.numpy() if hasattr(answer, "numpy") else answer).ravel()[0].item())
    except Exception:  # noqa: BLE001
        return "?"


def _scalar(name: str, answer, what: str, several_hint: str):
    """``(number, None)`` for one real number in any common form, else ``(None, CheckResult)``."""
    if answer is None:
        return None, CheckResult(name, False, _("got None: assign {what} to the variable").format(what=what))
    if isinstance(answer, (bool, np.bool_)):
        return None, CheckResult(name, False, _("got {value!r}, a bool: expected {what}").format(
            value=bool(answer), what=what))
    if isinstance(answer, (str, bytes)):
        return None, CheckResult(name, False, _("got the string {value!r}: expected {what} as a number, e.g. 5, "
                                                "not '5'").format(value=answer, what=what))
    try:
        shape = tuple(np.shape(answer.numpy() if hasattr(answer, "numpy") else answer))
    except Exception:  # noqa: BLE001 - a ragged list, an object without a shape
        shape = None
    if shape is None or isinstance(answer, (list, tuple, dict)) or len(shape) > 0:
        size = int(np.prod(shape)) if shape else -1
        if size == 1:
            return None, CheckResult(name, False, _(
                "got a {kind} holding one value ({value}): expected the number itself. Take it out, e.g. "
                "int(a[0]) or float(a.max())").format(kind=type(answer).__name__, value=_first_value(answer)))
        if size > 1:
            text = _("got a {kind} of {size} values: expected one number.").format(kind=type(answer).__name__,
                                                                               size=size)
        else:
            text = _("got a {kind} of several values: expected one number.").format(kind=type(answer).__name__)
        return None, CheckResult(name, False, join_sentences(text, several_hint))
    try:
        value = answer.numpy() if hasattr(answer, "numpy") else answer
        value = np.asarray(value).item() if isinstance(value, (np.ndarray, np.generic)) else value
    except Exception as err:  # noqa: BLE001 - a symbolic tensor, an unusual object
        return None, CheckResult(name, False, _("could not read a number from the {kind} ({error}): expected "
                                                "{what}").format(kind=type(answer).__name__,
                                                                 error=clean_message(err, 80), what=what))
    if isinstance(value, complex) or not isinstance(value, numbers.Real):
        return None, CheckResult(name, False, _("got {value} ({kind}): expected {what}").format(
            value=short_repr(answer), kind=type(answer).__name__, what=what))
    if not math.isfinite(float(value)):
        return None, CheckResult(name, False, _("got {value}: expected a finite number, {what}").format(
            value=float(value), what=what))
    return value, None


def as_number_answer(name: str, answer, what: str, *, several_hint: str = ""):
    """``(float, None)`` for a real number, else ``(None, CheckResult)`` saying what is wrong.

    Accepts Python and NumPy numbers and 0-d arrays, tensors and variables (``2**10``,
    ``1024.0``, ``np.float32(1024)``, ``tf.constant(1024)``); NaN and inf, strings, bools,
    ``None`` and containers get feedback. Used by the exercises that ask for a number
    (chapters 05 and 06).
    """
    value, problem = _scalar(name, answer, what, several_hint)
    return (None, problem) if problem is not None else (float(value), None)


def as_int_answer(name: str, answer, what: str, *, several_hint: str = ""):
    """``(int, None)`` for an int-like answer, else ``(None, CheckResult)`` saying what is wrong.

    Accepts ints, integral floats, NumPy scalars and 0-d arrays or tensors; a string, a bool,
    ``None`` or a container gets feedback (``several_hint`` is added for several values).
    Used by the exercises that ask for a number (chapters 01 and 07).
    """
    value, problem = _scalar(name, answer, _("{what} (an int)").format(what=what), several_hint)
    if problem is not None:
        return None, problem
    if isinstance(value, numbers.Integral) or float(value).is_integer():
        return int(value), None
    return None, CheckResult(name, False, _("got {value!r} ({kind}): expected {what} (an int)").format(
        value=value, kind=type(answer).__name__, what=what))
