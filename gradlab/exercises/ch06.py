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
        if problem is not None:
            return problem
        if out is None:
            return CheckResult(name, False, "round_ste returned None: return the rounded tensor")
        try:
            loss = tf.reduce_sum(tf.cast(tf.convert_to_tensor(out), tf.float32) * weights)
        except Exception:  # noqa: BLE001 - a string, a ragged list, ...
            return CheckResult(name, False, f"round_ste returned a {type(out).__name__} ({str(out)[:40]!r}): "
                                            "return a float tensor of x's shape, tf.round(x)")
    values = np.asarray(tf.convert_to_tensor(out), dtype=np.float64)
    if values.shape != tuple(x.shape) or not np.allclose(values, np.round(x.numpy())):  # NumPy rounds half to even
        return CheckResult(name, False, f"the forward values {values} are not tf.round(x) = "
                                        f"{np.round(x.numpy())}")
    if not isinstance(out, (tf.Tensor, tf.Variable)):
        return CheckResult(name, False, f"round_ste returned a {type(out).__name__}, not a tensor: the tape "
                                        "cannot follow Python or NumPy values. Stay in TensorFlow ops")
    try:
        g = tape.gradient(loss, x)
    except Exception as err:  # noqa: BLE001 - the learner's grad function failed
        return CheckResult(name, False, f"the backward pass raised {type(err).__name__}: {str(err).strip()[:160]}. "
                                        "With one input, grad(dy) returns one tensor: dy itself")
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
    zero = [p for p, g in zip(paths, grads, strict=True) if not np.any(tf.convert_to_tensor(g).numpy())]
    if zero:
        return CheckResult(name, False, f"the gradient of {', '.join(zero)} is all zeros: the layer is called but "
                                        "its output is multiplied away or cut off (stop_gradient). Add it to the output")
    layers = [getattr(model, n, None) for n in ("body", "head", "aux")]
    if tuple(layer_names) == ("body", "head", "aux") and all(callable(layer) for layer in layers):
        body, head, aux = layers
        try:
            h = body(x)
            want = (head(h) + aux(h)).numpy()
            got = np.asarray(model(x))
        except Exception as err:  # noqa: BLE001
            return CheckResult(name, False, f"calling the layers raised {type(err).__name__}: {err}")
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            return CheckResult(name, False, f"every variable gets a gradient, but the output (shape {got.shape}) is "
                                            f"not head(h) + aux(h) (shape {want.shape}): return their sum")
    return CheckResult(name, True, f"all {len(paths)} variables get a gradient")


# ----------------------------------------------------------------------------- exercise 3
def check_drop_none(drop_none: Callable) -> CheckResult:
    """Exercise 3: ``drop_none(grads, variables)`` keeps only the pairs whose gradient is not None."""
    name = "pairs without None"
    variables = [tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b"), tf.Variable(3.0, name="c"),
                 tf.Variable(4.0, name="d")]
    grads = [tf.constant(0.5), None, tf.constant(-1.0), tf.constant(0.0)]  # d's gradient is 0, not None
    out, problem = _call(name, drop_none, grads, variables)
    if problem is not None:
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
    if pairs and all(hasattr(p[0], "assign") and not hasattr(p[1], "assign") for p in pairs):
        return CheckResult(name, False, "your pairs are (variable, gradient): apply_gradients wants "
                                        "(gradient, variable), the gradient first")
    kept = [v for _, v in pairs]
    if len(kept) == 2 and kept[0] is variables[0] and kept[1] is variables[2]:
        return CheckResult(name, False, "you dropped d, whose gradient is 0.0, not None: a zero gradient is "
                                        "falsy. Test `g is not None`, not `if g`")
    if len(kept) != 3 or any(k is not variables[i] for k, i in zip(kept, (0, 2, 3), strict=True)):
        return CheckResult(name, False, f"kept {len(kept)} pairs; expected the pairs of a, c and d, in order, "
                                        "each gradient with its own variable (only b's gradient is None)")
    if float(pairs[0][0]) != 0.5 or float(pairs[1][0]) != -1.0 or float(pairs[2][0]) != 0.0:
        return CheckResult(name, False, "the gradients are not paired with their own variables")
    opt_ok = True
    try:
        import keras

        keras.optimizers.SGD(1.0).apply_gradients(pairs)
    except Exception:  # noqa: BLE001
        opt_ok = False
    if not opt_ok or not math.isclose(float(variables[0].numpy()), 0.5) or float(variables[1].numpy()) != 2.0:
        return CheckResult(name, False, "the optimizer could not apply these pairs as expected")
    return CheckResult(name, True, "3 pairs kept, and SGD applies them without a warning")


