"""Self-checks for chapter 05's exercises (residual connections, normalization, mixed precision).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_deep_fix`, settings that make the 100-layer residual ReLU network
  with He initialization trainable again (finite and healthy) while keeping the skip;
* exercise 2: :func:`check_loss_scale`, the smallest power-of-two loss scale that leaves no
  layer of exact float16 zeros in the 14-layer sigmoid network;
* exercise 3: :func:`check_scaled_step`, a custom Keras 3 training step under
  ``mixed_float16`` that scales the loss with ``LossScaleOptimizer.scale_loss``.

Every check returns a :class:`~gradlab.checks.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._env import quiet_import_tensorflow
from ..checks import CheckResult

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["EX1_BASE", "check_deep_fix", "check_loss_scale", "check_scaled_step", "smallest_loss_scale"]

_ENGINE = None


def _engine():
    global _ENGINE
    if _ENGINE is None:
        from ..engine import MLPGradientEngine

        _ENGINE = MLPGradientEngine()
    return _ENGINE


# ----------------------------------------------------------------------------- exercise 1
#: Exercise 1's network: what the learner starts from.
EX1_BASE = dict(depth=100, activation="relu", initializer="he_normal", residual=True, norm="none")
_EX1_KEYS = {"norm", "initializer", "activation"}


def check_deep_fix(my_fix) -> CheckResult:
    """Exercise 1: ``my_fix`` is a dict of changes to :data:`EX1_BASE` (``norm``, ``initializer``,
    ``activation``) that keeps ``residual=True`` and depth 100 and makes the report finite and healthy."""
    name = "a trainable 100-layer residual network"
    if not isinstance(my_fix, dict):
        return CheckResult(name, False, f"expected a dict such as {{'norm': ...}}, got {type(my_fix).__name__}")
    if my_fix.get("residual", True) is not True or my_fix.get("depth", 100) != 100:
        return CheckResult(name, False, (
            "keep the skip connection and the 100 layers: the exercise asks how to make a deep "
            "residual network work, not how to avoid one"))
    unknown = set(my_fix) - _EX1_KEYS - {"residual", "depth"}
    if unknown:
        return CheckResult(name, False, f"unknown key(s) {sorted(unknown)}; change only {sorted(_EX1_KEYS)}")
    s = {**EX1_BASE, **my_fix}
    try:
        r = _engine().report(s["depth"], s["activation"], s["initializer"], residual=True, norm=s["norm"])
    except ValueError as err:
        return CheckResult(name, False, str(err))
    if r.status == "non-finite":
        hint = (" Without normalization every block adds its own variance to h: it doubles or "
                "more per block, and the squares in the loss and the backward pass overflow float32 "
                "by about layer 85. What keeps the input of each activation at unit scale?" if s["norm"] == "none" else "")
        return CheckResult(name, False, f"still non-finite: {r.message}{hint}", details=r)
    if r.status != "healthy":
        return CheckResult(name, False, f"finite now, but {r.status}: {r.message}", details=r)
    return CheckResult(name, True, f"healthy: signal ratio {r.ratio:.3g}, gain {r.gain:.3g} per layer",
                       details=r)


# ----------------------------------------------------------------------------- exercise 2
def _zero_layers(scale: float) -> int:
    r = _engine().report(14, "sigmoid", "glorot_uniform", dtype="float16", loss_scale=scale)
    if not np.all(np.isfinite(r.signal_norms)):
        return -1
    return int(np.sum(r.signal_norms == 0))


def smallest_loss_scale() -> float:
    """The answer to exercise 2, by a sweep over 2^0 ... 2^24."""
    for k in range(25):
        if _zero_layers(2.0**k) == 0:
            return 2.0**k
    raise RuntimeError("no power of two up to 2^24 removes the zeros")


def check_loss_scale(my_scale) -> CheckResult:
    """Exercise 2: the smallest power of two for which no layer's float16 signal is exactly 0."""
    name = "the smallest loss scale without float16 zeros"
    if isinstance(my_scale, bool) or not isinstance(my_scale, numbers.Real):
        return CheckResult(name, False, f"expected a number such as 2**10, got {my_scale!r}")
    v = float(my_scale)
    if not (math.isfinite(v) and v >= 1):
        return CheckResult(name, False, f"got {my_scale!r}: a loss scale is a number >= 1 (1 = off)")
    k = math.log2(v)
    if k != int(k):
        return CheckResult(name, False, f"{my_scale!r} is not a power of two: use 2**k, as "
                                        "LossScaleOptimizer does (then scaling is exact in binary)")
    zeros = _zero_layers(v)
    best = smallest_loss_scale()
    if zeros < 0:
        return CheckResult(name, False, f"2^{k:g} overflows: float16's largest value is 65504, and the "
                                        "scaled gradients of the last layers pass it. Smaller.")
    if zeros > 0:
        return CheckResult(name, False, f"with 2^{k:g}, {zeros} layer(s) are still exactly 0: larger")
    if v > best:
        return CheckResult(name, False, f"2^{k:g} works, but a smaller power of two does too: "
                                        "halve it until a layer turns 0")
    return CheckResult(name, True, f"2^{k:g} is the smallest: with 2^{k - 1:g} a layer is exactly 0")


