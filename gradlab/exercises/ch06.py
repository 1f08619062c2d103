"""Self-checks for chapter 06's exercises (where None and NaN gradients come from).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_round_ste`, a straight-through ``round`` written with ``tf.custom_gradient``;
* exercise 2: :func:`check_uses_every_layer`, a subclassed model repaired so that every
  trainable variable gets a gradient (and no layer was deleted to get there);
* exercise 3: :func:`check_drop_none`, pairs of (gradient, variable) without the ``None`` ones;
* exercise 4: :func:`check_dense_bytes`, the memory of a dense embedding gradient;
* exercise 5: :func:`check_safe_log`, a logarithm with finite gradients everywhere (the double where);
* exercise 6: :func:`check_bce_from_logits`, a binary cross-entropy from logits that stays finite.

Every check returns a :class:`~gradlab.checks.CheckResult` and never raises on a wrong answer;
the feedback names what is wrong (``None``, NaN, a wrong value, a deleted layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..checks import CheckResult

tf = quiet_import_tensorflow()

__all__ = [
    "EMBEDDING",
    "check_bce_from_logits",
    "check_dense_bytes",
    "check_drop_none",
    "check_round_ste",
    "check_safe_log",
    "check_uses_every_layer",
]


def _call(name: str, fn: Callable, *args):
    """``(result, CheckResult | None)``: the call's result, or a failed check saying why."""
    if fn is None or not callable(fn):
        return None, CheckResult(name, False, f"expected a function, got {type(fn).__name__}")
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001 - any failure is feedback
        return None, CheckResult(name, False, f"raised {type(err).__name__}: {str(err).strip()[:200]}")


def _grad(fn, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x)


# ----------------------------------------------------------------------------- exercise 1
def check_round_ste(round_ste: Callable) -> CheckResult:
    """Exercise 1: forward ``tf.round(x)``, backward the incoming gradient unchanged."""
    name = "straight-through round"
    x = tf.constant([-1.7, -0.2, 0.4, 0.6, 2.5, 3.49])
    weights = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, problem = _call(name, round_ste, x)
        if problem:
            return problem
        if out is None:
            return CheckResult(name, False, "round_ste returned None: return the rounded tensor")
        loss = tf.reduce_sum(tf.convert_to_tensor(out) * weights)
    if not np.allclose(np.asarray(out), np.round(x.numpy())):  # NumPy rounds half to even, like tf.round
        return CheckResult(name, False, f"the forward values {np.asarray(out)} are not tf.round(x) = "
                                        f"{np.round(x.numpy())}")
    g = tape.gradient(loss, x)
    if g is None:
        return CheckResult(name, False, "the gradient is None: tf.round has no gradient. Wrap it with "
                                        "@tf.custom_gradient and return grad(dy) = dy")
    if not np.allclose(g.numpy(), weights.numpy()):
        return CheckResult(name, False, f"the gradient is {g.numpy()}, expected the incoming gradient "
                                        f"{weights.numpy()} passed straight through")
    return CheckResult(name, True, "forward rounds, backward passes dy straight through")


# ----------------------------------------------------------------------------- exercise 2
def check_uses_every_layer(model, x, layer_names: tuple[str, ...] = ("body", "head", "aux")) -> CheckResult:
    """Exercise 2: every trainable variable of ``model`` gets a gradient, and no layer is missing."""
    name = "every layer gets a gradient"
    if model is None:
        return CheckResult(name, False, "got None instead of a model")
    try:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"calling the model raised {type(err).__name__}: {err}")
    paths = [v.path for v in variables]
    missing = [n for n in layer_names if not any(f"/{n}/" in f"/{p}" for p in paths)]
    if missing:
        return CheckResult(name, False, f"no trainable layer {', '.join(map(repr, missing))}: deleting (or "
                                        "freezing) a layer is not a fix; use it in call")
    none = [p for p, g in zip(paths, grads, strict=True) if g is None]
    if none:
        return CheckResult(name, False, f"still no gradient for {', '.join(none)}: its layer does not take "
                                        "part in computing the output")
    return CheckResult(name, True, f"all {len(paths)} variables get a gradient")


