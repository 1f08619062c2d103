"""Jacobians, vector-Jacobian and Jacobian-vector products, Hessians and shape tables (chapter 02).

Pure computation: TensorFlow in, NumPy arrays and small dataclasses out. Nothing here imports
ipywidgets, so tests and other chapters can use it headless.

Three ways to build a Jacobian, all checked against each other in ``tests/test_jacobians.py``:

* :func:`jacobian_loop`: one ``tape.gradient`` call per output element, the way the source
  text's loop does it, but with the indexing done *inside* the tape (the source indexes
  outside it and gets ``None``; chapter 02 shows why).
* :func:`jacobian`: ``tape.jacobian``, vectorised with ``pfor`` by default.
* :func:`batch_jacobian`: ``tape.batch_jacobian``, only the per-example blocks; right only
  when the examples of the batch do not influence each other (:func:`diagonal_blocks` and
  :func:`cross_example_max` tell you whether they do).

The timings of chapter 02 (pfor against a loop, forward against reverse mode, the cost of a
Hessian-vector product) and the JacobianViewer's compiled bench are in
:mod:`gradlab.topics.jacobian_timing`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import numpy as np

from .._env import quiet_import_tensorflow
from .._validate import check_int as _check_int
from ..i18n import N_, _, pad, text_width

tf = quiet_import_tensorflow()

__all__ = [
    "HVP_METHODS",
    "JACOBIAN_FUNCTIONS",
    "JACOBIAN_METHODS",
    "JacobianFunction",
    "ShapeRow",
    "batch_jacobian",
    "cross_example_max",
    "diagonal_blocks",
    "format_shape_table",
    "forward_mode_jacobian",
    "forward_reverse_jacobians",
    "hessian",
    "hvp",
    "jacobian",
    "jacobian_function",
    "jacobian_loop",
    "jvp",
    "pfor_fallbacks",
    "reverse_mode_jacobian",
    "shape_free_spec",
    "shape_table",
    "tanh_matvec",
    "vjp",
]

JACOBIAN_METHODS: tuple[str, ...] = ("jacobian", "batch_jacobian", "loop")
MAX_SIZE = 4096


# ----------------------------------------------------------------------------- validation
def _check_callable(name: str, f) -> Callable:
    if not callable(f):
        raise ValueError(f"{name} must be a callable such as lambda x: x**2; got {type(f).__name__}")
    return f


def _as_source(name: str, x):
    """A float tensor or float variable the tape can watch; ValueError otherwise."""
    if isinstance(x, tf.Variable):
        if not x.dtype.is_floating:
            raise ValueError(
                f"{name} must be floating point (float16/32/64); got a {x.dtype.name} variable. "
                "Integer tensors have no gradient: the tape would return None."
            )
        return x
    if x is None or isinstance(x, (str, bytes, bool)):
        raise ValueError(f"{name} must be a float tensor, array or list of numbers; got {x!r}")
    try:
        t = tf.convert_to_tensor(x)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} must be a float tensor, array or list of numbers; got {type(x).__name__} ({err})"
        ) from None
    if t.dtype.is_integer or t.dtype == tf.bool:
        raise ValueError(
            f"{name} must be floating point (float16/32/64); got {t.dtype.name}. Integer tensors "
            "have no gradient: the tape would return None. Use e.g. tf.constant([1.0, 2.0])."
        )
    if not t.dtype.is_floating:
        raise ValueError(f"{name} must be a floating point tensor; got dtype {t.dtype.name}")
    return t


def _as_vector_like(name: str, v, shape, dtype):
    t = _as_source(name, v)
    t = tf.convert_to_tensor(t)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(t.shape)}")
    return tf.cast(t, dtype)


def _not_none(result, what: str):
    if result is None:
        raise ValueError(
            f"the {what} is None: f's output does not depend on x through operations the tape "
            "recorded (see chapter 02's gallery of None gradients)"
        )
    return result


# ----------------------------------------------------------------------------- Jacobians
def jacobian_loop(f: Callable, x) -> np.ndarray:
    """The Jacobian of ``f`` at ``x``, one ``tape.gradient`` call per output element (chapter 02).

    This is the source text's loop, generalised to any shapes and fixed: each output element
    ``y[i]`` is taken *inside* the persistent tape, so the tape records the slice and can
    differentiate through it. Returns an array of shape ``y.shape + x.shape``.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.convert_to_tensor(f(x))
        flat = tf.reshape(y, [-1])
        elements = [flat[i] for i in range(int(flat.shape[0]))]  # sliced while recording
    rows = [
        tape.gradient(e, x, unconnected_gradients=tf.UnconnectedGradients.ZERO) for e in elements
    ]
    del tape  # a persistent tape keeps every intermediate alive until it is dropped
    if not rows:
        return np.zeros(tuple(y.shape) + tuple(x.shape), dtype=x.dtype.as_numpy_dtype)
    return tf.reshape(tf.stack(rows), tuple(y.shape) + tuple(x.shape)).numpy()


