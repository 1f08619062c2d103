"""Self-checks for chapter 02's exercises (non-scalar targets and Jacobians).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_softmax_jacobian`, the Jacobian of ``tf.nn.softmax`` at :data:`SOFTMAX_Z`;
* exercise 2: :func:`check_loop_jacobian`, the source text's loop repaired;
* exercise 3: :func:`check_jacobian_row`, one row of a Jacobian from one ``output_gradients`` call;
* exercise 4: :func:`check_batch_jacobian_safe`, is ``batch_jacobian`` right for a function?

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong
answer: the typical slips (an unwatched constant, ``gradient`` instead of ``jacobian``, the
source's list of ``None`` s, the wrong row, a string instead of a bool) get feedback that says
what is wrong and hints at why.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list
from ..topics.jacobians import cross_example_max, jacobian
from .compare import check_array
from .feedback import CheckResult

tf = quiet_import_tensorflow()

__all__ = [
    "LOOP_X",
    "SOFTMAX_Z",
    "check_batch_jacobian_safe",
    "check_jacobian_row",
    "check_loop_jacobian",
    "check_softmax_jacobian",
]

#: Exercise 1: the point at which the softmax Jacobian is taken.
SOFTMAX_Z = (0.5, -1.0, 2.0, 0.0)
#: Exercise 2: the source text's ``x``; the Jacobian of ``x**2`` there is ``diag(2x)``.
LOOP_X = (1.0, 2.0, 3.0)


def _none_positions(answer) -> list[int] | None:
    """Positions of ``None`` in a list or tuple answer, or None when it is not such a list."""
    if isinstance(answer, (list, tuple)):
        return [i for i, a in enumerate(answer) if a is None]
    return None


def _same(a, b, atol: float = 1e-5) -> bool:
    try:
        a = np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == np.shape(b) and bool(np.allclose(a, b, atol=atol))


# ----------------------------------------------------------------------------- exercise 1
def check_softmax_jacobian(j) -> CheckResult:
    """Exercise 1: ``j`` is the 4 × 4 Jacobian of ``tf.nn.softmax`` at :data:`SOFTMAX_Z`."""
    name = _("softmax Jacobian")
    s = tf.nn.softmax(tf.constant(SOFTMAX_Z)).numpy().astype(np.float64)
    expected = np.diag(s) - np.outer(s, s)
    if j is None:
        return CheckResult(name, False, _(
            "got None. Either nothing is assigned yet, or tape.jacobian returned None: z is a tf.constant, and a "
            "tape watches only variables by itself. Call tape.watch(z) inside the with block, before the softmax."))
    if _same(j, np.zeros(4)):
        return CheckResult(name, False, _(
            "got 4 zeros, shape (4,): that is tape.gradient, the gradient of the sum of the outputs. The outputs of a "
            "softmax always sum to 1, so that gradient is 0. tape.jacobian keeps one row per output."))
    hints = [(np.diag(s), _("your matrix is diag(s), only the first term of diag(s) - s sᵀ: the derivative of s_i with "
                            "respect to z_j (j ≠ i) is -s_i s_j, not 0.")),
             (-np.outer(s, s), _("your matrix is -s sᵀ, only the second term: the diagonal also has s_i, so the "
                                 "Jacobian is diag(s) - s sᵀ.")),
             (np.eye(4) - s[None, :], _("that is the Jacobian of tf.nn.log_softmax (I - 1 sᵀ): take the Jacobian of "
                                       "tf.nn.softmax itself."))]
    result = check_array(name, j, expected, rtol=1e-4, atol=1e-6, hints=hints)
    if not result:
        return result
    got = np.asarray(j.numpy() if hasattr(j, "numpy") else j, dtype=np.float64)
    rows = np.abs(np.sum(got, axis=1)).max()
    return CheckResult(name, True, _("shape (4, 4), values match, and every row sums to 0 (largest |sum| "
                                     "{largest})").format(largest="< 1e-6" if rows < 1e-6 else f"{rows:.1g}"))  # float32 rounding: a bound


# ----------------------------------------------------------------------------- exercise 2
def check_loop_jacobian(j) -> CheckResult:
    """Exercise 2: ``j`` is ``diag(2x)`` for :data:`LOOP_X`, built by the repaired loop."""
    name = _("loop Jacobian")
    nones = _none_positions(j)
    if nones:
        where = join_list(str(i) for i in nones)
        return CheckResult(name, False, _(
            "your list holds None at position {where}: those are the source's None gradients. Each y[i] was sliced "
            "after the with block had closed, so the tape never recorded the slice and finds no path from y[i] back "
            "to x. Slice while the tape is still recording (inside the with block); the tape must also be "
            "persistent to be read once per row.").format(where=where))
    if j is not None and _same(j, 2 * np.asarray(LOOP_X)):
        return CheckResult(name, False, _(
            "got [2. 4. 6.], shape (3,): that is one tape.gradient(y, x) call, the gradient of the sum of y. The "
            "Jacobian has one row per element of y: one gradient call per y[i]."))
    return check_array(name, j, np.diag(2 * np.asarray(LOOP_X)))


# ----------------------------------------------------------------------------- exercise 3
def check_jacobian_row(row, f: Callable, x, index: int = 1) -> CheckResult:
    """Exercise 3: ``row`` is row ``index`` of ``f``'s Jacobian at ``x`` (the gradient of output ``index``)."""
    name = _("row {index} of J").format(index=index)
    full = jacobian(f, x)
    expected = full[index]
    if row is not None and not _same(row, expected):
        for k in range(full.shape[0]):
            if k != index and _same(row, full[k]):
                return CheckResult(name, False, _(
                    "that is row {k}, not row {index}: output_gradients picks the rows by position, and positions "
                    "start at 0. Put the 1 at position {index}.").format(k=k, index=index))
        if _same(row, full.sum(axis=0)):
            return CheckResult(name, False, _(
                "that is the sum of all rows: tape.gradient without output_gradients weights every output by 1. "
                "Weight output {index} by 1 and every other output by 0.").format(index=index))
        try:
            row_shape = np.shape(row)
        except ValueError:  # a ragged list: check_array below says so
            row_shape = None
        if row_shape == tuple(full.shape[:1]):
            return CheckResult(name, False, _(
                "shape {shape} is the output's shape, the shape of output_gradients. The result of tape.gradient has "
                "the source's shape {source}.").format(shape=np.shape(row), source=tuple(full.shape[1:])))
    hints = [(lambda arr: _multiple_of(arr, expected),
              _("a multiple of row {index}: output_gradients weighted output {index} by another number than 1. Put "
                "exactly 1 at position {index} and 0 elsewhere.").format(index=index))]
    return check_array(name, row, expected, rtol=1e-4, atol=1e-6, hints=hints)


