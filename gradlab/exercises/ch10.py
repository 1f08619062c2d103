"""Self-checks for chapter 10's exercises (check, bend and budget gradients).

* exercise 1: :func:`check_central_difference`, ``(f(x + h) - f(x - h)) / (2h)``;
* exercise 2: :func:`check_cube_gradient`, a ``tf.custom_gradient`` for ``x³`` that
  :func:`gradlab.check_gradient` accepts;
* exercise 3: :func:`check_clip_per_example`, each example's gradient clipped to a global
  norm, as DP-SGD clips (not the batch's, not each variable's);
* exercise 4: :func:`check_gradient_penalty`, the WGAN-GP penalty with a gradient that
  reaches the critic's weights;
* exercise 5: :func:`check_accumulate`, the mean of k micro-batch gradients, equal to the
  gradient of the whole batch.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, end_sentence, join_sentences
from ..topics.gradcheck import check_gradient
from .compare import check_array, check_arrays
from .feedback import CheckResult, call_answer, clean_message

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "check_accumulate",
    "check_central_difference",
    "check_clip_per_example",
    "check_cube_gradient",
    "check_gradient_penalty",
    "clip_reference",
    "critic_and_batch",
    "penalty_reference",
    "per_example_batch",
    "regression_model_and_batch",
]


def _glorot(seed: int):
    return keras.initializers.GlorotUniform(seed=seed)


def _tensor_or_feedback(name: str, value, what: str, *, number: bool = False):
    if value is None:
        return None, CheckResult(name, False, _("{what} returned None: did you forget the return statement?").format(
            what=what))
    if isinstance(value, (str, bytes)):
        text = (_("{what} returned a {kind}: return a number") if number else
                _("{what} returned a {kind}: return a tensor"))
        return None, CheckResult(name, False, text.format(what=what, kind=type(value).__name__))
    return value, None


# ----------------------------------------------------------------------------- exercise 1
def check_central_difference(central_difference: Callable) -> CheckResult:
    """Exercise 1: ``central_difference(f, x, h)`` is ``(f(x + h) - f(x - h)) / (2h)``."""
    name = _("central difference")

    def cube(t):
        return t ** 3

    cases = [(cube, 2.0, 1e-3, 3 * 2.0 ** 2), (cube, 2.0, 0.1, 3 * 2.0 ** 2), (np.sin, 1.0, 1e-4, np.cos(1.0))]
    for f, x, h, exact in cases:
        got, problem = call_answer(name, central_difference, f, x, h, what="central_difference")
        if problem is not None:
            return problem
        got, problem = _tensor_or_feedback(name, got, "central_difference", number=True)
        if problem is not None:
            return problem
        expected = (f(x + h) - f(x - h)) / (2 * h)
        forward = (f(x + h) - f(x)) / h
        hints = [(forward, _("that is the forward difference (f(x + h) - f(x)) / h, whose error falls only as h; "
                             "step to both sides")),
                 (2 * expected, _("twice the expected value: divide by 2h, the distance between x - h and x + h")),
                 (expected / 2, _("half the expected value: divide by 2h, the distance between x - h and x + h, "
                                  "not by 4h")),
                 (expected * h * h, _("that is the central difference times h²: `/ 2 * h` divides by 2 and then "
                                      "multiplies by h (Python reads it left to right); write `/ (2 * h)`")),
                 (expected * 4, _("that divides by h / 2: write `/ (2 * h)`")),
                 (expected * h, _("divide the difference by the step")),
                 ((f(x) - f(x - h)) / h, _("that is the backward difference (f(x) - f(x - h)) / h, whose error falls "
                                           "only as h; step to both sides")),
                 ((f(x + h / 2) - f(x - h / 2)) / h, _(
                     "that is (f(x + h/2) - f(x - h/2)) / h, the central difference over a total width h: a right "
                     "formula, with a quarter of the error, but not this exercise's, where h is the step to each "
                     "side: evaluate f at x + h and x - h and divide by 2h"))]
        if f is not cube:
            hints.append((((x + h) ** 3 - (x - h) ** 3) / (2 * h), _(
                "that is the central difference of x³, not of the f passed in: call f(x + h) and f(x - h)")))
        fixed = [other for other in sorted({c[2] for c in cases} - {h})
                 if not np.isclose((f(x + other) - f(x - other)) / (2 * other), expected, rtol=1e-9, atol=1e-12)]
        for other in fixed:
            value = (f(x + other) - f(x - other)) / (2 * other)
            hints.append((lambda a, v=value: bool(np.allclose(a, v, rtol=1e-10, atol=1e-12)), _(
                "that is the central difference with h = {other}, not with the h passed in ({h}): is the step "
                "typed in?").format(other=f"{other:g}", h=f"{h:g}")))
        if getattr(getattr(got, "dtype", None), "name", "") not in ("float16", "bfloat16", "float32"):
            # a float32 answer is close to everything near the slope: only a float64 one can be the exact one
            hints.append((lambda a, v=exact: bool(np.allclose(a, v, rtol=1e-9, atol=1e-12)), _("that is the exact derivative: the check wants the central difference, which "
                                   "differs from it by its truncation error h²·f‴(x)/6")))
        result = check_array(name, got, expected, rtol=1e-9, atol=1e-12, hints=hints)
        if not result:
            return CheckResult(name, False, _("for f = {f}, x = {x}, h = {h}: {feedback}").format(
                f=getattr(f, "__name__", "f"), x=x, h=h, feedback=result.feedback))
    return CheckResult(name, True, _("(f(x + h) - f(x - h)) / 2h for three functions and steps; for x³ at 2 with "
                                     "h = 0.1 it gives 12.01, the exact 12 plus the truncation error h² = 0.01"))


# ----------------------------------------------------------------------------- exercise 2
def check_cube_gradient(cube: Callable) -> CheckResult:
    """Exercise 2: ``cube(x) = x**3`` whose gradient :func:`gradlab.check_gradient` accepts."""
    name = _("custom gradient of x³")
    x = tf.constant([-1.5, 0.5, 2.0], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, problem = call_answer(name, cube, x, what="cube")
    if problem is not None:
        return problem
    out, problem = _tensor_or_feedback(name, out, "cube")
    if problem is not None:
        return problem
    forward = check_array(name, out, x.numpy() ** 3, rtol=1e-12, atol=1e-12)
    if not forward:
        return CheckResult(name, False, _("the forward pass must stay x³: {feedback}").format(
            feedback=forward.feedback))
    try:
        disconnected = not tf.is_tensor(out) or tape.gradient(out, x) is None
    except Exception:  # noqa: BLE001 - a backward pass that raises: check_gradient reports it below
        disconnected = False
    if disconnected:
        return CheckResult(name, False, _(
            "the forward pass gives x³, but the tape sees no path from x to it: it left TensorFlow (NumPy, "
            ".numpy(), float() or tf.constant of a NumPy value), so no gradient reaches x. The backward pass is not "
            "the problem: keep the forward pass in TensorFlow ops (x ** 3) inside @tf.custom_gradient"))
    try:
        result = check_gradient(cube, x)
    except Exception as err:  # noqa: BLE001 - the learner's grad function failed
        return CheckResult(name, False, _("the gradient check could not run cube's backward pass: {error}").format(
            error=f"{type(err).__name__}: {str(err).strip().splitlines()[0][:160]}"))
    if not result.ok:
        w = result.worst
        hint = ""
        if w is not None and abs(w.numerical) > 0 and abs(w.theoretical / w.numerical - 1 / x.numpy()[w.input[0]]) < 1e-6:
            hint = _("The backward pass returns 3x·dy: the derivative of x³ is 3x².")
        elif _ignores_dy(cube, x):
            hint = _("The backward pass ignores dy: doubling the incoming gradient leaves its result unchanged. "
                     "grad must return the local derivative times dy, 3x² · dy (the chain rule)")
        text = _("check_gradient says the backward pass is wrong: at {entry} the tape gives {tape}, finite "
                 "differences {fd}.").format(entry=w.label if w else "?", tape=f"{w.theoretical:.6g}" if w else "?",
                                             fd=f"{w.numerical:.6g}" if w else "?")
        return CheckResult(name, False, join_sentences(text, hint))
    graph = _graph_problem(cube, x)
    if graph:
        return CheckResult(name, False, graph)
    return CheckResult(name, True, _("check_gradient accepts it: largest error {err} of the largest entry").format(
        err="< 1e-9" if result.max_rel_error < 1e-9 else f"{result.max_rel_error:.1g}"))


def _ignores_dy(cube: Callable, x) -> bool:
    """Whether ``cube``'s backward pass gives the same result for dy and 2·dy (it never multiplies by dy)."""
    try:
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            out = cube(x)
        once = tape.gradient(out, x, output_gradients=tf.ones_like(out))
        twice = tape.gradient(out, x, output_gradients=2 * tf.ones_like(out))
    except Exception:  # noqa: BLE001 - a backward pass that raises is reported by the caller
        return False
    return once is not None and twice is not None and bool(np.any(once.numpy())) and bool(
        np.allclose(once.numpy(), twice.numpy()))


