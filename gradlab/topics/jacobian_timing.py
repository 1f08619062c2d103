"""Timings of chapter 02, apart from the Jacobian maths: the JacobianViewer's compiled bench,
pfor against a loop, forward against reverse mode, a gradient against a Hessian-vector product.

Pure computation: TensorFlow in, seconds (NumPy arrays and small dataclasses) out. The
maths these time is in :mod:`gradlab.topics.jacobians`.

:class:`JacobianBench` is the fast path behind chapter 02's JacobianViewer: one
``tf.function`` per method and function, with shape-free input signatures, so a new size
never retraces.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from .._env import quiet_import_tensorflow
from .._validate import check_int as _check_int
from ..i18n import _
from ..progress import Progress, check_progress
from .jacobians import (
    JACOBIAN_FUNCTIONS,
    MAX_SIZE,
    diagonal_blocks,
    forward_mode_jacobian,
    jacobian_function,
    jacobian_loop,
    reverse_mode_jacobian,
    shape_free_spec,
    tanh_matvec,
)
from .tracing import total_tracing_count

tf = quiet_import_tensorflow()

__all__ = [
    "ForwardReverseTiming",
    "HvpTiming",
    "JacobianBench",
    "JacobianRun",
    "PforTiming",
    "time_forward_reverse",
    "time_gradient_vs_hvp",
    "time_jacobian_methods",
    "time_pfor_vs_loop",
]

_spec = shape_free_spec


@dataclasses.dataclass(frozen=True)
class JacobianRun:
    """One viewer computation: the Jacobian three ways, and how long each took (seconds)."""

    name: str
    n: int
    x_shape: tuple
    y_shape: tuple
    jacobian: np.ndarray
    batch_jacobian: np.ndarray
    loop: np.ndarray
    times: dict

    @property
    def max_disagreement(self) -> float:
        """Largest difference between the three methods' answers (per-example blocks)."""
        j = self.jacobian
        if len(self.x_shape) == 2:  # batched: compare the diagonal blocks
            jb = diagonal_blocks(j, y_ndim=len(self.y_shape))
        else:
            jb = j
        bj = self.batch_jacobian.reshape(jb.shape)
        return float(max(np.abs(j - self.loop).max(), np.abs(jb - bj).max()))



class JacobianBench:
    """Compiled ``jacobian`` / ``batch_jacobian`` per registry function, reused for every size.

    Each compiled function has an input signature with unknown dimensions, so changing the
    size never retraces (``tracing_count()`` stays at one trace per function and method).
    The loop is the eager element-by-element loop of :func:`jacobian_loop`. Used by
    chapter 02's :class:`~gradlab.JacobianViewer`.
    """

    def __init__(self, seed: int = 0):
        self.seed = _check_int("seed", seed, 0)
        self._compiled: dict[tuple[str, str], Callable] = {}

    def _compiled_fn(self, name: str, method: str):
        key = (name, method)
        if key not in self._compiled:
            spec = JACOBIAN_FUNCTIONS[name]
            x0, params0 = spec.inputs(2, self.seed)
            sig = [_spec(x0.shape.rank)] + [_spec(p.shape.rank) for p in params0]
            fn = spec.fn

            if method == "jacobian":
                def run(x, *params):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        y = fn(x, *params)
                    return tape.jacobian(y, x)
            else:
                def run(x, *params):
                    xb = x if spec.batched else x[None]
                    with tf.GradientTape() as tape:
                        tape.watch(xb)
                        y = fn(xb, *params) if spec.batched else fn(xb[0], *params)[None]
                    return tape.batch_jacobian(y, xb)

            self._compiled[key] = tf.function(run, input_signature=sig, autograph=False)
        return self._compiled[key]

    def tracing_count(self) -> int:
        """Traces so far over all compiled functions (one per function and method)."""
        return total_tracing_count(self._compiled.values())

    def run(self, name: str, n: int, *, repeats: int = 3, loop_repeats: int = 1) -> JacobianRun:
        """The Jacobian of registry function ``name`` at size ``n`` by all three methods, timed.

        Each compiled method is called once untimed (tracing, first-call costs), then the best
        of ``repeats`` calls is kept; the eager loop is timed ``loop_repeats`` times.
        """
        spec = jacobian_function(name)
        n = _check_int("n", n, 1, MAX_SIZE)
        repeats = _check_int("repeats", repeats, 1, 100)
        loop_repeats = _check_int("loop_repeats", loop_repeats, 1, 100)
        x, params = spec.inputs(n, self.seed)
        results, times = {}, {}
        for method in ("jacobian", "batch_jacobian"):
            fn = self._compiled_fn(name, method)
            results[method] = fn(x, *params).numpy()
            best = np.inf
            for _repeat in range(repeats):
                t0 = time.perf_counter()
                fn(x, *params).numpy()
                best = min(best, time.perf_counter() - t0)
            times[method] = best
        best = np.inf
        for _repeat in range(loop_repeats):
            t0 = time.perf_counter()
            results["loop"] = jacobian_loop(lambda xx: spec.fn(xx, *params), x)
            best = min(best, time.perf_counter() - t0)
        times["loop"] = best
        y_shape = tuple(results["jacobian"].shape[: results["jacobian"].ndim - x.shape.rank])
        return JacobianRun(
            name=name,
            n=n,
            x_shape=tuple(x.shape),
            y_shape=y_shape,
            jacobian=results["jacobian"],
            batch_jacobian=results["batch_jacobian"],
            loop=results["loop"],
            times=times,
        )


