"""Check a gradient against finite differences (chapter 10).

:func:`check_gradient` compares what the tape computes (the *theoretical* Jacobian, one
backward pass per output element) with central finite differences (the *numerical* one, two
evaluations of ``f`` per input element), as ``tf.test.compute_gradient`` does, and returns
both in the same layout: one 2-D array per input, ``(output size, input size)``. Unlike
``tf.test.compute_gradient`` (a fixed step of 1/1024 in the input's own dtype) it

* works in float64: float16/bfloat16/float32 inputs are cast up, and the result says so;
  a function that computes in float32 inside anyway (a Keras layer, a ``tf.cast``: a float32
  op in its graph, not merely a large value that absorbs small changes in float64), or that
  refuses float64 inputs, or whose backward pass alone refuses float64 (a custom gradient
  written in float32), is detected and checked in float32 with float32's step and
  tolerance, so a correct float32 function is not called wrong;
* picks the step near the optimum ``h ≈ ε^(1/3) · max(1, |x|)`` (a power of two), where the
  truncation error (∝ h²) and the rounding error (∝ ε/h) of the central difference balance;
* estimates both errors per entry (the rounding from ``ε·|f|/h``, the truncation from the
  difference between steps ``h`` and ``2h``) and calls an entry wrong only beyond them plus the
  tolerance times the largest entry of its own row or column (not of the whole Jacobian: a
  wrong entry 2000× smaller than the largest still fails);
* recognises a point where ``f`` is not differentiable (a kink: ``|x|`` or ``relu`` at 0)
  from one-sided slopes that disagree by the same amount at steps ``h`` and ``2h``, and says
  so instead of reporting a wrong gradient;
* evaluates ``f`` twice at ``xs`` first: a function that returns different values at the same
  point (Dropout or GaussianNoise with ``training=True``, an unseeded ``tf.random`` op) has
  no slope to measure, and the result says so instead of calling the noise a kink.

:func:`check_gradient` is a pipeline of named stages: the arguments, the working precision
(:func:`_working_precision`), the determinism check, the tape's Jacobian (with the float32
fallback), the finite differences, the comparison.

Pure computation: TensorFlow in, NumPy arrays and a small dataclass out; no widgets, no plots.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list, join_sentences, ngettext, pgettext
from ..progress import Progress, check_progress

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
#: An entry's error is measured against the largest entry of its row or column, but never against
#: less than this many ε of the Jacobian's largest entry (the tape's rounding where it sums terms).
_TAPE_ROUNDING = 16.0
_KINK_SIZE = 1e-2  # a jump in slope above this fraction of the Jacobian's scale can be a kink
#: Two evaluations of f at the same point may differ by this many ε·max|f| (a reduction whose
#: order varies between runs) before f counts as non-deterministic.
_REPEAT_SLACK = 64.0
_ERRORS = (TypeError, ValueError, tf.errors.InvalidArgumentError, tf.errors.NotFoundError)


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
    ``|theoretical - numerical|`` divided by the largest entry (either way) of the same row or
    the same column of that input's Jacobian, whichever is smaller, over every entry of every
    input, so a wrong entry small next to the largest one counts at its own size; ``worst`` is
    where it occurs. ``verdict`` is ``"ok"``,
    ``"wrong"`` (some entry differs by more than the finite differences' own error),
    ``"kink"`` (``f`` is not differentiable at ``x``: see ``kinks``; the check cannot say) or
    ``"random"`` (two evaluations of ``f`` at ``xs`` differ by ``repeat_difference``, relative
    to ``f``'s largest value: there is no slope to measure; ``numerical`` is NaN).
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
    repeat_difference: float = 0.0  # two evaluations of f at xs: largest difference / max |f|
    #: ``"float16"`` or ``"bfloat16"`` when f computes in it inside (a mixed-precision Keras model),
    #: whatever dtype it takes and returns; ``""`` otherwise.
    low_precision: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @property
    def verdict_word(self) -> str:
        """``verdict`` in the reader's language (``ok`` → 通过 in Chinese), for tables a chapter prints."""
        words = {"ok": pgettext("gradient check", "ok"), "wrong": pgettext("gradient check", "wrong"),
                 "kink": pgettext("gradient check", "kink"), "random": pgettext("gradient check", "random")}
        return words.get(self.verdict, self.verdict)

    @property
    def printed_error(self) -> str:
        """``max_rel_error`` as the message prints it: a passing error as a power of ten rounded
        up (its digits are float rounding, which varies from CPU to CPU), never above the
        tolerance it met; any other error with 3 significant digits."""
        if self.verdict == "ok":
            bound = decade_bound(self.max_rel_error)
            if self.max_rel_error <= self.tolerance and float(bound) > self.tolerance:
                bound = f"{self.tolerance:.0e}"
            return bound
        return f"{self.max_rel_error:.3g}"

    @property
    def message(self) -> str:
        """One paragraph a learner reads: the verdict, the numbers, and why."""
        heads = {"ok": self._passed, "wrong": self._failed, "kink": self._kinked, "random": self._random}
        return join_sentences(heads[self.verdict](), *self.notes)

    def _passed(self) -> str:
        step, bound, tol = _format_steps(self.steps), self.printed_error, f"{self.tolerance:.0e}"
        if self.max_rel_error <= self.tolerance:
            return _("✅ gradient check passed: largest error at most {bound}, relative to the largest entry "
                     "in its row or column (tolerance {tol}; {dtype}, central differences, step {step}).").format(
                bound=bound, tol=tol, dtype=self.dtype, step=step)
        return _("✅ gradient check passed: largest error at most {bound}, relative to the largest entry in its "
                 "row or column: above "
                 "the tolerance {tol} but within the finite differences' own error there (rounding ε·|f|/h and "
                 "truncation, estimated from steps h and 2h; {dtype}, step {step}).").format(
            bound=bound, tol=tol, dtype=self.dtype, step=step)

    def _failed(self) -> str:
        w = self.worst
        head = _("❌ gradient check failed: {n} Jacobian entries differ from finite differences by more than "
                 "their own error. Largest error {err} of the largest entry in its row or column (tolerance "
                 "{tol}), at {entry}: "
                 "the tape gives {tape}, finite differences {fd}.").format(
            n=self.wrong_entries, err=self.printed_error, tol=f"{self.tolerance:.0e}",
            entry=w.label, tape=f"{w.theoretical:.6g}", fd=f"{w.numerical:.6g}")
        cause = (_("With {dtype} inside, its rounding alone can be the cause (see below).").format(
            dtype=self.low_precision) if self.low_precision else
            _("A custom gradient or a hand-written backward pass is the usual cause."))
        return join_sentences(head, cause)

    def _kinked(self) -> str:
        k = self.kinks[0]
        head = _("⚠️ f is not differentiable at {where} = {value} (or has a kink within the step {step} of "
                 "it): its slope is {left} from the left and {right} from the right. The tape returns {tape}; "
                 "at a kink that value is a convention (relu'(0) = 0, |x|'(0) = 0), and central differences "
                 "return about the mean of the two slopes, {mean}, so the check cannot verify the gradient "
                 "here. Check it at a point away from the kink.").format(
            where=k.label, value=f"{k.value:.4g}", step=f"{k.step:.2g}", left=f"{k.left:.4g}",
            right=f"{k.right:.4g}", tape=f"{k.theoretical:.4g}", mean=f"{(k.left + k.right) / 2:.4g}")
        more = len(self.kinks) - 1
        return join_sentences(head, _("({n} more input elements are at a kink.)").format(n=more)) if more else head

    def _random(self) -> str:
        return _("⚠️ f is not deterministic: two evaluations at the same xs differ (their largest difference is "
                 "{diff}× the largest |f|), so finite differences would measure the noise, not a slope, and the check cannot "
                 "verify the gradient. Random layers in training mode (Dropout, GaussianNoise with "
                 "training=True) and unseeded tf.random ops do this: check with training=False, or with the "
                 "randomness fixed (a stateless op with a fixed seed).").format(
            diff=f"{self.repeat_difference:.2g}")

    def __str__(self) -> str:
        return self.message

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(self.message)


