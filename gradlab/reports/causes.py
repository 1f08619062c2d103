"""Name the cause of ``None`` and non-finite gradients (chapter 06; used by
:func:`gradlab.inspect_training_step`).

* :func:`explain_none_gradients` says, for every variable whose gradient is ``None``,
  which op cuts the path from the variable to the loss. It traces ``loss_fn`` once with
  ``tf.function``, walks the graph from each variable to the loss, and asks ``tf.gradients``
  which tensors on that path the loss's gradient still reaches: the op where it stops is the
  cause (``ArgMax``, ``Round``, a ``Cast`` to an integer, a comparison, ``StopGradient``).
* :func:`find_nonfinite_source` says where a NaN/inf is born, in the forward or the backward
  pass, by re-running one forward and backward pass eagerly under
  ``tf.debugging.enable_check_numerics()``, and suggests the fix that fits that op.
* :func:`lossless_outputs` and :func:`lossless_head_causes` name the cause the graph cannot
  see: an output compiled with a loss of ``None`` (``compile(loss=["mse", None])`` or a dict
  with ``None``). Keras 3 leaves that output out of the loss, eagerly, in ``tf.function`` and
  under ``jit_compile=True`` alike, and ``fit`` runs without a word; the variables that feed only
  that head get no gradient.

Pure computation: TensorFlow in, plain strings out. Nothing here imports ipywidgets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import renamed_keywords
from ..i18n import N_, _, end_sentence, join_clauses, join_list

tf = quiet_import_tensorflow()

__all__ = ["CAUSE_KINDS", "Cause", "NonfiniteSource", "explain_none_gradients", "find_nonfinite_source",
           "lossless_head_causes", "lossless_outputs"]

#: The kinds of cause of a ``None`` gradient, as data (:attr:`Cause.kinds`).
CAUSE_KINDS: tuple[str, ...] = ("no-gradient-op", "stop-gradient", "integer-cast", "comparison", "numpy",
                                "never-read", "discarded", "integer-variable", "nested", "no-loss", "unknown")


class Cause(str):
    """Why a gradient is ``None``, in the current language (a ``str``), with its kind(s) as data:
    ``kinds`` holds one entry of :data:`CAUSE_KINDS` per op named, ``kind`` the first."""

    kinds: tuple[str, ...]

    def __new__(cls, text: str, kinds):
        obj = super().__new__(cls, text)
        obj.kinds = tuple(kinds) if isinstance(kinds, (tuple, list)) else (kinds,)
        return obj

    @property
    def kind(self) -> str:
        return self.kinds[0] if self.kinds else "unknown"


class NonfiniteSource(str):
    """Where a NaN/inf is born, in the current language (a ``str``: the finding, then ``Fix: ...``),
    with the two parts apart: ``finding`` (where, and what that op does wrong: whole sentences)
    and ``fix`` (a clause without its full stop; empty when there is no specific fix)."""

    finding: str
    fix: str

    def __new__(cls, finding: str, fix: str = ""):
        text = _("{finding} Fix: {fix}").format(finding=finding, fix=end_sentence(fix)) if fix else finding
        obj = super().__new__(cls, text)
        obj.finding, obj.fix = finding, fix
        return obj


# ----------------------------------------------------------------------------- validation
def _check_args(loss_fn, variables) -> list:
    if not callable(loss_fn):
        raise ValueError(
            f"loss_fn must be a zero-argument callable returning the scalar loss; got {type(loss_fn).__name__}"
        )
    if isinstance(variables, (str, bytes)) or not isinstance(variables, Sequence):
        raise ValueError(
            f"variables must be a list or tuple of tf.Variable (e.g. model.trainable_variables); "
            f"got {type(variables).__name__}"
        )
    for i, v in enumerate(variables):
        if not hasattr(v, "handle") or not hasattr(v, "dtype"):
            raise ValueError(f"variables[{i}] must be a tf.Variable or keras.Variable; got {type(v).__name__}")
    return list(variables)


def _eager_gradients(loss_fn, variables):
    """(loss, gradients, handles of the variables the tape saw being read)."""
    with tf.GradientTape() as tape:
        loss = loss_fn()
    grads = tape.gradient(loss, variables)
    watched = {id(w.handle) for w in tape.watched_variables()}
    return loss, grads, watched


# ----------------------------------------------------------------------------- None gradients
_COMPARISONS = {"Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual",
                "LogicalAnd", "LogicalOr", "LogicalNot", "IsNan", "IsFinite", "IsInf"}
#: op type -> (the text, with the op's graph name as {name}, and the kind of cause)
_NO_GRADIENT = {
    "ArgMax": (N_("ArgMax (tf.argmax) has no gradient: it returns an integer index (op {name!r})"), "no-gradient-op"),
    "ArgMin": (N_("ArgMin (tf.argmin) has no gradient: it returns an integer index (op {name!r})"), "no-gradient-op"),
    "Round": (N_("Round (tf.round) has no gradient (op {name!r})"), "no-gradient-op"),
    "Floor": (N_("Floor (tf.floor) has no gradient (op {name!r})"), "no-gradient-op"),
    "Ceil": (N_("Ceil (tf.math.ceil) has no gradient (op {name!r})"), "no-gradient-op"),
    "Rint": (N_("Rint (tf.math.rint) has no gradient (op {name!r})"), "no-gradient-op"),
    "StopGradient": (N_("tf.stop_gradient (StopGradient) blocks the gradient on purpose (op {name!r})"),
                     "stop-gradient"),
    "PyFunc": (N_("the value left TensorFlow through tf.numpy_function (PyFunc), which has no gradient "
                  "(op {name!r})"), "numpy"),
    "UniqueV2": (N_("Unique (tf.unique) has no gradient (op {name!r})"), "no-gradient-op"),
    "Unique": (N_("Unique (tf.unique) has no gradient (op {name!r})"), "no-gradient-op"),
    "TopKV2": (N_("the indices of tf.math.top_k carry no gradient (op {name!r})"), "no-gradient-op"),
}
_NESTED = {"PartitionedCall": N_("a nested tf.function"), "StatefulPartitionedCall": N_("a nested tf.function"),
           "If": N_("a tf.cond branch"), "StatelessIf": N_("a tf.cond branch"), "While": N_("a tf.while_loop body"),
           "StatelessWhile": N_("a tf.while_loop body"), "Case": N_("a tf.switch_case branch"),
           "StatelessCase": N_("a tf.switch_case branch")}
_SELECTS = {"Select", "SelectV2", "If", "StatelessIf"}
_NUMPY_HINTS = ("numpy", "Cannot convert a symbolic")


def _is_float(t) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def _describe_cut(op, path_input) -> Cause:
    """Plain words for the op ``op`` whose input ``path_input`` gets no gradient."""
    name = op.name
    if op.type == "Cast":
        out = op.outputs[0].dtype
        if out.is_integer or out == tf.bool:
            return Cause(_("a Cast to {dtype} (tf.cast to an integer dtype) (op {name!r}): integers carry no "
                           "gradient").format(dtype=out.name, name=name), "integer-cast")
    if op.type in _COMPARISONS:
        return Cause(_("a comparison ({type}) (op {name!r}): the loss depends on the variable only through this "
                       "true/false result, and a boolean carries no gradient").format(type=op.type, name=name),
                     "comparison")
    if op.type in _NO_GRADIENT:
        text, kind = _NO_GRADIENT[op.type]
        return Cause(_(text).format(name=name), kind)
    if op.type in _NESTED:
        return Cause(_("an op inside {where} (op {name!r}) cuts the path (run that code outside the function or "
                       "branch to name the op)").format(where=_(_NESTED[op.type]), name=name), "nested")
    out_dtypes = {o.dtype.name for o in op.outputs}
    if _is_float(path_input) and not any(o.dtype.is_floating for o in op.outputs):
        return Cause(_("{type} (op {name!r}) turns a float into {dtypes}, which carries no gradient").format(
            type=op.type, name=name, dtypes=join_list(sorted(out_dtypes))), "integer-cast")
    return Cause(_("{type} (op {name!r}) has no gradient for this input").format(type=op.type, name=name),
                 "no-gradient-op")


def _only_selects(op, path_refs) -> bool:
    """True for a comparison whose result on the path only picks a branch (tf.where, tf.cond)."""
    if op.type not in _COMPARISONS:
        return False
    uses = [(c, i) for o in op.outputs for c in o.consumers() if any(x.ref() in path_refs for x in c.outputs)
            for i, x in enumerate(c.inputs) if x is o]
    return bool(uses) and all(c.type in _SELECTS and i == 0 for c, i in uses)


def _graph_causes(loss_fn, variables, positions) -> dict[int, Cause]:
    """Trace ``loss_fn`` and name the op that cuts each variable's path to the loss."""
    cf = tf.function(loss_fn).get_concrete_function()
    graph = cf.graph
    loss = cf.outputs[0]
    internal = {}
    for external, inner in graph.captures:
        internal[id(external)] = inner
    # everything the loss depends on (walk the inputs back from the loss)
    needed: set = set()
    stack = [loss]
    while stack:
        t = stack.pop()
        if t.ref() in needed:
            continue
        needed.add(t.ref())
        stack.extend(t.op.inputs)
    causes: dict[int, Cause] = {}
    for i in positions:
        v = variables[i]
        handle = internal.get(id(v.handle))
        if handle is None:
            causes[i] = Cause(_("the variable is never read by the loss computation (for a layer: it is created "
                                "but not used in call)"), "never-read")
            continue
        # tensors reachable from the variable (walk the consumers forward)
        reach: list = []
        seen = set()
        stack = [handle]
        while stack:
            t = stack.pop()
            if t.ref() in seen:
                continue
            seen.add(t.ref())
            reach.append(t)
            for op in t.consumers():
                stack.extend(op.outputs)
        on_path = [t for t in reach if t.ref() in needed and t is not handle]
        if not on_path:
            causes[i] = Cause(_("the variable is read, but nothing computed from it reaches the loss (for a "
                                "layer: it is not used in call, or its output is discarded)"), "discarded")
            continue
        path_refs = {t.ref() for t in on_path} | {handle.ref()}
        floats = [t for t in on_path if _is_float(t)]
        with graph.as_default():
            grads = tf.gradients(loss, floats, unconnected_gradients=tf.UnconnectedGradients.NONE)
        reached = {t.ref() for t, g in zip(floats, grads, strict=True) if g is not None}
        cuts: list[Cause] = []
        selectors: list[Cause] = []  # comparisons that only choose (tf.where, tf.cond): a last resort
        ops = list({id(t.op): t.op for t in on_path}.values())
        for op in ops:
            path_inputs = [x for x in op.inputs if x.ref() in path_refs]
            if not path_inputs or any(x.ref() in reached for x in path_inputs):
                continue
            # a variable handle passed into a nested function or branch counts as a float
            float_inputs = [x for x in path_inputs if _is_float(x) or (
                x.dtype == tf.resource and op.type in _NESTED)]
            outs_reached = any(o.ref() in reached for o in op.outputs)
            to_int = float_inputs and not any(_is_float(o) for o in op.outputs)
            # A cut: the gradient reaches the op's output but not its float input (Round,
            # StopGradient), or the op turns a float into an integer or boolean (ArgMax, Cast,
            # Greater). An op fed by integers is only a consequence of a cut further up.
            if not (float_inputs and (outs_reached or to_int)):
                continue
            text = _describe_cut(op, float_inputs[0])
            target = selectors if _only_selects(op, path_refs) else cuts
            if text not in target:
                target.append(text)
        cuts = cuts or selectors
        if cuts:
            causes[i] = Cause(join_clauses(cuts), [c.kind for c in cuts])
        else:
            causes[i] = Cause(_("the path from the variable to the loss is cut by an op without a gradient (none "
                                "of the usual suspects was found on it)"), "unknown")
    return causes


