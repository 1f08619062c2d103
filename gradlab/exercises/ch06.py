"""Self-checks for chapter 06's exercises (where None and NaN gradients come from).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_round_ste`, a straight-through ``round`` written with ``tf.custom_gradient``;
* exercise 2: :func:`check_uses_every_layer`, a subclassed model repaired so that every
  trainable variable gets a gradient (and no layer was deleted to get there);
* exercise 3: :func:`check_drop_none`, pairs of (gradient, variable) without the ``None`` ones;
* exercise 4: :func:`check_dense_bytes`, the memory of a dense embedding gradient;
* exercise 5: :func:`check_safe_log`, a logarithm with finite gradients everywhere (the double where);
* exercise 6: :func:`check_bce_from_logits`, a binary cross-entropy from logits that stays finite.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer;
the feedback names what is wrong (``None``, NaN, a wrong value, a deleted layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list, join_sentences
from .answers import as_number_answer
from .feedback import CheckResult, call_answer, describe_error

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


def _cut_text() -> str:
    return _("something cuts the path from the input to the output: a tf.stop_gradient, a value taken out of "
             "TensorFlow (.numpy(), float(), np.*) and put back, or an integer cast")


def _as_array(value):
    """``value`` as a float64 array, or None when it is not numbers (a tensor, array or number)."""
    try:
        arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float64)
    except Exception:  # noqa: BLE001
        return None
    return arr


def _gradient(fn, x, *, graph: bool = False):
    """``(output, gradient, error)`` of ``sum(fn(x))`` with respect to ``x``, eagerly or in a graph."""

    def run(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            out = fn(t)
            total = tf.reduce_sum(tf.cast(tf.convert_to_tensor(out), tf.float32))
        g = tape.gradient(total, t)
        return out, (g if g is not None else tf.fill(tf.shape(t), np.nan)), g is None

    try:
        if graph:
            out, g, was_none = tf.function(run, autograph=False)(x)
        else:
            out, g, was_none = run(x)
    except Exception as err:  # noqa: BLE001
        return None, None, err
    return out, (None if bool(was_none) else g), None


# ----------------------------------------------------------------------------- exercise 1
def check_round_ste(round_ste: Callable) -> CheckResult:
    """Exercise 1: forward ``tf.round(x)``, backward the incoming gradient unchanged.

    Checked eagerly and inside ``tf.function`` (as in ``fit``), with an upstream gradient that
    differs per element, so that a backward pass returning ones, a constant or a clipped
    gradient is told apart from ``dy`` itself.
    """
    name = _("straight-through round")
    if round_ste is None or not callable(round_ste):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(round_ste).__name__))
    x = tf.constant([-1.7, -0.2, 0.4, 0.6, 2.5, 3.49])
    weights = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    want = np.round(x.numpy())  # NumPy rounds half to even, as tf.round does
    out, problem = call_answer(name, round_ste, x)
    if problem is not None:
        return problem
    if out is None:
        return CheckResult(name, False, _("round_ste returned None: return the rounded tensor"))
    values = _as_array(out)
    if values is None:
        return CheckResult(name, False, _("round_ste returned a {kind} ({value!r}): return a float tensor of x's "
                                          "shape, tf.round(x)").format(kind=type(out).__name__, value=str(out)[:40]))
    if values.shape != tuple(x.shape) or not np.allclose(values, want):
        return CheckResult(name, False, _("the forward values {got} are not tf.round(x) = {want}").format(
            got=np.array2string(values, precision=3), want=want))
    if not isinstance(out, (tf.Tensor, tf.Variable)):
        return CheckResult(name, False, _(
            "round_ste returned a {kind}, not a tensor: the tape cannot follow Python or NumPy values. Stay in "
            "TensorFlow ops").format(kind=type(out).__name__))

    def run(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            loss = tf.reduce_sum(tf.cast(round_ste(t), tf.float32) * weights)
        return tape.gradient(loss, t)

    for mode in ("eager", "tf.function"):
        try:
            g = run(x) if mode == "eager" else tf.function(run, autograph=False)(x)
        except Exception as err:  # noqa: BLE001
            text = str(err)
            if mode == "tf.function" and ("numpy" in text or "symbolic" in text.lower()):
                return CheckResult(name, False, _(
                    "it works eagerly but fails inside tf.function ({error}): the forward pass leaves TensorFlow "
                    "(.numpy(), np.round). Inside a graph, as in fit, a tensor has no value yet; use "
                    "tf.round").format(error=describe_error(err, 120)))
            where = _("eagerly") if mode == "eager" else _("inside tf.function")
            return CheckResult(name, False, _(
                "{where} the backward pass raised {error}. With one input, grad(dy) returns one tensor: dy "
                "itself").format(where=where, error=describe_error(err, 160)))
        if g is None:
            return CheckResult(name, False, _("the gradient is None: tf.round has no gradient. Wrap it with "
                                              "@tf.custom_gradient and return grad(dy) = dy"))
        got = _as_array(g)
        dy = weights.numpy()
        if got is None or got.shape != dy.shape:
            shape = "?" if got is None else got.shape
            return CheckResult(name, False, _(
                "the gradient has shape {shape}, expected {want}: grad(dy) must return a tensor of dy's shape "
                "(dy itself), not a number").format(shape=shape, want=dy.shape))
        if not np.all(np.isfinite(got)):
            return CheckResult(name, False, _("the gradient holds NaN or inf: {got}").format(got=got))
        if not np.allclose(got, dy):
            if not np.any(got):
                text = _("the gradient is 0 everywhere, expected the incoming gradient {want}: grad(dy) returned zeros "
                         "(tf.zeros_like, 0 * dy), so nothing upstream learns, as if there were no gradient at all. "
                         "Return dy itself").format(want=dy)
            elif np.allclose(got, got.flat[0]):
                text = _("the gradient is {value} everywhere, expected the incoming gradient {want}: grad(dy) "
                         "returned a constant (ones, 1.0) instead of dy, so every weight upstream would get the "
                         "same gradient whatever the loss").format(value=f"{got.flat[0]:g}", want=dy)
            elif np.all((got == 0) | np.isclose(got, dy)):
                text = _("the gradient is {got}: dy is passed through only for some elements and zeroed for the "
                         "others (|x| > 1 here), the clipped straight-through estimator of sign_ste. The task asks "
                         "for the plain one: return dy everywhere").format(got=got)
            else:
                text = _("the gradient is {got}, expected the incoming gradient {want} passed straight "
                         "through").format(got=np.array2string(got, precision=4), want=dy)
            return CheckResult(name, False, text)
    return CheckResult(name, True, _("forward rounds, backward passes dy straight through, eagerly and in "
                                     "tf.function"))


# ----------------------------------------------------------------------------- exercise 2
def _combination_feedback(got: np.ndarray, head: np.ndarray, aux: np.ndarray) -> str:
    """Which other combination of the two heads the output is (product, difference, mean, concatenation)."""
    candidates = [
        (head * aux, _("the output is head(h) * aux(h), their product: return their sum")),
        (head - aux, _("the output is head(h) - aux(h), their difference: return their sum")),
        (aux - head, _("the output is aux(h) - head(h), their difference: return their sum")),
        ((head + aux) / 2, _("the output is the mean of head(h) and aux(h): return their sum")),
        (np.concatenate([head, aux], axis=-1), _("the output puts head(h) and aux(h) side by side (concatenated, "
                                                 "one column each): return their sum, one column")),
    ]
    for value, text in candidates:
        if value.shape == got.shape and np.allclose(got, value, rtol=1e-5, atol=1e-6):
            return text
    return ""


def check_uses_every_layer(model, x, layer_names: tuple[str, ...] = ("body", "head", "aux")) -> CheckResult:
    """Exercise 2: every trainable variable of ``model`` gets a gradient, and no layer is missing."""
    name = _("every layer gets a gradient")
    if model is None:
        return CheckResult(name, False, _("got None instead of a model"))
    if isinstance(model, type):
        return CheckResult(name, False, _("got the class {kind} itself: create the model, {kind}(), build it, and "
                                          "pass that").format(kind=model.__name__))
    try:
        with tf.GradientTape() as tape:
            out = model(x)
            if isinstance(out, (tuple, list)):
                return CheckResult(name, False, _("the model returns a {kind} of {n} outputs: return one tensor, "
                                                  "head(h) + aux(h)").format(kind=type(out).__name__, n=len(out)))
            loss = tf.reduce_mean(tf.square(out))
        variables = list(model.trainable_variables)
        grads = tape.gradient(loss, variables)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, _("calling the model raised {error}").format(error=describe_error(err)))
    paths = [getattr(v, "path", v.name) for v in variables]
    missing = [n for n in layer_names if not any(f"/{n}/" in f"/{p}" for p in paths)]
    if missing:
        return CheckResult(name, False, _("no trainable layer {names}: deleting (or freezing) a layer is not a fix; "
                                          "use it in call").format(names=join_list(map(repr, missing))))
    none = [p for p, g in zip(paths, grads, strict=True) if g is None]
    if none:
        return CheckResult(name, False, _("still no gradient for {names}: its layer does not take part in computing "
                                          "the output, its output passes through tf.stop_gradient, or it leaves "
                                          "TensorFlow on the way (NumPy, .numpy(), tf.constant of a value)").format(
                                              names=join_list(none)))
    zero = [p for p, g in zip(paths, grads, strict=True) if not np.any(tf.convert_to_tensor(g).numpy())]
    if zero:
        return CheckResult(name, False, _("the gradient of {names} is all zeros: the layer is called but its output "
                                          "is multiplied away or cut off (stop_gradient). Add it to the "
                                          "output").format(names=join_list(zero)))
    layers = [getattr(model, n, None) for n in ("body", "head", "aux")]
    if tuple(layer_names) == ("body", "head", "aux") and all(callable(layer) for layer in layers):
        body, head, aux = layers
        try:
            h = body(x)
            want = (head(h) + aux(h)).numpy()
            got = np.asarray(model(x))
        except Exception as err:  # noqa: BLE001
            return CheckResult(name, False, _("calling the layers raised {error}").format(error=describe_error(err)))
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            known = _combination_feedback(got, head(h).numpy(), aux(h).numpy())
            if known:
                return CheckResult(name, False, known)
            return CheckResult(name, False, _("every variable gets a gradient, but the output (shape {got}) is not "
                                              "head(h) + aux(h) (shape {want}): return their sum").format(
                                                  got=got.shape, want=want.shape))
    return CheckResult(name, True, _("all {n} variables get a gradient").format(n=len(paths)))


# ----------------------------------------------------------------------------- exercise 3
def check_drop_none(drop_none: Callable) -> CheckResult:
    """Exercise 3: ``drop_none(grads, variables)`` keeps only the pairs whose gradient is not None.

    The function gets copies of the lists, so an answer that edits them in place is judged by
    what it returns; any iterable of pairs (a list, a zip, a generator) is accepted.
    """
    name = _("pairs without None")
    variables = [tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b"), tf.Variable(3.0, name="c"),
                 tf.Variable(4.0, name="d")]
    grads = [tf.constant(0.5), None, tf.constant(-1.0), tf.constant(0.0)]  # d's gradient is 0, not None
    out, problem = call_answer(name, drop_none, list(grads), list(variables))
    if problem is not None:
        return problem
    if out is None:
        return CheckResult(name, False, _("drop_none returned None: return a list of (gradient, variable) pairs"))
    try:
        pairs = [tuple(p) for p in out]
        ok_shape = all(len(p) == 2 for p in pairs)
    except TypeError:
        ok_shape = False
    if not ok_shape:
        return CheckResult(name, False, _("expected a list of (gradient, variable) pairs"))
    if any(g is None for g, _v in pairs):
        return CheckResult(name, False, _("a pair still holds a None gradient"))
    if pairs and all(hasattr(p[0], "assign") and not hasattr(p[1], "assign") for p in pairs):
        return CheckResult(name, False, _("your pairs are (variable, gradient): apply_gradients wants (gradient, "
                                          "variable), the gradient first"))
    kept = [v for _g, v in pairs]
    if len(kept) == 2 and kept[0] is variables[0] and kept[1] is variables[2]:
        return CheckResult(name, False, _("you dropped d, whose gradient is 0.0, not None: a zero gradient is "
                                          "falsy. Test `g is not None`, not `if g`"))
    if len(kept) != 3 or any(k is not variables[i] for k, i in zip(kept, (0, 2, 3), strict=True)):
        return CheckResult(name, False, _("kept {n} pairs; expected the pairs of a, c and d, in order, each gradient "
                                          "with its own variable (only b's gradient is None)").format(n=len(kept)))
    values = [_as_array(g) for g, _v in pairs]
    if any(v is None or v.shape != () for v in values) or [float(v) for v in values] != [0.5, -1.0, 0.0]:
        return CheckResult(name, False, _("the gradients are not paired with their own variables"))
    try:
        keras.optimizers.SGD(1.0).apply_gradients(pairs)
        applied = math.isclose(float(variables[0].numpy()), 0.5) and float(variables[1].numpy()) == 2.0
    except Exception:  # noqa: BLE001
        applied = False
    if not applied:
        return CheckResult(name, False, _("the optimizer could not apply these pairs as expected"))
    return CheckResult(name, True, _("3 pairs kept, and SGD applies them without a warning"))


# ----------------------------------------------------------------------------- exercise 4
#: Exercise 4: the embedding table and the lookups.
EMBEDDING = {"vocab": 50_000, "dim": 64, "lookups": 4, "bytes_per_float": 4}


def _units_feedback(got_dense: float, got_slices: float, dense: int, slices: int) -> str:
    """Feedback for answers in another unit (bits, kB, MB, MiB, float64's 8 bytes) or swapped."""
    if math.isclose(got_dense, slices) and math.isclose(got_slices, dense):
        return _("the two numbers are swapped: dense_bytes is the large one (the whole table), slices_bytes the small "
                 "one (the rows looked up)")
    for factor, text in ((2.0, _("twice the bytes: that is float64, 8 bytes per number; the table is float32, 4 "
                                 "bytes")),
                         (8.0, _("8× the bytes: that counts bits; the check wants bytes (a float32 takes 4)")),
                         (1e-3, _("that is kilobytes (1000 bytes): give the number of bytes itself")),
                         (1e-6, _("that is megabytes (10^6 bytes): give the number of bytes itself, e.g. "
                                  "50_000 * 64 * 4")),
                         (2.0**-20, _("that is mebibytes (2^20 bytes): give the number of bytes itself")),
                         (2.0**-10, _("that is kibibytes (2^10 bytes): give the number of bytes itself"))):
        for which, value, want in (("dense_bytes", got_dense, dense), ("slices_bytes", got_slices, slices)):
            if math.isclose(value, want * factor, rel_tol=1e-3):
                return _("{which} = {value}: {text}").format(which=which, value=f"{value:g}", text=text)
    return ""


def check_dense_bytes(dense_bytes, slices_bytes) -> CheckResult:
    """Exercise 4: bytes of the dense gradient and of the IndexedSlices' values (float32)."""
    name = _("memory of the embedding gradient")
    e = EMBEDDING
    dense = e["vocab"] * e["dim"] * e["bytes_per_float"]
    slices = e["lookups"] * e["dim"] * e["bytes_per_float"]
    got = {}
    for label, value in (("dense_bytes", dense_bytes), ("slices_bytes", slices_bytes)):
        number, problem = as_number_answer(name, value, _("{label}, a number of bytes").format(label=label))
        if problem is not None:
            return problem
        got[label] = number
    unit = _units_feedback(got["dense_bytes"], got["slices_bytes"], dense, slices)
    if unit:
        return CheckResult(name, False, unit)
    if got["dense_bytes"] == e["vocab"] * e["dim"] or (got["slices_bytes"] == e["lookups"] * e["dim"]
                                                       and got["dense_bytes"] != dense):
        return CheckResult(name, False, _("that is a number of floats: a float32 takes 4 bytes"))
    if got["slices_bytes"] == e["dim"] * e["bytes_per_float"]:
        return CheckResult(name, False, _("slices_bytes = {value}: that is one row of the table; the slices hold one "
                                          "row per lookup, {lookups} of them").format(
                                              value=f"{got['slices_bytes']:g}", lookups=e["lookups"]))
    if not math.isclose(got["dense_bytes"], dense, rel_tol=1e-9):
        return CheckResult(name, False, _("dense_bytes = {value}: the dense gradient has one float per entry of the "
                                          "whole table").format(value=f"{got['dense_bytes']:g}"))
    if not math.isclose(got["slices_bytes"], slices, rel_tol=1e-9):
        return CheckResult(name, False, _("slices_bytes = {value}: the slices hold one row of values per lookup "
                                          "(the indices add a few bytes, leave them out)").format(
                                              value=f"{got['slices_bytes']:g}"))
    return CheckResult(name, True, _("{mb} MB dense against {slices} bytes of slices: {factor}× more").format(
        mb=f"{dense / 1e6:.1f}", slices=slices, factor=dense // slices))


# ----------------------------------------------------------------------------- exercise 5
def check_safe_log(safe_log: Callable) -> CheckResult:
    """Exercise 5: log(x) for x > 0 and 0 elsewhere, with finite gradients everywhere.

    Checked eagerly and inside ``tf.function``; a gradient that is 0 where x > 0 (a
    ``stop_gradient``) fails as clearly as a NaN one.
    """
    name = _("safe log")
    xs = np.array([-4.0, -1e-3, 0.0, 1e-6, 0.25, 4.0], np.float32)
    positive = xs > 0
    expected = np.where(positive, np.log(np.where(positive, xs, 1.0)), 0.0)
    want = np.where(positive, 1.0 / np.where(positive, xs, 1.0), 0.0)
    if safe_log is None or not callable(safe_log):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(safe_log).__name__))
    first, problem = call_answer(name, safe_log, tf.constant(xs), what="safe_log")
    if problem is not None:
        return problem
    if first is None:
        return CheckResult(name, False, _("safe_log returned None: return the tensor of logarithms"))
    for graph in (False, True):
        out, g, err = _gradient(safe_log, tf.constant(xs), graph=graph)
        where = _("inside tf.function") if graph else _("eagerly")
        if err is not None:
            return CheckResult(name, False, _("{where} your function raised {error}").format(
                where=where, error=describe_error(err)))
        if out is None:
            return CheckResult(name, False, _("safe_log returned None: return the tensor of logarithms"))
        values = _as_array(out)
        if values is None or values.shape != xs.shape or not np.allclose(values, expected, rtol=1e-5, atol=1e-6):
            return CheckResult(name, False, _("values {got}, expected {want}").format(got=values, want=expected))
        if g is None:
            return CheckResult(name, False, _("the gradient is None: {cause}").format(cause=_cut_text()))
        g = g.numpy()
        if not np.all(np.isfinite(g)):
            bad = [float(v) for v in xs[~np.isfinite(g)]]
            return CheckResult(name, False, _(
                "the gradient is NaN/inf at x = {bad}: the unselected branch still computes log of those x. Make "
                "the input safe before the log").format(bad=bad))
        if np.allclose(g[positive], 0.0) and not np.allclose(want[positive], 0.0):
            return CheckResult(name, False, _("the gradient is 0 where x > 0 too, where it should be 1/x: "
                                              "{cause}").format(cause=_cut_text()))
        if not np.allclose(g, want, rtol=1e-4):
            return CheckResult(name, False, _("gradients {got}, expected {want}").format(got=g, want=want))
    return CheckResult(name, True, _("values and gradients match, finite at x <= 0, eagerly and in tf.function"))


# ----------------------------------------------------------------------------- exercise 6
def _nonfinite_bce(bce: Callable, got: float) -> str:
    """Why the loss is NaN or inf: exp(z) overflowing (log(1 + exp(z)) by hand), or log(σ(z)) reaching log(0)."""
    try:  # at z = -200 with y = 1 log(1 + exp(z)) - y·z is 200, finite; -log σ(z) is -log(0) = inf
        probe = float(np.asarray(bce(tf.constant([1.0]), tf.constant([-200.0]))))
    except Exception:  # noqa: BLE001 - the learner's function on another batch: no verdict from it
        probe = math.nan
    if math.isfinite(probe):
        return _("the loss is {value}: exp(z) overflows float32 (to inf) at large logits, so log(1 + exp(z)) written "
                 "by hand is inf at z = 200. Write it with tf.math.softplus, which never forms exp of a large "
                 "z").format(value=got)
    return _("the loss is {value}: a sigmoid followed by a log underflows to log(0) at large logits. Write it with "
             "tf.math.softplus").format(value=got)


def check_bce_from_logits(bce: Callable) -> CheckResult:
    """Exercise 6: mean binary cross-entropy from logits, finite for logits up to ±200.

    The feedback recognises a sum instead of a mean, swapped arguments, swapped softplus signs,
    a clipped probability and a gradient cut by ``stop_gradient``.
    """
    name = _("stable binary cross-entropy")
    labels = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0], np.float32)
    logits = np.array([-200.0, 200.0, 3.0, -0.5, 90.0, -90.0], np.float32)
    if bce is None or not callable(bce):
        return CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(bce).__name__))
    out, problem = call_answer(name, bce, tf.constant(labels), tf.constant(logits), what="bce_from_logits")
    if problem is not None:
        return problem
    if out is None:
        return CheckResult(name, False, _("bce_from_logits returned None: return the mean loss (a scalar tensor)"))
    if not isinstance(out, (tf.Tensor, tf.Variable)):
        return CheckResult(name, False, _(
            "bce_from_logits returned a {kind}, not a tensor: the tape cannot differentiate a Python or NumPy "
            "number. Stay in TensorFlow ops").format(kind=type(out).__name__))
    if tuple(out.shape) != ():
        return CheckResult(name, False, _("the loss has shape {shape}: return the mean over the batch (a scalar), "
                                          "tf.reduce_mean(...)").format(shape=tuple(out.shape)))
    z = tf.constant(logits)
    try:
        with tf.GradientTape() as tape:
            tape.watch(z)
            loss = bce(tf.constant(labels), z)
        g = tape.gradient(loss, z)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, _("bce_from_logits raised {error}").format(error=describe_error(err)))
    zz = logits.astype(np.float64)
    n = len(zz)
    ref = float(np.mean(np.logaddexp(0.0, zz) - labels * zz))  # softplus(z) - y*z, in float64
    ref_g = (1.0 / (1.0 + np.exp(-zz)) - labels) / n
    got = float(np.asarray(loss))
    if not math.isfinite(got):
        return CheckResult(name, False, _nonfinite_bce(bce, got))
    if not math.isclose(got, ref, rel_tol=1e-4):
        swapped_signs = (float(np.mean(labels * np.logaddexp(0.0, zz) + (1 - labels) * np.logaddexp(0.0, -zz))),
                         float(np.mean(np.logaddexp(0.0, -zz) - labels * zz)),
                         float(np.mean(np.logaddexp(0.0, zz) + labels * zz)))
        as_probs = float(keras.losses.binary_crossentropy(labels, logits))  # the logits read as probabilities
        if math.isclose(got, as_probs, rel_tol=1e-4):
            hint = _("that is the cross-entropy of the logits read as probabilities: a Keras loss takes "
                     "probabilities unless from_logits=True. Pass from_logits=True, or write it with softplus")
        elif math.isclose(got, ref / 2, rel_tol=1e-4):
            hint = _("half the true loss: a factor 1/2 (or a mean over 2 × the batch), where the task asks for "
                     "the plain mean over the batch")
        elif math.isclose(got, ref * n, rel_tol=1e-4):
            hint = _("{n}× too large, the batch size. A sum where the mean was wanted (tf.reduce_mean)").format(n=n)
        elif math.isclose(got, float(np.mean(np.logaddexp(0.0, labels) - zz * labels)), rel_tol=1e-4):
            hint = _("labels and logits are swapped. The arguments are (labels, logits)")
        elif any(math.isclose(got, v, rel_tol=1e-4) for v in swapped_signs):
            hint = _("the signs inside softplus are swapped. -log σ(z) = softplus(-z) is the loss of a positive "
                     "label (y = 1), -log(1 - σ(z)) = softplus(z) that of a negative one: the loss is "
                     "y·softplus(-z) + (1 - y)·softplus(z) = softplus(z) - y·z")
        elif got < ref:
            hint = _("smaller than the true loss, as when the probabilities are clipped (or a small epsilon added) "
                     "before the log, or the logits clipped, which caps each example's loss. Use softplus on the "
                     "logits as they are, which is exact")
        else:
            hint = _("compare your formula with y·softplus(-z) + (1 - y)·softplus(z), averaged over the batch")
        return CheckResult(name, False, _("the loss is {got}, expected {want}: {hint}").format(
            got=f"{got:.6g}", want=f"{ref:.6g}", hint=hint))
    if g is None:
        return CheckResult(name, False, _("the loss is right, but its gradient is None: {cause}").format(
            cause=_cut_text()))
    g = g.numpy()
    if not np.all(np.isfinite(g)):
        return CheckResult(name, False, _("the loss is right, but its gradient holds NaN or inf: {got}").format(got=g))
    if not np.allclose(g, ref_g, atol=1e-6):
        without_softplus = -labels / n  # the gradient of -y·z alone: softplus's part was cut
        hint = ""
        if np.allclose(g, without_softplus, atol=1e-6):
            hint = " " + _("That is the gradient of -y·z alone: the softplus term contributes nothing, so it is "
                           "cut from the tape ({cause}).").format(cause=_cut_text())
        text = _("the loss is right, but the gradient is {got}, expected {want}.").format(
            got=np.array2string(g, precision=4), want=np.array2string(ref_g, precision=4))
        return CheckResult(name, False, join_sentences(text, hint))
    return CheckResult(name, True, _("loss {value} and its gradient match, even at logits ±200").format(
        value=f"{got:.4g}"))