def jacobian(f: Callable, x, *, experimental_use_pfor: bool = True) -> np.ndarray:
    """``tape.jacobian(f(x), x)`` as a NumPy array of shape ``y.shape + x.shape`` (chapter 02).

    ``experimental_use_pfor=False`` computes the rows one by one in a ``tf.while_loop``, which
    re-reads the tape once per row and therefore needs ``persistent=True``; it is used here so.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    with tf.GradientTape(persistent=not experimental_use_pfor) as tape:
        tape.watch(x)
        y = f(x)
    j = tape.jacobian(y, x, experimental_use_pfor=bool(experimental_use_pfor))
    return _not_none(j, "Jacobian").numpy()


def batch_jacobian(f: Callable, x) -> np.ndarray:
    """``tape.batch_jacobian(f(x), x)``: the per-example blocks ``dy[b]/dx[b]`` (chapter 02).

    Shape ``(batch,) + y.shape[1:] + x.shape[1:]``. Right only when example ``b``'s output
    does not depend on any other example's input; check with :func:`cross_example_max`.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    if x.shape.rank is None or x.shape.rank < 2:
        raise ValueError(
            f"x must have a batch axis and at least one more, shape (batch, ...); got shape "
            f"{tuple(x.shape)}. For a single vector use jacobian(), or x[None] for a batch of one."
        )
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.convert_to_tensor(f(x))
    if y.shape.rank is None or y.shape.rank < 2 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"f(x) must keep the batch axis: x has shape {tuple(x.shape)}, so f(x) must have "
            f"shape ({x.shape[0]}, ...) with rank >= 2; got {tuple(y.shape)}"
        )
    return _not_none(tape.batch_jacobian(y, x), "batch Jacobian").numpy()


def _source_batch_axis(full: np.ndarray, y_ndim: int | None) -> int:
    if y_ndim is None:
        if full.ndim % 2:
            raise ValueError(
                f"full has shape {full.shape} (odd rank): give y_ndim, the rank of f(x)"
            )
        y_ndim = full.ndim // 2  # f(x) and x have the same rank
    y_ndim = _check_int("y_ndim", y_ndim, 1, full.ndim - 1)
    if full.shape[y_ndim] != full.shape[0]:
        raise ValueError(
            f"full must have shape (B, *out, B, *in) with both batch axes of length B; got "
            f"{full.shape}, whose axis {y_ndim} has length {full.shape[y_ndim]}, not {full.shape[0]}"
        )
    return y_ndim


def diagonal_blocks(full, y_ndim: int | None = None) -> np.ndarray:
    """The per-example blocks ``J[b, ..., b, ...]`` of a full Jacobian of a batched function.

    ``full`` has shape ``(B, *out, B, *in)``: what :func:`jacobian` returns for ``x`` of shape
    ``(B, *in)`` and ``y = f(x)`` of shape ``(B, *out)``. The result has
    :func:`batch_jacobian`'s shape ``(B, *out, *in)``. ``y_ndim`` is ``y``'s rank; by default
    it is assumed equal to ``x``'s (chapter 02).
    """
    full = np.asarray(full)
    axis = _source_batch_axis(full, y_ndim)
    moved = np.moveaxis(full, axis, 1)  # (B, B, *out, *in)
    return np.stack([moved[i, i] for i in range(full.shape[0])])


def cross_example_max(full, y_ndim: int | None = None) -> float:
    """Largest ``|dy[b]/dx[c]|`` over ``b != c``; 0 means :func:`batch_jacobian` is safe (chapter 02)."""
    full = np.asarray(full)
    axis = _source_batch_axis(full, y_ndim)
    moved = np.moveaxis(full, axis, 1)
    off = np.abs(moved[~np.eye(full.shape[0], dtype=bool)])
    return float(off.max()) if off.size else 0.0