def _graph_problem(cube: Callable, x) -> str:
    """Feedback when ``cube``'s gradient is right eagerly but fails inside tf.function (as in fit)."""
    def run(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            out = cube(t)
        return tape.gradient(out, t)

    try:
        graph = tf.function(cube, autograph=False).get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
    except Exception as err:  # noqa: BLE001 - a forward pass that needs eager values
        return _("check_gradient (eager) accepts it, but inside tf.function, as in fit, the forward pass raises "
                 "{error}: it leaves TensorFlow (.numpy(), NumPy). Keep the forward pass in TensorFlow ops, "
                 "x ** 3").format(error=f"{type(err).__name__}: {clean_message(err, 120)}")
    kinds = {op.type for op in graph.get_operations()}
    if not kinds & {"IdentityN", "PartitionedCall", "StatefulPartitionedCall"}:
        return _("the gradient is right, but cube is no longer a custom gradient: TensorFlow differentiated x ** 3 "
                 "itself. Keep @tf.custom_gradient and repair grad: return the derivative 3x² times dy")
    try:
        g = tf.function(run, autograph=False)(x)
    except Exception as err:  # noqa: BLE001 - a backward pass that needs eager values
        return _("check_gradient (eager) accepts it, but inside tf.function, as in fit, it raises {error}: the "
                 "backward pass leaves TensorFlow (.numpy(), NumPy). Write grad with TensorFlow ops, "
                 "3 * x**2 * dy").format(error=f"{type(err).__name__}: {clean_message(err, 120)}")
    if g is None or not np.allclose(np.asarray(g), 3 * x.numpy() ** 2, rtol=1e-9):
        return _("check_gradient (eager) accepts it, but inside tf.function the gradient differs: keep the "
                 "backward pass in TensorFlow ops")
    return ""


# ----------------------------------------------------------------------------- exercise 3
def per_example_batch() -> list:
    """Exercise 3's per-example gradients: two variables, a batch of 4, one example far larger."""
    rng = np.random.default_rng(10)
    kernel = rng.normal(size=(4, 3, 2)) * np.array([1.0, 0.2, 5.0, 0.5])[:, None, None]
    bias = rng.normal(size=(4, 2)) * np.array([1.0, 0.2, 5.0, 0.5])[:, None]
    return [tf.constant(kernel, tf.float32), tf.constant(bias, tf.float32)]


def clip_reference(grads, c: float) -> list[np.ndarray]:
    """Exercise 3's answer in NumPy float64: each example scaled by ``min(1, c / its norm)``."""
    arrays = [np.asarray(g, dtype=np.float64) for g in grads]
    n = arrays[0].shape[0]
    norms = np.sqrt(sum(np.sum(a.reshape(n, -1) ** 2, axis=1) for a in arrays))
    scale = np.minimum(1.0, c / np.maximum(norms, 1e-300))
    return [a * scale.reshape((n,) + (1,) * (a.ndim - 1)) for a in arrays]


def _rescaled(arrays, c: float) -> list[np.ndarray]:
    """Every example scaled to norm ``c`` exactly (a wrong answer: clipping only shortens)."""
    n = arrays[0].shape[0]
    norms = np.sqrt(sum(np.sum(a.reshape(n, -1) ** 2, axis=1) for a in arrays))
    return [a * (c / norms).reshape((n,) + (1,) * (a.ndim - 1)) for a in arrays]


def check_clip_per_example(clip_per_example: Callable, clip_norm: float = 1.0) -> CheckResult:
    """Exercise 3: each example's gradient (over all variables together) scaled to norm <= ``clip_norm``.

    Tried with ``clip_norm`` and with 3 × ``clip_norm``, so an answer that ignores its argument fails.
    """
    name = _("per-example clipping")
    result = _check_clip_once(name, clip_per_example, clip_norm)
    if not result:
        return result
    again = _check_clip_once(name, clip_per_example, 3 * clip_norm)
    if not again:
        return CheckResult(name, False, _("right for clip_norm = {c}, but with clip_norm = {c3}: {feedback}").format(
            c=f"{clip_norm:g}", c3=f"{3 * clip_norm:g}", feedback=again.feedback))
    return result


def _check_clip_once(name: str, clip_per_example: Callable, clip_norm: float) -> CheckResult:
    grads = per_example_batch()
    got, problem = call_answer(name, clip_per_example, list(grads), clip_norm, what="clip_per_example")
    if problem is not None:
        return problem
    expected = clip_reference(grads, clip_norm)
    arrays = [np.asarray(g, dtype=np.float64) for g in grads]
    batch_clipped = [np.asarray(g) for g in tf.clip_by_global_norm([tf.cast(a, tf.float64) for a in arrays],
                                                                   clip_norm)[0]]
    per_variable = [np.stack([np.asarray(tf.clip_by_norm(tf.constant(a[i]), clip_norm)) for i in range(a.shape[0])])
                    for a in arrays]
    hints = [(batch_clipped, _("that clips the whole batch to one global norm (tf.clip_by_global_norm): DP-SGD "
                               "clips each example, over all of its variables together")),
             (per_variable, _("that clips each variable of each example separately: an example's norm is taken "
                              "over all of its variables together")),
             (arrays, _("nothing was clipped: example 2's norm is far above the bound")),
             ([np.clip(a, -clip_norm, clip_norm) for a in arrays],
              _("that clips each element to ±clip_norm (tf.clip_by_value): a bound on the values, not on the norm. "
                "Scale each example's whole gradient by min(1, clip_norm / norm)")),
             (_rescaled(arrays, clip_norm), _("every example was rescaled to norm clip_norm, the short ones "
                                              "lengthened too: scale by min(1, clip_norm / norm), which only "
                                              "shortens"))]
    if isinstance(got, tuple) and len(got) == 2 and not hasattr(got[0], "shape"):
        got = got[0]
    return check_arrays(name, got, expected, labels=["kernel", "bias"], what=_("one per variable"), hints=hints,
                        rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- exercise 4
def critic_and_batch():
    """Exercise 4's critic (two tanh layers) and a batch of interpolated inputs.

    Its initializers carry their own seeds, so a check leaves the learner's global seeds alone.
    """
    critic = keras.Sequential([keras.Input((3,)),
                               keras.layers.Dense(8, activation="tanh", kernel_initializer=_glorot(4)),
                               keras.layers.Dense(1, kernel_initializer=_glorot(40))])
    x = tf.random.stateless_normal([6, 3], seed=[4, 4])
    return critic, x


def penalty_reference(critic, x):
    """Exercise 4's answer: the penalty and its gradient for each critic variable (double backprop)."""
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x)
            d = critic(x)
        g = inner.gradient(d, x)
        norm = tf.sqrt(tf.reduce_sum(tf.square(g), axis=1) + 1e-12)
        penalty = tf.reduce_mean(tf.square(norm - 1.0))
    return penalty, outer.gradient(penalty, critic.trainable_variables)


def check_gradient_penalty(gradient_penalty: Callable) -> CheckResult:
    """Exercise 4: ``gradient_penalty(critic, x)``, the mean over the batch of
    ``(||∇ₓ D(x_i)|| - 1)²``, differentiable with respect to the critic's weights."""
    name = _("gradient penalty")
    critic, x = critic_and_batch()
    expected, expected_grads = penalty_reference(critic, x)
    watched: list = []
    stopped: list = []
    with tf.GradientTape() as tape:
        with _watch_calls(watched, stopped):
            got, problem = call_answer(name, gradient_penalty, critic, x, what="gradient_penalty")
        if problem is not None:
            return _penalty_error(name, problem, x, watched, stopped)
        if _penalty_first(got):
            return CheckResult(name, False, _("returned a pair (penalty, gradients), as the chapter's reference does: "
                                              "return only the penalty, a scalar tensor; the check differentiates it "
                                              "with respect to the critic's weights itself"))
        got, problem = _tensor_or_feedback(name, got, "gradient_penalty")
        if problem is not None:
            return problem
    with tf.GradientTape() as t2:
        t2.watch(x)
        d = critic(x)
    g = t2.gradient(d, x).numpy().astype(np.float64)
    whole_batch = (np.linalg.norm(g) - 1.0) ** 2
    no_square = float(np.mean(np.linalg.norm(g, axis=1) - 1.0))
    factor = _penalty_factor(got, float(expected), batch=int(x.shape[0]))
    if factor:
        return CheckResult(name, False, factor)
    value = check_array(name, got, float(expected), rtol=1e-4, atol=1e-6, hints=[
        (whole_batch, _("that takes one norm over the whole batch: take one norm per example (axis=1), then the "
                        "mean of (norm - 1)²")),
        (no_square, _("square (norm - 1) before the mean")),
        (float(np.mean((np.sum(g**2, axis=1) - 1.0) ** 2)), _("that uses the squared norm, the sum of squares "
                                                              "without its square root (tf.norm or tf.sqrt)")),
        (float(np.mean((np.linalg.norm(g, axis=0) - 1.0) ** 2)), _("that takes one norm per input feature "
                                                                   "(axis=0): take one per example, axis=1"))])
    if not value:
        return value
    if not tf.is_tensor(got):
        return CheckResult(name, False, _("the value is right, but it is a {kind}, not a tensor: the tape cannot "
                                          "differentiate it, so the update cannot lower it. Keep the whole penalty in "
                                          "TensorFlow ops, without .numpy(), float() or NumPy.").format(
                                              kind=type(got).__name__))
    try:
        grads = tape.gradient(got, critic.trainable_variables)
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, False, _("the penalty cannot be differentiated: {error}").format(
            error=f"{type(err).__name__}: {str(err).strip().splitlines()[0][:160]}"))
    if all(gr is None for gr in grads):
        return CheckResult(name, False, _("the value is right but its gradient with respect to the critic's weights "
                                          "is None: the penalty left TensorFlow (NumPy, float(), .numpy()) or was "
                                          "computed from a stopped gradient, so the update cannot lower it"))
    # the output layer's bias does not change the input gradient: its gradient is None, for everyone
    variables = critic.trainable_variables
    keep = [i for i, e in enumerate(expected_grads) if e is not None]
    extra = [variables[i].path for i, gr in enumerate(grads)
             if expected_grads[i] is None and gr is not None and np.any(tf.convert_to_tensor(gr).numpy())]
    if extra:
        return CheckResult(name, False, _("the penalty has a gradient for {paths}, which cannot change the input "
                                          "gradient: it is not the gradient of ∇ₓD").format(paths=", ".join(extra)))
    result = check_arrays(name, [grads[i] for i in keep], [expected_grads[i] for i in keep],
                          labels=[variables[i].path for i in keep], what=_("one per variable"), rtol=1e-4, atol=1e-6)
    if not result:
        return result
    return CheckResult(name, True, _("penalty {value} and its gradient for the {n} critic variables it depends on, "
                                     "by double backprop").format(value=f"{float(expected):.4g}", n=len(keep)))