# ----------------------------------------------------------------------------- exercise 3
def _ex3_setup():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        from ..mlp import build_mlp, make_data

        model = build_mlp(14, activation="sigmoid", initializer="glorot_uniform")
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        x, y = make_data(128, 64, 0)
        return model, optimizer, x, y
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _reference_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.cast(model(x, training=True), tf.float32) - y))
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
    return loss


def _spy(optimizer, seen: list):
    """Record the layer-1 kernel gradient the step passes to ``apply_gradients`` / ``apply``."""
    from ..grads import true_norm

    for name in ("apply_gradients", "apply"):
        original = getattr(optimizer, name)

        def wrapper(*args, _original=original, _name=name, **kw):
            pairs = list(args[0]) if args else list(kw.get("grads_and_vars", kw.get("grads", [])))
            if pairs:
                first = pairs[0][0] if _name == "apply_gradients" else pairs[0]
                seen.append(true_norm(first) if first is not None else 0.0)
                args = (pairs, *args[1:]) if args else args
                if not args:
                    kw = {**kw, ("grads_and_vars" if "grads_and_vars" in kw else "grads"): pairs}
            return _original(*args, **kw)

        setattr(optimizer, name, wrapper)


def check_scaled_step(train_step) -> CheckResult:
    """Exercise 3: ``train_step(model, optimizer, x, y)`` takes one loss-scaled SGD step.

    Run on a ``mixed_float16`` 14-layer sigmoid network with ``LossScaleOptimizer(SGD(0.1))``:
    the layer-1 kernel gradient handed to ``apply_gradients`` must be the scaled one of the
    reference step (without scaling its float16 signal underflows to 0)."""
    name = "a loss-scaled training step"
    if not callable(train_step):
        return CheckResult(name, False, f"expected a function train_step(model, optimizer, x, y), got "
                                        f"{type(train_step).__name__}")
    norms = []
    for step in (train_step, _reference_step):
        model, optimizer, x, y = _ex3_setup()
        seen: list = []
        _spy(optimizer, seen)
        try:
            step(model, optimizer, x, y)
        except Exception as err:  # noqa: BLE001 - a learner's code may raise anything
            hint = ""
            if "get_scaled_loss" in str(err) or "get_unscaled" in str(err):
                hint = (" get_scaled_loss/get_unscaled_gradients are TF 2 (Keras 2) names; Keras 3 "
                        "has optimizer.scale_loss(loss), and apply_gradients unscales")
            return CheckResult(name, False, f"train_step raised {type(err).__name__}: {err}.{hint}")
        if not seen:
            return CheckResult(name, False, "train_step never called optimizer.apply_gradients: "
                                            "apply the gradients to take the step")
        norms.append(seen[0])
    got, ref = norms
    if got == 0:
        return CheckResult(name, False, (
            "the layer-1 gradient is exactly 0: its float16 signal underflowed. Scale the loss "
            "inside the tape with optimizer.scale_loss(loss) and differentiate the scaled loss"))
    ratio = got / ref
    if abs(math.log2(ratio)) > 0.1:
        return CheckResult(name, False, (
            f"the layer-1 gradient you apply is {ratio:.3g}× the expected one. Pass the scaled "
            "gradients: apply_gradients already divides by the scale, so do not unscale them "
            "yourself (or scale the loss twice)"))
    return CheckResult(name, True, f"the layer-1 gradient reaches the optimizer ({got:.3g}, scaled by 2^15)")