# ----------------------------------------------------------------------------- stage 1: the arguments
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


def _check_arguments(f, xs, delta, progress):
    """The validated inputs (tensors), step and progress flag, or a ValueError naming the argument."""
    _check_f(f)
    if not xs:
        raise ValueError("xs is empty: pass the input(s) at which to check the gradient, e.g. "
                         "check_gradient(f, tf.constant([1.0, 2.0]))")
    inputs = [_as_input(i, x) for i, x in enumerate(xs)]
    delta = _check_delta(delta)
    progress = check_progress(progress)
    total = sum(_size(t) for t in inputs)
    if total > MAX_INPUT_ELEMENTS:
        raise ValueError(
            f"xs hold {total:,} elements in all; check_gradient evaluates f four times per element, so it "
            f"takes at most {MAX_INPUT_ELEMENTS:,}. Check a slice (x[:4]), a smaller layer, or a few examples"
        )
    if total == 0:
        raise ValueError("xs hold no elements (an empty array): there is nothing to check")
    return inputs, delta, progress


def _size(t) -> int:
    return int(np.prod(t.shape)) if t.shape.rank else 1


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


def _first_line(err) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return first.split(" [Op:")[0][:160]


# ----------------------------------------------------------------------------- stage 2: the precision
@dataclasses.dataclass
class _Work:
    """The inputs the check runs on, in its working precision, and f's output there."""

    inputs: list
    dtype: str
    cast: bool
    notes: list
    y0: np.ndarray = None
    y_shapes: list = None
    low_precision: str = ""