_DEFAULT_BENCH: JacobianBench | None = None


def time_jacobian_methods(name: str, n: int, *, repeats: int = 3, bench: JacobianBench | None = None) -> dict:
    """Seconds taken by ``jacobian``, ``batch_jacobian`` and the loop for one viewer function.

    Returns ``{"jacobian": s, "batch_jacobian": s, "loop": s}`` (best of ``repeats`` for the
    compiled methods, after a warm-up call). Chapter 02 uses it in a timing cell.
    """
    global _DEFAULT_BENCH
    if bench is None:
        if _DEFAULT_BENCH is None:
            _DEFAULT_BENCH = JacobianBench()
        bench = _DEFAULT_BENCH
    return dict(bench.run(name, n, repeats=repeats).times)


# ----------------------------------------------------------------------------- forward vs reverse
@dataclasses.dataclass(frozen=True)
class ForwardReverseTiming:
    """Seconds to build the full Jacobian of ``tanh(W x)`` by forward and by reverse mode.

    ``wide_inputs``: many inputs, ``fixed`` outputs; ``wide_outputs``: many outputs, ``fixed``
    inputs. Each maps ``"forward"`` / ``"reverse"`` to an array of times over ``sizes``.
    """

    sizes: np.ndarray
    fixed: int
    wide_inputs: dict
    wide_outputs: dict


def time_forward_reverse(
    sizes: Sequence[int] = (4, 16, 64, 256, 1024), *, fixed: int = 4, repeats: int = 3, seed: int = 0
) -> ForwardReverseTiming:
    """Time forward-mode and reverse-mode full Jacobians of ``tanh(W x)`` (chapter 02).

    Forward mode needs one JVP per *input*, reverse mode one VJP per *output*; the two sweeps
    (many inputs and ``fixed`` outputs, then the mirror image) show who wins where. Both
    methods are compiled once with shape-free signatures; each point is the best of
    ``repeats`` calls after a warm-up call.
    """
    sizes = [_check_int("sizes[i]", s, 1, MAX_SIZE) for s in sizes]
    if not sizes:
        raise ValueError("sizes must hold at least one size; got an empty sequence")
    fixed = _check_int("fixed", fixed, 1, MAX_SIZE)
    repeats = _check_int("repeats", repeats, 1, 100)

    def best(fn, w, x):
        fn(w, x).numpy()
        out = np.inf
        for _repeat in range(repeats):
            t0 = time.perf_counter()
            fn(w, x).numpy()
            out = min(out, time.perf_counter() - t0)
        return out

    result = {}
    for sweep in ("wide_inputs", "wide_outputs"):
        times = {"forward": [], "reverse": []}
        for s in sizes:
            m, n = (fixed, s) if sweep == "wide_inputs" else (s, fixed)
            w = tf.random.stateless_normal([m, n], seed=[seed, s]) / np.float32(np.sqrt(n))
            x = tf.random.stateless_normal([n], seed=[seed + 1, s])
            times["forward"].append(best(forward_mode_jacobian, w, x))
            times["reverse"].append(best(reverse_mode_jacobian, w, x))
        result[sweep] = {k: np.asarray(v) for k, v in times.items()}
    return ForwardReverseTiming(np.asarray(sizes), fixed, result["wide_inputs"], result["wide_outputs"])



