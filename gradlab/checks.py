"""Self-checks for the exercises of every chapter.

Each check returns a :class:`CheckResult` that says *what* is wrong (``None``, type, shape,
non-finite values, wrong values, or a wrong status) rather than only pass or fail, and hints
at *why* where a wrong answer has a typical cause. A result is truthy when it passed and
prints as one line, ``✅ …`` or ``❌ …``. A check never raises on a learner's answer: a wrong
type (a string, a scalar where a list is expected, a tuple from ``tf.clip_by_global_norm``, a
list holding ``None``, ragged lists) is feedback too. Only a wrong *expected* value, which is
the exercise author's mistake, raises.

Chapter-specific hints are passed as ``hints``: a sequence of ``(match, text)`` pairs, where
``match`` is either a known wrong answer (array-like, or a list of them for
:func:`check_arrays`; it matches when the answer has its shapes and values) or a predicate
called with the answer as float64 NumPy array(s). The text of every matching hint is appended
to the feedback of a failed check. The per-chapter modules in :mod:`gradlab.exercises` use
them.

Pure computation: NumPy and TensorFlow only, no widgets.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ._env import quiet_import_tensorflow
from .i18n import _
from .training import train_steps

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CheckResult",
    "as_int_answer",
    "as_number_answer",
    "call_answer",
    "check_array",
    "check_arrays",
    "check_status",
    "check_trains",
    "check_true",
    "clean_message",
    "describe_error",
    "is_float_number",
    "step_length_advice",
]

Hint = tuple[Any, str]

NONE_TEXT = (
    "nothing is returned or assigned yet? If it is a gradient, it is None because the target "
    "does not depend on the source through operations the tape recorded (chapter 02's gallery "
    "of None gradients)"
)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one self-check: ``ok`` plus feedback a learner can act on.

    ``details`` may carry what the check measured (for example a training run), for a chapter
    module that wants to add more specific advice; it is not printed.
    """

    name: str
    ok: bool
    feedback: str
    details: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return f"{'✅' if self.ok else '❌'} {self.name}: {self.feedback}"

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(str(self))


# ----------------------------------------------------------------------------- the learner's code
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
#: Lines of TensorFlow's and Keras's messages that are plumbing, not the message: stack
#: frames, node names, the ``[Op:...]`` tail, the headers Keras and autograph put first.
_NOISE = re.compile(r"^(Traceback|Detected at node|defined at \(most recent call last\)|\[\[\{\{node|\[\[node"
                    r"|\[Op:|in user code:|Graph execution error:|Exception encountered when calling|"
                    r"During handling of the above exception)")
_DUMP = re.compile(r"^(Arguments received by|Call arguments received)")
_PREFIX = re.compile(r"^(\w+\.)*\w*(Error|Exception|Warning): ")


def clean_message(err, limit: int = 240) -> str:
    """The readable part of an exception's (or a text's) message, for quoting in feedback.

    Strips ANSI colour codes; Python, autograph and TensorFlow stack frames (``File "..."``
    lines and the code under them); the headers "in user code:", "Graph execution error:" and
    "Exception encountered when calling ..."; ``[[{{node ...}}]]`` and ``[Op:...]`` tails;
    Keras's "Arguments received by ..." dump (everything after it); and a repeated
    ``ValueError:`` prefix. Joins what is left into one line of at most ``limit`` characters.
    Used by every chapter's checks when a learner's code raises.
    """
    text = _ANSI.sub("", str(err))
    kept: list[str] = []
    frame_indent = None
    for raw in text.splitlines():
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if not line:
            continue
        if line.startswith('File "'):
            frame_indent = indent
            continue
        if frame_indent is not None and indent > frame_indent:
            continue  # the code line under a frame
        frame_indent = None
        if _DUMP.match(line):
            break  # Keras's dump of every argument follows: leave it out
        if _NOISE.match(line):
            continue
        line = _PREFIX.sub("", line)
        if line and not _NOISE.match(line) and line not in kept:
            kept.append(line)
    text = re.sub(r"\s+", " ", " ".join(kept)).strip()
    text = re.sub(r"\s*\[Op:[^\]]*\]", "", text).strip()
    text = re.sub(r"\.\.+$", ".", text)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or type(err).__name__


