"""Self-checks for chapter 05's exercises (residual connections, normalization, mixed precision).

Each exercise cell shows the task and one call:

* exercise 1: :func:`check_deep_fix`, settings that make the 100-layer residual ReLU network
  with He initialization trainable again (finite and healthy) while keeping the skip;
* exercise 2: :func:`check_loss_scale`, the smallest power-of-two loss scale that leaves no
  layer of exact float16 zeros in the 14-layer sigmoid network;
* exercise 3: :func:`check_scaled_step`, a custom Keras 3 training step under
  ``mixed_float16`` that scales the loss with ``LossScaleOptimizer.scale_loss``.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

import math

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from ..core import mean_squared_error
from ..engines.mlp import MLPGradientEngine
from ..i18n import _, join_list, join_sentences
from ..models.mlp import ACTIVATIONS, INITIALIZERS, NORMS, build_mlp, make_data
from ..reports.verdict import status_word
from .answers import as_number_answer
from .feedback import CheckResult, clean_message, describe_error

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["EX1_BASE", "EX3_SCALE", "check_deep_fix", "check_loss_scale", "check_scaled_step",
           "smallest_loss_scale"]

_ENGINE: list = []


def _engine() -> MLPGradientEngine:
    if not _ENGINE:
        _ENGINE.append(MLPGradientEngine())
    return _ENGINE[0]


# ----------------------------------------------------------------------------- exercise 1
#: Exercise 1's network: what the learner starts from.
EX1_BASE = dict(depth=100, activation="relu", initializer="he_normal", residual=True, norm="none")
_EX1_KEYS = ("norm", "initializer", "activation")
#: Other spellings a learner may use for the norms (Keras layer names, short forms).
_NORM_ALIASES = {"layer_norm": "layer", "layernorm": "layer", "layernormalization": "layer", "ln": "layer",
                 "batch_norm": "batch", "batchnorm": "batch", "batchnormalization": "batch", "bn": "batch",
                 "no": "none", "off": "none", "": "none"}


def _choice(key: str, value, allowed) -> tuple[str | None, str | None]:
    """``(value, None)`` with ``value`` spelled as the engine wants it, or ``(None, feedback)``."""
    if value is None and key == "norm":
        value = "none"
    if not isinstance(value, str):
        return None, _("{key} must be a name such as {example!r}, got {kind} {value!r}").format(
            key=key, example=allowed[0], kind=type(value).__name__, value=value)
    spelled = value.strip().lower().replace("-", "_").replace(" ", "_")
    if key == "norm":
        spelled = _NORM_ALIASES.get(spelled.replace("_", ""), _NORM_ALIASES.get(spelled, spelled))
    if spelled not in allowed:
        return None, _("{key}={value!r} is not one of {allowed}").format(
            key=key, value=value, allowed=join_list(map(repr, allowed)))
    return spelled, None


def _not_a_dict(answer) -> str:
    """Feedback for an exercise-1 answer that is not a dict (None, a bare name, a list of pairs)."""
    if answer is None:
        return _("got None: assign a dict of the settings you change, such as {example}").format(
            example="{'norm': 'layer'}")
    if isinstance(answer, str):
        return _("got the string {value!r}: put it in a dict under the setting it belongs to, such as "
                 "{example}").format(value=answer, example=f"{{'norm': {answer!r}}}")
    if isinstance(answer, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in answer):
        return _("got a {kind} of pairs: write it as a dict, such as {example}").format(
            kind=type(answer).__name__, example="{'norm': 'layer'}")
    return _("expected a dict such as {example}, got {kind}").format(example="{'norm': ...}",
                                                                   kind=type(answer).__name__)


def _layer_name(value):
    """A Keras layer class or instance (LayerNormalization) read as the name the engine knows."""
    cls = value if isinstance(value, type) else type(value) if isinstance(value, keras.layers.Layer) else None
    return cls.__name__ if cls is not None else value


def check_deep_fix(my_fix) -> CheckResult:
    """Exercise 1: ``my_fix`` is a dict of changes to :data:`EX1_BASE` (``norm``, ``initializer``,
    ``activation``) that keeps ``residual=True`` and depth 100 and makes the report finite and healthy.

    Names are read leniently (``"LayerNorm"``, ``"layer_norm"`` and ``"layer"`` are one norm).
    Any setting the engine diagnoses as healthy passes; the feedback for a failed one says what
    the residual stack does (every block adds its variance to ``h``), not generic advice.
    """
    name = _("a trainable 100-layer residual network")
    if not isinstance(my_fix, dict):
        return CheckResult(name, False, _not_a_dict(my_fix))
    residual = my_fix.get("residual", True)
    depth = my_fix.get("depth", 100)
    if residual is not True and not (isinstance(residual, (int, np.integer)) and residual == 1):
        residual = False  # 1 is True spelled as a number: it keeps the skip too
    if residual is False or isinstance(depth, bool) or depth != 100:
        return CheckResult(name, False, _(
            "keep the skip connection and the 100 layers: the exercise asks how to make a deep residual "
            "network work, not how to avoid one"))
    unknown = sorted(str(k) for k in set(my_fix) - set(_EX1_KEYS) - {"residual", "depth"})
    if unknown:
        return CheckResult(name, False, _("unknown key(s) {keys}; change only {allowed}").format(
            keys=join_list(map(repr, unknown)), allowed=join_list(map(repr, _EX1_KEYS))))
    if not any(k in my_fix for k in _EX1_KEYS):
        return CheckResult(name, False, _(
            "the dict changes nothing yet: as it stands the network is the non-finite one of the chapter. Set "
            "one of {allowed}").format(allowed=join_list(map(repr, _EX1_KEYS))))
    settings = dict(EX1_BASE)
    for key, allowed in (("norm", tuple(NORMS)), ("initializer", tuple(INITIALIZERS)),
                         ("activation", tuple(ACTIVATIONS))):
        if key in my_fix:
            value, problem = _choice(key, _layer_name(my_fix[key]), allowed)
            if problem:
                return CheckResult(name, False, problem)
            settings[key] = value
    try:
        r = _engine().report(100, settings["activation"], settings["initializer"], residual=True,
                             norm=settings["norm"])
    except ValueError as err:
        return CheckResult(name, False, clean_message(err))
    nums = _("signal ratio {ratio}, gain {gain} per layer").format(ratio=f"{r.ratio:.3g}", gain=f"{r.gain:.3g}")
    if r.status == "non-finite":
        bad = int(np.sum(~np.isfinite(r.signal_norms)))
        text = _("still non-finite: {bad} of 100 layers have a NaN/inf gradient.").format(bad=bad)
        if settings["initializer"] == "he_uniform" and settings["activation"] == "relu":
            text = join_sentences(text, _("he_uniform draws with the same variance as he_normal, 2 / fan_in, so "
                                          "it changes nothing here."))
        if settings["norm"] == "none":
            text = join_sentences(text, _(
                "Without normalization every block adds its own branch to h, so the variance of h grows "
                "block after block and the squares in the loss and the backward pass overflow float32. What "
                "keeps the input of each activation at unit scale, whatever the size of h? (A branch that "
                "starts small works too.)"))
        return CheckResult(name, False, text, details=r)
    if r.status != "healthy" and not np.any(r.signal_norms[:-1]):
        return CheckResult(name, False, _(
            "finite now, but the gradient signal below the output is exactly 0: with initializer={init!r} the "
            "branches pass no signal, so nothing below the output learns. Keep random weights (he_normal for "
            "ReLU) and normalize the input of each block").format(init=settings["initializer"]), details=r)
    if r.status != "healthy":
        text = _("finite now, but the verdict is {status} ({nums}): the gradient changes too much from layer 100 to "
                 "layer 1.").format(status=status_word(r.status), nums=nums)
        if settings["norm"] == "none":
            text = join_sentences(text, _(
                "A smaller initial variance or another activation only slows the growth: without normalization "
                "every block still adds its branch's variance to h. Normalize the input of each block."))
        return CheckResult(name, False, text, details=r)
    return CheckResult(name, True, _("healthy: {nums}").format(nums=nums), details=r)


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
    """Exercise 2: the smallest power of two for which no layer's float16 signal is exactly 0.

    The answer may be any real number form: ``2**10``, ``1024.0``, ``np.float32(1024)``,
    ``tf.constant(1024)``.
    """
    name = _("the smallest loss scale without float16 zeros")
    v, problem = as_number_answer(name, my_scale, _("a loss scale such as 2**10"))
    if problem is not None:
        return problem
    if v < 1:
        return CheckResult(name, False, _("got {value}: a loss scale is a number >= 1 (1 = off)").format(
            value=f"{v:g}"))
    best = smallest_loss_scale()
    if v == math.log2(best):
        return CheckResult(name, False, _("got {value}: that is the exponent k, not the scale. The loss scale is the "
                                          "factor itself, 2**{value} = {scale}").format(
                                              value=f"{v:g}", scale=f"{2.0**v:g}"))
    k = math.log2(v)
    if k != int(k):
        return CheckResult(name, False, _("{value} is not a power of two: use 2**k, as LossScaleOptimizer does "
                                          "(then scaling is exact in binary)").format(value=f"{v:g}"))
    k = int(k)
    zeros = _zero_layers(v)
    if zeros < 0:
        return CheckResult(name, False, _("2^{k} overflows: float16's largest value is 65504, and the scaled "
                                          "gradients of the last layers pass it. Smaller.").format(k=k))
    if zeros > 0:
        return CheckResult(name, False, _("with 2^{k}, {zeros} layer(s) are still exactly 0: larger").format(
            k=k, zeros=zeros))
    if v > best:
        return CheckResult(name, False, _("2^{k} works, but a smaller power of two does too: halve it until a "
                                          "layer turns 0").format(k=k))
    return CheckResult(name, True, _("2^{k} is the smallest: with 2^{k_below} a layer is exactly 0").format(
        k=k, k_below=k - 1))


# ----------------------------------------------------------------------------- exercise 3
#: The loss scale the optimizer holds when exercise 3's check runs the learner's step. It is
#: not Keras's initial 2^15, so a hand-written ``loss * 32768.0`` is told apart from
#: ``optimizer.scale_loss(loss)``; it is large enough that no layer underflows (exercise 2).
EX3_SCALE = 2.0**12


def _ex3_setup(scale: float = EX3_SCALE):
    """A fresh mixed_float16 model, a built ``LossScaleOptimizer(SGD(0.1))`` at ``scale`` and the batch."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(0)
        model = build_mlp(14, activation="sigmoid", initializer="glorot_uniform")
        optimizer = core.loss_scale_optimizer(keras.optimizers.SGD(0.1), initial_scale=scale)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    optimizer.build(model.trainable_variables)  # so that a step inside tf.function creates no variables
    x, y = make_data(128, 64, 0)
    return model, optimizer, x, y


