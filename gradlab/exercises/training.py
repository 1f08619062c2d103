"""Self-checks that train: :func:`check_trains` (does the learner's model really train?) and
:func:`step_length_advice` (steps too short or too long, from the loss curve).

Layer 8 (exercises); trains with :func:`gradlab.train.steps.train_steps`. Used by chapter
04's capstone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import _, join_list, join_sentences
from ..progress import Progress
from ..train.steps import train_steps
from .feedback import CheckResult, describe_error

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = ["FINAL_WINDOW", "check_trains", "step_length_advice"]


def _describe_optimizer(optimizer) -> tuple[str, float | None]:
    """A short name such as ``SGD(0.01)`` and the learning rate (None when it is a schedule)."""
    try:
        lr = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    except Exception:  # noqa: BLE001 - a schedule or an unusual optimizer
        lr = None
    momentum = float(getattr(optimizer, "momentum", 0.0) or 0.0)
    args = f"{lr:g}" if lr is not None else "schedule"
    if momentum:
        args += f", momentum={momentum:g}"
    return f"{type(optimizer).__name__}({args})", lr


def step_length_advice(losses, global_norms, *, optimizer, clip: float | None, below: float) -> str:
    """Advice for a run whose final loss stayed above ``below`` (nothing diverged, nothing None).

    Tells a loss still falling (steps too short) from one that stalls or jumps (steps too long)
    by comparing the mean loss of the last 10 steps with the 10 before, and, with clipping,
    counts the clipped steps: a clipped plain-SGD step moves the weights by exactly learning
    rate × clip. Used by chapter 04's capstone check; :func:`check_trains` may use it too.
    """
    losses = np.asarray(losses, dtype=np.float64)
    norms = np.asarray(global_norms, dtype=np.float64)
    name, lr = _describe_optimizer(optimizer)
    plain_sgd = type(optimizer).__name__ == "SGD" and not getattr(optimizer, "momentum", 0.0)
    clipped = int(np.sum(norms > clip)) if clip is not None else 0
    clip_text = ""
    if clip is not None:
        if plain_sgd and lr is not None and clipped >= len(norms) / 2:
            clip_text = " " + _("{k} of {n} steps were clipped (gradient norm above {clip}), and each clipped {name} "
                                "step moves the weights by exactly {lr} × {clip} = {length}.").format(
                                    k=clipped, n=len(norms), clip=f"{clip:g}", name=name, lr=f"{lr:g}",
                                    length=f"{lr * clip:.3g}")
        else:
            clip_text = " " + _("{k} of {n} steps were clipped (gradient norm above {clip}).").format(
                k=clipped, n=len(norms), clip=f"{clip:g}")
    if losses.size < 20:
        return clip_text.strip()
    last, before = float(losses[-10:].mean()), float(losses[-20:-10].mean())
    spread = float(losses[-20:].max() - losses[-20:].min())
    if last < 0.98 * before and spread < 0.5 * before:
        rate = (before - last) / 10
        numbers = dict(before=f"{before:.3g}", start=losses.size - 19, end=losses.size - 10, last=f"{last:.3g}")
        if rate > 0 and last > below:
            falling = _("The loss is still falling (mean {before} over steps {start}-{end}, {last} over the last 10), "
                        "too slowly; at that pace it needs about {more} more steps: the steps are too short.").format(
                            more=math.ceil((last - below) / rate), **numbers)
        else:
            falling = _("The loss is still falling (mean {before} over steps {start}-{end}, {last} over the last 10), "
                        "too slowly: the steps are too short.").format(**numbers)
        fix = (_("Make each step count for more: a larger learning rate (keep a clip for the first large gradients), "
                 "momentum (SGD(..., momentum=0.9)), or Adam.") if clip is not None else
               _("Make each step count for more: a larger learning rate (with a clip for the first large gradients), "
                 "momentum (SGD(..., momentum=0.9)), or Adam."))
        return join_sentences(falling, clip_text, fix)
    if spread <= 1e-3 * max(abs(last), 1e-12):
        return join_sentences(_stalled_advice(losses, last), clip_text)
    numbers = dict(low=f"{losses[-20:].min():.3g}", high=f"{losses[-20:].max():.3g}", last=f"{last:.3g}",
                   before=f"{before:.3g}")
    unsettled = _("The loss is not settling: over the last 20 steps it ranges from {low} to {high} (mean {last} over "
                  "the last 10, {before} over the 10 before): the steps are too long for this problem.").format(**numbers)
    fix = (_("Lower the learning rate (keep the clip), or use momentum or Adam with a smaller rate.") if clip is not None
           else _("Lower the learning rate, or use momentum or Adam with a smaller rate."))
    return join_sentences(unsettled, clip_text, fix)


def _stalled_advice(losses: np.ndarray, last: float) -> str:
    """Advice for a loss that no longer changes at all: the model stopped learning, whatever the step length."""
    best = float(np.nanmin(losses))
    stalled = _("The loss has stopped changing: the last 20 steps all give {last}. The model no longer learns, "
                "and a longer or shorter step now will not restart it.").format(last=f"{last:.3g}")
    if best < 0.9 * last:
        return join_sentences(stalled, _(
            "It was lower before (best {best}): a step too large pushed the units where they pass no gradient (ReLUs "
            "that output 0 for every example, saturated sigmoids). Train again from the start with a lower learning "
            "rate.").format(best=f"{best:.3g}"))
    return join_sentences(stalled, _(
        "It never got lower: the model predicts nearly the same value for every input, so the signal of the input "
        "vanishes on its way through the layers. Fix the activation and the initializer first (the explorer, "
        "gl.inspect_training_step on a fresh model), then the step length."))


FINAL_WINDOW = 10  # check_trains judges the mean loss of this many last steps


def check_trains(name: str, model, x, y, *, optimizer, steps: int, below: float,
                 loss_fn: Callable | None = None, clip_global_norm: float | None = None,
                 require_variables: Sequence[str] = (), progress: bool | None = None) -> CheckResult:
    """Train ``model`` for ``steps`` steps and check that it really trains (chapter 04).

    Passes when the **final** loss, the mean loss of the last 10 steps (of all steps when
    there are fewer), is below ``below``; every loss and gradient stays finite; no trainable
    variable has a ``None`` gradient; and every name in ``require_variables`` (a part of a
    variable path such as ``"standardize/scale"``) matches a trainable variable of the model,
    so deleting a layer does not pass for repairing it. A loss that only dips below the
    threshold at some step and rises again fails. The feedback names the condition that
    failed: the variables without a gradient or missing, the step where the loss or the
    gradients went NaN/inf, or the final and best losses. The model is trained in place with
    :func:`gradlab.train_steps` (one tape per step on the batch ``(x, y)``, mean squared error
    unless ``loss_fn`` is given, global-norm clipping when ``clip_global_norm`` is set), with a
    :class:`gradlab.progress.Progress` bar, step k of ``steps`` (``progress=None``: on in a
    notebook).

    A pipeline of named stages: the arguments, the model and optimizer, the run, the
    variables, divergence, then the final loss.
    """
    _check_trains_arguments(below, require_variables)
    problem = _refuse_model(name, model, optimizer)
    if problem is not None:
        return problem
    try:
        with Progress(steps, _("training {steps} steps").format(steps=steps), enabled=progress) as bar:
            run = train_steps(model, x, y, optimizer=optimizer, steps=steps, loss=loss_fn,
                              clip=clip_global_norm, stop_on_none=True, progress=bar)
    except Exception as err:  # noqa: BLE001 - any failure to train is feedback
        return CheckResult(name, False, _("could not train: {error}").format(error=describe_error(err)))
    for stage in (_none_feedback(run), _variables_feedback(model, require_variables), _diverged_feedback(run)):
        if stage is not None:
            return CheckResult(name, False, stage)
    return _final_loss_result(name, run, steps=steps, below=below, require_variables=require_variables)


def _check_trains_arguments(below, require_variables) -> None:
    """The exercise author's arguments: a ValueError, not feedback."""
    if isinstance(below, bool) or not isinstance(below, (int, float, np.integer, np.floating)) or not below > 0:
        raise ValueError(f"below must be a number > 0; got {below!r}")
    if isinstance(require_variables, (str, bytes)) or not isinstance(require_variables, Sequence) or not all(
            isinstance(r, str) and r for r in require_variables):
        raise ValueError("require_variables must be a list or tuple of non-empty strings (parts of variable "
                         f"paths such as 'standardize/scale'); got {require_variables!r}")