@renamed_keywords(loss_fn="loss_closure")
def explain_none_gradients(loss_closure: Callable[[], object], variables: Sequence) -> dict[int, Cause]:
    """Explain why ``tape.gradient(loss_fn(), variables)`` is ``None`` for some variables (chapter 06).

    Runs ``loss_fn`` eagerly under a tape to find the ``None`` gradients, then traces it with
    ``tf.function`` and walks the graph from each such variable to the loss.

    Args:
        loss_closure: zero-argument callable returning the scalar loss (it is called once eagerly
            and traced once).
        variables: list of ``tf.Variable`` (or Keras variables), e.g. ``model.trainable_variables``.

    Returns:
        ``{position: cause}`` for every variable whose gradient is ``None``; the cause (a
        :class:`Cause`: a ``str`` in the current language, with ``cause.kinds`` from
        :data:`CAUSE_KINDS`), in plain words, names the op that cuts the path and its graph name (e.g.
        ``"ArgMax (tf.argmax) has no gradient: ..."``, ``"a Cast to int32 ..."``,
        ``"a comparison (Greater) ..."``, ``"tf.stop_gradient (StopGradient) ..."``), says that
        the variable is never read by the loss computation, that it has an integer dtype, or
        that its value left TensorFlow through NumPy. Empty when every gradient exists.
    """
    loss_fn = loss_closure  # a closure, unlike the loss= of the other tools: loss_closure() is the loss
    variables = _check_args(loss_fn, variables)
    _loss, grads, watched = _eager_gradients(loss_fn, variables)
    causes: dict[int, Cause] = {}
    todo = []
    for i, (v, g) in enumerate(zip(variables, grads, strict=True)):
        if g is not None:
            continue
        dtype = tf.as_dtype(v.dtype)
        if not (dtype.is_floating or dtype.is_complex):
            causes[i] = Cause(_("integer dtype: the variable holds {dtype}, and gradients exist only for float "
                                "(and complex) variables; make it float32").format(dtype=dtype.name),
                              "integer-variable")
        else:
            todo.append(i)
    if not todo:
        return causes
    try:
        causes.update(_graph_causes(loss_fn, variables, todo))
    except Exception as err:  # noqa: BLE001 - any tracing failure is reported as a cause
        chain, e = [], err
        while e is not None and len(chain) < 5:  # Keras wraps errors raised in call
            chain.append(f"{type(e).__name__}: {e}")
            e = e.__cause__ or e.__context__
        numpy = any(h in text for text in chain for h in _NUMPY_HINTS)
        for i in todo:
            read = id(variables[i].handle) in watched
            if numpy and read:
                causes[i] = Cause(_("the value left TensorFlow (a NumPy round-trip: .numpy() or np.* turns the "
                                    "tensor into a NumPy array, which the tape cannot follow); keep the computation "
                                    "in TensorFlow ops (tf.* or keras.ops.*)"), "numpy")
            elif not read:
                causes[i] = Cause(_("the variable is never read by the loss computation (for a layer: it is "
                                    "created but not used in call)"), "never-read")
            else:
                first = str(err).strip().splitlines()[-1][:160] if str(err).strip() else type(err).__name__
                causes[i] = Cause(_("the variable is read but its path to the loss is cut; the cut could not be "
                                    "located because loss_fn does not trace with tf.function ({error})").format(
                                        error=first), "unknown")
    return causes