def _reference_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = mean_squared_error(y, model(x, training=True))  # float32 even for a float16 output
        scaled = optimizer.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


def _ex3_batch() -> int:
    """The number of numbers exercise 3's mean squared error averages (batch × outputs)."""
    _x, y = make_data(128, 64, 0)
    return int(np.prod(y.shape))


class _Spy:
    """Records what a step hands to ``optimizer.apply`` and ``scale_loss``, eagerly or in a graph.

    The gradients are copied into variables (an assignment works inside ``tf.function``); the
    Python-side notes (calls, dtypes) are taken when the code runs or is traced.
    """

    def __init__(self, model, optimizer):
        self.variables = list(model.trainable_variables)
        self.grads = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False) for v in self.variables]
        self.applied = tf.Variable(0, trainable=False)
        self.scale_inputs: list[str] = []
        self.none: list[int] = []
        self.python_numbers = False
        self.model_calls = 0  # set by _run_step: how often the step called the model it was given
        apply, scale_loss = optimizer.apply, optimizer.scale_loss

        def spy_apply(grads, trainable_variables=None):
            grads = list(grads)
            order = list(trainable_variables) if trainable_variables is not None else self.variables
            for g, v in zip(grads, order, strict=False):
                index = next((i for i, w in enumerate(self.variables) if w is v), None)
                if index is None:
                    continue
                if g is None:
                    self.none.append(index)
                else:
                    self.grads[index].assign(tf.cast(tf.convert_to_tensor(g), tf.float32))
            self.applied.assign_add(1)
            return apply(grads, trainable_variables)

        def spy_scale_loss(loss):
            dtype = getattr(loss, "dtype", None)  # str(tf.float16) is "<dtype: 'float16'>": keep the name
            self.scale_inputs.append(getattr(dtype, "name", str(dtype)) if dtype is not None else type(loss).__name__)
            self.python_numbers |= not hasattr(loss, "dtype")
            return scale_loss(loss)

        optimizer.apply = spy_apply
        optimizer.scale_loss = spy_scale_loss

    def values(self) -> list[np.ndarray]:
        return [g.numpy().astype(np.float64) for g in self.grads]