def _refuse_model(name: str, model, optimizer) -> CheckResult | None:
    """Feedback when the learner's model or optimizer is not one (None, another type)."""
    if model is None:
        return CheckResult(name, False, _("got None instead of a model: did your function forget to return it?"))
    if not isinstance(model, keras.Model):
        return CheckResult(name, False, _("expected a keras.Model, got {kind}").format(kind=type(model).__name__))
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        return CheckResult(name, False,
                           _("expected a keras optimizer such as keras.optimizers.SGD(0.05), got {kind}").format(
                               kind=type(optimizer).__name__))
    return None


def _none_feedback(run) -> str | None:
    if not run.none_gradients:
        return None
    return _("no gradient (None) for {names}: these variables never train. Find what disconnects them from the loss "
             "(chapter 02's None gallery).").format(names=", ".join(run.none_gradients))


def _variables_feedback(model, require_variables: Sequence[str]) -> str | None:
    """Feedback when a required variable is missing: renamed (another layer name) or removed."""
    paths = [getattr(v, "path", v.name) for v in model.trainable_variables]
    missing = [r for r in require_variables if not any(r in p for p in paths)]
    if not missing:
        return None
    renamed = [m for m in missing if "/" in m and any(p.endswith("/" + m.rsplit("/", 1)[1]) for p in paths)]
    if len(renamed) == len(missing):
        layers = sorted({m.rsplit("/", 1)[0] for m in missing})
        return _("the model has variables like {names} under another layer name: keep the layer's name {layers} (the "
                 "check finds the variables by their path, such as {path}).").format(
                     names=join_list(repr(m.rsplit("/", 1)[1]) for m in missing),
                     layers=join_list(repr(x) for x in layers), path=repr(missing[0]))
    return _("the model has no trainable variable {names}: removing (or freezing) that layer is not a fix. Keep it "
             "and repair it so that its variables get a gradient.").format(names=" / ".join(repr(m) for m in missing))