# ----------------------------------------------------------------------------- NaN and inf
_DETECTED = re.compile(r'Detected Infinity or NaN in output (\d+) of (?:eagerly-executing|graph) op "([^"]+)"')
_COUNTS = re.compile(r"# of ([+-](?:NaN|Inf)) elements: (\d+)")

_BACKWARD_OF = {
    "SqrtGrad": "Sqrt", "RsqrtGrad": "Rsqrt", "ReciprocalGrad": "Reciprocal", "TanhGrad": "Tanh",
    "SigmoidGrad": "Sigmoid", "SoftplusGrad": "Softplus", "ReluGrad": "Relu", "EluGrad": "Elu",
}
_FIX = {
    "Log": (N_("log of 0 (or of a negative number)"),
            N_("keep the argument positive (tf.math.log(tf.maximum(x, 1e-7)) or log(x + eps)), or compute in "
               "log space: from_logits=True, tf.nn.log_softmax, tf.math.softplus, tf.math.log1p, "
               "tf.reduce_logsumexp")),
    "Log1p": (N_("log1p of -1 or below"), N_("keep the argument above -1")),
    "Sqrt": (N_("sqrt at 0 or below: its derivative 1/(2·sqrt(x)) is infinite at 0"),
             N_("add a small epsilon (tf.sqrt(x + 1e-12)), or the double where: "
                "tf.where(x > 0, tf.sqrt(tf.where(x > 0, x, 1.0)), 0.0)")),
    "Rsqrt": (N_("rsqrt at 0 or below"), N_("add a small epsilon to the argument")),
    "Pow": (N_("a fractional power of 0 or of a negative number (x ** 0.5 of x < 0 is NaN; its derivative "
               "at 0 is infinite)"),
            N_("make the argument safe before the power, e.g. the double where: "
               "tf.where(x > 0, tf.where(x > 0, x, 1.0) ** 0.5, 0.0)")),
    "RealDiv": (N_("a division by 0"), N_("use tf.math.divide_no_nan, or add an epsilon to the denominator")),
    "Div": (N_("a division by 0"), N_("use tf.math.divide_no_nan, or add an epsilon to the denominator")),
    "Reciprocal": (N_("1/x at 0"), N_("use tf.math.divide_no_nan, or add an epsilon")),
    "Xlogy": (N_("x·log(y) at y = 0"), N_("tf.math.xlogy is 0 where x is 0; keep y positive where x is not")),
    "Acos": (N_("acos at ±1: its derivative −1/sqrt(1 − x²) is infinite there"),
             N_("keep the argument inside (−1, 1): tf.acos(tf.clip_by_value(x, -1 + 1e-6, 1 - 1e-6))")),
    "Asin": (N_("asin at ±1: its derivative 1/sqrt(1 − x²) is infinite there"),
             N_("keep the argument inside (−1, 1): tf.asin(tf.clip_by_value(x, -1 + 1e-6, 1 - 1e-6))")),
    "Atanh": (N_("atanh at ±1: it and its derivative 1/(1 − x²) are infinite there"),
              N_("keep the argument inside (−1, 1): tf.atanh(tf.clip_by_value(x, -1 + 1e-6, 1 - 1e-6))")),
    "Exp": (N_("exp overflowing float32 (above about 88)"),
            N_("use a stable form: tf.math.softplus, tf.reduce_logsumexp, or from_logits=True")),
}
_WHERE_FIX = N_("make the input safe *before* the op with the double where, "
                "tf.where(ok, f(tf.where(ok, x, safe_value)), 0.0), so that the unselected branch holds "
                "finite numbers")