def _multiple_of(arr: np.ndarray, expected: np.ndarray) -> bool:
    """Whether ``arr`` is k or 1/k times ``expected`` for a whole k ≥ 2 (a 2.0 typed into output_gradients).

    Other factors are not this slip: the row of the weight matrix without tanh's derivative is a
    multiple of the right row too.
    """
    nonzero = np.abs(expected) > 1e-12
    if arr.shape != expected.shape or not nonzero.any():
        return False
    r = abs(float(np.median(arr[nonzero] / expected[nonzero])))
    k = r if r >= 1 else 1 / max(r, 1e-12)
    return round(k) >= 2 and abs(k - round(k)) < 1e-3 * k and bool(
        np.allclose(np.abs(arr), r * np.abs(expected), rtol=1e-4, atol=1e-6))


# ----------------------------------------------------------------------------- exercise 4
def check_batch_jacobian_safe(answer, f: Callable, shape=(3, 4), seed: int = 2) -> CheckResult:
    """Exercise 4: ``answer`` (True or False) says whether ``batch_jacobian`` is right for ``f``.

    The truth is measured: ``f``'s full Jacobian on a random batch of ``shape`` has no
    cross-example entry (:func:`~gradlab.cross_example_max` is 0) exactly when it is safe.
    """
    name = _("batch_jacobian safe")
    xl = tf.random.stateless_normal(list(shape), seed=[0, seed])
    cross = cross_example_max(jacobian(f, xl))
    safe = cross == 0.0
    if hasattr(answer, "numpy") and getattr(answer, "dtype", None) == tf.bool and answer.shape.rank == 0:
        answer = answer.numpy()  # a scalar bool tensor, e.g. from tf.reduce_all
    if isinstance(answer, np.ndarray) and answer.dtype == bool and answer.shape == ():
        answer = answer.item()
    if isinstance(answer, np.bool_):
        answer = bool(answer)
    if answer is None:
        return CheckResult(name, False, _("no answer yet: set my_answer to True or False"))
    if isinstance(answer, str):
        return CheckResult(name, False, _("got the string {value!r}: write the bool True or False, without "
                                          "quotes").format(value=answer))
    if not isinstance(answer, bool):
        return CheckResult(name, False, _("got {value!r} ({kind}): set my_answer to True or False").format(
            value=answer, kind=type(answer).__name__))
    if answer != safe:
        text = (_("not quite (look at which examples each output depends on: does any statistic mix examples?). "
                  "gl.topics.jacobians.cross_example_max on its full Jacobian tells you.") if safe else
                _("not quite (some output depends on another example's input). gl.topics.jacobians.cross_example_max on its "
                  "full Jacobian tells you."))
        return CheckResult(name, False, text)
    if safe:
        return CheckResult(name, True, _("right: each example is transformed with its own numbers only: the largest "
                                         "cross-example entry is 0"))
    return CheckResult(name, True, _("right: examples are coupled: the largest cross-example entry is {value}").format(
        value=f"{cross:.3g}"))