class _CalledModel:
    """Exercise 3's model as the learner gets it, counting its calls (eagerly, or once per trace).

    Everything else (``trainable_variables``, ``layers``, ...) is the model's own. A step that
    never calls it ran another model, such as a chapter's global ``model``.
    """

    def __init__(self, model):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "calls", 0)

    def __call__(self, *args, **kwargs):
        object.__setattr__(self, "calls", self.calls + 1)
        return self._model(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._model, attr)

    def __setattr__(self, attr, value):
        setattr(self._model, attr, value)


def _run_step(step, scale: float = EX3_SCALE):
    """Run ``step`` on a fresh setup at loss scale ``scale``: ``(spy, optimizer, returned value, error)``.

    ``spy.model_calls`` is how often the step called the model it was given.
    """
    model, optimizer, x, y = _ex3_setup(scale)
    spy = _Spy(model, optimizer)
    given = _CalledModel(model)
    try:
        out = step(given, optimizer, x, y)
    except Exception as err:  # noqa: BLE001 - a learner's code may raise anything
        spy.model_calls = given.calls
        return spy, optimizer, None, err
    spy.model_calls = given.calls
    return spy, optimizer, out, None


def _compiled_references() -> list[list[np.ndarray]]:
    """The reference step's gradients inside ``tf.function`` and with XLA: float16 rounds differently there.

    A learner's step wrapped in ``@tf.function`` (or ``jit_compile=True``) is compared with the same step
    compiled the same way, so the check does not mistake float16 rounding for a wrong loss.
    """
    refs = []
    for jit in (False, True):
        spy, _opt, _out, err = _run_step(tf.function(_reference_step, jit_compile=jit))
        if err is None:
            refs.append(spy.values())
    return refs