def _parse(err: Exception) -> tuple[str, int, str]:
    """(op type, output index, counts such as '1 NaN') from a check_numerics error."""
    text = str(err)
    m = _DETECTED.search(text)
    if not m:
        return "", 0, ""
    # TRANSLATORS: a count of non-finite values in an op's output, such as "118 NaN" or "1 -Inf"
    counts = join_list(_("{count} {value}").format(count=n, value=k.lstrip("+"))
                       for k, n in _COUNTS.findall(text))
    return m.group(2), int(m.group(1)), counts


def _location(op: str, name: str = "", counts: str = "") -> str:
    """An op, with its graph name and NaN/inf counts when known: ``Log ('model/dense/Log', 1 -Inf)``."""
    if name and counts:
        return _("{op} ({name}, {counts})").format(op=op, name=name, counts=counts)
    if name:
        return _("{op} ({name})").format(op=op, name=name)
    if counts:
        return _("{op} ({counts})").format(op=op, counts=counts)
    return op


def _graph_node(loss_fn, op_type: str) -> str:
    """The graph name(s) of the ``op_type`` ops of the traced ``loss_fn``, e.g. ``"'model/dense/Log'"``.

    The names carry the Keras layer's name scope, which says where the op is; when the traced
    function has several ops of that type, up to three are listed.
    """
    try:
        graph = tf.function(loss_fn).get_concrete_function().graph
    except Exception:  # noqa: BLE001 - the name is a bonus
        return ""
    names = [op.name for op in graph.get_operations() if op.type == op_type]
    if not names:
        return ""
    if len(names) == 1:
        return repr(names[0])
    shown = join_list(repr(n) for n in names[:3])
    if len(names) > 3:
        return _("one of {names} and {more} more").format(names=shown, more=len(names) - 3)
    return _("one of {names}").format(names=shown)