def _lowest_precision(inputs) -> str:
    names = [t.dtype.name for t in inputs]
    return max(names, key=lambda n: _EPS.get(n, 1.0))


def _cast_up(f, inputs) -> _Work:
    """Lower-precision inputs cast to float64, unless ``f`` refuses float64 (then their own dtype)."""
    low = [i for i, t in enumerate(inputs) if t.dtype.name != "float64"]
    if not low:
        return _Work(list(inputs), "float64", False, [])
    up = [tf.cast(t, tf.float64) for t in inputs]
    try:
        _flat_output(f(*up))
    except _ERRORS as err:
        dtype = _lowest_precision(inputs)
        return _Work(list(inputs), dtype, False, [_(
            "f does not accept float64 inputs ({error}), so the check ran in {dtype}, with {dtype}'s step and "
            "tolerance.").format(error=_first_line(err), dtype=dtype)])
    note = _("{names} ({dtype}) cast to float64 for the check: in {dtype}, finite differences would lose about a "
             "third of the digits (their error is about ε^(2/3)).").format(
        names=join_list(f"xs[{i}]" for i in low), dtype=inputs[low[0]].dtype.name)
    return _Work(up, "float64", True, [note])


def _working_precision(f, inputs, *, allow_cast: bool = True) -> _Work:
    """Stage 2: the inputs and precision of the check, and ``f``'s output there.

    float64 unless ``f`` refuses float64 inputs, returns a lower precision, or rounds its input
    to float32 inside; the notes say which.
    """
    work = _cast_up(f, inputs) if allow_cast else _Work(list(inputs), _lowest_precision(inputs), False, [])
    y0_struct = f(*work.inputs)
    work.y0 = _flat_output(y0_struct)
    work.y_shapes = [tuple(int(d) for d in tf.convert_to_tensor(p).shape) for p in tf.nest.flatten(y0_struct)]
    out_dtype = _output_dtype(y0_struct)
    low = _low_precision_inside(f, work.inputs) if work.dtype in ("float64", "float32") else ""
    if low:  # float16/bfloat16 inside: its step and tolerance, and how to check for real
        if work.cast:  # the cast up gained nothing: f rounds to low inside
            work.notes = []
        work.dtype = work.low_precision = low
        work.notes.append(_low_precision_note(low))
    elif work.dtype == "float64" and out_dtype != "float64":
        work.dtype = out_dtype
        if work.cast:  # the cast up gained nothing: f works in out_dtype
            work.notes = []
        work.notes.append(_("f returns {dtype} even for float64 inputs (it computes in {dtype} inside, as a Keras "
                            "layer does), so the step and the tolerance are {dtype}'s.").format(dtype=out_dtype))
    elif work.dtype == "float64" and _ignores_float64_digits(f, work.inputs, work.y0):
        inside = _float32_inside(f, work.inputs, work.y0)
        if inside:
            work.dtype = "float32"
            work.notes.append(_("f ignores changes of its input below float32's resolution (it computes in "
                                "float32 inside), so the step and the tolerance are float32's."))
        else:  # float64 throughout: a large value absorbs the change (1e8 + 1e-3 * x), not float32
            work.notes.append(_("f ignores changes of its input below float32's resolution, though it computes "
                                "in float64 throughout: a large value absorbs the change (as in 1e8 + 1e-3 * x), "
                                "so finite differences resolve only changes above float64's rounding of f; the "
                                "check stays in float64 and allows each entry that rounding (ε·|f|/h)."))
    return work