def _matches(got: list[np.ndarray], ref: list[np.ndarray]) -> bool:
    return all(np.allclose(g, e, rtol=2e-2, atol=1e-3 * float(np.abs(e).max()) + 1e-12)
               for g, e in zip(got, ref, strict=True))


def _other_model_feedback() -> str:
    return _("your step never called the model passed in (train_step's first argument): it ran another model, "
             "such as the chapter's global `model`. Use the argument: the check hands your step a fresh model and "
             "optimizer")


def _ratio(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """The median of got / ref over the elements where ref is clearly nonzero (NaN if none)."""
    a = np.concatenate([g.ravel() for g in got])
    e = np.concatenate([r.ravel() for r in ref])
    keep = np.abs(e) > 1e-6 * np.abs(e).max()
    return float(np.median(a[keep] / e[keep])) if keep.any() else float("nan")


def _near(r: float, target: float) -> bool:
    return math.isfinite(r) and r > 0 and abs(math.log2(r / target)) < 0.05


def _error_feedback(err: BaseException, spy: _Spy) -> str:
    text = str(err)
    hint = ""
    if "get_scaled_loss" in text or "get_unscaled" in text:
        hint = _("get_scaled_loss and get_unscaled_gradients are TF 2 (Keras 2) names; Keras 3 has "
                 "optimizer.scale_loss(loss), and apply_gradients unscales")
    elif "No gradients provided" in text and spy.scale_inputs:
        hint = _("every gradient is None. Was optimizer.scale_loss(loss) called after the `with` block? "
                 "The tape records only what runs inside it, so the scaled loss must be computed inside the "
                 "tape")
    elif "No gradients provided" in text:
        hint = _("every gradient is None: compute the loss inside the `with tf.GradientTape()` block, from "
                 "model(x)")
    message = _("train_step raised {error}").format(error=describe_error(err)).rstrip(".")
    return message + (". " + hint if hint else "")


#: A second loss scale the check runs a step at when optimizer.scale_loss was not called: a factor
#: typed in (4096.0, ch05.EX3_SCALE) matches the first scale only.
_OTHER_SCALE = 2.0**9


def _fixed_factor(train_step) -> str:
    """Feedback when a step without scale_loss is right at EX3_SCALE only: a hand-written factor."""
    ref_spy, *_rest = _run_step(_reference_step, _OTHER_SCALE)
    spy, _opt, _out, err = _run_step(train_step, _OTHER_SCALE)
    if err is not None or int(spy.applied.numpy()) != 1:
        return ""
    got, ref = spy.values(), ref_spy.values()
    if not all(np.all(np.isfinite(g)) for g in got):
        return ""
    r = _ratio(got, ref)
    if _near(r, 1.0):
        return ""  # the learner's own spelling of the current scale (optimizer.dynamic_scale)
    return _("right at the scale 2^{k}, but with the optimizer's scale at 2^{k2} your gradients are {ratio}× the "
             "expected ones: the loss is multiplied by a fixed number that equals this check's first scale (such as "
             "4096.0 or ch05.EX3_SCALE). The scale is dynamic: use optimizer.scale_loss(loss), which multiplies by "
             "the current one").format(k=int(math.log2(EX3_SCALE)), k2=int(math.log2(_OTHER_SCALE)),
                                       ratio=f"{r:.3g}")


def _scaled_ratio_feedback(r: float, scalings: int, s: str) -> str:
    """Exercise 3: what a gradient ``r`` times the reference's says about the step ("" when r is 1)."""
    if _near(r, 1.0):
        return ""
    if _near(r, 2.0**15 / EX3_SCALE) and not scalings:
        text = _("the gradients are {ratio}× the expected ones: the loss was multiplied by a fixed 32768. The "
                 "scale is dynamic (LossScaleOptimizer halves it after an overflow and doubles it after 2000 "
                 "good steps; it is {scale} in this check), so use optimizer.scale_loss(loss), which "
                 "multiplies by the current scale").format(ratio=f"{r:.3g}", scale=s)
    elif _near(r, 1.0 / EX3_SCALE):
        text = _("the gradients are 1/{scale} of the expected ones: they were divided by the scale before "
                 "apply_gradients, which divides them again. Pass the scaled gradients as they come from the "
                 "tape").format(scale=s)
    elif _near(r, float(_ex3_batch())):
        text = _("the gradients you apply are {ratio}× the expected ones, the batch size: the loss is a sum "
                 "over the examples where the mean was wanted (tf.reduce_mean)").format(ratio=f"{r:.3g}")
    elif _near(r, EX3_SCALE):
        text = _("the gradients are {scale}× the expected ones: the loss is scaled twice").format(scale=s)
    else:
        text = _("the gradients you apply are {ratio}× the expected ones: differentiate "
                 "optimizer.scale_loss(loss), where loss is the mean squared error, and pass the gradients to "
                 "apply_gradients unchanged").format(ratio=f"{r:.3g}")
    return text


def _returned_loss_feedback(out, want: float, s: str) -> str:
    """Exercise 3: what the step returned, if it is neither nothing nor the unscaled loss ("" when fine)."""
    if out is None:
        return ""
    try:
        value = float(np.asarray(out.numpy() if hasattr(out, "numpy") else out))
    except Exception:  # noqa: BLE001 - a tuple, a string, ...
        value = None
    if value is not None and math.isclose(value, want * EX3_SCALE, rel_tol=1e-3):
        return _(
            "the step is right, but it returns the scaled loss ({value}, {scale}× the loss): return the "
            "loss itself, so that what you log is the mean squared error").format(value=f"{value:.4g}", scale=s)
    if value is None or not math.isclose(value, want, rel_tol=1e-3):
        return _(
            "the step is right, but it returns {got}, not the loss ({want}): return the mean squared "
            "error").format(got=clean_message(repr(out), 60), want=f"{want:.4g}")
    return ""


def check_scaled_step(train_step) -> CheckResult:
    """Exercise 3: ``train_step(model, optimizer, x, y)`` takes one loss-scaled SGD step.

    Run on a ``mixed_float16`` 14-layer sigmoid network with ``LossScaleOptimizer(SGD(0.1))``
    whose current scale is :data:`EX3_SCALE`, eagerly or inside ``tf.function`` as the learner
    wrote it. Passes when the gradients handed to ``apply_gradients`` equal those of the
    reference step (the loss scaled inside the tape by ``optimizer.scale_loss``, in float32),
    ``apply_gradients`` was called once, and the returned value is the unscaled loss (or
    nothing). The feedback names the usual mistakes: no scaling (the first layers' gradients
    underflow to 0), ``scale_loss`` outside the tape, scaling twice, a hand-written factor, the
    gradients unscaled by hand, the inner optimizer, a float16 loss, the scaled loss returned.
    """
    name = _("a loss-scaled training step")
    if not callable(train_step):
        return CheckResult(name, False, _("expected a function train_step(model, optimizer, x, y), got {kind}").format(
            kind=type(train_step).__name__))
    ref_spy, ref_opt, ref_loss, _err = _run_step(_reference_step)
    spy, optimizer, out, err = _run_step(train_step)
    if spy.model_calls == 0 and (err is None or any(s in str(err) for s in ("No gradients provided",
                                                                             "Unknown variable"))):
        return CheckResult(name, False, _other_model_feedback())
    if err is not None:
        return CheckResult(name, False, _error_feedback(err, spy))
    applied = int(spy.applied.numpy())
    s = f"2^{int(math.log2(EX3_SCALE))}"
    if applied == 0:
        if int(optimizer.inner_optimizer.iterations.numpy()) > 0:
            return CheckResult(name, False, _(
                "the step went through optimizer.inner_optimizer, which does not unscale: call "
                "optimizer.apply_gradients, which divides the gradients by the scale and skips non-finite steps"))
        return CheckResult(name, False, _("train_step never called optimizer.apply_gradients: apply the gradients "
                                          "to take the step"))
    if applied > 1:
        return CheckResult(name, False, _("optimizer.apply_gradients was called {n} times: one step applies the "
                                          "gradients once").format(n=applied))
    if any(dt.endswith("float16") for dt in spy.scale_inputs) or getattr(out, "dtype", None) == tf.float16:
        return CheckResult(name, False, _(
            "the loss is float16: compute it in float32 (cast the model's output and y to float32 first). A "
            "float16 loss keeps about 3 digits, and scaled by {scale} it overflows float16's 65504 as soon as "
            "the loss passes {limit}").format(scale=s, limit=f"{65504 / EX3_SCALE:.3g}"))
    if spy.none:
        names = join_list(spy.variables[i].path for i in spy.none[:3])
        return CheckResult(name, False, _("the gradients of {names} are None: compute the loss from model(x) inside "
                                          "the tape").format(names=names))
    got, ref = spy.values(), ref_spy.values()
    scalings = len(spy.scale_inputs)
    if not all(np.all(np.isfinite(g)) for g in got):
        cause = (_("optimizer.scale_loss was called {n} times: the loss is scaled twice, by {scale} squared, and "
                   "the float16 gradients overflow").format(n=scalings, scale=s) if scalings > 1 else
                 _("the scaled gradients overflowed float16 (65504): is the loss multiplied by more than the "
                   "optimizer's scale?"))
        return CheckResult(name, False, _(
            "the gradients you apply hold inf or NaN, so LossScaleOptimizer skipped the step (the weights did not "
            "change) and halved its scale. {cause}").format(cause=cause))
    first = got[0]
    if not np.any(first) and np.any(ref[0]):
        return CheckResult(name, False, _(
            "the layer-1 kernel gradient is exactly 0: its float16 signal underflowed, so the loss was not scaled "
            "before the backward pass. Scale it inside the tape with optimizer.scale_loss(loss) and differentiate "
            "the scaled loss"))
    wrong_size = _scaled_ratio_feedback(_ratio(got, ref), scalings, s)
    if wrong_size:
        return CheckResult(name, False, wrong_size)
    if not _matches(got, ref) and not any(_matches(got, other) for other in _compiled_references()):
        return CheckResult(name, False, _(
            "the gradients are about the right size but differ from the expected ones: use the loss "
            "mean((model(x) - y)**2) over the whole batch"))
    if not scalings:
        fixed = _fixed_factor(train_step)
        if fixed:
            return CheckResult(name, False, fixed)
    returned = _returned_loss_feedback(out, float(ref_loss.numpy()), s)
    if returned:
        return CheckResult(name, False, returned)
    return CheckResult(name, True, _(
        "the gradients reach the optimizer scaled by {scale} (layer 1: {norm}), and apply_gradients unscales "
        "them").format(scale=s, norm=f"{float(np.sqrt(np.sum(first**2))):.3g}"))