@contextlib.contextmanager
def _watch_calls(watched: list, stopped: list):
    """Record what the learner's code hands to ``GradientTape.watch`` and how often it calls ``tf.stop_gradient``."""
    watch, stop_gradient = tf.GradientTape.watch, tf.stop_gradient

    def watching(self, tensor):
        watched.append(tensor)
        return watch(self, tensor)

    def stopping(*args, **kwargs):
        stopped.append(1)
        return stop_gradient(*args, **kwargs)

    tf.GradientTape.watch, tf.stop_gradient = watching, stopping
    try:
        yield
    finally:
        tf.GradientTape.watch, tf.stop_gradient = watch, stop_gradient


def _is_none_value(feedback: str) -> bool:
    """Whether an error is about a None value (not Keras's ``(None, 3)`` shapes or ``name 'None'``)."""
    return "NoneType" in feedback or "value (None)" in feedback


def _penalty_error(name: str, problem: CheckResult, x, watched: list, stopped: list) -> CheckResult:
    """Exercise 4: the cause of an error, when it is the inner tape's None gradient."""
    if not _is_none_value(problem.feedback):
        return problem
    if stopped:
        cause = _("A None here is the inner tape's gradient, and the path from D to x is cut: tf.stop_gradient "
                  "hands the critic a copy of x that the tape does not follow back to x, even though x is watched. "
                  "Call the critic on x itself.")
    elif any(w is x for w in watched):
        cause = _("A None here is usually the inner tape's gradient. x is watched, so the critic's output does not "
                  "reach x through TensorFlow ops: call the critic on x itself, not on a NumPy copy or another "
                  "tensor.")
    else:
        cause = _("A None here is usually the inner tape's gradient: x is a tensor, not a variable, so the inner "
                  "tape follows it only after inner.watch(x), inside its `with` block, before the critic is "
                  "called.")
    return CheckResult(name, False, join_sentences(end_sentence(problem.feedback), cause))


