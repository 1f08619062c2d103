"""Comparing an answer with the expected value: arrays, lists of arrays, status words, yes/no.

* :func:`check_array`: type, ``None``, shape, non-finite values, then the values, with the
  feedback naming the first of these that is wrong and a typical cause (a common factor of -1,
  a whole number or 1/n; a transpose; a reduced axis; a rounded copy);
* :func:`check_arrays`: the same for a list (one gradient per variable), naming the first
  wrong item, the order, a ``(list, norm)`` pair or ``(gradient, variable)`` pairs;
* :func:`check_status` and :func:`check_true`.

Chapter-specific hints are passed as ``hints``: a sequence of ``(match, text)`` pairs, where
``match`` is either a known wrong answer (array-like, or a list of them for
:func:`check_arrays`; it matches when the answer has its shapes and values) or a predicate
called with the answer as float64 NumPy array(s). The text of every matching hint is appended
to the feedback of a failed check. A check never raises on a learner's answer; only a wrong
*expected* value, the exercise author's mistake, raises.

Pure computation: NumPy and TensorFlow only, no widgets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, end_sentence, join_list, join_sentences
from .feedback import NONE_TEXT, CheckResult, clean_message, describe_error, short_repr

tf = quiet_import_tensorflow()

__all__ = ["Hint", "check_array", "check_arrays", "check_status", "check_true"]

Hint = tuple[Any, str]

#: dtypes whose rounding a float64 reference can tell apart
_LOW_PRECISION = ("float16", "bfloat16", "float32")
#: the relative gap that rounding in each dtype can explain (about 16 units in the last place:
#: a few rounded operations); a larger gap is a wrong value, not float32 rounding
_ROUNDING_RTOL = {"float16": 16 * 2.0 ** -11, "bfloat16": 16 * 2.0 ** -8, "float32": 16 * 2.0 ** -24}


# ----------------------------------------------------------------------------- describing answers
def _is_sparse(value) -> bool:
    """True for a ``tf.IndexedSlices`` (what tape.gradient returns for tf.gather, Embedding)."""
    return all(hasattr(value, a) for a in ("indices", "values", "dense_shape"))


def _is_array_like(value) -> bool:
    return (hasattr(value, "shape") and hasattr(value, "dtype")) or _is_sparse(value)


def _find_none(value, path=()) -> tuple[int, ...] | None:
    """The index path of the first ``None`` inside nested lists/tuples, or None when there is none."""
    if value is None:
        return path
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _find_none(item, (*path, i))
            if found is not None:
                return found
    return None


def _item_shape(item) -> str:
    try:
        return str(tuple(np.shape(item.numpy() if hasattr(item, "numpy") else item)))
    except Exception:  # noqa: BLE001 - a nested ragged item
        return "ragged"


def _to_numpy(value):
    """``(array, problem, note)``: problem is None when ``value`` converted cleanly.

    ``note`` says how the value was read when that is worth knowing (a number written as a
    string, an IndexedSlices turned dense); it is a sentence of its own.
    """
    if value is None:
        return None, _("got None: {none}.").format(none=_(NONE_TEXT)), ""
    if isinstance(value, (str, bytes)):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        try:
            number = float(text.strip())
        except ValueError:
            return None, _("got a {kind} ({value}), expected numbers: return the number or array itself, not its "
                           "printed text").format(kind=type(value).__name__, value=short_repr(value)), ""
        return np.asarray(number), None, " " + _("(The string {value} was read as the number {number}: a number is "
                                                 "what is expected, not its text.)").format(
                                                     value=short_repr(value), number=f"{number:g}")
    if isinstance(value, dict):
        return None, _("got a dict with keys {keys}, expected numbers (an array or a tensor); a dict has no order or "
                       "shape to compare").format(keys=short_repr(list(value))), ""
    note = ""
    if _is_sparse(value):
        value = tf.convert_to_tensor(value)
        note = " " + _("(An IndexedSlices, compared as the dense tensor it stands for.)")
    where = _find_none(value) if isinstance(value, (list, tuple)) else None
    if where is not None:
        index = "".join(f"[{i}]" for i in where)
        return None, _("it holds None at {where}: a None there means {none}.").format(
            where=f"{type(value).__name__}{index}", none=_(NONE_TEXT)), ""
    try:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception as err:  # noqa: BLE001 - any conversion failure is feedback
        if isinstance(value, (list, tuple)) and "inhomogeneous" in str(err):
            shapes = ", ".join(_item_shape(v) for v in value[:6]) + (", ..." if len(value) > 6 else "")
            return None, _("got a ragged {kind}: its items have different shapes ({shapes}), so it is not one "
                           "rectangular array. Are some items missing a value, or is this a list of several arrays "
                           "where one was expected?").format(kind=type(value).__name__, shapes=shapes), ""
        return None, _("could not turn a {kind} into an array ({error})").format(
            kind=type(value).__name__, error=clean_message(err, 120)), ""
    if arr.dtype == object:
        nones = [i for i, v in enumerate(arr.ravel()) if v is None]
        if nones:
            index = tuple(int(i) for i in np.unravel_index(nones[0], arr.shape))
            return None, _("it holds None at index {index}: a None there means {none}.").format(
                index=index, none=_(NONE_TEXT)), ""
        return None, _("got a {kind} that is not a rectangular array of numbers").format(
            kind=type(value).__name__), ""
    return arr, None, note


def _shape_feedback(arr: np.ndarray, exp: np.ndarray) -> str:
    got, want = arr.shape, exp.shape
    if arr.ndim == 0:
        return _("got a single number ({value}), expected an array of shape {want}: did you reduce it (a sum, a "
                 "mean, a loss) where the whole array was wanted?").format(value=f"{float(arr):.4g}", want=want)
    if exp.ndim == 0:
        if arr.size == 1:
            return _("shape {got}, expected {want}: one number wrapped in an array; take it out (float(...) or "
                     "tf.squeeze)").format(got=got, want=want)
        return _("shape {got}, expected {want}, a single number: did you return a whole array where one value was "
                 "wanted?").format(got=got, want=want)
    if arr.ndim != exp.ndim and arr.size == exp.size and tuple(d for d in got if d != 1) == tuple(d for d in want if d != 1):
        if arr.ndim > exp.ndim:
            text = _("shape {got}, expected {want}: an extra axis of length 1.")
        else:
            text = _("shape {got}, expected {want}: a missing axis of length 1.")
        return join_sentences(text.format(got=got, want=want), _(
            "Careful: subtracting a (n, 1) array from a (n,) one broadcasts to (n, n) without an error; use "
            "keepdims=True, tf.squeeze or tf.reshape so both sides have the same shape"))
    if arr.size == exp.size:
        return _("shape {got}, expected {want} (same number of elements: a transpose or reshape away)").format(
            got=got, want=want)
    if arr.ndim < exp.ndim:
        return _("shape {got}, expected {want} (fewer dimensions: did you sum over an axis, or use gradient instead "
                 "of jacobian?)").format(got=got, want=want)
    if arr.ndim > exp.ndim:
        return _("shape {got}, expected {want} (more dimensions: did you stack several results, or use jacobian "
                 "instead of gradient?)").format(got=got, want=want)
    return _("shape {got}, expected {want}").format(got=got, want=want)


def _common_ratio(arrs: Sequence[np.ndarray], exps: Sequence[np.ndarray]) -> float | None:
    """The factor r with got == r * expected for every element, when there is one (and r != 1)."""
    a = np.concatenate([x.ravel() for x in arrs])
    e = np.concatenate([x.ravel() for x in exps])
    nonzero = np.abs(e) > 1e-12 * max(1.0, float(np.abs(e).max(initial=0.0)))
    if not nonzero.any():
        return None
    r = float(np.median(a[nonzero] / e[nonzero]))
    if not np.isfinite(r) or abs(r - 1.0) < 1e-6 or r == 0.0:
        return None
    return r if np.allclose(a, r * e, rtol=1e-3, atol=1e-12) else None


def _uniform_factor(arr: np.ndarray, exp: np.ndarray, tol: float) -> bool:
    """Whether several values are one factor r != 1 times the expected ones, to within ``tol``.

    Rounding scatters its errors; one factor shared by every element (beyond what rounding can
    explain) is a wrong or rounded constant, such as a norm typed in as 5.83.
    """
    nonzero = np.abs(exp) > 0
    if arr.size < 2 or nonzero.sum() < 2:
        return False
    r = float(np.median(arr[nonzero] / exp[nonzero]))
    return abs(r - 1.0) > tol and bool(np.all(np.abs(arr - r * exp) <= tol * np.abs(exp) + 1e-300))


def _ratio_text(r: float, single: bool = False, *, across: bool = False, explain: bool = True) -> str:
    """What a common factor between the answer and the expected values suggests (one sentence).

    For a ``single`` number any answer is some multiple of the expected one, so only the
    telling factors (-1, a whole number, 1/n) are mentioned. ``across`` words it for all items
    of a list; ``explain=False`` states the factor without guessing its cause.
    """
    digits = 4
    while f"{r:.{digits}g}" in ("1", "-1") and digits < 12:
        digits += 1  # a factor near 1 is shown with the digits that tell it from 1 (never "1×")
    factor = f"{r:.{digits}g}"
    # One number is always some multiple of another: for it, only a factor met to float32 rounding is telling
    # (0.05554 is 1/18 to 3e-4, a coincidence, not a mean).
    tol = 1e-5 if single else 1e-3
    if abs(r + 1.0) < tol:
        kind = "sign"
    elif abs(r) >= 2 and abs(r - round(r)) < tol * abs(r):
        kind = "whole"
    elif abs(r) < 0.5 and abs(1 / r - round(1 / r)) < tol / abs(r):
        kind = "fraction"
    else:
        kind = "plain"
    if single and kind == "plain":
        return ""
    if not explain or kind == "plain":
        text = (_("Across all items every value is {factor}× the expected one.") if across else
                _("That is {factor}× the expected value.") if single else
                _("Every value is {factor}× the expected one."))
        return " " + text.format(factor=factor)
    if kind == "sign":
        text = (_("Across all items every value is {factor}× the expected one: the sign is flipped.") if across else
                _("That is {factor}× the expected value: the sign is flipped.") if single else
                _("Every value is {factor}× the expected one: the sign is flipped."))
    elif kind == "whole":
        text = (_("Across all items every value is {factor}× the expected one: a whole number, as when a sum is "
                  "taken where a mean was wanted (the ratio is then the number of items averaged, such as the batch "
                  "size).") if across else
                _("That is {factor}× the expected value: a whole number, as when a sum is taken where a mean was "
                  "wanted (the ratio is then the number of items averaged, such as the batch size).") if single else
                _("Every value is {factor}× the expected one: a whole number, as when a sum is taken where a mean "
                  "was wanted (the ratio is then the number of items averaged, such as the batch size)."))
    else:
        text = (_("Across all items every value is {factor}× the expected one (1/{n}): a mean where a sum was "
                  "wanted, or a factor divided twice?") if across else
                _("That is {factor}× the expected value (1/{n}): a mean where a sum was wanted, or a factor divided "
                  "twice?") if single else
                _("Every value is {factor}× the expected one (1/{n}): a mean where a sum was wanted, or a factor "
                  "divided twice?"))
    return " " + text.format(factor=factor, n=round(1 / r) if kind == "fraction" else "")


def _matches(match, arrs) -> bool:
    try:
        if callable(match):
            return bool(match(arrs))
        if isinstance(arrs, list):
            if len(match) != len(arrs):
                return False
            known = [np.asarray(m, dtype=np.float64) for m in match]
            return all(k.shape == a.shape and np.allclose(a, k, rtol=1e-4, atol=1e-6) for k, a in zip(known, arrs, strict=True))
        known = np.asarray(match, dtype=np.float64)
        return known.shape == arrs.shape and bool(np.allclose(arrs, known, rtol=1e-4, atol=1e-6))
    except Exception:  # noqa: BLE001 - a hint that cannot be evaluated does not match
        return False


def _hint_sentences(hints: Iterable[Hint], arrs) -> list[str]:
    return [_("Hint: {hint}").format(hint=end_sentence(text)) for match, text in hints if _matches(match, arrs)]


def _expected_array(expected) -> np.ndarray:
    if _is_sparse(expected):
        expected = tf.convert_to_tensor(expected)
    return np.asarray(expected.numpy() if hasattr(expected, "numpy") else expected, dtype=np.float64)


# ----------------------------------------------------------------------------- array checks
def check_array(name: str, got, expected, *, rtol: float = 1e-4, atol: float = 1e-6,
                hints: Sequence[Hint] = (), if_none: str = "") -> CheckResult:
    """Compare ``got`` with ``expected``: type, ``None``, shape, non-finite values, then the values.

    ``got`` may be a number, a NumPy array, a tensor, a variable, an ``IndexedSlices`` or a
    (nested) list; a number written as a string (``"3"``) is read as that number, and the
    feedback says so. ``hints`` are chapter-specific ``(match, text)`` pairs (see the module
    docstring); ``if_none`` is appended when the answer is or holds ``None``. Used by the
    exercises of every chapter.
    """
    return _check_array(name, got, _expected_array(expected), rtol=rtol, atol=atol, hints=hints, if_none=if_none)


def _check_array(name: str, got, exp: np.ndarray, *, rtol: float, atol: float, hints: Sequence[Hint] = (),
                 if_none: str = "", ratio: bool = True) -> CheckResult:
    if isinstance(got, (bool, np.bool_)):
        return CheckResult(name, False, _("got the bool {value!r}, expected numbers (a comparison or a check result "
                                          "where the value itself was wanted?)").format(value=bool(got)))
    arr, problem, note = _to_numpy(got)
    if problem:
        extra = if_none if if_none and _find_none(got) is not None else ""
        return CheckResult(name, False, join_sentences(problem, extra))
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        return CheckResult(name, False, _("dtype {dtype} is not numeric: expected numbers").format(dtype=arr.dtype))
    if np.iscomplexobj(arr):
        return CheckResult(name, False, _("dtype {dtype} is complex: expected real numbers").format(dtype=arr.dtype))
    low_precision = arr.dtype.name if arr.dtype.name in _LOW_PRECISION else ""
    arr = arr.astype(np.float64)
    if arr.shape != exp.shape:
        return CheckResult(name, False, join_sentences(_shape_feedback(arr, exp), note, *_hint_sentences(hints, arr)))
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        return CheckResult(name, False, join_sentences(_("{bad} of {n} values are NaN or inf").format(
            bad=bad, n=arr.size), *_hint_sentences(hints, arr)))
    if not np.allclose(arr, exp, rtol=rtol, atol=atol):
        diff = np.abs(arr - exp)
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        got_v = float(arr[idx] if idx else arr)
        exp_v = float(exp[idx] if idx else exp)
        digits, rounded = 4, ""
        while f"{got_v:.{digits}g}" == f"{exp_v:.{digits}g}" and digits < 17:
            digits += 1  # show enough digits that the two numbers look different
        hint = _hint_sentences(hints, arr)
        # a chapter's hint names the cause it recognises (sin(x) taken through NumPy); a guess
        # about half precision next to it would point the learner the wrong way
        half = "" if hint else _half_precision_gap(arr, exp, low_precision, atol)
        if half:
            rounded, ratio = " " + half, False  # a factor like 1.0002× is rounding, not a cause
        elif (low_precision and np.allclose(arr, exp, rtol=1e-3, atol=max(atol, 1e-6))
                and not _uniform_factor(arr, exp, _ROUNDING_RTOL[low_precision])):
            rounded = " " + _("The answer is {dtype}: rounding in {dtype} explains a gap this small, and this check "
                              "needs more digits. Compute in float64 (Python floats, NumPy or tf.float64).").format(
                dtype=low_precision)
        elif digits > 4 and not hint:
            rounded = " " + _("These agree to the digits usually printed: was the answer typed in, or copied from a "
                              "rounded printout? Pass the computed value itself (the tensor or float), not a rounded "
                              "copy.")
        values = dict(gap=f"{float(diff.max()):.3g}", got=f"{got_v:.{digits}g}", want=f"{exp_v:.{digits}g}")
        if idx:
            text = _("values differ: largest gap {gap} at index {index} (got {got}, expected {want}).").format(
                index=tuple(int(i) for i in idx), **values)
        else:
            text = _("values differ: largest gap {gap} (got {got}, expected {want}).").format(**values)
        r = _common_ratio([arr], [exp]) if ratio else None
        factor = _ratio_text(r, single=exp.size == 1, explain=not hint) if r is not None else ""
        return CheckResult(name, False, join_sentences(text, note, rounded, factor, *hint))
    if note:
        return CheckResult(name, True, join_sentences(_("shape {shape} and values match.").format(shape=arr.shape),
                                                      note))
    return CheckResult(name, True, _("shape {shape} and values match").format(shape=arr.shape))


def _half_precision_gap(arr: np.ndarray, exp: np.ndarray, low_precision: str, atol: float) -> str:
    """A sentence when a float32 answer is off by float16/bfloat16 rounding: computed in half precision, cast back.

    Rounding in float32 gives gaps near 1e-7; scattered gaps of 1e-5 to 1e-3 (no common factor, which
    would be a rounded constant) are what a step in float16 (2^-11) or bfloat16 (2^-8) leaves.
    """
    if low_precision != "float32" or not np.allclose(arr, exp, rtol=_ROUNDING_RTOL["bfloat16"], atol=max(atol, 1e-6)):
        return ""
    nonzero = np.abs(exp) > 1e-12
    if not nonzero.any():
        return ""
    rel = float(np.max(np.abs(arr - exp)[nonzero] / np.abs(exp[nonzero])))
    if rel <= 1e-5 or _uniform_factor(arr, exp, _ROUNDING_RTOL["float32"]):
        return ""
    return _("The answer is float32, but a relative gap of {gap} is far beyond float32 rounding (about 1e-7) and what "
             "rounding in float16 or bfloat16 leaves: was a step computed in half precision and cast back? Compute in "
             "float64 (Python floats, NumPy or tf.float64).").format(gap=f"{rel:.1g}")


def _want_list(n: int, what: str) -> str:
    """How :func:`check_arrays` names what it expects: ``a list of 4 arrays (one per variable)``."""
    return _("a list of {n} arrays ({what})").format(n=n, what=what)


def _as_list(got, exps: list, what: str):
    """``(items, problem)``: the answer as a list of items, or why it is not a list of ``len(exps)`` arrays."""
    n = len(exps)
    want = _want_list(n, what)
    if got is None:
        return None, _("got None, expected {want}: {none}.").format(want=want, none=_(NONE_TEXT))
    if isinstance(got, (str, bytes)):
        return None, _("got a {kind} ({value}), expected {want}").format(kind=type(got).__name__, value=short_repr(got),
                                                                          want=want)
    if isinstance(got, dict):
        return None, _("got a dict with keys {keys}, expected {want}: return the values as a list in the order of "
                       "the sources").format(keys=short_repr(list(got)), want=want)
    if (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (list, tuple)) and got[0]
            and any(_is_array_like(a) for a in got[0]) and np.ndim(got[1]) == 0):
        return None, _("got a pair (a list of {k} arrays, one number), expected {want}. tf.clip_by_global_norm "
                       "returns such a pair, (clipped list, global norm before clipping): keep its first item, "
                       "`clipped, norm = tf.clip_by_global_norm(grads, c)`").format(k=len(got[0]), want=want)
    if _is_array_like(got) or isinstance(got, (int, float, np.number)):
        arr, problem, _note = _to_numpy(got)
        if problem:
            return None, _("expected {want}; {problem}").format(want=want, problem=problem)
        if arr.ndim == 0 or arr.size == 1:
            return None, _("got a single number ({value}), expected {want}. A single number is what a loss or a norm "
                           "looks like: return the gradients, tape.gradient(loss, variables), which is a list with "
                           "one tensor per variable").format(value=f"{float(arr.ravel()[0]):.4g}", want=want)
        if arr.size == sum(e.size for e in exps) and n > 1:
            return None, _("got one array of shape {shape}, expected {want}, with as many numbers as all of them "
                           "together: were they concatenated, flattened or summed into one? Return the list "
                           "itself").format(shape=arr.shape, want=want)
        if arr.ndim >= 1 and arr.shape[0] == n:
            return None, _("got one array of shape {shape}, expected {want}, whose first axis has length {n}: was "
                           "the list stacked? Return the list itself").format(shape=arr.shape, want=want, n=n)
        return None, _("got one array of shape {shape}, expected {want} (with shapes {shapes})").format(
            shape=arr.shape, want=want, shapes=", ".join(str(e.shape) for e in exps))
    if not isinstance(got, (list, tuple)):
        if not isinstance(got, Iterable):
            return None, _("got a {kind}, expected {want}").format(kind=type(got).__name__, want=want)
        try:
            got = list(got)  # zip, map, a generator: read it once
        except Exception as err:  # noqa: BLE001
            return None, _("could not read the {kind} as a list ({error}), expected {want}").format(
                kind=type(got).__name__, error=clean_message(err, 120), want=want)
    return list(got), None


def check_arrays(name: str, got: Sequence, expected: Sequence, *, labels: Sequence[str] | None = None,
                 what: str | None = None, hints: Sequence[Hint] = (), **kw) -> CheckResult:
    """Check a list of arrays (e.g. one gradient per variable) element by element.

    The feedback names the first item that is wrong (by ``labels``, such as variable paths,
    when given) and how many others are wrong too; when every item has its shape but all of
    them are off by one common factor, it says so (a sum instead of a mean gives the batch
    size). A single tensor, a number, a ``(list, norm)`` pair, a dict or ``None`` in place of
    the list are feedback, not errors. ``what`` says what the items are ("one per variable",
    translated by the caller). ``kw`` goes to :func:`check_array` (``rtol``, ``atol``). Used
    by chapters 00 to 03 and 08.
    """
    what = what or _("one per source")
    rtol, atol = kw.pop("rtol", 1e-4), kw.pop("atol", 1e-6)
    if kw:
        raise TypeError(f"check_arrays got unexpected keyword arguments {sorted(kw)}")
    exps = [_expected_array(e) for e in expected]
    n = len(exps)
    items, problem = _as_list(got, exps, what)
    if problem:
        return CheckResult(name, False, problem)
    if items and all(isinstance(it, (list, tuple)) and len(it) == 2 and hasattr(it[1], "assign")
                     for it in items):
        return CheckResult(name, False, _("got {k} (gradient, variable) pairs, expected {want}: return only the "
                                          "gradients, without zipping them with the variables").format(
                                              k=len(items), want=_want_list(n, what)))
    if len(items) != n:
        if n <= 8:
            return CheckResult(name, False, _("got {k} arrays, expected {n} ({what}, with shapes {shapes})").format(
                k=len(items), n=n, what=what, shapes=", ".join(str(e.shape) for e in exps)))
        return CheckResult(name, False, _("got {k} arrays, expected {n} ({what})").format(k=len(items), n=n, what=what))
    labels = list(labels) if labels is not None else [f"{name}[{i}]" for i in range(n)]
    results = [_check_array(labels[i], g, e, rtol=rtol, atol=atol) for i, (g, e) in enumerate(zip(items, exps, strict=True))]
    bad = [i for i, r in enumerate(results) if not r]
    if not bad:
        return CheckResult(name, True, _("all {n} arrays match").format(n=n))
    nones = [i for i in bad if items[i] is None]
    if len(nones) == n:
        return CheckResult(name, False, _("every item is None: the tape recorded nothing that connects the target to "
                                          "these sources. Was the loss computed inside the `with` block, from the "
                                          "sources themselves? ({none})").format(none=_(NONE_TEXT)))
    first = bad[0]
    item_text = results[first].feedback
    arrs = [_to_numpy(g)[0] for g in items]
    if _is_permutation(arrs, exps, rtol=rtol, atol=atol):
        return CheckResult(name, False, _("every item is one of the expected arrays, but they are in a different "
                                          "order: return them in the order {order} (the order of the sources, as "
                                          "tape.gradient returns them).").format(order=", ".join(labels)))
    ratio, hint_sentences = "", []
    if all(a is not None and a.shape == e.shape for a, e in zip(arrs, exps, strict=True)):
        arrs = [a.astype(np.float64) for a in arrs]
        hint_sentences = _hint_sentences(hints, arrs)
        r = _common_ratio(arrs, exps) if all(np.all(np.isfinite(a)) for a in arrs) else None
        if r is not None and len(bad) > 1:  # the factor is said once, for all items, below
            item_text = _check_array(labels[first], items[first], exps[first], rtol=rtol, atol=atol,
                                     ratio=False).feedback
            ratio = _ratio_text(r, across=True, explain=not hint_sentences)
    if labels[first] != f"{name}[{first}]":
        text = _("item {i} ({label}): {feedback}").format(i=first, label=labels[first], feedback=item_text)
    else:
        text = _("item {i}: {feedback}").format(i=first, feedback=item_text)
    more = ""
    if len(bad) > 1:
        labelled = [i for i in bad[1:] if labels[i] != f"{name}[{i}]"]
        if len(bad) > 2 and labelled:
            # TRANSLATORS: {which} is a list of "{i} ({label})" items
            more = _("Items {which} are wrong too.").format(which=join_list(
                _("{i} ({label})").format(i=i, label=labels[i]) if i in labelled else str(i) for i in bad[1:]))
        elif len(bad) > 2:
            more = _("Items {numbers} are wrong too.").format(numbers=join_list(str(i) for i in bad[1:]))
        elif labelled:
            more = _("Item {i} ({label}) is wrong too.").format(i=bad[1], label=labels[bad[1]])
        else:
            more = _("Item {i} is wrong too.").format(i=bad[1])
    return CheckResult(name, False, join_sentences(end_sentence(text), more, ratio, *hint_sentences))


def _is_permutation(arrs, exps, *, rtol: float, atol: float) -> bool:
    """Whether ``arrs`` are the ``exps`` in another order (each used once, not the same order)."""
    if any(a is None for a in arrs) or len(arrs) != len(exps) or len(arrs) < 2:
        return False
    left = list(range(len(exps)))
    order = []
    for a in arrs:
        match = next((j for j in left if a.shape == exps[j].shape and np.all(np.isfinite(a))
                      and np.allclose(a.astype(np.float64), exps[j], rtol=rtol, atol=atol)), None)
        if match is None:
            return False
        left.remove(match)
        order.append(match)
    return order != list(range(len(exps)))


def check_status(name: str, got: str, expected: str, *, allowed: Sequence[str] = ()) -> CheckResult:
    """Check a diagnosis word such as ``"vanishing"``; ``allowed`` lists the words that exist."""
    if isinstance(got, str) and got == expected:
        return CheckResult(name, True, _("status is {status!r}").format(status=expected))
    if not isinstance(got, str) and isinstance(getattr(got, "status", None), str):
        return CheckResult(name, False, _("got a {kind}, expected its status word such as {want!r}: pass its .status "
                                          "(here {status!r})").format(kind=type(got).__name__, want=expected,
                                                                      status=got.status))
    if isinstance(got, str) and got.strip().lower() == expected.lower():
        return CheckResult(name, False, _("status is {got!r}, expected {want!r}: same word, but spelled differently "
                                          "(statuses are lower-case, no spaces)").format(got=got, want=expected))
    if isinstance(got, str) and allowed and got not in allowed:
        return CheckResult(name, False, _("status is {got!r}, which is not one of {allowed}").format(
            got=got, allowed=join_list(map(repr, allowed))))
    return CheckResult(name, False, _("status is {got!r}, expected {want!r}").format(got=got, want=expected))


def check_true(name: str, condition: bool | Callable[[], bool], if_false: str,
               if_true: str | None = None) -> CheckResult:
    """A yes/no check with the feedback to show when it fails (texts translated by the caller)."""
    try:
        ok = bool(condition() if callable(condition) else condition)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, _("raised {error}").format(error=describe_error(err)))
    return CheckResult(name, ok, (if_true or _("as expected")) if ok else if_false)