def _diverged_feedback(run) -> str | None:
    if run.stopped_at is None:
        return None
    if not np.isfinite(run.losses[-1]):
        return _("at step {step} the loss is {value}: training diverged. Lower the learning rate, clip the global "
                 "norm, or fix the initializer.").format(step=run.stopped_at, value=run.losses[-1])
    return _("at step {step} the gradient norm is {value}: training diverged. Lower the learning rate, clip the "
             "global norm, or fix the initializer.").format(step=run.stopped_at, value=run.global_norms[-1])


def _final_loss_result(name: str, run, *, steps: int, below: float, require_variables) -> CheckResult:
    """Pass when the mean of the last ``FINAL_WINDOW`` losses is below ``below``; else say how it missed."""
    window = run.losses[-FINAL_WINDOW:]
    final = float(np.mean(window))
    final_text = _("the final loss (mean of the last {k} steps) is {value}").format(k=len(window), value=f"{final:.3g}")
    hit = run.first_below(below)
    if final < below:
        return CheckResult(name, True,
                           (_("{final} < {below} (first below it at step {hit} of {steps}); every gradient finite; no "
                              "None gradients; {names} present and trained") if require_variables else
                            _("{final} < {below} (first below it at step {hit} of {steps}); every gradient finite; no "
                              "None gradients")).format(final=final_text, below=f"{below:g}", hit=hit, steps=steps,
                                                        names=join_list(require_variables)))
    if hit is not None and run.losses[-1] <= min(window) and run.losses[-1] < window[0]:
        advice = _("The loss first went below {below} at step {hit} and is still falling: it gets there too late. "
                   "Make each step count for more (momentum, or a larger rate with clipping) or train "
                   "longer.").format(below=f"{below:g}", hit=hit)
    elif hit is not None:
        advice = _("The loss dipped below {below} at step {hit} but did not stay there (last step {last}): it jumps "
                   "around instead of settling. Shorter steps (a lower learning rate, clipping) settle it.").format(
                       below=f"{below:g}", hit=hit, last=f"{run.losses[-1]:.3g}")
    else:
        advice = _("Look for vanishing gradients, and a learning rate that is too small (the loss falls slowly) or "
                   "too large for the clipping (it stalls or jumps).")
    summary = _("after {steps} steps {final} (best single step {best}), not below {below}.").format(
        steps=steps, final=final_text, best=f"{min(run.losses):.3g}", below=f"{below:g}")
    return CheckResult(name, False, join_sentences(summary, advice),
                       details={"kind": "not below", "run": run, "summary": summary})
