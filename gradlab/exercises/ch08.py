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
            if problem:
                return problem
            got.append(value)
        expected = np.array([float(tf.reduce_sum(per_example[i * share:(i + 1) * share])) / 8
                             for i in range(replicas)])
        try:
            got = np.array([float(np.asarray(g)) for g in got])
        except (TypeError, ValueError):
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
    clip_norm = 1.0
    summed = [a + b for a, b in zip(*replica_grads, strict=True)]
    expected, _ = tf.clip_by_global_norm(summed, clip_norm)
    clipped_each = [tf.clip_by_global_norm(r, clip_norm)[0] for r in replica_grads]
    wrong_before = [a + b for a, b in zip(*clipped_each, strict=True)]
    value, problem = _call(name, clip_summed, replica_grads, clip_norm)
    if problem:
        return problem
    if isinstance(value, tuple) and len(value) == 2 and not hasattr(value[0], "shape"):
        return CheckResult(name, False, "return only the list of gradients (tf.clip_by_global_norm "
                                        "returns a pair: (clipped list, norm))")
    result = check_arrays(name, value, [e.numpy() for e in expected], rtol=1e-5, labels=["kernel", "bias"])
    if not result:
        try:
            got = [np.asarray(v, np.float64) for v in value]
            if all(np.allclose(g, w.numpy(), rtol=1e-5) for g, w in zip(got, wrong_before, strict=True)):
                return CheckResult(name, False, (
                    "you clipped each replica's gradients, then added them: the sum is longer than "
                    "clip_norm and points elsewhere. Add first, then clip."))
        except Exception:  # noqa: BLE001 - the generic feedback below is enough
            pass
    return result