def _backward_culprit(loss_fn) -> tuple[str, str]:
    """``(op type, graph name)`` of the forward op whose own gradient turns finite gradients into
    NaN/inf: the op, in ``loss_fn`` traced as a graph, whose outputs get a finite gradient (or none)
    while one of its inputs, which it alone consumes, gets a non-finite one. The backward pass of
    ``tf.acos`` divides by sqrt(1 − x²) in a Reciprocal op the learner never wrote: this names Acos.
    ``("", "")`` when ``loss_fn`` cannot be traced or no op is found."""
    probed: list = []

    def probe():
        loss = loss_fn()
        ops = [op for op in tf.compat.v1.get_default_graph().get_operations()
               if op.type not in ("ReadVariableOp", "Const", "Identity")]
        tensors = list({id(t): t for op in ops for t in (*op.inputs, *op.outputs)
                        if t.dtype.is_floating}.values())
        grads = tf.gradients(loss, tensors)
        flags = [tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
                 if g is not None else tf.constant(True) for g in grads]
        probed.append((ops, tensors))
        return tf.stack(flags)

    try:
        finite = tf.function(probe)().numpy()
    except Exception:  # noqa: BLE001 - the name is a bonus; the op check_numerics names stays
        return "", ""
    ops, tensors = probed[-1]
    ok = {id(t): bool(f) for t, f in zip(tensors, finite, strict=True)}
    forward_ops = {id(op) for op in ops}

    def alone(t):  # op is the only forward op that reads t (the gradient ops read it too)
        return sum(id(c) in forward_ops for c in t.consumers()) == 1

    for op in reversed(ops):  # nearest the loss first
        outs = [t for t in op.outputs if id(t) in ok]
        bad = [t for t in op.inputs if id(t) in ok and not ok[id(t)]]
        if outs and all(ok[id(t)] for t in outs) and any(alone(t) for t in bad):
            return op.type, op.name
    return "", ""