def _float32_inside(f, xs, y0: np.ndarray) -> bool:
    """Whether ``f``, which ignores float64 digits of its input, does so because it computes in
    float32: an op on float32 in its graph at ``xs``'s float64 signature. Where ``f`` cannot be
    traced (a NumPy round-trip), its values tell: every output is a float32 number (a float32
    result cast back up), which a float64 computation that absorbs the change (1e8 + 1e-3 * x)
    almost never returns."""
    found = _graph_dtypes(f, xs)
    if found is not None:
        return tf.float32.as_datatype_enum in found
    return bool(np.all(y0 == y0.astype(np.float32).astype(np.float64)))


def _graph_dtypes(f, xs) -> set | None:
    """The dtypes (as enums) that ops of ``f``'s graph at ``xs``'s signature name, or ``None``
    when ``f`` cannot be traced."""
    try:
        graph = tf.function(f).get_concrete_function(*(tf.TensorSpec(x.shape, x.dtype) for x in xs)).graph
        graph_def = graph.as_graph_def()
    except Exception:  # noqa: BLE001 - an untraceable f is judged by its values alone
        return None
    nodes = list(graph_def.node) + [n for fn in graph_def.library.function for n in fn.node_def]
    found = set()
    for node in nodes:
        for value in node.attr.values():
            found.update((value.type, *value.list.type))
    return found


_LOW_ENUMS = {tf.float16.as_datatype_enum: "float16", tf.bfloat16.as_datatype_enum: "bfloat16"}


def _low_precision_inside(f, xs) -> str:
    """``"float16"`` or ``"bfloat16"`` when ``f``, traced as a graph at ``xs``'s signature, holds an op
    on that dtype (a mixed-precision Keras layer casts its float32 variables and inputs to it), the
    coarser of the two when both; ``""`` when none does, or when ``f`` cannot be traced (a NumPy
    round-trip): then only its output dtype and its resolution (:func:`_ignores_float64_digits`) tell."""
    types = _graph_dtypes(f, xs)
    found = {_LOW_ENUMS[t] for t in types or () if t in _LOW_ENUMS}
    return max(found, key=lambda n: _EPS[n]) if found else ""


def _low_precision_note(dtype: str) -> str:
    return _("f computes in {dtype} inside (a Keras model under the mixed_{dtype} policy, or a cast to {dtype}), "
             "whatever dtype it takes and returns, so the step and the tolerance are {dtype}'s and the check can "
             "verify the gradient only to about {tol}. A gradient check needs float32 or float64 end to end: "
             "check a copy of the model built under keras.mixed_precision.set_global_policy(\"float32\") with "
             "the same weights (copy.set_weights(model.get_weights())), or gl.models.precision.float64_copy(model)."
             ).format(dtype=dtype, tol=f"{TOLERANCES[dtype]:.0e}")


def _check_output_size(work: _Work, inputs) -> None:
    y_size, total = work.y0.size, sum(_size(t) for t in inputs)
    if y_size == 0:
        raise ValueError("f returned an empty tensor: there is no gradient to check")
    if y_size * total > MAX_JACOBIAN_ENTRIES:
        raise ValueError(
            f"the Jacobian would have {y_size:,} x {total:,} entries (more than {MAX_JACOBIAN_ENTRIES:,}); "
            "check a smaller input, or reduce f's output to a scalar (e.g. tf.reduce_sum(f(x) * w) with a fixed "
            "random w)"
        )


def _ignores_float64_digits(f, xs, y0: np.ndarray) -> bool:
    """True when ``f``'s output does not move at all for a change of its inputs far below
    float32's resolution (2**-30 relative) but does for one float32 can see (2**-10): ``f``
    rounds its input to float32 (or less) inside, whatever dtype it returns."""
    def moved(rel):
        args = [tf.constant(np.asarray(x.numpy()) * (1.0 + rel) + rel, dtype=tf.float64) for x in xs]
        return not np.array_equal(_flat_output(f(*args)), y0)

    return not moved(2.0 ** -30) and moved(2.0 ** -10)


# ----------------------------------------------------------------------------- stage 3: determinism
def _repeat_difference(f, work: _Work) -> float:
    """Stage 3: ``f`` evaluated again at the same point. The largest difference to the first
    evaluation relative to ``max |f|``, or 0 where it is within float rounding."""
    again = _flat_output(f(*work.inputs))
    if again.shape != work.y0.shape:
        return math.inf
    scale = max(float(np.max(np.abs(work.y0), initial=0.0)), float(np.max(np.abs(again), initial=0.0)))
    scale = scale if scale > 0 else 1.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(again - work.y0)
    diff = np.where(np.isnan(again) & np.isnan(work.y0), 0.0, diff)
    worst = float(np.max(np.nan_to_num(diff, nan=math.inf), initial=0.0)) / scale
    return worst if worst > _REPEAT_SLACK * _EPS[work.dtype] else 0.0