# ----------------------------------------------------------------------------- exercise 4
#: Exercise 4: the embedding table and the lookups.
EMBEDDING = {"vocab": 50_000, "dim": 64, "lookups": 4, "bytes_per_float": 4}


def check_dense_bytes(dense_bytes, slices_bytes) -> CheckResult:
    """Exercise 4: bytes of the dense gradient and of the IndexedSlices' values (float32)."""
    name = "memory of the embedding gradient"
    e = EMBEDDING
    dense = e["vocab"] * e["dim"] * e["bytes_per_float"]
    slices = e["lookups"] * e["dim"] * e["bytes_per_float"]
    def as_number(v):
        if hasattr(v, "numpy"):
            v = v.numpy()
        if isinstance(v, np.ndarray) and v.shape == ():
            v = v.item()
        return v

    dense_bytes, slices_bytes = as_number(dense_bytes), as_number(slices_bytes)
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
    if not callable(safe_log):
        return CheckResult(name, False, f"expected a function, got {type(safe_log).__name__}")
    out, problem = _call(name, safe_log, x)
    if problem is not None:
        return problem
    if out is None:
        return CheckResult(name, False, "safe_log returned None: return the tensor of logarithms")
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
    if not callable(bce):
        return CheckResult(name, False, f"expected a function, got {type(bce).__name__}")
    out, problem = _call(name, bce, tf.constant(labels), z)
    if problem is not None:
        return problem
    if out is None:
        return CheckResult(name, False, "bce_from_logits returned None: return the mean loss (a scalar tensor)")
    if not isinstance(out, (tf.Tensor, tf.Variable)):
        return CheckResult(name, False, f"bce_from_logits returned a {type(out).__name__}, not a tensor: the tape "
                                        "cannot differentiate a Python or NumPy number. Stay in TensorFlow ops")
    if tuple(out.shape) != ():
        return CheckResult(name, False, f"the loss has shape {tuple(out.shape)}: return the mean over the batch "
                                        "(a scalar), tf.reduce_mean(...)")
    try:
        loss, g = _grad(lambda t: bce(tf.constant(labels), t), z)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, f"raised {type(err).__name__}: {str(err).strip()[:200]}")
    if loss is None or g is None:
        return CheckResult(name, False, "the loss or its gradient is None: keep the computation in TensorFlow ops")
    zz = logits.astype(np.float64)
    ref = np.mean(np.logaddexp(0.0, zz) - labels * zz)  # softplus(z) - y*z, in float64
    ref_g = (1.0 / (1.0 + np.exp(-zz)) - labels) / len(zz)
    got = float(np.asarray(loss))
    if not math.isfinite(got):
        return CheckResult(name, False, f"the loss is {got}: a sigmoid followed by a log underflows to log(0) "
                                        "at large logits. Write it with tf.math.softplus")
    if not math.isclose(got, ref, rel_tol=1e-4):
        hint = ""
        if math.isclose(got, ref * len(zz), rel_tol=1e-4):
            hint = f": {len(zz)}× too large, the batch size. A sum where the mean was wanted (tf.reduce_mean)"
        elif math.isclose(got, float(np.mean(np.logaddexp(0.0, labels) - zz * labels)), rel_tol=1e-4):
            hint = ": labels and logits are swapped. The arguments are (labels, logits)"
        elif got < 0.5 * ref:
            hint = (": smaller than the true loss, as when the probabilities are clipped (or a small epsilon "
                    "added) before the log, which caps each example's loss. Use softplus, which is exact")
        return CheckResult(name, False, f"the loss is {got:.6g}, expected {ref:.6g}{hint}")
    g = g.numpy()
    if not np.all(np.isfinite(g)) or not np.allclose(g, ref_g, atol=1e-6):
        return CheckResult(name, False, f"the gradient is {g}, expected {ref_g}")
    return CheckResult(name, True, f"loss {got:.4g} and its gradient match, even at logits ±200")
