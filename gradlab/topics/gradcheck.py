"""Check a gradient against finite differences (chapter 10).

:func:`check_gradient` compares what the tape computes (the *theoretical* Jacobian, one
backward pass per output element) with central finite differences (the *numerical* one, two
evaluations of ``f`` per input element), as ``tf.test.compute_gradient`` does, and returns
both in the same layout: one 2-D array per input, ``(output size, input size)``. Unlike
``tf.test.compute_gradient`` (a fixed step of 1/1024 in the input's own dtype) it

* works in float64: float16/bfloat16/float32 inputs are cast up, and the result says so;
  a function that computes in float32 inside anyway (a Keras layer, a ``tf.cast``), or that
  refuses float64 inputs, is detected and checked in float32 with float32's step and
  tolerance, so a correct float32 function is not called wrong;
* picks the step near the optimum ``h ≈ ε^(1/3) · max(1, |x|)`` (a power of two), where the
  truncation error (∝ h²) and the rounding error (∝ ε/h) of the central difference balance;
* estimates both errors per entry (the rounding from ``ε·|f|/h``, the truncation from the
  difference between steps ``h`` and ``2h``) and calls an entry wrong only beyond them;
* recognises a point where ``f`` is not differentiable (a kink: ``|x|`` or ``relu`` at 0)
  from one-sided slopes that disagree by the same amount at steps ``h`` and ``2h``, and says
  so instead of reporting a wrong gradient.

Pure computation: TensorFlow in, NumPy arrays and a small dataclass out; no widgets, no plots.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list, join_sentences

tf = quiet_import_tensorflow()

__all__ = ["GradientCheck", "GradientEntry", "Kink", "check_gradient", "decade_bound", "default_step"]

#: At most this many input elements in all (each costs four evaluations of ``f``).
MAX_INPUT_ELEMENTS = 10_000
#: At most this many Jacobian entries (output size × input size) in all.
MAX_JACOBIAN_ENTRIES = 5_000_000
#: Tolerance on the error relative to the Jacobian's largest entry, by working precision.
TOLERANCES = {"float64": 1e-6, "float32": 1e-3, "float16": 3e-2, "bfloat16": 3e-2}
_EPS = {name: float(np.finfo(np.float64 if name == "float64" else np.float32).eps) for name in ("float64", "float32")}
_EPS.update(float16=float(np.finfo(np.float16).eps), bfloat16=2.0 ** -7)
_ROUNDING_SAFETY = 8.0  # the rounding estimate eps*|f|/h, times this, is allowed per entry
_TRUNCATION_SAFETY = 2.0  # |D(2h) - D(h)| (three times the truncation error), times this
_KINK_SIZE = 1e-2  # a jump in slope above this fraction of the Jacobian's scale can be a kink
_PROGRESS_AFTER_S = 2.0


@dataclasses.dataclass(frozen=True)
class GradientEntry:
    """One entry of the Jacobian: ``d f[output] / d x[arg][input]``, both ways."""

    arg: int
    output: tuple[int, ...]
    input: tuple[int, ...]
    theoretical: float
    numerical: float
    label: str  # e.g. "d f[2] / d x[2]"


@dataclasses.dataclass(frozen=True)
class Kink:
    """An input element where ``f`` is not differentiable: its one-sided slopes differ."""

    arg: int
    input: tuple[int, ...]
    value: float  # the input element
    output: tuple[int, ...]  # the output whose slopes differ most
    left: float  # slope from the left, (f(x) - f(x - h)) / h
    right: float  # slope from the right, (f(x + h) - f(x)) / h
    theoretical: float  # what the tape returns there
    step: float  # the step h the slopes were taken with
    label: str  # e.g. "x[1]"


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """What :func:`check_gradient` found. Truthy when the gradient was verified.

    ``theoretical`` and ``numerical`` hold one 2-D array per input, ``(output size, input
    size)``, as ``tf.test.compute_gradient`` returns them. ``max_rel_error`` is the largest
    ``|theoretical - numerical|`` divided by the largest entry of that input's Jacobian
    (either way), over every input; ``worst`` is where it occurs. ``verdict`` is ``"ok"``,
    ``"wrong"`` (some entry differs by more than the finite differences' own error) or
    ``"kink"`` (``f`` is not differentiable at ``x``: see ``kinks``; the check cannot say).
    """

    ok: bool
    verdict: str
    max_rel_error: float
    theoretical: tuple[np.ndarray, ...]
    numerical: tuple[np.ndarray, ...]
    worst: GradientEntry | None
    kinks: tuple[Kink, ...]
    dtype: str  # the precision the check ran in
    cast: bool  # lower-precision inputs were cast up to float64
    tolerance: float
    steps: tuple[np.ndarray, ...]  # the step used for each input element
    wrong_entries: int
    notes: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.ok

    @property
    def message(self) -> str:
        """One paragraph a learner reads: the verdict, the numbers, and why."""
        step = _format_steps(self.steps)
        # a passing check's error is float rounding, whose digits change from CPU to CPU: a bound
        bound = decade_bound(self.max_rel_error)
        if self.verdict == "ok" and self.max_rel_error <= self.tolerance:
            head = _("✅ gradient check passed: largest error at most {bound}, relative to the largest entry "
                     "(tolerance {tol}; {dtype}, central differences, step {step}).").format(
                bound=bound, tol=f"{self.tolerance:.0e}", dtype=self.dtype, step=step)
        elif self.verdict == "ok":
            head = _("✅ gradient check passed: largest error at most {bound}, relative to the largest entry: above "
                     "the tolerance {tol} but within the finite differences' own error there (rounding ε·|f|/h and "
                     "truncation, estimated from steps h and 2h; {dtype}, step {step}).").format(
                bound=bound, tol=f"{self.tolerance:.0e}", dtype=self.dtype, step=step)
        elif self.verdict == "wrong":
            w = self.worst
            head = _("❌ gradient check failed: {n} Jacobian entries differ from finite differences by more than "
                     "their own error. Largest error {err} of the largest entry (tolerance {tol}), at {entry}: "
                     "the tape gives {tape}, finite differences {fd}. A custom gradient or a hand-written "
                     "backward pass is the usual cause.").format(
                n=self.wrong_entries, err=f"{self.max_rel_error:.3g}", tol=f"{self.tolerance:.0e}",
                entry=w.label, tape=f"{w.theoretical:.6g}", fd=f"{w.numerical:.6g}")
        else:
            k = self.kinks[0]
            more = len(self.kinks) - 1
            head = _("⚠️ f is not differentiable at {where} = {value} (or has a kink within the step {step} of "
                     "it): its slope is {left} from the left and {right} from the right. The tape returns {tape}; "
                     "at a kink that value is a convention (relu'(0) = 0, |x|'(0) = 0), and central differences "
                     "return about the mean of the two slopes, {mean}, so the check cannot verify the gradient "
                     "here. Check it at a point away from the kink.").format(
                where=k.label, value=f"{k.value:.4g}", step=f"{k.step:.2g}", left=f"{k.left:.4g}",
                right=f"{k.right:.4g}", tape=f"{k.theoretical:.4g}", mean=f"{(k.left + k.right) / 2:.4g}")
            if more:
                head = join_sentences(head, _("({n} more input elements are at a kink.)").format(n=more))
        return join_sentences(head, *self.notes)

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(self.message)


# ----------------------------------------------------------------------------- arguments
def _check_f(f) -> None:
    if not callable(f):
        raise ValueError(
            f"f must be a callable that takes the inputs and returns a tensor (e.g. lambda x: x * x); "
            f"got {type(f).__name__} {f!r:.60}"
        )


def _as_input(i: int, x):
    name = f"xs[{i}]"
    if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, (str, bytes)):
        raise ValueError(f"{name} must be a floating-point number, array or tensor; got {x!r:.60}")
    if isinstance(x, tf.Variable):
        x = x.value() if hasattr(x, "value") else tf.convert_to_tensor(x)
    try:
        t = tf.convert_to_tensor(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a floating-point number, array or tensor; got {type(x).__name__}") from err
    if not t.dtype.is_floating:
        hint = " (write 3.0 instead of 3, or cast with tf.cast(x, tf.float64))" if t.dtype.is_integer else ""
        raise ValueError(
            f"{name} has dtype {t.dtype.name}; finite differences need a floating-point input "
            f"(float16, bfloat16, float32 or float64){hint}"
        )
    return t


def _check_delta(delta) -> float | None:
    if delta is None:
        return None
    if (isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating, np.integer))
            or not math.isfinite(delta) or delta <= 0):
        raise ValueError(
            f"delta must be None (a step near eps**(1/3) * max(1, |x|), chosen per element) or a finite "
            f"step > 0 such as 1e-6; got {delta!r}"
        )
    return float(delta)


def default_step(x, dtype: str = "float64") -> np.ndarray:
    """The step :func:`check_gradient` uses per element: ``ε^(1/3) · max(1, |x|)`` rounded to a
    power of two, where ``ε`` is the machine epsilon of ``dtype`` (chapter 10)."""
    if dtype not in _EPS:
        raise ValueError(f"dtype must be one of {', '.join(_EPS)}; got {dtype!r}")
    x = np.asarray(x, dtype=np.float64)
    raw = _EPS[dtype] ** (1.0 / 3.0) * np.maximum(1.0, np.abs(x))
    return np.exp2(np.round(np.log2(raw)))


# ----------------------------------------------------------------------------- evaluation
def _flat_output(y) -> np.ndarray:
    parts = tf.nest.flatten(y)
    if not parts or any(p is None for p in parts):
        raise ValueError("f returned None (or a structure holding None); it must return a tensor of numbers")
    arrays = []
    for p in parts:
        t = tf.convert_to_tensor(p)
        if not t.dtype.is_floating:
            raise ValueError(
                f"f must return floating-point values; it returned dtype {t.dtype.name}, which has no gradient"
            )
        arrays.append(np.asarray(t.numpy(), dtype=np.float64).ravel())
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def _output_dtype(y) -> str:
    names = {tf.convert_to_tensor(p).dtype.name for p in tf.nest.flatten(y)}
    for name in ("float16", "bfloat16", "float32", "float64"):
        if name in names:
            return name
    return "float64"


def _output_index(shapes: list[tuple[int, ...]], i: int) -> tuple[int, ...]:
    """Row ``i`` of the flattened output as an index into ``f``'s output (``(k, ...)`` for the
    k-th of several outputs)."""
    if len(shapes) == 1:
        return tuple(int(v) for v in np.unravel_index(i, shapes[0])) if shapes[0] else ()
    for k, shape in enumerate(shapes):
        size = int(np.prod(shape)) if shape else 1
        if i < size:
            inner = tuple(int(v) for v in np.unravel_index(i, shape)) if shape else ()
            return (k, *inner)
        i -= size
    raise IndexError(i)  # pragma: no cover - i is always in range


def _theoretical(f, xs, y_size: int):
    """One backward pass per output element (as ``tf.test.compute_gradient``), or ``None`` per
    input the tape found no path to."""
    with tf.GradientTape(persistent=True) as tape:
        for x in xs:
            tape.watch(x)
        y = f(*xs)
        flat = tf.concat([tf.reshape(tf.cast(tf.convert_to_tensor(p), tf.float64), [-1])
                          for p in tf.nest.flatten(y)], axis=0)
    jac = [np.zeros((y_size, int(np.prod(x.shape)) if x.shape.rank else 1)) for x in xs]
    connected = [False] * len(xs)
    for row in range(y_size):
        seed = tf.one_hot(row, y_size, dtype=tf.float64)
        grads = tape.gradient(flat, list(xs), output_gradients=seed)
        for k, g in enumerate(grads):
            if g is None:
                continue
            connected[k] = True
            jac[k][row] = np.asarray(tf.convert_to_tensor(g).numpy(), dtype=np.float64).ravel()
    del tape
    return jac, connected


def decade_bound(value: float) -> str:
    """``value`` rounded *up* to a power of ten, as printed (``3.1e-05`` -> ``"1e-04"``; 0 -> ``"0"``).

    A passing check's error is float rounding: its digits differ between CPUs, its decade hardly.
    """
    if not math.isfinite(value) or value <= 0:
        return f"{value:g}"
    return f"{10.0 ** math.ceil(math.log10(value) - 1e-9):.0e}"


class _Progress:
    def __init__(self, total: int, enabled: bool | None):
        self.total, self.enabled = total, enabled
        self.start = self.last = time.perf_counter()
        self.shown = False
        self.last_done = 0

    def __call__(self, done: int) -> None:
        if self.enabled is False:
            return
        now = time.perf_counter()
        finished = done == self.total and self.shown and self.last_done != done  # a shown line also shows the end
        if finished or self.enabled or (now - self.start > _PROGRESS_AFTER_S and now - self.last > _PROGRESS_AFTER_S):
            if self.enabled and done not in (1, self.total) and now - self.last < _PROGRESS_AFTER_S:
                return
            self.last, self.shown, self.last_done = now, True, done
            print(_("checking the gradient: {done} of {total} input elements").format(done=done, total=self.total),
                  flush=True)


def check_gradient(f: Callable, *xs, delta: float | None = None, progress: bool | None = None) -> GradientCheck:
    """Compare the tape's gradient (or Jacobian) of ``f`` at ``xs`` with central finite differences.

    ``f(*xs)`` returns a tensor (any shape; a list or tuple of tensors is read as their
    concatenation). Each ``xs[i]`` is a floating-point number, array or tensor. ``delta`` is an
    absolute step for every element (as ``tf.test.compute_gradient`` takes one); by default each
    element gets ``ε^(1/3) · max(1, |x|)`` rounded to a power of two. Inputs of lower precision
    are cast to float64 and the result says so; a function that computes in float32 anyway is
    checked in float32. ``progress`` prints a line every few seconds (``None``: only when the
    check takes longer than 2 s). At most 10,000 input elements: each costs four evaluations
    of ``f``.

    Returns a :class:`GradientCheck` (``.ok``, ``.max_rel_error``, ``.theoretical``,
    ``.numerical``, ``.worst``, ``.kinks``, ``.message``). Used in chapter 10.
    """
    _check_f(f)
    if not xs:
        raise ValueError("xs is empty: pass the input(s) at which to check the gradient, e.g. "
                         "check_gradient(f, tf.constant([1.0, 2.0]))")
    inputs = [_as_input(i, x) for i, x in enumerate(xs)]
    delta = _check_delta(delta)
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be None, True or False; got {progress!r}")
    sizes = [int(np.prod(t.shape)) if t.shape.rank else 1 for t in inputs]
    if sum(sizes) > MAX_INPUT_ELEMENTS:
        raise ValueError(
            f"xs hold {sum(sizes):,} elements in all; check_gradient evaluates f four times per element, so it "
            f"takes at most {MAX_INPUT_ELEMENTS:,}. Check a slice (x[:4]), a smaller layer, or a few examples"
        )
    if sum(sizes) == 0:
        raise ValueError("xs hold no elements (an empty array): there is nothing to check")

    notes: list[str] = []
    original = [t.dtype.name for t in inputs]
    low = [i for i, name in enumerate(original) if name != "float64"]
    work_inputs, cast, dtype = inputs, False, "float64"
    if low:
        up = [tf.cast(t, tf.float64) for t in inputs]
        try:
            y_up = f(*up)
            _flat_output(y_up)
        except (TypeError, ValueError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            first = first.split(" [Op:")[0][:160]
            dtype = max((original[i] for i in low), key=lambda n: _EPS.get(n, 1.0))
            notes.append(_("f does not accept float64 inputs ({error}), so the check ran in {dtype}, with "
                           "{dtype}'s step and tolerance.").format(error=first, dtype=dtype))
        else:
            work_inputs, cast = up, True
            names = join_list(f"xs[{i}]" for i in low)
            cast_note = _("{names} ({dtype}) cast to float64 for the check: in {dtype}, finite differences would "
                          "lose about a third of the digits (their error is about ε^(2/3)).").format(
                names=names, dtype=original[low[0]])
            notes.append(cast_note)
    y0_struct = f(*work_inputs)
    y0 = _flat_output(y0_struct)
    out_dtype = _output_dtype(y0_struct)
    if dtype == "float64" and out_dtype != "float64":
        dtype = out_dtype
        if cast:
            notes.remove(cast_note)
        notes.append(_("f returns {dtype} even for float64 inputs (it computes in {dtype} inside, as a Keras layer "
                       "does), so the step and the tolerance are {dtype}'s.").format(dtype=dtype))
    elif dtype == "float64" and _ignores_float64_digits(f, work_inputs, y0):
        dtype = "float32"
        notes.append(_("f ignores changes of its input below float32's resolution (it computes in float32 inside), "
                       "so the step and the tolerance are float32's."))
    y_shapes = [tuple(int(d) for d in tf.convert_to_tensor(p).shape) for p in tf.nest.flatten(y0_struct)]
    y_size = y0.size
    if y_size == 0:
        raise ValueError("f returned an empty tensor: there is no gradient to check")
    if y_size * sum(sizes) > MAX_JACOBIAN_ENTRIES:
        raise ValueError(
            f"the Jacobian would have {y_size:,} x {sum(sizes):,} entries (more than {MAX_JACOBIAN_ENTRIES:,}); "
            "check a smaller input, or reduce f's output to a scalar (e.g. tf.reduce_sum(f(x) * w) with a fixed "
            "random w)"
        )
    eps = _EPS[dtype]
    tol = TOLERANCES[dtype]

    theoretical, connected = _theoretical(f, work_inputs, y_size)
    for k, ok in enumerate(connected):
        if not ok:
            notes.append(_("The tape found no path from xs[{k}] to f's output (tape.gradient returned None): the "
                           "theoretical Jacobian counts it as zeros.").format(k=k))

    base = [np.asarray(t.numpy(), dtype=np.float64) for t in work_inputs]
    tf_dtypes = [t.dtype for t in work_inputs]
    numerical, steps = [], []
    stats = []
    progress_line = _Progress(sum(sizes), progress)
    done = 0
    for k, x in enumerate(base):
        flat = x.ravel()
        h = np.full(flat.shape, delta) if delta is not None else default_step(flat, dtype)
        n = flat.size
        d1 = np.zeros((y_size, n))
        d2 = np.zeros((y_size, n))
        jump1 = np.zeros((y_size, n))
        left1 = np.zeros((y_size, n))
        jump2 = np.zeros((y_size, n))
        rounding = np.zeros((y_size, n))
        for j in range(n):
            values = {}
            for s in (-2, -1, 1, 2):
                point = flat.copy()
                point[j] = point[j] + s * h[j]
                moved = tf.constant(point.reshape(x.shape), dtype=tf_dtypes[k])
                # the step really taken: x + h rounded to the input's dtype
                values[s] = float(np.asarray(tf.cast(moved, tf.float64).numpy()).ravel()[j])
                if s in (-1, 1) and values[s] == flat[j]:
                    raise ValueError(
                        f"delta={h[j]:.3g} is below the resolution of {tf_dtypes[k].name} at xs[{k}] element {j} "
                        f"(= {flat[j]:.6g}): x + delta == x. Pass a larger delta, or None for the default"
                    )
                args = [moved if i == k else t for i, t in enumerate(work_inputs)]
                values[(s, "y")] = _flat_output(f(*args))
            xm1, xp1 = float(values[-1]), float(values[1])
            xm2, xp2 = float(values[-2]), float(values[2])
            x0 = float(flat[j])
            ym1, yp1, ym2, yp2 = values[(-1, "y")], values[(1, "y")], values[(-2, "y")], values[(2, "y")]
            d1[:, j] = (yp1 - ym1) / (xp1 - xm1)
            d2[:, j] = (yp2 - ym2) / (xp2 - xm2)
            left1[:, j] = (y0 - ym1) / (x0 - xm1)
            jump1[:, j] = (yp1 - y0) / (xp1 - x0) - left1[:, j]
            jump2[:, j] = (yp2 - y0) / (xp2 - x0) - (y0 - ym2) / (x0 - xm2)
            rounding[:, j] = eps * (np.abs(yp1) + np.abs(ym1) + np.abs(y0)) / (xp1 - xm1)
            done += 1
            progress_line(done)
        numerical.append(d1)
        steps.append(h.reshape(x.shape))
        stats.append((d2, jump1, jump2, rounding, left1))

    max_rel, worst, wrong, kinks = 0.0, None, 0, []
    xname = "x" if len(base) == 1 else "xs"
    worst_excess = -1.0
    for k, (t_jac, n_jac, (d2, jump1, jump2, rounding, left1)) in enumerate(zip(theoretical, numerical, stats, strict=True)):
        scale = max(float(np.max(np.abs(t_jac), initial=0.0)), float(np.max(np.abs(n_jac), initial=0.0)))
        scale = scale if scale > 0 else 1.0
        diff = np.abs(t_jac - n_jac)
        allowed = tol * scale + _ROUNDING_SAFETY * rounding + _TRUNCATION_SAFETY * np.abs(d2 - n_jac)
        big = np.abs(jump1) > _KINK_SIZE * scale + 2 * _ROUNDING_SAFETY * rounding
        kink = big & (np.abs(jump2) < 1.5 * np.abs(jump1))
        bad = (diff > allowed) & ~kink
        wrong += int(bad.sum())
        rel = diff / scale
        if rel.size and float(rel.max()) > max_rel:
            max_rel = float(rel.max())
        excess = np.where(bad, 1.0 + rel, rel / 1e9)  # a wrong entry first, else the largest error
        if excess.size and float(excess.max()) > worst_excess:
            worst_excess = float(excess.max())
            i, j = np.unravel_index(int(np.argmax(excess)), excess.shape)
            out, xin = _output_index(y_shapes, int(i)), _input_index(base[k].shape, int(j))
            worst = GradientEntry(k, out, xin, float(t_jac[i, j]), float(n_jac[i, j]),
                                  f"d {_name('f', (), out)} / d {_name(xname, k, xin)}")
        for j in np.flatnonzero(kink.any(axis=0)):
            i = int(np.argmax(np.where(kink[:, j], np.abs(jump1[:, j]), -1.0)))
            left = float(left1[i, j])
            right = float(left1[i, j] + jump1[i, j])
            xin = _input_index(base[k].shape, int(j))
            kinks.append(Kink(k, xin, float(base[k].ravel()[j]), _output_index(y_shapes, i), left, right,
                              float(t_jac[i, j]), float(steps[k].ravel()[j]), _name(xname, k, xin)))
    verdict = "wrong" if wrong else "kink" if kinks else "ok"
    return GradientCheck(
        ok=verdict == "ok", verdict=verdict, max_rel_error=max_rel,
        theoretical=tuple(theoretical), numerical=tuple(numerical), worst=worst, kinks=tuple(kinks),
        dtype=dtype, cast=cast, tolerance=tol, steps=tuple(steps), wrong_entries=wrong, notes=tuple(notes),
    )


def _name(base: str, k, index: tuple[int, ...]) -> str:
    head = base if k == () or base == "x" else f"{base}[{k}]"
    return head + (f"[{', '.join(map(str, index))}]" if index else "")


def _input_index(shape, j: int) -> tuple[int, ...]:
    return tuple(int(v) for v in np.unravel_index(j, shape)) if len(shape) else ()


def _ignores_float64_digits(f, xs, y0: np.ndarray) -> bool:
    """True when ``f``'s output does not move at all for a change of its inputs far below
    float32's resolution (2**-30 relative) but does for one float32 can see (2**-10): ``f``
    rounds its input to float32 (or less) inside, whatever dtype it returns."""
    def moved(rel):
        args = [tf.constant(np.asarray(x.numpy()) * (1.0 + rel) + rel, dtype=tf.float64) for x in xs]
        return not np.array_equal(_flat_output(f(*args)), y0)

    return not moved(2.0 ** -30) and moved(2.0 ** -10)


def _format_steps(steps) -> str:
    values = np.concatenate([np.ravel(s) for s in steps])
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.2g}" if lo == hi else f"{lo:.2g}–{hi:.2g}"