def _penalty_first(got) -> bool:
    """Whether ``got`` is a tuple or list of two whose first item is one number (a penalty and what else)."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    try:
        return np.size(np.asarray(got[0].numpy() if hasattr(got[0], "numpy") else got[0], dtype=np.float64)) == 1
    except (TypeError, ValueError):
        return False


def _penalty_factor(got, expected: float, *, batch: int) -> str:
    """What a penalty that is a constant multiple of the right one says: the batch size or a λ."""
    try:
        value = float(np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64).reshape(()))
    except Exception:  # noqa: BLE001 - not one number: check_array says what it is
        return ""
    if not expected or not np.isfinite(value) or np.isclose(value, expected, rtol=1e-4, atol=1e-6):
        return ""
    r = value / expected
    if abs(r - batch) < 1e-3 * batch:
        return _("values differ: got {got}, {r}× the expected {want}, the batch size: a sum over the examples "
                 "where their mean was wanted (tf.reduce_mean)").format(got=f"{value:.4g}", r=batch,
                                                                      want=f"{expected:.4g}")
    if r > 1.5 and abs(r - float(f"{r:.2g}")) < 1e-4 * r:  # a round weight: 2, 5, 10, 100
        return _("values differ: got {got}, {r}× the expected {want}: the weight λ multiplied in? Return the "
                 "penalty itself; λ belongs in the critic's loss (loss + λ · penalty)").format(
                     got=f"{value:.4g}", r=f"{r:g}", want=f"{expected:.4g}")
    return ""


# ----------------------------------------------------------------------------- exercise 5
def regression_model_and_batch():
    """Exercise 5's model (no BatchNorm) and a batch of 12 examples (seeded initializers, as in exercise 4)."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6, activation="tanh", kernel_initializer=_glorot(5)),
                              keras.layers.Dense(1, kernel_initializer=_glorot(50))])
    x = tf.random.stateless_normal([12, 4], seed=[5, 1])
    y = tf.random.stateless_normal([12, 1], seed=[5, 2])
    return model, x, y


