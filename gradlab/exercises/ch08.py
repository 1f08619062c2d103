"""Self-checks for chapter 08's exercises (gradients across devices and workers).

* exercise 1: :func:`check_replica_loss`, a replica's loss whose gradients, summed over the
  replicas, equal the gradient of the mean over the global batch;
* exercise 2: :func:`check_clip_summed`, the gradient to apply from each replica's gradient
  list, clipped to a global norm the way one device would clip it.

Every check returns a :class:`~gradlab.checks.CheckResult` and never raises on a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._env import quiet_import_tensorflow
from ..checks import CheckResult, check_array, check_arrays

tf = quiet_import_tensorflow()

__all__ = ["check_clip_summed", "check_replica_loss"]


def _call(name: str, fn, *args):
    """``(value, None)`` or ``(None, CheckResult)`` when the learner's function is missing or raises."""
    if not callable(fn):
        return None, CheckResult(name, False, f"expected a function, got {type(fn).__name__}")
    try:
        return fn(*args), None
    except Exception as err:  # noqa: BLE001 - reported to the learner
        return None, CheckResult(name, False, f"your function raised {type(err).__name__}: {err}"[:300])


# ----------------------------------------------------------------------------- exercise 1
def check_replica_loss(replica_loss: Callable) -> CheckResult:
    """Exercise 1: ``replica_loss(per_example_loss, global_batch_size)`` on a replica's share.

    Checked on two splits (2 replicas of 4 examples, 4 replicas of 2): the replicas' losses
    must add up to the mean over the global batch, i.e. each is its sum over the global batch
    size, as ``tf.nn.compute_average_loss`` computes it.
    """
    name = "replica loss"
    per_example = tf.constant([0.5, 1.0, 2.0, 4.0, 0.25, 3.0, 1.5, 0.75])
    for replicas in (2, 4):
        share = 8 // replicas
        got = []
        for i in range(replicas):
            value, problem = _call(name, replica_loss, per_example[i * share:(i + 1) * share], 8)
            if problem is not None:
                return problem
            got.append(value)
        expected = np.array([float(tf.reduce_sum(per_example[i * share:(i + 1) * share])) / 8
                             for i in range(replicas)])
        for g in got:
            shape = np.shape(g) if not isinstance(g, (str, bytes)) and g is not None else None
            if shape is not None and shape != () and int(np.prod(shape)) > 1:
                return CheckResult(name, False, (
                    f"a replica's loss has shape {tuple(shape)}: return one number per replica, the sum of its "
                    "per-example losses divided by the global batch size"))
        try:
            got = np.array([float(np.asarray(g).reshape(())) for g in got])
        except (TypeError, ValueError, AttributeError):
            return CheckResult(name, False, f"expected one number per replica, got {got[0]!r}"[:200])
        result = check_array(
            f"{name} ({replicas} replicas)", got, expected, rtol=1e-5,
            hints=[(lambda a, e=expected * replicas: np.allclose(a, e, rtol=1e-5),
                    f"each replica divided by its own {share} examples, not by the global batch "
                    "of 8: the summed gradient is then the number of replicas times too large")])
        if not result:
            return result
    return CheckResult(name, True, "on 2 and on 4 replicas the losses add up to the global-batch mean")


# ----------------------------------------------------------------------------- exercise 2
def check_clip_summed(clip_summed: Callable) -> CheckResult:
    """Exercise 2: ``clip_summed(replica_grads, clip_norm)`` returns the gradient list to apply.

    ``replica_grads`` holds one list of gradient tensors per replica. The answer must equal
    clipping the *sum* over replicas to the global norm ``clip_norm`` (what one device applies).
    """
    name = "clip after the sum"
    replica_grads = [
        [tf.constant([[3.0, 0.0], [0.0, 4.0]]), tf.constant([1.0, -1.0])],
        [tf.constant([[-1.0, 2.0], [0.5, 0.0]]), tf.constant([0.0, 2.0])],
    ]
    # the sum's global norm is 5.12: clipped at 1.0; at 4.0 the sum is clipped but the mean (2.56) is not
    for clip_norm in (1.0, 4.0):
        result = _check_clip_summed_at(name, clip_summed, replica_grads, clip_norm)
        if not result:
            return result
    return CheckResult(name, True, "at clip_norm 1.0 and 4.0 your list equals clipping the sum over the replicas")


def _check_clip_summed_at(name: str, clip_summed: Callable, replica_grads, clip_norm: float) -> CheckResult:
    summed = [a + b for a, b in zip(*replica_grads, strict=True)]
    expected, _ = tf.clip_by_global_norm(summed, clip_norm)
    clipped_each = [tf.clip_by_global_norm(r, clip_norm)[0] for r in replica_grads]
    wrong_before = [a + b for a, b in zip(*clipped_each, strict=True)]
    value, problem = _call(name, clip_summed, replica_grads, clip_norm)
    if problem is not None:
        return problem
    if value is None:
        return CheckResult(name, False, "clip_summed returned None: did you forget the return statement?")
    if (isinstance(value, (list, tuple)) and len(value) == len(replica_grads)
            and all(isinstance(v, (list, tuple)) for v in value)):
        return CheckResult(name, False, (
            "you returned one list per replica: one device applies a single list, the replicas' "
            "gradients added variable by variable (tf.add_n over zip(*replica_grads)), then clipped"))
    if isinstance(value, tuple) and len(value) == 2 and not hasattr(value[0], "shape"):
        return CheckResult(name, False, "return only the list of gradients (tf.clip_by_global_norm "
                                        "returns a pair: (clipped list, norm))")
    result = check_arrays(name, value, [e.numpy() for e in expected], rtol=1e-5, labels=["kernel", "bias"],
                          what="one per variable, the replicas' sum clipped")
    if not result:
        try:
            got = [np.asarray(v, np.float64) for v in value]
            if all(np.allclose(g, w.numpy(), rtol=1e-5) for g, w in zip(got, wrong_before, strict=True)):
                return CheckResult(name, False, (
                    "you clipped each replica's gradients, then added them: the sum is longer than "
                    "clip_norm and points elsewhere. Add first, then clip."))
            if all(np.allclose(g, w.numpy(), rtol=1e-5) for g, w in zip(got, summed, strict=True)):
                return CheckResult(name, False, (
                    f"with clip_norm {clip_norm:g} you returned the sum unclipped (its global norm is "
                    f"{float(tf.linalg.global_norm(summed)):.3g}): clip it with tf.clip_by_global_norm"))
            per_tensor = [tf.clip_by_norm(a, clip_norm) for a in summed]
            if all(np.allclose(g, w.numpy(), rtol=1e-5) for g, w in zip(got, per_tensor, strict=True)):
                return CheckResult(name, False, (
                    f"with clip_norm {clip_norm:g} you clipped each tensor on its own (tf.clip_by_norm): clip "
                    "the global norm over all tensors, tf.clip_by_global_norm"))
            mean = [a / len(replica_grads) for a in summed]
            if all(np.allclose(g, w.numpy(), rtol=1e-5) for g, w in
                   zip(got, tf.clip_by_global_norm(mean, clip_norm)[0], strict=True)):
                return CheckResult(name, False, (
                    f"with clip_norm {clip_norm:g} you clipped the mean over the replicas: the all-reduce "
                    "adds the replicas' gradients (each loss is already divided by the global batch size), so "
                    "clip their sum. At a larger clip_norm the mean is not clipped where the sum is."))
        except Exception:  # noqa: BLE001 - the generic feedback below is enough
            pass
        return CheckResult(name, False, f"with clip_norm {clip_norm:g}: {result.feedback}")
    return result