# ----------------------------------------------------------------------------- stage 4: the tape
def _tape_jacobian(f, xs, y_size: int):
    """One backward pass per output element (as ``tf.test.compute_gradient``), and whether the
    tape found a path to each input (a ``None`` gradient counts as zeros)."""
    with tf.GradientTape(persistent=True) as tape:
        for x in xs:
            tape.watch(x)
        y = f(*xs)
        flat = tf.concat([tf.reshape(tf.cast(tf.convert_to_tensor(p), tf.float64), [-1])
                          for p in tf.nest.flatten(y)], axis=0)
    jac = [np.zeros((y_size, _size(x))) for x in xs]
    connected = [False] * len(xs)
    for row in range(y_size):
        seed = tf.one_hot(row, y_size, dtype=tf.float64)
        grads = tape.gradient(flat, list(xs), output_gradients=seed)
        for k, g in enumerate(grads):
            if g is not None:
                connected[k] = True
                jac[k][row] = np.asarray(tf.convert_to_tensor(g).numpy(), dtype=np.float64).ravel()
    del tape
    return jac, connected


def _fallback(f, inputs, err):
    """The tape's Jacobian where the backward pass refused float64: in the inputs' own precision, else
    (float16/bfloat16 inputs, a backward pass written in float32) with the inputs cast to float32."""
    tries = [list(inputs)]
    if any(t.dtype.name != "float32" for t in inputs):
        tries.append([tf.cast(t, tf.float32) for t in inputs])
    for k, attempt in enumerate(tries):
        work = _working_precision(f, attempt, allow_cast=False)
        try:
            jac, connected = _tape_jacobian(f, work.inputs, work.y0.size)
        except _ERRORS:
            if k + 1 < len(tries):
                continue
            raise ValueError(
                f"the tape could not compute f's gradient at xs in float64 ({type(err).__name__}: "
                f"{_first_line(err)}), nor in {' or '.join(dict.fromkeys(w[0].dtype.name for w in tries))}; "
                "f's backward pass must accept float32 or the dtype of its inputs"
            ) from err
        work.notes.insert(0, _("f's backward pass does not accept float64 ({error}), so the check ran in "
                               "{dtype}, with {dtype}'s step and tolerance.").format(
            error=_first_line(err), dtype=work.dtype))
        return work, jac, connected
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _theoretical(f, work: _Work, inputs):
    """Stage 4: the tape's Jacobian. Where only the backward pass refuses float64 (a custom
    gradient written in float32), the check falls back to the inputs' own precision: the
    returned :class:`_Work` is then a new one, and says so."""
    try:
        jac, connected = _tape_jacobian(f, work.inputs, work.y0.size)
    except _ERRORS as err:
        if not work.cast:
            raise ValueError(
                f"the tape could not compute f's gradient at xs in {work.dtype} ({type(err).__name__}: "
                f"{_first_line(err)}); f's backward pass must accept the dtype of its inputs (pass float32 "
                "inputs to check a backward pass written in float32)"
            ) from err
        work, jac, connected = _fallback(f, inputs, err)
    for k, ok in enumerate(connected):
        if not ok:
            work.notes.append(_("The tape found no path from xs[{k}] to f's output (tape.gradient returned None): "
                                "the theoretical Jacobian counts it as zeros.").format(k=k))
    return jac, work


# ----------------------------------------------------------------------------- stage 5: finite differences
@dataclasses.dataclass
class _Differences:
    """Per input: the central difference at step h (``d1``) and 2h (``d2``), the jumps between the
    one-sided slopes at h and 2h, the left slope at h, and the rounding estimate, each
    ``(output size, input size)``."""

    d1: np.ndarray
    d2: np.ndarray
    jump1: np.ndarray
    jump2: np.ndarray
    left1: np.ndarray
    rounding: np.ndarray
    steps: np.ndarray


def _shifted(f, work: _Work, k: int, flat, j: int, step: float, s: int):
    """``f`` with element ``j`` of input ``k`` moved by ``s`` steps: (the moved value as taken, f)."""
    point = flat.copy()
    point[j] = point[j] + s * step
    dtype = work.inputs[k].dtype
    moved = tf.constant(point.reshape(work.inputs[k].shape), dtype=dtype)
    value = float(np.asarray(tf.cast(moved, tf.float64).numpy()).ravel()[j])  # x + h rounded to the dtype
    if s in (-1, 1) and value == flat[j]:
        raise ValueError(
            f"delta={step:.3g} is below the resolution of {dtype.name} at xs[{k}] element {j} "
            f"(= {flat[j]:.6g}): x + delta == x. Pass a larger delta, or None for the default"
        )
    args = [moved if i == k else t for i, t in enumerate(work.inputs)]
    return value, _flat_output(f(*args))