# ----------------------------------------------------------------------------- pfor speed
@dataclasses.dataclass(frozen=True)
class PforTiming:
    """Seconds for ``tape.jacobian`` of ``tanh(W x)`` with pfor and with a while_loop, by size ``n``.

    ``graph`` holds the times inside a ``tf.function``, ``eager`` the times when called eagerly;
    each maps ``"pfor"`` / ``"while_loop"`` to an array over ``sizes``.
    """

    sizes: np.ndarray
    graph: dict
    eager: dict

    def speedups(self) -> dict:
        """``{"graph": while_loop / pfor, "eager": ...}``: how many times faster pfor was, per size."""
        return {k: np.asarray(v["while_loop"]) / np.asarray(v["pfor"])
                for k, v in (("graph", self.graph), ("eager", self.eager))}


def _tape_jacobian(w, x, use_pfor: bool):
    with tf.GradientTape(persistent=not use_pfor) as tape:
        tape.watch(x)
        y = tanh_matvec(w, x)
    return tape.jacobian(y, x, experimental_use_pfor=use_pfor)


def _best_of(fn, args, repeats: int) -> float:
    fn(*args).numpy()  # warm-up: tracing, first-call costs
    out = np.inf
    for _repeat in range(repeats):
        t0 = time.perf_counter()
        fn(*args).numpy()
        out = min(out, time.perf_counter() - t0)
    return out


def time_pfor_vs_loop(sizes: Sequence[int] = (16, 64, 256), *, repeats: int = 3, seed: int = 0,
                      progress: bool | None = None) -> PforTiming:
    """Time ``tape.jacobian`` of ``tanh(W x)`` (``W`` is ``n × n``) with and without pfor (chapter 02).

    Inside a ``tf.function`` (shape-free signature, traced once per method) and eagerly. Each
    point is the best of ``repeats`` calls after a warm-up call. ``progress`` (``None``: on in a
    notebook) shows a bar with one stage per size, drawn between the timings, never inside one.
    """
    sizes = [_check_int("sizes[i]", s, 1, 1024) for s in sizes]
    if not sizes:
        raise ValueError("sizes must hold at least one size; got an empty sequence")
    repeats = _check_int("repeats", repeats, 1, 100)
    bar = Progress(len(sizes), _("matrix sizes timed"), enabled=check_progress(progress))
    compiled = {
        name: tf.function(lambda w, x, p=p: _tape_jacobian(w, x, p),
                          input_signature=[_spec(2), _spec(1)], autograph=False)
        for name, p in (("pfor", True), ("while_loop", False))
    }
    graph = {"pfor": [], "while_loop": []}
    eager = {"pfor": [], "while_loop": []}
    for n in sizes:
        w = tf.random.stateless_normal([n, n], seed=[seed, n]) / np.float32(np.sqrt(n))
        x = tf.random.stateless_normal([n], seed=[seed + 1, n])
        for name, use_pfor in (("pfor", True), ("while_loop", False)):
            graph[name].append(_best_of(compiled[name], (w, x), repeats))
            eager[name].append(_best_of(lambda w, x, p=use_pfor: _tape_jacobian(w, x, p), (w, x), repeats))
        bar.update(note=f"n = {n}")
    bar.close()
    return PforTiming(np.asarray(sizes), {k: np.asarray(v) for k, v in graph.items()},
                      {k: np.asarray(v) for k, v in eager.items()})


