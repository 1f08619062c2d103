"""Self-checks for the exercises of every chapter.

Each check returns a :class:`CheckResult` that says *what* is wrong (``None``, type, shape,
non-finite values, wrong values, or a wrong status) rather than only pass or fail. A result
is truthy when it passed and prints as one line, ``✅ …`` or ``❌ …``.

Pure computation: NumPy and TensorFlow only, no widgets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "CheckResult",
    "check_array",
    "check_arrays",
    "check_status",
    "check_trains",
    "check_true",
]


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one self-check: ``ok`` plus feedback a learner can act on."""

    name: str
    ok: bool
    feedback: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return f"{'✅' if self.ok else '❌'} {self.name}: {self.feedback}"

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(str(self))


def _to_numpy(value):
    """(array, problem) for a tensor-like value; problem is None when it converted cleanly."""
    if value is None:
        return None, (
            "got None: nothing is returned or assigned yet? If it is a gradient, it is None "
            "because the target does not depend on the source through operations the tape "
            "recorded (chapter 02's gallery of None gradients)."
        )
    if isinstance(value, (str, bytes)):
        return None, f"got a {type(value).__name__}, expected numbers"
    try:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception as err:  # noqa: BLE001 - any conversion failure is feedback
        return None, f"could not turn a {type(value).__name__} into an array ({err})"
    if arr.dtype == object:
        return None, f"got a {type(value).__name__} that is not a rectangular array of numbers"
    return arr, None


def check_array(name: str, got, expected, *, rtol: float = 1e-4, atol: float = 1e-6) -> CheckResult:
    """Compare ``got`` with ``expected``: None, shape, non-finite values, then the values."""
    exp = np.asarray(expected.numpy() if hasattr(expected, "numpy") else expected, dtype=np.float64)
    arr, problem = _to_numpy(got)
    if problem:
        return CheckResult(name, False, problem)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        return CheckResult(name, False, f"dtype {arr.dtype} is not numeric")
    if arr.shape != exp.shape:
        hint = ""
        if arr.size == exp.size:
            hint = " (same number of elements: a transpose or reshape away)"
        elif arr.ndim < exp.ndim:
            hint = " (fewer dimensions: did you sum over an axis, or use gradient instead of jacobian?)"
        return CheckResult(name, False, f"shape {arr.shape}, expected {exp.shape}{hint}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        return CheckResult(name, False, f"{bad} of {arr.size} values are NaN or inf")
    if not np.allclose(arr, exp, rtol=rtol, atol=atol):
        diff = np.abs(arr - exp)
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        where = f" at index {tuple(int(i) for i in idx)}" if idx else ""
        got_v = arr[idx] if idx else arr
        exp_v = exp[idx] if idx else exp
        return CheckResult(
            name,
            False,
            f"values differ: largest gap {float(diff.max()):.3g}{where} "
            f"(got {float(got_v):.4g}, expected {float(exp_v):.4g})",
        )
    return CheckResult(name, True, f"shape {arr.shape} and values match")


def check_arrays(name: str, got: Sequence, expected: Sequence, **kw) -> CheckResult:
    """Check a list of arrays (e.g. one gradient per variable) element by element."""
    if got is None or isinstance(got, (str, bytes)) or not hasattr(got, "__len__"):
        return CheckResult(name, False, f"expected a list of {len(expected)} arrays, got {type(got).__name__}")
    if len(got) != len(expected):
        return CheckResult(name, False, f"got {len(got)} arrays, expected {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        r = check_array(f"{name}[{i}]", g, e, **kw)
        if not r:
            return CheckResult(name, False, f"item {i}: {r.feedback}")
    return CheckResult(name, True, f"all {len(expected)} arrays match")


def check_status(name: str, got: str, expected: str) -> CheckResult:
    """Check a diagnosis word such as ``"vanishing"``."""
    if got == expected:
        return CheckResult(name, True, f"status is {expected!r}")
    return CheckResult(name, False, f"status is {got!r}, expected {expected!r}")


def check_true(name: str, condition: bool | Callable[[], bool], if_false: str,
               if_true: str = "as expected") -> CheckResult:
    """A yes/no check with the feedback to show when it fails."""
    try:
        ok = bool(condition() if callable(condition) else condition)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"raised {type(err).__name__}: {err}")
    return CheckResult(name, ok, if_true if ok else if_false)


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
    from .diagnostics import keras, train_steps

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