def _differences_of(f, work: _Work, k: int, delta, bar: Progress) -> _Differences:
    """Four evaluations of ``f`` per element of input ``k`` (steps -2h, -h, h, 2h)."""
    flat = np.asarray(work.inputs[k].numpy(), dtype=np.float64).ravel()
    h = np.full(flat.shape, delta, dtype=np.float64) if delta is not None else default_step(flat, work.dtype)
    shape = (work.y0.size, flat.size)
    d = _Differences(*(np.zeros(shape) for _i in range(6)), steps=h.reshape(work.inputs[k].shape))
    for j in range(flat.size):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/inf f: judged in the comparison
            step = _difference_column(f, work, k, flat, j, float(h[j]), d)
            # the default step scales with |x| (x + h must move x): where f varies on a scale of its own
            # (sin at 1e6), the differences at h and 2h disagree; smaller steps, down to the unscaled one
            smallest = float(default_step(np.zeros(1), work.dtype)[0])
            while delta is None and step / 8 >= smallest and _unsettled(d, j, TOLERANCES[work.dtype]):
                step = _difference_column(f, work, k, flat, j, step / 8, d)
        h[j] = step
        bar.update()
    d.steps = h.reshape(work.inputs[k].shape)
    return d


def _unsettled(d: _Differences, j: int, tol: float) -> bool:
    """Column ``j``'s differences at h and 2h, or its one-sided slopes, disagree beyond ``tol``."""
    scale = float(np.max(np.abs(np.where(np.isfinite(d.d1[:, j]), d.d1[:, j], 0.0)), initial=0.0)) or 1.0
    spread = np.maximum(np.abs(d.d2[:, j] - d.d1[:, j]), np.abs(d.jump1[:, j]))
    return bool(np.any(spread > tol * scale + 2 * _ROUNDING_SAFETY * d.rounding[:, j]))


def _difference_column(f, work: _Work, k: int, flat, j: int, step: float, d: _Differences) -> float:
    """Column ``j`` of ``d``: the differences of ``f`` for element ``j`` of input ``k`` at ``step``."""
    eps, y0 = _EPS[work.dtype], work.y0
    (xm2, ym2), (xm1, ym1), (xp1, yp1), (xp2, yp2) = (_shifted(f, work, k, flat, j, step, s)
                                                      for s in (-2, -1, 1, 2))
    x0 = float(flat[j])
    d.d1[:, j] = (yp1 - ym1) / (xp1 - xm1)
    d.d2[:, j] = (yp2 - ym2) / (xp2 - xm2)
    d.left1[:, j] = (y0 - ym1) / (x0 - xm1)
    d.jump1[:, j] = (yp1 - y0) / (xp1 - x0) - d.left1[:, j]
    d.jump2[:, j] = (yp2 - y0) / (xp2 - x0) - (y0 - ym2) / (x0 - xm2)
    d.rounding[:, j] = eps * (np.abs(yp1) + np.abs(ym1) + np.abs(y0)) / (xp1 - xm1)
    return step


# ----------------------------------------------------------------------------- stage 6: the comparison
@dataclasses.dataclass
class _Comparison:
    max_rel: float = 0.0
    worst: GradientEntry | None = None
    worst_excess: float = -1.0
    wrong: int = 0
    kinks: list = dataclasses.field(default_factory=list)
    nonfinite_tape: int = 0  # entries where the tape returns NaN/inf
    nonfinite_differences: int = 0  # entries where only the finite differences are NaN/inf