@dataclasses.dataclass(frozen=True)
class HvpTiming:
    """Seconds per call of a loss, its gradient and two Hessian-vector products (chapter 02).

    ``seconds``: the best call of each; ``ratios``: per function, the median over rounds of
    its time divided by the gradient's time in the same round, which a busy machine
    disturbs much less than separate timings.
    """

    n_params: int
    seconds: dict
    ratios: dict

    def relative(self) -> dict:
        """Each function's time as a multiple of the gradient's (median of per-round ratios)."""
        return dict(self.ratios)


def time_gradient_vs_hvp(n: int = 256, *, batch: int = 64, repeats: int = 20, seed: int = 0) -> HvpTiming:
    """Time a two-layer loss, its gradient and its Hessian-vector product, all compiled (chapter 02).

    The loss is ``mean(tanh(tanh(x W1) W2)²)`` over a batch, as a function of the ``n × n``
    weights ``W1`` (``n²`` parameters). ``seconds`` maps ``"loss"``, ``"gradient"``,
    ``"hvp forward_over_reverse"`` and ``"hvp reverse_over_reverse"`` to the best of
    ``repeats`` calls of each ``tf.function`` after a warm-up call; the calls are interleaved
    round by round, and ``ratios`` holds the median per-round ratio to the gradient.
    """
    n = _check_int("n", n, 2, 2048)
    batch = _check_int("batch", batch, 1, 4096)
    repeats = _check_int("repeats", repeats, 1, 1000)
    xb = tf.random.stateless_normal([batch, n], seed=[seed, 1])
    w2 = tf.random.stateless_normal([n, n], seed=[seed, 2]) / np.float32(np.sqrt(n))
    w1 = tf.reshape(tf.random.stateless_normal([n, n], seed=[seed, 3]) / np.float32(np.sqrt(n)), [-1])
    v = tf.random.stateless_normal([n * n], seed=[seed, 4])

    def loss(w):
        return tf.reduce_mean(tf.square(tf.tanh(tf.tanh(xb @ tf.reshape(w, [n, n])) @ w2)))

    def gradient(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            y = loss(w)
        return tape.gradient(y, w)

    def hvp_fr(w, v):
        with tf.autodiff.ForwardAccumulator(w, v) as acc:
            g = gradient(w)
        return acc.jvp(g)

    def hvp_rr(w, v):
        with tf.GradientTape() as outer:
            outer.watch(w)
            gv = tf.reduce_sum(gradient(w) * v)
        return outer.gradient(gv, w)

    calls = {
        "loss": (tf.function(loss), (w1,)),
        "gradient": (tf.function(gradient), (w1,)),
        "hvp forward_over_reverse": (tf.function(hvp_fr), (w1, v)),
        "hvp reverse_over_reverse": (tf.function(hvp_rr), (w1, v)),
    }
    rounds = {k: [] for k in calls}
    for fn, args in calls.values():
        fn(*args).numpy()  # warm-up: tracing, first-call costs
    for _repeat in range(repeats):  # interleaved, so a burst of load hits every function alike
        for k, (fn, args) in calls.items():
            t0 = time.perf_counter()
            fn(*args).numpy()
            rounds[k].append(time.perf_counter() - t0)
    grad = np.asarray(rounds["gradient"])
    seconds = {k: float(np.min(t)) for k, t in rounds.items()}
    ratios = {k: float(np.median(np.asarray(t) / grad)) for k, t in rounds.items()}
    return HvpTiming(n * n, seconds, ratios)