@contextlib.contextmanager
def _count_gradient_calls(calls: list):
    """Count the calls of ``tf.GradientTape.gradient`` while the learner's function runs."""
    original = tf.GradientTape.gradient

    def watched(self, *args, **kwargs):
        calls.append(self)  # the tape itself (kept: an id could be reused): one read k times held them all
        return original(self, *args, **kwargs)

    tf.GradientTape.gradient = watched
    try:
        yield
    finally:
        tf.GradientTape.gradient = original


class _RecordedModel:
    """The exercise's model, handed to the learner with a record of the batch size of each call.

    Everything else (``trainable_variables``, ``predict``, ...) is the model's own; a call inside
    a ``tf.function`` records the static batch size of its trace.
    """

    def __init__(self, model):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "batch_sizes", [])

    def __call__(self, inputs, *args, **kwargs):
        shape = getattr(inputs, "shape", None)
        self.batch_sizes.append(shape[0] if shape is not None and len(shape) else None)
        return self._model(inputs, *args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._model, attr)

    def __setattr__(self, attr, value):
        setattr(self._model, attr, value)


def check_accumulate(accumulate: Callable, k: int = 3) -> CheckResult:
    """Exercise 5: ``accumulate(model, x, y, k)`` returns the mean of the gradients of the mean
    squared error over ``k`` equal micro-batches, one per trainable variable.

    Tried with ``k`` and with another number of micro-batches (4, or 2 when ``k`` is 4), so an
    answer that types in 3 or a micro-batch size of 4 fails. The model the learner gets records
    the batch size of every call: an answer that runs the whole batch at once gets the same
    numbers, and fails.
    """
    result = _check_accumulate_once(accumulate, k)
    if not result:
        return result
    other = 4 if k != 4 else 2
    again = _check_accumulate_once(accumulate, other)
    if not again:
        return CheckResult(result.name, False, _("right for k = {k}, but with k = {other}: {feedback}").format(
            k=k, other=other, feedback=again.feedback))
    return result