def _compare_input(out: _Comparison, k: int, t_jac, d: _Differences, work: _Work, xname: str, tol: float) -> None:
    """Entries of input ``k`` beyond the finite differences' own error (wrong), and its kinks."""
    finite = np.isfinite(t_jac) & np.isfinite(d.d1)
    size = np.maximum(np.abs(np.where(finite, t_jac, 0.0)), np.abs(np.where(finite, d.d1, 0.0)))
    scale = float(np.max(size, initial=0.0)) or 1.0
    local = _local_scale(size, scale, work.dtype)
    # a NaN/inf entry on either side compares False with any bound: it is wrong, not within it
    diff = np.where(finite, np.abs(t_jac - d.d1), np.inf)
    allowed = tol * local + _ROUNDING_SAFETY * d.rounding + _TRUNCATION_SAFETY * np.abs(d.d2 - d.d1)
    big = np.abs(d.jump1) > _KINK_SIZE * scale + 2 * _ROUNDING_SAFETY * d.rounding
    kink = big & (np.abs(d.jump2) < 1.5 * np.abs(d.jump1)) & finite
    bad = ~(diff <= allowed) & ~kink
    out.nonfinite_tape += int(np.sum(~np.isfinite(t_jac)))
    out.nonfinite_differences += int(np.sum(np.isfinite(t_jac) & ~np.isfinite(d.d1)))
    out.wrong += int(bad.sum())
    rel = diff / local
    out.max_rel = max(out.max_rel, float(rel.max(initial=0.0)))
    # a wrong entry first, else the largest error; among errors equal to 3 digits, the largest absolute one
    excess = np.where(bad, 1.0 + rel, rel / 1e9)
    if excess.size and float(excess.max()) > out.worst_excess:
        out.worst_excess = float(excess.max())
        level = np.where(bad, 1.0, 0.0) + np.nan_to_num(np.round(np.log10(np.maximum(rel, 1e-300)), 3), posinf=1e9)
        order = np.lexsort((np.nan_to_num(diff, posinf=1e300).ravel(), level.ravel()))
        i, j = np.unravel_index(int(order[-1]), excess.shape)
        o, xin = _output_index(work.y_shapes, int(i)), _input_index(d.steps.shape, int(j))
        out.worst = GradientEntry(k, o, xin, float(t_jac[i, j]), float(d.d1[i, j]),
                                  f"d {_name('f', (), o)} / d {_name(xname, k, xin)}")
    base = np.asarray(work.inputs[k].numpy(), dtype=np.float64).ravel()
    for j in np.flatnonzero(kink.any(axis=0)):
        i = int(np.argmax(np.where(kink[:, j], np.abs(d.jump1[:, j]), -1.0)))
        left = float(d.left1[i, j])
        xin = _input_index(d.steps.shape, int(j))
        out.kinks.append(Kink(k, xin, float(base[j]), _output_index(work.y_shapes, i), left,
                              left + float(d.jump1[i, j]), float(t_jac[i, j]), float(d.steps.ravel()[j]),
                              _name(xname, k, xin)))


def _local_scale(size: np.ndarray, scale: float, dtype: str) -> np.ndarray:
    """Per entry, what its error is measured against: the largest entry (tape or finite differences)
    in its own row or its own column, whichever is smaller, so a wrong entry small next to the
    Jacobian's largest one is still judged on its own size; never below ``_TAPE_ROUNDING`` ε of
    the largest entry, the tape's own rounding in a backward pass that sums terms of that size."""
    rows = np.max(size, axis=1, keepdims=True, initial=0.0)
    cols = np.max(size, axis=0, keepdims=True, initial=0.0)
    return np.maximum(np.minimum(rows, cols), _TAPE_ROUNDING * _EPS[dtype] * scale)


def _nonfinite_notes(out: _Comparison) -> list[str]:
    """Why entries that are NaN/inf count as wrong: the tape's (a gradient that is NaN where ``f``
    is finite, such as ``tf.norm`` at 0) or the finite differences' (``f`` is not finite within a step)."""
    notes = []
    if out.nonfinite_tape:
        notes.append(ngettext(
            "The tape returns NaN/inf in {n} Jacobian entry (an op whose derivative is infinite or 0/0 at xs, such "
            "as tf.norm or tf.sqrt at 0): such a gradient is wrong even where f itself is finite; use a safe form "
            "(tf.sqrt(x + 1e-12)) or a custom gradient.",
            "The tape returns NaN/inf in {n} Jacobian entries (an op whose derivative is infinite or 0/0 at xs, such "
            "as tf.norm or tf.sqrt at 0): such a gradient is wrong even where f itself is finite; use a safe form "
            "(tf.sqrt(x + 1e-12)) or a custom gradient.", out.nonfinite_tape).format(n=out.nonfinite_tape))
    if out.nonfinite_differences:
        notes.append(ngettext(
            "f is NaN/inf within a step of xs in {n} Jacobian entry (the edge of its domain, such as tf.sqrt or "
            "tf.math.log at 0), so finite differences cannot verify it: check at a point inside the domain.",
            "f is NaN/inf within a step of xs in {n} Jacobian entries (the edge of its domain, such as tf.sqrt or "
            "tf.math.log at 0), so finite differences cannot verify them: check at a point inside the domain.",
            out.nonfinite_differences).format(n=out.nonfinite_differences))
    return notes