def _checked_run(loss_fn, variables):
    """Run forward then backward under check_numerics: ('forward'|'backward'|None, error)."""
    tf.debugging.enable_check_numerics()
    try:
        try:
            with tf.GradientTape() as tape:
                loss = loss_fn()
        except tf.errors.InvalidArgumentError as err:
            return "forward", err
        try:
            tape.gradient(loss, variables)
        except tf.errors.InvalidArgumentError as err:
            return "backward", err
        return None, None
    finally:
        tf.debugging.disable_check_numerics()


@renamed_keywords(loss_fn="loss_closure")
def find_nonfinite_source(loss_closure: Callable[[], object], variables: Sequence) -> NonfiniteSource | None:
    """Say where a NaN/inf is born in the forward or backward pass of ``loss_fn`` (chapter 06).

    Runs one forward and backward pass under a tape; when the loss or a gradient is NaN/inf,
    runs them again under ``tf.debugging.enable_check_numerics()`` (switched off again before
    returning), which stops at the first op whose output is NaN/inf. A ``tf.function`` that
    ``loss_fn`` calls and that is traced for the first time during that run keeps its checks
    afterwards; call ``loss_fn`` once before, as :func:`gradlab.inspect_training_step` does.

    Args:
        loss_closure: zero-argument callable returning the scalar loss.
        variables: list of ``tf.Variable`` (or Keras variables).

    Returns:
        A plain-words description naming the op and the pass (forward or backward) where the
        first non-finite value appeared, what that op does wrong, and a suggested fix; it says
        when the NaN sits in a value the loss does not use (the unselected branch of a
        ``tf.where``), whose gradient is still NaN. It is a :class:`NonfiniteSource`: a ``str``
        whose ``finding`` and ``fix`` hold the two parts apart. ``None`` when the loss and all
        gradients are finite.
    """
    loss_fn = loss_closure  # a closure, unlike the loss= of the other tools: loss_closure() is the loss
    variables = _check_args(loss_fn, variables)
    loss, grads, _watched = _eager_gradients(loss_fn, variables)
    loss_finite = core.is_finite(loss)
    if loss_finite and all(core.is_finite(g) for g in grads):
        return None
    phase, err = _checked_run(loss_fn, variables)
    if phase is None:
        return NonfiniteSource(_("No single op produced a NaN/inf under check_numerics (the weights or inputs may "
                                 "already hold NaN/inf)."), _("check tf.math.is_finite on them"))
    op_type, _index, counts = _parse(err)
    if not op_type:
        return NonfiniteSource(_("check_numerics stopped with: {error}").format(
            error=str(err).strip().splitlines()[0][:200]))
    if phase == "forward":
        where = _location(op_type, _graph_node(loss_fn, op_type), counts)
        if op_type in _FIX:
            what, fix = (_(t) for t in _FIX[op_type])
        else:
            what = _("{op} produced a non-finite value").format(op=op_type)
            fix = _("keep its input in the range where it is finite")
        if loss_finite:
            return NonfiniteSource(_(
                "The first NaN/inf is born in the forward pass, in {where}: {what}. The loss is finite, so the loss "
                "does not use this value, as in the unselected branch of a tf.where: the backward pass still "
                "multiplies the NaN/inf by 0, and 0 × NaN = NaN.").format(where=where, what=what), _(_WHERE_FIX))
        return NonfiniteSource(_("The first NaN/inf is born in the forward pass, in {where}: {what}.").format(
            where=where, what=what), fix)
    if op_type.startswith("__inference"):
        return NonfiniteSource(
            _("The first NaN/inf is born in the backward pass, inside the gradient of a tf.function called by "
              "loss_fn: {where}.").format(where=_location(op_type, counts=counts)),
            _("call the inner function's body eagerly to name the op"))
    forward, name = _backward_culprit(loss_fn)
    if not forward:
        forward, name = _BACKWARD_OF.get(op_type, op_type), ""
    if forward in _FIX:
        what, fix = (_(t) for t in _FIX[forward])
    else:
        what = _("the derivative of {op} is infinite or undefined at these inputs").format(op=forward)
        fix = _("keep the input away from the point where the derivative blows up")
    if forward != op_type:
        where = _("{grad}, the gradient of {op}").format(grad=_location(op_type, counts=counts),
                                                         op=_location(forward, repr(name) if name else
                                                                      _graph_node(loss_fn, forward)))
    else:
        where = _location(op_type, counts=counts)
    return NonfiniteSource(_("The forward pass is finite; the first NaN/inf is born in the backward pass, in "
                             "{where}: {what}.").format(where=where, what=what), fix)