def _check_accumulate_once(accumulate: Callable, k: int) -> CheckResult:
    name = _("gradient accumulation")
    model, x, y = regression_model_and_batch()
    n = int(x.shape[0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
    expected = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    recorded = _RecordedModel(model)
    gradient_calls: list = []
    with _count_gradient_calls(gradient_calls):
        got, problem = call_answer(name, accumulate, recorded, x, y, k, what="accumulate")
    if problem is not None:
        return problem
    if (isinstance(got, (list, tuple)) and len(got) == k and len(expected) != k
            and all(isinstance(item, (list, tuple)) and len(item) == len(expected) for item in got)):
        return CheckResult(name, False, _(
            "got {k} lists of {n} gradients, one per micro-batch: return their mean, one tensor per variable "
            "(add them variable by variable and divide by k)").format(k=k, n=len(expected)))
    hints = [([g * k for g in expected], _("k times too large: divide the sum of the micro-batch gradients by k"))]
    result = check_arrays(name, got, expected, labels=[v.path for v in model.trainable_variables],
                          what=_("one per variable"), hints=hints, rtol=1e-4, atol=1e-6)
    if not result:
        return result
    whole = [b for b in recorded.batch_sizes if b is not None and b >= n]
    if whole:
        return CheckResult(name, False, _(
            "the gradients are right, but the model was called on the whole batch of {n} at once: that is one "
            "ordinary step, not accumulation, and it needs the memory accumulation saves. Split x and y into k = {k} "
            "micro-batches of {m} (tf.split), take each one's gradient and average them").format(n=n, k=k, m=n // k))
    sizes = [b for b in recorded.batch_sizes if b is not None]
    if len(sizes) == k and 0 < len(gradient_calls) < k:
        return CheckResult(name, False, _(
            "the gradients are right and the model ran on {k} micro-batches, but tape.gradient ran {calls} times for "
            "the {k} of them: one tape around every micro-batch keeps all their activations, so it needs the memory "
            "of the whole batch. Open one tape per micro-batch and take each one's gradient inside the loop").format(
                k=k, calls=len(gradient_calls)))
    tapes = len({id(tape) for tape in gradient_calls})
    if len(sizes) == k and len(gradient_calls) >= k and tapes < k:
        return CheckResult(name, False, _(
            "the gradients are right, but {calls} tape.gradient calls read {tapes} tape(s) for the {k} micro-batches: "
            "a persistent tape around the loop records every micro-batch and keeps all their activations until it "
            "is deleted, the memory of the whole batch. Open a new tape for each micro-batch, inside the "
            "loop").format(calls=len(gradient_calls), tapes=tapes, k=k))
    if sizes and any(b != n // k for b in sizes):
        return CheckResult(name, False, _(
            "the gradients are right, but the model was called on batches of {sizes}, not on k = {k} "
            "micro-batches of {m}: split into the k passed in (tf.split(x, k)), not into a number typed "
            "in").format(k=k, sizes=sorted(set(int(b) for b in sizes)), m=n // k))
    return CheckResult(name, True, _("the mean of {k} micro-batch gradients equals the gradient of the whole batch "
                                     "of {n}").format(k=k, n=n))