def describe_error(err: BaseException, limit: int = 240) -> str:
    """``"ValueError: <clean message>"`` for feedback (see :func:`clean_message`), without a final period."""
    return f"{type(err).__name__}: {clean_message(err, limit).rstrip('.')}"


def call_answer(name: str, fn, *args, what: str | None = None, **kwargs):
    """Call a learner's function: ``(result, None)``, or ``(None, CheckResult)`` saying why not.

    A missing function (``None``, not callable) and any exception become a failed
    :class:`CheckResult` whose feedback quotes the cleaned message (:func:`describe_error`).
    Used by the checks of chapters 05 to 08.
    """
    if fn is None or not callable(fn):
        return None, CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    try:
        return fn(*args, **kwargs), None
    except Exception as err:  # noqa: BLE001 - any failure in the learner's code is feedback
        return None, CheckResult(name, False, _("{what} raised {error}").format(
            what=what or _("your function"), error=describe_error(err)))


def is_float_number(value) -> bool:
    """True for a Python or NumPy number (not a tensor): a value the tape cannot follow."""
    return isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, (bool, np.bool_))


# ----------------------------------------------------------------------------- describing answers
def _short(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    string, an IndexedSlices turned dense).
    """
    if value is None:
        return None, f"got None: {NONE_TEXT}.", ""
    if isinstance(value, (str, bytes)):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        try:
            number = float(text.strip())
        except ValueError:
            return None, (f"got a {type(value).__name__} ({_short(value)}), expected numbers: return the "
                          "number or array itself, not its printed text"), ""
        return np.asarray(number), None, f" (the string {_short(value)} was read as the number {number:g}: " \
            "a number is what is expected, not its text)"
    if isinstance(value, dict):
        return None, (f"got a dict with keys {_short(list(value))}, expected numbers (an array or a "
                      "tensor); a dict has no order or shape to compare"), ""
    note = ""
    if _is_sparse(value):
        value = tf.convert_to_tensor(value)
        note = " (an IndexedSlices, compared as the dense tensor it stands for)"
    where = _find_none(value) if isinstance(value, (list, tuple)) else None
    if where is not None:
        index = "".join(f"[{i}]" for i in where)
        return None, f"it holds None at {type(value).__name__}{index}: a None there means {NONE_TEXT}.", ""
    try:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception as err:  # noqa: BLE001 - any conversion failure is feedback
        if isinstance(value, (list, tuple)) and "inhomogeneous" in str(err):
            shapes = ", ".join(_item_shape(v) for v in value[:6]) + (", ..." if len(value) > 6 else "")
            return None, (f"got a ragged {type(value).__name__}: its items have different shapes ({shapes}), "
                          "so it is not one rectangular array. Are some items missing a value, or is this "
                          "a list of several arrays where one was expected?"), ""
        return None, f"could not turn a {type(value).__name__} into an array ({err})", ""
    if arr.dtype == object:
        nones = [i for i, v in enumerate(arr.ravel()) if v is None]
        if nones:
            index = tuple(int(i) for i in np.unravel_index(nones[0], arr.shape))
            return None, f"it holds None at index {index}: a None there means {NONE_TEXT}.", ""
        return None, f"got a {type(value).__name__} that is not a rectangular array of numbers", ""
    return arr, None, note


def _shape_feedback(arr: np.ndarray, exp: np.ndarray) -> str:
    got_s, exp_s = arr.shape, exp.shape
    text = f"shape {got_s}, expected {exp_s}"
    if arr.ndim == 0:
        return (f"got a single number ({float(arr):.4g}), expected an array of shape {exp_s}: did you reduce "
                "it (a sum, a mean, a loss) where the whole array was wanted?")
    if exp.ndim == 0:
        if arr.size == 1:
            return f"{text}: one number wrapped in an array; take it out (float(...) or tf.squeeze)"
        return f"{text}, a single number: did you return a whole array where one value was wanted?"
    if arr.ndim != exp.ndim and arr.size == exp.size and tuple(d for d in got_s if d != 1) == tuple(d for d in exp_s if d != 1):
        which = "an extra" if arr.ndim > exp.ndim else "a missing"
        return (f"{text}: {which} axis of length 1. Careful: subtracting a (n, 1) array from a (n,) one "
                "broadcasts to (n, n) without an error; use keepdims=True, tf.squeeze or tf.reshape so both "
                "sides have the same shape")
    if arr.size == exp.size:
        return f"{text} (same number of elements: a transpose or reshape away)"
    if arr.ndim < exp.ndim:
        return f"{text} (fewer dimensions: did you sum over an axis, or use gradient instead of jacobian?)"
    if arr.ndim > exp.ndim:
        return f"{text} (more dimensions: did you stack several results, or use jacobian instead of gradient?)"
    return text


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


def _ratio_text(r: float, single: bool = False) -> str:
    """What a common factor between the answer and the expected values suggests.

    For a ``single`` number any answer is some multiple of the expected one, so only the
    telling factors (-1, a whole number, 1/n) are mentioned.
    """
    text = f" Every value is {r:.4g}× the expected one" if not single else f" That is {r:.4g}× the expected value"
    if abs(r + 1.0) < 1e-3:
        return text + ": the sign is flipped."
    if abs(r) >= 2 and abs(r - round(r)) < 1e-3 * abs(r):
        return text + (": a whole number, as when a sum is taken where a mean was wanted "
                       "(the ratio is then the number of items averaged, such as the batch size).")
    if abs(r) < 0.5 and abs(1 / r - round(1 / r)) < 1e-3 / abs(r):
        return text + f" (1/{round(1 / r)}): a mean where a sum was wanted, or a factor divided twice?"
    return "" if single else text + "."


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


def _hint_text(hints: Iterable[Hint], arrs) -> str:
    found = [text for match, text in hints if _matches(match, arrs)]
    return "".join(f" Hint: {t}" for t in found)


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
    exp = _expected_array(expected)
    if isinstance(got, (bool, np.bool_)):
        return CheckResult(name, False, f"got the bool {bool(got)!r}, expected numbers (a comparison or a "
                                        "check result where the value itself was wanted?)")
    arr, problem, note = _to_numpy(got)
    if problem:
        extra = f" {if_none}" if if_none and _find_none(got) is not None else ""
        return CheckResult(name, False, problem + extra)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        return CheckResult(name, False, f"dtype {arr.dtype} is not numeric: expected numbers")
    if np.iscomplexobj(arr):
        return CheckResult(name, False, f"dtype {arr.dtype} is complex: expected real numbers")
    arr = arr.astype(np.float64)
    if arr.shape != exp.shape:
        return CheckResult(name, False, _shape_feedback(arr, exp) + note + _hint_text(hints, arr))
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        return CheckResult(name, False, f"{bad} of {arr.size} values are NaN or inf" + _hint_text(hints, arr))
    if not np.allclose(arr, exp, rtol=rtol, atol=atol):
        diff = np.abs(arr - exp)
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        where = f" at index {tuple(int(i) for i in idx)}" if idx else ""
        got_v = float(arr[idx] if idx else arr)
        exp_v = float(exp[idx] if idx else exp)
        digits, rounded = 4, ""
        while f"{got_v:.{digits}g}" == f"{exp_v:.{digits}g}" and digits < 17:
            digits += 1  # show enough digits that the two numbers look different
        if digits > 4:
            rounded = (" These agree to the digits usually printed: was the answer typed in, or copied from a "
                       "rounded printout? Pass the computed value itself (the tensor or float), not a rounded copy.")
        r = _common_ratio([arr], [exp])
        return CheckResult(
            name,
            False,
            f"values differ: largest gap {float(diff.max()):.3g}{where} "
            f"(got {got_v:.{digits}g}, expected {exp_v:.{digits}g}){note}.{rounded}"
            + (_ratio_text(r, single=exp.size == 1) if r is not None else "") + _hint_text(hints, arr),
        )
    return CheckResult(name, True, f"shape {arr.shape} and values match{note}")


def _want_list(n: int, what: str) -> str:
    """How :func:`check_arrays` names what it expects: ``a list of 4 arrays (one per variable)``."""
    return f"a list of {n} arrays ({what})"


def _as_list(got, n: int, what: str):
    """``(items, problem)``: the answer as a list of items, or why it is not a list of ``n`` arrays."""
    want = _want_list(n, what)
    if got is None:
        return None, f"got None, expected {want}: {NONE_TEXT}."
    if isinstance(got, (str, bytes)):
        return None, f"got a {type(got).__name__} ({_short(got)}), expected {want}"
    if isinstance(got, dict):
        return None, (f"got a dict with keys {_short(list(got))}, expected {want}: return the values as a list "
                      "in the order of the sources")
    if (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (list, tuple)) and got[0]
            and any(_is_array_like(a) for a in got[0]) and np.ndim(got[1]) == 0):
        return None, (f"got a pair (a list of {len(got[0])} arrays, one number), expected {want}. "
                      "tf.clip_by_global_norm returns such a pair, (clipped list, global norm before clipping): "
                      "keep its first item, `clipped, norm = tf.clip_by_global_norm(grads, c)`")
    if _is_array_like(got) or isinstance(got, (int, float, np.number)):
        arr, problem, _ = _to_numpy(got)
        if problem:
            return None, f"expected {want}; {problem}"
        if arr.ndim == 0 or arr.size == 1:
            return None, (f"got a single number ({float(arr.ravel()[0]):.4g}), expected {want}. A single number "
                          "is what a loss or a norm looks like: return the gradients, "
                          "tape.gradient(loss, variables), which is a list with one tensor per variable")
        return None, f"got one array of shape {arr.shape}, expected {want}"
    if not isinstance(got, (list, tuple)):
        if not isinstance(got, Iterable):
            return None, f"got a {type(got).__name__}, expected {want}"
        try:
            got = list(got)  # zip, map, a generator: read it once
        except Exception as err:  # noqa: BLE001
            return None, f"could not read the {type(got).__name__} as a list ({err}), expected {want}"
    return list(got), None


def check_arrays(name: str, got: Sequence, expected: Sequence, *, labels: Sequence[str] | None = None,
                 what: str = "one per source", hints: Sequence[Hint] = (), **kw) -> CheckResult:
    """Check a list of arrays (e.g. one gradient per variable) element by element.

    The feedback names the first item that is wrong (by ``labels``, such as variable paths,
    when given) and how many others are wrong too; when every item has its shape but all of
    them are off by one common factor, it says so (a sum instead of a mean gives the batch
    size). A single tensor, a number, a ``(list, norm)`` pair, a dict or ``None`` in place of
    the list are feedback, not errors. ``what`` says what the items are ("one per variable").
    ``kw`` goes to :func:`check_array` (``rtol``, ``atol``). Used by chapters 00 to 03.
    """
    expected = list(expected)
    n = len(expected)
    items, problem = _as_list(got, n, what)
    exps = [_expected_array(e) for e in expected]
    if problem:
        if "got one array of shape" in problem:
            arr = _to_numpy(got)[0]
            if arr.size == sum(e.size for e in exps) and n > 1:
                problem += (" with as many numbers as all of them together: were they concatenated, flattened or "
                            "summed into one? Return the list itself")
            elif arr.ndim >= 1 and arr.shape[0] == n:
                problem += f" whose first axis has length {n}: was the list stacked? Return the list itself"
            else:
                problem += f" (with shapes {', '.join(str(e.shape) for e in exps)})"
        return CheckResult(name, False, problem)
    if items and all(isinstance(it, (list, tuple)) and len(it) == 2 and hasattr(it[1], "assign")
                     for it in items):
        return CheckResult(name, False, (f"got {len(items)} (gradient, variable) pairs, expected {_want_list(n, what)}: "
                                         "return only the gradients, without zipping them with the variables"))
    if len(items) != n:
        shapes = ", ".join(str(e.shape) for e in exps)
        hint = f" ({what}, with shapes {shapes})" if n <= 8 else f" ({what})"
        return CheckResult(name, False, f"got {len(items)} arrays, expected {n}{hint}")
    labels = list(labels) if labels is not None else [f"{name}[{i}]" for i in range(n)]
    results = [check_array(labels[i], g, e, **kw) for i, (g, e) in enumerate(zip(items, exps, strict=True))]
    bad = [i for i, r in enumerate(results) if not r]
    if not bad:
        return CheckResult(name, True, f"all {n} arrays match")
    nones = [i for i in bad if items[i] is None]
    if len(nones) == n:
        return CheckResult(name, False, (f"every item is None: the tape recorded nothing that connects the target "
                                         f"to these sources. Was the loss computed inside the `with` block, from the "
                                         f"sources themselves? ({NONE_TEXT})"))
    first = bad[0]
    label = f" ({labels[first]})" if labels[first] != f"{name}[{first}]" else ""
    item_text = results[first].feedback
    arrs = [_to_numpy(g)[0] for g in items]
    tail = ""
    if all(a is not None and a.shape == e.shape for a, e in zip(arrs, exps, strict=True)):
        arrs = [a.astype(np.float64) for a in arrs]
        hint = _hint_text(hints, arrs)
        r = _common_ratio(arrs, exps) if all(np.all(np.isfinite(a)) for a in arrs) else None
        if r is not None and len(bad) > 1:
            item_text = item_text.split(" Every value is")[0]  # said once, for all items, below
            ratio = _ratio_text(r).replace("Every value is", "Across all items every value is")
            tail = (ratio.split(":")[0].rstrip(".") + "." if hint else ratio)
        tail += hint
    text = f"item {first}{label}: {item_text.rstrip('.')}"
    if len(bad) > 1:
        others = len(bad) - 1
        text += f"; {others} more item{'s are' if others > 1 else ' is'} wrong ({', '.join(map(str, bad[1:]))})"
    return CheckResult(name, False, text + "." + tail)


def check_status(name: str, got: str, expected: str, *, allowed: Sequence[str] = ()) -> CheckResult:
    """Check a diagnosis word such as ``"vanishing"``; ``allowed`` lists the words that exist."""
    if isinstance(got, str) and got == expected:
        return CheckResult(name, True, f"status is {expected!r}")
    if not isinstance(got, str) and isinstance(getattr(got, "status", None), str):
        return CheckResult(name, False, (f"got a {type(got).__name__}, expected its status word such as "
                                         f"{expected!r}: pass its .status (here {got.status!r})"))
    if isinstance(got, str) and got.strip().lower() == expected.lower():
        return CheckResult(name, False, f"status is {got!r}, expected {expected!r}: same word, but spelled "
                                        "differently (statuses are lower-case, no spaces)")
    if isinstance(got, str) and allowed and got not in allowed:
        return CheckResult(name, False, f"status is {got!r}, which is not one of {', '.join(map(repr, allowed))}")
    return CheckResult(name, False, f"status is {got!r}, expected {expected!r}")


def check_true(name: str, condition: bool | Callable[[], bool], if_false: str,
               if_true: str = "as expected") -> CheckResult:
    """A yes/no check with the feedback to show when it fails."""
    try:
        ok = bool(condition() if callable(condition) else condition)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"raised {type(err).__name__}: {err}")
    return CheckResult(name, ok, if_true if ok else if_false)


# ----------------------------------------------------------------------------- training advice
def _describe_optimizer(optimizer) -> tuple[str, float | None]:
    """A short name such as ``SGD(0.01)`` and the learning rate (None when it is a schedule)."""
    try:
        lr = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    except Exception:  # noqa: BLE001 - a schedule or an unusual optimizer
        lr = None
    momentum = float(getattr(optimizer, "momentum", 0.0) or 0.0)
    args = f"{lr:g}" if lr is not None else "schedule"
    if momentum:
        args += f", momentum={momentum:g}"
    return f"{type(optimizer).__name__}({args})", lr


def step_length_advice(losses, global_norms, *, optimizer, clip: float | None, below: float) -> str:
    """Advice for a run whose final loss stayed above ``below`` (nothing diverged, nothing None).

    Tells a loss still falling (steps too short) from one that stalls or jumps (steps too long)
    by comparing the mean loss of the last 10 steps with the 10 before, and, with clipping,
    counts the clipped steps: a clipped plain-SGD step moves the weights by exactly learning
    rate × clip. Used by chapter 04's capstone check; :func:`check_trains` may use it too.
    """
    losses = np.asarray(losses, dtype=np.float64)
    norms = np.asarray(global_norms, dtype=np.float64)
    name, lr = _describe_optimizer(optimizer)
    plain_sgd = type(optimizer).__name__ == "SGD" and not getattr(optimizer, "momentum", 0.0)
    clipped = int(np.sum(norms > clip)) if clip is not None else 0
    clip_text = ""
    if clip is not None:
        clip_text = f" {clipped} of {len(norms)} steps were clipped (gradient norm above {clip:g})"
        if plain_sgd and lr is not None and clipped >= len(norms) / 2:
            clip_text += f", and each clipped {name} step moves the weights by exactly {lr:g} × {clip:g} = {lr * clip:.3g}"
        clip_text += "."
    if losses.size < 20:
        return clip_text.strip()
    last, before = float(losses[-10:].mean()), float(losses[-20:-10].mean())
    spread = float(losses[-20:].max() - losses[-20:].min())
    if last < 0.98 * before and spread < 0.5 * before:
        steps_needed = ""
        rate = (before - last) / 10
        if rate > 0 and last > below:
            steps_needed = f"; at that pace it needs about {math.ceil((last - below) / rate)} more steps"
        return (f" The loss is still falling (mean {before:.3g} over steps {losses.size - 19}-{losses.size - 10}, "
                f"{last:.3g} over the last 10), too slowly{steps_needed}: the steps are too short.{clip_text} Make each "
                f"step count for more: a larger learning rate ({'keep' if clip is not None else 'with'} a clip for "
                "the first large gradients), momentum (SGD(..., momentum=0.9)), or Adam.")
    keep = " (keep the clip)" if clip is not None else ""
    return (f" The loss is not settling: over the last 20 steps it ranges from {losses[-20:].min():.3g} to "
            f"{losses[-20:].max():.3g} (mean {last:.3g} over the last 10, {before:.3g} over the 10 before): the "
            f"steps are too long for this problem.{clip_text} Lower the learning rate{keep}, or use "
            "momentum or Adam with a smaller rate.")


FINAL_WINDOW = 10  # check_trains judges the mean loss of this many last steps


def check_trains(name: str, model, x, y, *, optimizer, steps: int, below: float,
                 loss_fn: Callable | None = None, clip_global_norm: float | None = None,
                 require_variables: Sequence[str] = ()) -> CheckResult:
    """Train ``model`` for ``steps`` steps and check that it really trains (chapter 04).

    Passes when the **final** loss, the mean loss of the last 10 steps (of all steps when
    there are fewer), is below ``below``; every loss and gradient stays finite; no trainable
    variable has a ``None`` gradient; and every name in ``require_variables`` (a part of a
    variable path such as ``"standardize/scale"``) matches a trainable variable of the model,
    so deleting a layer does not pass for repairing it. A loss that only dips below the
    threshold at some step and rises again fails. The feedback names the condition that
    failed: the variables without a gradient or missing, the step where the loss or the
    gradients went NaN/inf, or the final and best losses. The model is trained in place with
    :func:`gradlab.train_steps` (one tape per step on the batch ``(x, y)``, mean squared error
    unless ``loss_fn`` is given, global-norm clipping when ``clip_global_norm`` is set).
    """
    if isinstance(below, bool) or not isinstance(below, (int, float, np.integer, np.floating)) or not below > 0:
        raise ValueError(f"below must be a number > 0; got {below!r}")
    if isinstance(require_variables, (str, bytes)) or not isinstance(require_variables, Sequence) or not all(
            isinstance(r, str) and r for r in require_variables):
        raise ValueError("require_variables must be a list or tuple of non-empty strings (parts of variable "
                         f"paths such as 'standardize/scale'); got {require_variables!r}")
    if model is None:
        return CheckResult(name, False, "got None instead of a model: did your function forget to return it?")
    if not isinstance(model, keras.Model):
        return CheckResult(name, False, f"expected a keras.Model, got {type(model).__name__}")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        return CheckResult(name, False,
                           f"expected a keras optimizer such as keras.optimizers.SGD(0.05), got {type(optimizer).__name__}")
    try:
        run = train_steps(model, x, y, optimizer=optimizer, steps=steps, loss_fn=loss_fn,
                          clip_global_norm=clip_global_norm, stop_on_none=True)
    except Exception as err:  # noqa: BLE001 - any failure to train is feedback
        return CheckResult(name, False, f"could not train: {type(err).__name__}: {err}")
    if run.none_gradients:
        return CheckResult(name, False,
                           f"no gradient (None) for {', '.join(run.none_gradients)}: these variables never "
                           "train. Find what disconnects them from the loss (chapter 02's None gallery).")
    paths = [getattr(v, "path", v.name) for v in model.trainable_variables]
    missing = [r for r in require_variables if not any(r in p for p in paths)]
    if missing:
        return CheckResult(name, False,
                           f"the model has no trainable variable {' or '.join(repr(m) for m in missing)}: "
                           "removing (or freezing) that layer is not a fix. Keep it and repair it so that "
                           "its variables get a gradient.")
    if run.stopped_at is not None:
        last = run.losses[-1]
        what = (f"the loss is {last}" if not np.isfinite(last)
                else f"the gradient norm is {run.global_norms[-1]}")
        return CheckResult(name, False,
                           f"at step {run.stopped_at} {what}: training diverged. Lower the learning rate, "
                           "clip the global norm, or fix the initializer.")
    window = run.losses[-FINAL_WINDOW:]
    final = float(np.mean(window))
    final_text = f"the final loss (mean of the last {len(window)} steps) is {final:.3g}"
    hit = run.first_below(below)
    if not final < below:
        best = min(run.losses)
        if hit is not None and run.losses[-1] <= min(window) and run.losses[-1] < window[0]:
            advice = (f" The loss first went below {below:g} at step {hit} and is still falling: it gets there "
                      "too late. Make each step count for more (momentum, or a larger rate with clipping) "
                      "or train longer.")
        elif hit is not None:
            advice = (f" The loss dipped below {below:g} at step {hit} but did not stay there (last step "
                      f"{run.losses[-1]:.3g}): it jumps around instead of settling. Shorter steps (a lower "
                      "learning rate, clipping) settle it.")
        else:
            advice = (" Look for vanishing gradients, and a learning rate that is too small (the loss falls "
                      "slowly) or too large for the clipping (it stalls or jumps).")
        return CheckResult(name, False,
                           f"after {steps} steps {final_text} (best single step {best:.3g}), not below "
                           f"{below:g}.{advice}")
    required = f"; {', '.join(require_variables)} present and trained" if require_variables else ""
    return CheckResult(name, True,
                       f"{final_text} < {below:g} (first below it at step {hit} of {steps}); every gradient "
                       f"finite; no None gradients{required}")


# ----------------------------------------------------------------------------- numbers
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
        return None, CheckResult(name, False, text + (f" {several_hint}" if several_hint else ""))
    try:
        value = answer.numpy() if hasattr(answer, "numpy") else answer
        value = np.asarray(value).item() if isinstance(value, (np.ndarray, np.generic)) else value
    except Exception as err:  # noqa: BLE001 - a symbolic tensor, an unusual object
        return None, CheckResult(name, False, _("could not read a number from the {kind} ({error}): expected "
                                                "{what}").format(kind=type(answer).__name__,
                                                                 error=clean_message(err, 80), what=what))
    if isinstance(value, complex) or not isinstance(value, numbers.Real):
        return None, CheckResult(name, False, _("got {value} ({kind}): expected {what}").format(
            value=_short(answer), kind=type(answer).__name__, what=what))
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