# ----------------------------------------------------------------------------- the tool
def check_gradient(f: Callable, *xs, delta: float | None = None, progress: bool | None = None) -> GradientCheck:
    """Compare the tape's gradient (or Jacobian) of ``f`` at ``xs`` with central finite differences.

    ``f(*xs)`` returns a tensor (any shape; a list or tuple of tensors is read as their
    concatenation). Each ``xs[i]`` is a floating-point number, array or tensor. ``delta`` is an
    absolute step for every element (as ``tf.test.compute_gradient`` takes one); by default each
    element gets ``ε^(1/3) · max(1, |x|)`` rounded to a power of two. Inputs of lower precision
    are cast to float64 and the result says so; a function that computes in float32 anyway, or
    whose backward pass refuses float64, is checked in float32. ``f`` is evaluated twice at
    ``xs`` first: a non-deterministic ``f`` (Dropout with ``training=True``) gets the verdict
    ``"random"``. ``progress`` shows a bar over the input elements (:class:`gradlab.progress.Progress`;
    ``None``: on in a notebook). At most 10,000 input elements: each costs four evaluations of ``f``.

    Returns a :class:`GradientCheck` (``.ok``, ``.verdict``, ``.max_rel_error``, ``.theoretical``,
    ``.numerical``, ``.worst``, ``.kinks``, ``.message``). Used in chapter 10.
    """
    inputs, delta, progress = _check_arguments(f, xs, delta, progress)
    work = _working_precision(f, inputs)
    _check_output_size(work, inputs)
    repeat = _repeat_difference(f, work)
    theoretical, work = _theoretical(f, work, inputs)
    tol = TOLERANCES[work.dtype]
    if repeat:
        return GradientCheck(
            ok=False, verdict="random", max_rel_error=math.nan, theoretical=tuple(theoretical),
            numerical=tuple(np.full_like(t, np.nan) for t in theoretical), worst=None, kinks=(),
            dtype=work.dtype, cast=work.cast, tolerance=tol, steps=(), wrong_entries=0,
            notes=tuple(work.notes), repeat_difference=repeat, low_precision=work.low_precision)
    with Progress(sum(_size(t) for t in work.inputs), _("checking the gradient"), enabled=progress) as bar:
        diffs = [_differences_of(f, work, k, delta, bar) for k in range(len(work.inputs))]
    out = _Comparison()
    xname = "x" if len(work.inputs) == 1 else "xs"
    for k, (t_jac, d) in enumerate(zip(theoretical, diffs, strict=True)):
        _compare_input(out, k, t_jac, d, work, xname, tol)
    verdict = "wrong" if out.wrong else "kink" if out.kinks else "ok"
    notes = list(work.notes) + _nonfinite_notes(out)
    return GradientCheck(
        ok=verdict == "ok", verdict=verdict, max_rel_error=out.max_rel,
        theoretical=tuple(theoretical), numerical=tuple(d.d1 for d in diffs), worst=out.worst,
        kinks=tuple(out.kinks), dtype=work.dtype, cast=work.cast, tolerance=tol,
        steps=tuple(d.steps for d in diffs), wrong_entries=out.wrong, notes=tuple(notes),
        low_precision=work.low_precision,
    )


def decade_bound(value: float) -> str:
    """``value`` rounded *up* to a power of ten, as printed (``3.1e-05`` -> ``"1e-04"``; 0 -> ``"0"``).

    A passing check's error is float rounding: its digits differ between CPUs, its decade hardly.
    """
    if not math.isfinite(value) or value <= 0:
        return f"{value:g}"
    return f"{10.0 ** math.ceil(math.log10(value) - 1e-9):.0e}"


def _name(base: str, k, index: tuple[int, ...]) -> str:
    head = base if k == () or base == "x" else f"{base}[{k}]"
    return head + (f"[{', '.join(map(str, index))}]" if index else "")


def _input_index(shape, j: int) -> tuple[int, ...]:
    return tuple(int(v) for v in np.unravel_index(j, shape)) if len(shape) else ()


def _format_steps(steps) -> str:
    values = np.concatenate([np.ravel(s) for s in steps])
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.2g}" if lo == hi else f"{lo:.2g}–{hi:.2g}"
