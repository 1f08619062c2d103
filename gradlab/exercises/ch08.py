"""Self-checks for chapter 08's exercises (gradients across devices and workers).

* exercise 1: :func:`check_replica_loss`, a replica's loss whose gradients, summed over the
  replicas, equal the gradient of the mean over the global batch;
* exercise 2: :func:`check_clip_summed`, the gradient to apply from each replica's gradient
  list, clipped to a global norm the way one device would clip it.

Every check returns a :class:`~gradlab.exercises.feedback.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..core import true_global_norm
from ..i18n import _, end_sentence, join_sentences
from .answers import is_float_number
from .compare import check_array, check_arrays
from .feedback import CheckResult, call_answer

tf = quiet_import_tensorflow()

__all__ = ["CLIP_NORMS", "check_clip_summed", "check_replica_loss"]

#: Exercise 2's thresholds: the replicas' summed gradient has global norm 5.12, so 1.0 and 4.0
#: clip it (and 4.0 does not clip the mean over the replicas, 2.56), and 8.0 leaves it alone.
CLIP_NORMS = (1.0, 4.0, 8.0)


# ----------------------------------------------------------------------------- exercise 1
#: Exercise 1's splits: (the global batch's per-example losses, the number of replicas). The
#: last has another global batch size, so a typed-in 8 fails there.
_REPLICA_SPLITS = (
    ([0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.75], 2),
    ([0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.75], 4),
    ([0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.75, 2.5, 0.1, 1.25, 0.6], 3),
)


def _replica_values(name: str, replica_loss: Callable, per_example, share: int, replicas: int):
    """Each replica's loss as a float, and the gradient check on the first replica's."""
    scale = tf.Variable(1.0)  # the per-example losses depend on it: the loss must keep the dependence
    values = []
    for i in range(replicas):
        with tf.GradientTape() as tape:
            part = scale * per_example[i * share:(i + 1) * share]
            value, problem = call_answer(name, replica_loss, part, int(per_example.shape[0]), what="replica_loss")
        if problem is not None:
            return None, problem
        if value is None:
            return None, CheckResult(name, False, _("replica_loss returned None: did you forget the return "
                                                    "statement?"))
        if isinstance(value, (str, bytes)) or is_float_number(value) or isinstance(value, np.ndarray):
            if isinstance(value, (str, bytes)):
                return None, CheckResult(name, False, _("replica_loss returned a {kind}: return the loss as a "
                                                        "tensor").format(kind=type(value).__name__))
            return None, CheckResult(name, False, _(
                "replica_loss returned a {kind}, not a tensor: float(...), .numpy() and NumPy leave TensorFlow, so "
                "the tape cannot differentiate the loss and the replica would compute no gradient. Stay in "
                "TensorFlow ops (tf.reduce_sum, tf.nn.compute_average_loss)").format(kind=type(value).__name__))
        shape = tuple(getattr(value, "shape", ()))
        if shape != () and int(np.prod(shape)) > 1:
            return None, CheckResult(name, False, _(
                "a replica's loss has shape {shape}: return one number per replica, the sum of its per-example "
                "losses divided by the global batch size").format(shape=shape))
        if i == 0:
            try:
                grad = tape.gradient(value, scale)
            except Exception:  # noqa: BLE001 - not something the tape knows
                grad = None
            if grad is None:
                return None, CheckResult(name, False, _(
                    "the returned loss is not connected to the per-example losses on the tape (its gradient is "
                    "None): compute it from per_example_loss with TensorFlow ops"))
        try:
            values.append(float(np.asarray(value).reshape(())))
        except (TypeError, ValueError, AttributeError):
            return None, CheckResult(name, False, _("expected one number per replica, got {value}").format(
                value=repr(value)[:120]))
    return np.array(values), None


def check_replica_loss(replica_loss: Callable) -> CheckResult:
    """Exercise 1: ``replica_loss(per_example_loss, global_batch_size)`` on a replica's share.

    Checked on two splits (2 replicas of 4 examples, 4 replicas of 2): the replicas' losses
    must add up to the mean over the global batch, i.e. each is its sum over the global batch
    size, as ``tf.nn.compute_average_loss`` computes it. The loss must be a tensor the tape
    can differentiate (a Python float trains nothing).
    """
    name = _("replica loss")
    passed = []  # the splits already right: a loss right on one split and wrong on another holds a typed-in number
    for per_example, replicas in _REPLICA_SPLITS:
        per_example = tf.constant(per_example)
        batch = int(per_example.shape[0])
        share = batch // replicas
        got, problem = _replica_values(name, replica_loss, per_example, share, replicas)
        if problem is not None:
            return problem
        expected = np.array([float(tf.reduce_sum(per_example[i * share:(i + 1) * share])) / batch
                             for i in range(replicas)])
        if batch != 8 and np.allclose(got, expected * batch / 8, rtol=1e-5):
            return CheckResult(name, False, _(
                "right for the global batch of 8, but with a global batch of {batch} ({replicas} replicas) every loss "
                "is {batch}/8 times too large: the 8 is typed in. Divide by the global_batch_size argument").format(
                    batch=batch, replicas=replicas))
        hints = [(lambda a, e=expected * replicas: np.allclose(a, e, rtol=1e-5),
                  _("each replica divided by its own {share} examples, not by the global batch of {batch}: the summed "
                    "gradient is then the number of replicas times too large").format(share=share, batch=batch)),
                 (lambda a, e=expected / share: np.allclose(a, e, rtol=1e-5),
                  _("the replica's mean divided by the global batch size: divided twice, by its own {share} examples "
                    "and by {batch}. Divide the replica's sum, tf.reduce_sum, by the global batch size").format(
                        share=share, batch=batch))]
        if passed and not any(_hint_matches(h, got) for h in hints):
            hints.append((lambda a: True, _(
                "right with {before} replicas, wrong with {replicas}: a number of replicas or of examples is typed in. "
                "Divide the replica's sum by the global_batch_size argument only").format(
                    before=passed[0], replicas=replicas)))
        result = check_array(
            _("{name} ({n} replicas, global batch {batch})").format(name=name, n=replicas, batch=batch), got, expected,
            rtol=1e-5, hints=hints)
        if not result:
            return result
        passed.append(replicas)
    return CheckResult(name, True, _("on 2 and on 4 replicas of a batch of 8, and on 3 of a batch of 12, the losses "
                                     "add up to the global-batch mean"))


def _hint_matches(hint, got) -> bool:
    try:
        return bool(hint[0](np.asarray(got, dtype=np.float64)))
    except Exception:  # noqa: BLE001 - a hint that cannot be evaluated does not match
        return False


# ----------------------------------------------------------------------------- exercise 2
def check_clip_summed(clip_summed: Callable) -> CheckResult:
    """Exercise 2: ``clip_summed(replica_grads, clip_norm)`` returns the gradient list to apply.

    ``replica_grads`` holds one list of gradient tensors per replica. The answer must equal
    clipping the *sum* over replicas to the global norm ``clip_norm`` (what one device applies),
    at each of :data:`CLIP_NORMS`: two that clip the sum and one (8.0) above its norm, where
    the sum must come back unchanged.
    """
    name = _("clip after the sum")
    replica_grads = [
        [tf.constant([[3.0, 0.0], [0.0, 4.0]]), tf.constant([1.0, -1.0])],
        [tf.constant([[-1.0, 2.0], [0.5, 0.0]]), tf.constant([0.0, 2.0])],
    ]
    for clip_norm in CLIP_NORMS:
        result = _check_clip_summed_at(name, clip_summed, replica_grads, clip_norm)
        if not result:
            return result
    # three replicas (summed global norm 3.61): an answer written for exactly two replicas fails here
    three = [*replica_grads, [tf.constant([[-1.0, -1.0], [0.5, -2.0]]), tf.constant([-0.5, 0.0])]]
    result = _check_clip_summed_at(name, clip_summed, three, 1.0)
    if not result:
        two = _check_clip_summed_at(name, clip_summed, three[:2], 1.0)
        if two and _same_value(clip_summed, three, three[:2]):
            return CheckResult(name, False, _("right for 2 replicas, but with 3 your list ignores the third: add "
                                              "every replica's gradients, tf.add_n over zip(*replica_grads), not "
                                              "replica_grads[0] + replica_grads[1]"))
        return CheckResult(name, False, _("right for 2 replicas, but with 3 replicas: {feedback}").format(
            feedback=result.feedback))
    return CheckResult(name, True, _("at clip_norm 1.0, 4.0 and 8.0 your list equals clipping the sum over the "
                                     "replicas (8.0 leaves it unchanged), with 2 replicas and with 3"))


def _same_value(clip_summed: Callable, a, b) -> bool:
    """Whether ``clip_summed`` gives the same list for the replica lists ``a`` and ``b`` (clip 1.0)."""
    try:
        got_a = clip_summed([list(r) for r in a], 1.0)
        got_b = clip_summed([list(r) for r in b], 1.0)
        return _same([np.asarray(g, np.float64) for g in got_a], got_b)
    except Exception:  # noqa: BLE001
        return False


def _same(got, want) -> bool:
    return all(np.allclose(g, np.asarray(w), rtol=1e-5) for g, w in zip(got, want, strict=True))


def _check_clip_summed_at(name: str, clip_summed: Callable, replica_grads, clip_norm: float) -> CheckResult:
    summed = [tf.add_n(list(parts)) for parts in zip(*replica_grads, strict=True)]
    expected, _norm = tf.clip_by_global_norm(summed, clip_norm)
    norm = true_global_norm(summed)
    value, problem = call_answer(name, clip_summed, [list(r) for r in replica_grads], clip_norm, what="clip_summed")
    if problem is not None:
        if "shape" in problem.feedback.lower():
            return CheckResult(name, False, join_sentences(end_sentence(problem.feedback), _(
                "replica_grads holds one list per replica: add them variable by variable first (zip(*replica_grads)), "
                "then clip the one summed list.")))
        return problem
    if value is None:
        return CheckResult(name, False, _("clip_summed returned None: did you forget the return statement?"))
    if (isinstance(value, (list, tuple)) and len(value) == len(replica_grads)
            and all(isinstance(v, (list, tuple)) for v in value)):
        return CheckResult(name, False, _(
            "you returned one list per replica: one device applies a single list, the replicas' gradients added "
            "variable by variable (tf.add_n over zip(*replica_grads)), then clipped"))
    if isinstance(value, tuple) and len(value) == 2 and not hasattr(value[0], "shape"):
        return CheckResult(name, False, _("return only the list of gradients (tf.clip_by_global_norm returns a "
                                          "pair: (clipped list, norm))"))
    result = check_arrays(name, value, [e.numpy() for e in expected], rtol=1e-5, labels=["kernel", "bias"],
                          what=_("one per variable, the replicas' sum clipped"))
    if result:
        return result
    try:
        got = [np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64) for v in value]
    except Exception:  # noqa: BLE001 - the generic feedback is enough
        got = None
    if got is not None and len(got) == len(summed):
        clipped_each = [tf.clip_by_global_norm(r, clip_norm)[0] for r in replica_grads]
        mean = [a / len(replica_grads) for a in summed]
        candidates = [
            ([tf.add_n(list(parts)) for parts in zip(*clipped_each, strict=True)], _(
                "you clipped each replica's gradients, then added them: the sum is longer than clip_norm and points "
                "elsewhere. Add first, then clip.")),
            (summed, _("with clip_norm {c} you returned the sum unclipped (its global norm is {norm}): clip it with "
                       "tf.clip_by_global_norm").format(c=f"{clip_norm:g}", norm=f"{norm:.3g}")),
            ([a * (clip_norm / norm) for a in summed], _(
                "with clip_norm {c} the sum (global norm {norm}) must come back unchanged, but you rescaled it to "
                "norm {c}: clipping only shortens a gradient that is longer than clip_norm, g * min(1, clip_norm / "
                "norm)").format(c=f"{clip_norm:g}", norm=f"{norm:.3g}")),
            ([tf.clip_by_norm(a, clip_norm) for a in summed], _(
                "with clip_norm {c} you clipped each tensor on its own (tf.clip_by_norm): clip the global norm over "
                "all tensors, tf.clip_by_global_norm").format(c=f"{clip_norm:g}")),
            (tf.clip_by_global_norm(mean, clip_norm)[0], _(
                "with clip_norm {c} you clipped the mean over the replicas: the all-reduce adds the replicas' "
                "gradients (each loss is already divided by the global batch size), so clip their sum. At a larger "
                "clip_norm the mean is not clipped where the sum is.").format(c=f"{clip_norm:g}")),
            (mean, _("with clip_norm {c} you returned the mean over the replicas: the all-reduce adds them (each "
                     "replica's loss is already divided by the global batch size)").format(c=f"{clip_norm:g}")),
            ([len(replica_grads) * e for e in expected], _(
                "with clip_norm {c} you returned the clipped sum times {n}, the number of replicas: clip the sum "
                "once and apply it as it is").format(c=f"{clip_norm:g}", n=len(replica_grads))),
            ([tf.clip_by_value(a, -clip_norm, clip_norm) for a in summed], _(
                "with clip_norm {c} you clipped each element to ±{c} (tf.clip_by_value), which changes the "
                "direction: clip the global norm of the sum, tf.clip_by_global_norm").format(c=f"{clip_norm:g}")),
            (tf.clip_by_global_norm(list(replica_grads[0]), clip_norm)[0], _(
                "with clip_norm {c} you returned replica 0's gradients clipped, without the other replicas: add "
                "every replica's gradients first, variable by variable").format(c=f"{clip_norm:g}")),
            ([-e for e in expected], _(
                "with clip_norm {c} every value has the wrong sign: the list to apply is the gradient itself; the "
                "optimizer subtracts it").format(c=f"{clip_norm:g}")),
        ]
        for candidate, text in candidates:
            try:
                if _same(got, candidate):
                    return CheckResult(name, False, text)
            except Exception:  # noqa: BLE001 - shapes that do not match this candidate
                continue
    return CheckResult(name, False, _("with clip_norm {c}: {feedback}").format(c=f"{clip_norm:g}",
                                                                             feedback=result.feedback))