# ----------------------------------------------------------------------------- products
def vjp(f: Callable, x, v) -> np.ndarray:
    """The vector-Jacobian product ``Jᵀv`` by reverse mode: ``tape.gradient(y, x, output_gradients=v)``.

    ``v`` has ``f(x)``'s shape, the result has ``x``'s shape (chapter 02). One backward pass,
    whatever the size of ``x``.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.convert_to_tensor(f(x))
    v = _as_vector_like("v", v, y.shape, y.dtype)
    return _not_none(tape.gradient(y, x, output_gradients=v), "vector-Jacobian product").numpy()


def jvp(f: Callable, x, v) -> np.ndarray:
    """The Jacobian-vector product ``Jv`` by forward mode: ``tf.autodiff.ForwardAccumulator``.

    ``v`` has ``x``'s shape, the result has ``f(x)``'s shape (chapter 02). One forward pass,
    whatever the size of ``f(x)``.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    v = _as_vector_like("v", v, x.shape, x.dtype)
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        y = f(x)
    return _not_none(acc.jvp(y), "Jacobian-vector product").numpy()


def hessian(f: Callable, x) -> np.ndarray:
    """The Hessian of a scalar ``f`` at ``x`` by two nested tapes (chapter 02).

    The inner tape gives the gradient ``g`` (shape of ``x``); the outer tape, which was
    recording while the inner one computed ``g``, gives ``jacobian(g, x)``: shape
    ``x.shape + x.shape``. It holds ``x.size**2`` numbers; see :func:`hvp` to avoid that.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.convert_to_tensor(f(x))
        if y.shape.rank != 0:
            raise ValueError(f"f must return a scalar for a Hessian; got shape {tuple(y.shape)}")
        g = _not_none(inner.gradient(y, x), "gradient")
    return _not_none(outer.jacobian(g, x), "Hessian").numpy()


HVP_METHODS = ("forward_over_reverse", "reverse_over_reverse")


def hvp(f: Callable, x, v, *, method: str = "forward_over_reverse") -> np.ndarray:
    """The Hessian-vector product ``H v`` of a scalar ``f``, without building ``H`` (chapter 02).

    ``forward_over_reverse`` pushes the tangent ``v`` (ForwardAccumulator) through the
    gradient computation; ``reverse_over_reverse`` differentiates ``g · v`` with an outer tape.
    Both cost a small constant times one gradient, and memory of the size of ``x``.
    """
    _check_callable("f", f)
    if method not in HVP_METHODS:
        raise ValueError(f"method must be one of {', '.join(HVP_METHODS)}; got {method!r}")
    x = _as_source("x", x)
    v = _as_vector_like("v", v, x.shape, x.dtype)

    def grad(xx):
        with tf.GradientTape() as inner:
            inner.watch(xx)
            y = tf.convert_to_tensor(f(xx))
        if y.shape.rank != 0:
            raise ValueError(f"f must return a scalar for a Hessian-vector product; got shape {tuple(y.shape)}")
        return _not_none(inner.gradient(y, xx), "gradient")

    if method == "forward_over_reverse":
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            g = grad(x)
        return _not_none(acc.jvp(g), "Hessian-vector product").numpy()
    with tf.GradientTape() as outer:
        outer.watch(x)
        g = grad(x)
        gv = tf.reduce_sum(g * v)
    return _not_none(outer.gradient(gv, x), "Hessian-vector product").numpy()


# ----------------------------------------------------------------------------- shape table
@dataclasses.dataclass(frozen=True)
class ShapeRow:
    """What each tape method returns for one (target shape, source shape) pair."""

    target: tuple
    source: tuple
    gradient: str
    jacobian: str
    batch_jacobian: str


def _shape_or_error(fn) -> str:
    try:
        out = fn()
    except Exception as err:  # noqa: BLE001 - the error *is* the answer for this cell
        return _("error ({kind})").format(kind=type(err).__name__)
    if out is None:
        return "None"
    return str(tuple(int(d) for d in out.shape))


def shape_table(
    targets: Sequence[tuple] = ((), (4,), (2, 4)),
    sources: Sequence[tuple] = ((3,), (2, 3)),
) -> list[ShapeRow]:
    """Run ``gradient``, ``jacobian`` and ``batch_jacobian`` for every target × source shape.

    Each target depends on every element of the source (per example when the first axes
    match). The shapes are measured by really calling the tape, not written by hand
    (chapter 02's shape table). Errors are reported as ``error (TypeName)``.
    """
    rows = []
    for s in sources:
        for t in targets:
            s, t = tuple(int(d) for d in s), tuple(int(d) for d in t)
            if any(d < 1 for d in s + t):
                raise ValueError(f"shapes must have positive sizes; got target {t}, source {s}")
            x = tf.reshape(tf.range(1, int(np.prod(s)) + 1, dtype=tf.float32), s)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(x)
                if t and s and t[0] == s[0] and len(s) > 1:  # per example: y[b] from x[b] only
                    per = tf.reduce_sum(tf.reshape(x * x, [s[0], -1]), axis=1)
                    y = tf.reshape(per, [s[0]] + [1] * (len(t) - 1)) * tf.ones(t)
                else:
                    y = tf.reduce_sum(x * x) * tf.ones(t)
            rows.append(
                ShapeRow(
                    target=t,
                    source=s,
                    gradient=_shape_or_error(lambda y=y, x=x, tape=tape: tape.gradient(y, x)),
                    jacobian=_shape_or_error(lambda y=y, x=x, tape=tape: tape.jacobian(y, x)),
                    batch_jacobian=_shape_or_error(
                        lambda y=y, x=x, tape=tape: tape.batch_jacobian(y, x)
                    ),
                )
            )
            del tape
    return rows


def format_shape_table(rows: Sequence[ShapeRow]) -> str:
    """A fixed-width text table of :func:`shape_table`'s rows."""
    head = (_("target y"), _("source x"), "gradient", "jacobian", "batch_jacobian")
    cells = [head] + [
        (str(r.target), str(r.source), r.gradient, r.jacobian, r.batch_jacobian) for r in rows
    ]
    widths = [max(text_width(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(pad(c[i], widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- registry
@dataclasses.dataclass(frozen=True)
class JacobianFunction:
    """One function of the viewer: ``fn(x, *params)`` with inputs made by ``make(n, seed)``;
    ``label`` and ``description`` are marked for translation (show them through ``_()``)."""

    name: str
    label: str
    batched: bool
    fn: Callable
    make: Callable
    description: str = ""

    def inputs(self, n: int, seed: int = 0):
        """``(x, params)`` for size ``n``; ``x`` is ``[n]`` or, for batched functions, ``[batch, n]``."""
        n = _check_int("n", n, 1, MAX_SIZE)
        return self.make(n, seed)

    def __call__(self, x, *params):
        return self.fn(x, *params)


VIEWER_BATCH = 4
DENSE_UNITS = 3


def _vec(n: int, seed: int):
    return tf.random.stateless_uniform([n], seed=[seed, n], minval=-1.5, maxval=1.5)


def _make_square(n, seed):
    return _vec(n, seed), ()


def _make_matvec(n, seed):
    w = tf.random.stateless_normal([n, n], seed=[seed + 1, n]) / np.sqrt(n).astype(np.float32)
    return _vec(n, seed), (w,)


def _make_softmax(n, seed):
    return 2.0 * _vec(n, seed), ()


def _make_dense(n, seed):
    x = tf.random.stateless_normal([VIEWER_BATCH, n], seed=[seed, n])
    w = tf.random.stateless_normal([n, DENSE_UNITS], seed=[seed + 1, n]) / np.sqrt(n).astype(np.float32)
    b = tf.random.stateless_normal([DENSE_UNITS], seed=[seed + 2, n]) * 0.1
    return x, (w, b)


def _dense(x, w, b):
    return tf.tanh(tf.matmul(x, w) + b)


#: The viewer's functions: elementwise square, matvec with tanh, softmax, a Dense layer over a batch.
JACOBIAN_FUNCTIONS: dict[str, JacobianFunction] = {
    f.name: f
    for f in (
        JacobianFunction("square", N_("y = x²"), False, lambda x: x * x, _make_square,
                         N_("elementwise square: J = diag(2x)")),
        JacobianFunction("matvec_tanh", N_("y = tanh(W x)"), False,
                         lambda x, w: tf.tanh(tf.linalg.matvec(w, x)), _make_matvec,
                         N_("matrix-vector product then tanh: J = diag(1 - tanh²(Wx)) W")),
        JacobianFunction("softmax", N_("y = softmax(x)"), False, tf.nn.softmax, _make_softmax,
                         N_("softmax: J = diag(s) - s sᵀ")),
        # VIEWER_BATCH = 4 and DENSE_UNITS = 3 are written out: a translated text must be a literal
        JacobianFunction("dense_batch", N_("y = tanh(x W + b), batch 4, 3 units"),
                         True, _dense, _make_dense,
                         N_("a Dense(3, tanh) layer over a batch of 4: J is block diagonal")),
    )
}


def jacobian_function(name: str) -> JacobianFunction:
    """The viewer function called ``name`` from :data:`JACOBIAN_FUNCTIONS`; ValueError for an unknown name."""
    if name not in JACOBIAN_FUNCTIONS:
        raise ValueError(f"function must be one of {', '.join(JACOBIAN_FUNCTIONS)}; got {name!r}")
    return JACOBIAN_FUNCTIONS[name]


# ----------------------------------------------------------------------------- forward vs reverse
def shape_free_spec(rank: int):
    """A float32 ``tf.TensorSpec`` of ``rank`` unknown dimensions (a signature that never retraces)."""
    return tf.TensorSpec([None] * rank, tf.float32)


def tanh_matvec(w, x):
    return tf.tanh(tf.linalg.matvec(w, x))


@tf.function(input_signature=[shape_free_spec(2), shape_free_spec(1)], autograph=False)
def reverse_mode_jacobian(w, x):
    """All rows at once: one vectorised VJP per output (tape.jacobian with pfor)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tanh_matvec(w, x)
    return tape.jacobian(y, x)


@tf.function(input_signature=[shape_free_spec(2), shape_free_spec(1)], autograph=False)
def forward_mode_jacobian(w, x):
    """All columns at once: one vectorised JVP (ForwardAccumulator) per input direction."""

    def column(e):
        with tf.autodiff.ForwardAccumulator(x, e) as acc:
            y = tanh_matvec(w, x)
        return acc.jvp(y)

    return tf.transpose(tf.vectorized_map(column, tf.eye(tf.shape(x)[0])))


def forward_reverse_jacobians(m: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The Jacobian of ``tanh(W x)`` (``W`` is ``m × n``) by forward and by reverse mode."""
    m, n = _check_int("m", m, 1, MAX_SIZE), _check_int("n", n, 1, MAX_SIZE)
    w = tf.random.stateless_normal([m, n], seed=[seed, m * 7919 + n]) / np.float32(np.sqrt(n))
    x = tf.random.stateless_normal([n], seed=[seed + 1, n])
    return forward_mode_jacobian(w, x).numpy(), reverse_mode_jacobian(w, x).numpy()


# ----------------------------------------------------------------------------- pfor: fallback and speed
def pfor_fallbacks(f: Callable, x) -> tuple[np.ndarray, list[str]]:
    """``tape.jacobian(f(x), x)`` with pfor, and the ops pfor could not vectorise (chapter 02).

    For an op without a vectorisation rule, ``tape.jacobian`` does not raise: pfor falls back
    to a ``tf.while_loop`` over the rows for that op (``fallback_to_while_loop=True``) and
    logs ``Using a while_loop for converting <Op> ...`` only at DEBUG level, which nobody
    sees. This runs the Jacobian with TensorFlow's logger at DEBUG, routed into a list
    instead of stderr, and returns ``(jacobian, messages)``: one message per op that fell back.
    """
    _check_callable("f", f)
    x = _as_source("x", x)
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            text = record.getMessage()
            if "while_loop for converting" in text:
                messages.append(text)

    logger = tf.get_logger()
    saved = (logger.level, list(logger.handlers), logger.propagate)
    collect = _Collect()
    for h in saved[1]:
        logger.removeHandler(h)
    logger.addHandler(collect)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        j = _not_none(tape.jacobian(y, x), "Jacobian").numpy()
    finally:
        logger.removeHandler(collect)
        for h in saved[1]:
            logger.addHandler(h)
        logger.setLevel(saved[0])
        logger.propagate = saved[2]
    return j, messages