# ----------------------------------------------------------------------------- outputs without a loss
def lossless_outputs(model) -> list[tuple[object, str]]:
    """``(key, name)`` of each output of a compiled ``model`` whose compiled loss is ``None``.

    ``key`` is the output's position in a list of outputs (``None`` where unknown); ``name`` is the
    output's name as a learner wrote it (the key of the loss dict, which is also the key of a dict of
    outputs, or the output layer's name). Empty for a model not compiled with a list or dict of losses.
    """
    loss = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
    names = list(getattr(model, "output_names", None) or [])
    if isinstance(loss, dict):
        return [(names.index(key) if key in names else None, str(key)) for key, value in loss.items()
                if value is None]
    if isinstance(loss, (list, tuple)):
        return [(i, names[i] if i < len(names) else f"output {i}") for i, value in enumerate(loss) if value is None]
    return []


def _head(y_pred, key, name):
    """The prediction of one output: by name in a dict of outputs, by position in a list."""
    if isinstance(y_pred, dict):
        return y_pred.get(name)
    if isinstance(y_pred, (list, tuple)) and isinstance(key, int) and key < len(y_pred):
        return y_pred[key]
    return None


def lossless_head_causes(tape, y_pred, variables: Sequence, grads: Sequence, heads) -> dict[int, Cause]:
    """``index -> Cause`` for each variable whose gradient is ``None`` but that a lossless output reaches.

    ``tape`` recorded the forward pass that gave ``y_pred`` (persistent, so that ``gradient`` can
    be asked again; the head's sum is taken as ``output_gradients`` of ones, since the tape no longer
    records); ``heads`` are :func:`lossless_outputs`. A variable whose gradient of the loss
    is ``None`` while the sum of that output has one feeds that head only.
    """
    causes: dict[int, Cause] = {}
    none = [k for k, g in enumerate(grads) if g is None]
    for key, name in heads:
        if not none:
            break
        parts = [t for t in tf.nest.flatten(_head(y_pred, key, name)) if isinstance(t, tf.Tensor) and t.dtype.is_floating]
        if not parts:
            continue
        reached = tape.gradient(parts, [variables[k] for k in none],  # the sum of the head's outputs
                                output_gradients=[tf.ones_like(t) for t in parts])
        for k, g in zip(list(none), reached, strict=True):
            if g is not None:
                causes[k] = Cause(_("the output {name!r} has no loss (it is compiled with None), so Keras leaves "
                                    "it out of the loss and the variables that feed only that head get no "
                                    "gradient").format(name=name), "no-loss")
                none.remove(k)
    return causes