# ----------------------------------------------------------------------------- exercise 3
def check_drop_none(drop_none: Callable) -> CheckResult:
    """Exercise 3: ``drop_none(grads, variables)`` keeps only the pairs whose gradient is not None."""
    name = "pairs without None"
    variables = [tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b"), tf.Variable(3.0, name="c")]
    grads = [tf.constant(0.5), None, tf.constant(-1.0)]
    out, problem = _call(name, drop_none, grads, variables)
    if problem:
        return problem
    if out is None:
        return CheckResult(name, False, "drop_none returned None: return a list of (gradient, variable) pairs")
    try:
        pairs = list(out)
        ok_shape = all(len(p) == 2 for p in pairs)
    except TypeError:
        ok_shape = False
    if not ok_shape:
        return CheckResult(name, False, "expected a list of (gradient, variable) pairs")
    if any(g is None for g, _ in pairs):
        return CheckResult(name, False, "a pair still holds a None gradient")
    kept = [v for _, v in pairs]
    if len(kept) != 2 or kept[0] is not variables[0] or kept[1] is not variables[2]:
        return CheckResult(name, False, f"kept {len(kept)} pairs; expected the pairs of a and c, in order, "
                                        "each gradient with its own variable")
    if float(pairs[0][0]) != 0.5 or float(pairs[1][0]) != -1.0:
        return CheckResult(name, False, "the gradients are not paired with their own variables")
    opt_ok = True
    try:
        import keras

        keras.optimizers.SGD(1.0).apply_gradients(pairs)
    except Exception:  # noqa: BLE001
        opt_ok = False
    if not opt_ok or not math.isclose(float(variables[0].numpy()), 0.5) or float(variables[1].numpy()) != 2.0:
        return CheckResult(name, False, "the optimizer could not apply these pairs as expected")
    return CheckResult(name, True, "2 pairs kept, and SGD applies them without a warning")


# ----------------------------------------------------------------------------- exercise 4
#: Exercise 4: the embedding table and the lookups.
EMBEDDING = {"vocab": 50_000, "dim": 64, "lookups": 4, "bytes_per_float": 4}


def check_dense_bytes(dense_bytes, slices_bytes) -> CheckResult:
    """Exercise 4: bytes of the dense gradient and of the IndexedSlices' values (float32)."""
    name = "memory of the embedding gradient"
    e = EMBEDDING
    dense = e["vocab"] * e["dim"] * e["bytes_per_float"]
    slices = e["lookups"] * e["dim"] * e["bytes_per_float"]
    for label, got in (("dense_bytes", dense_bytes), ("slices_bytes", slices_bytes)):
        if got is None:
            return CheckResult(name, False, f"{label} is None: set it to a number of bytes")
        if isinstance(got, bool) or not isinstance(got, (int, float, np.integer, np.floating)):
            return CheckResult(name, False, f"{label} must be a number of bytes, got {type(got).__name__}")
    if dense_bytes == e["vocab"] * e["dim"] or slices_bytes == e["lookups"] * e["dim"]:
        return CheckResult(name, False, "that is a number of floats: a float32 takes 4 bytes")
    if not math.isclose(dense_bytes, dense, rel_tol=1e-9):
        return CheckResult(name, False, f"dense_bytes = {dense_bytes:g}: the dense gradient has one float "
                                        "per entry of the whole table")
    if not math.isclose(slices_bytes, slices, rel_tol=1e-9):
        return CheckResult(name, False, f"slices_bytes = {slices_bytes:g}: the slices hold one row of "
                                        "values per lookup (the indices add a few bytes, leave them out)")
    return CheckResult(name, True, f"{dense / 1e6:.1f} MB dense against {slices} bytes of slices: "
                                   f"{dense // slices}× more")


# ----------------------------------------------------------------------------- exercise 5
def check_safe_log(safe_log: Callable) -> CheckResult:
    """Exercise 5: log(x) for x > 0 and 0 elsewhere, with finite gradients everywhere."""
    name = "safe log"
    xs = np.array([-4.0, -1e-3, 0.0, 1e-6, 0.25, 4.0], np.float32)
    x = tf.constant(xs)
    try:
        _, g = _grad(lambda t: tf.reduce_sum(tf.convert_to_tensor(safe_log(t))), x)
        values = np.asarray(safe_log(x))
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"raised {type(err).__name__}: {str(err).strip()[:200]}")
    positive = xs > 0
    expected = np.where(positive, np.log(np.where(positive, xs, 1.0)), 0.0)
    if values.shape != xs.shape or not np.allclose(values, expected, rtol=1e-5, atol=1e-6):
        return CheckResult(name, False, f"values {values}, expected {expected}")
    if g is None:
        return CheckResult(name, False, "the gradient is None: keep the computation in TensorFlow ops")
    g = g.numpy()
    if not np.all(np.isfinite(g)):
        bad = [float(v) for v in xs[~np.isfinite(g)]]
        return CheckResult(name, False, f"the gradient is NaN/inf at x = {bad}: the unselected branch still "
                                        "computes log of those x. Make the input safe before the log")
    want = np.where(positive, 1.0 / np.where(positive, xs, 1.0), 0.0)
    if not np.allclose(g, want, rtol=1e-4):
        return CheckResult(name, False, f"gradients {g}, expected {want}")
    return CheckResult(name, True, "values and gradients match, finite at x <= 0")


# ----------------------------------------------------------------------------- exercise 6
def check_bce_from_logits(bce: Callable) -> CheckResult:
    """Exercise 6: mean binary cross-entropy from logits, finite for logits up to ±200."""
    name = "stable binary cross-entropy"
    labels = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], np.float32)
    logits = np.array([-200.0, 200.0, 3.0, -0.5, 90.0, -90.0], np.float32)
    z = tf.constant(logits)
    try:
        loss, g = _grad(lambda t: bce(tf.constant(labels), t), z)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"raised {type(err).__name__}: {str(err).strip()[:200]}")
    if loss is None or g is None:
        return CheckResult(name, False, "the loss or its gradient is None")
    zz = logits.astype(np.float64)
    ref = np.mean(np.logaddexp(0.0, zz) - labels * zz)  # softplus(z) - y*z, in float64
    ref_g = (1.0 / (1.0 + np.exp(-zz)) - labels) / len(zz)
    got = float(np.asarray(loss))
    if np.asarray(loss).shape != ():
        return CheckResult(name, False, f"the loss has shape {np.asarray(loss).shape}: return the mean (a scalar)")
    if not math.isfinite(got):
        return CheckResult(name, False, f"the loss is {got}: a sigmoid followed by a log underflows to log(0) "
                                        "at large logits. Write it with tf.math.softplus")
    if not math.isclose(got, ref, rel_tol=1e-4):
        return CheckResult(name, False, f"the loss is {got:.6g}, expected {ref:.6g}")
    g = g.numpy()
    if not np.all(np.isfinite(g)) or not np.allclose(g, ref_g, atol=1e-6):
        return CheckResult(name, False, f"the gradient is {g}, expected {ref_g}")
    return CheckResult(name, True, f"loss {got:.4g} and its gradient match, even at logits ±200")
