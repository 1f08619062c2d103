"""The one training core every gradlab tool runs on (chapters 01, 03, 04, 07 and 08).

Pure computation: TensorFlow and Keras in, tensors, NumPy numbers and small dataclasses out;
nothing here imports ipywidgets or matplotlib. Each mechanism exists once, in its own module,
and every tool (:func:`gradlab.gradient_report`, :func:`gradlab.inspect_training_step`,
:func:`gradlab.train_steps`, :func:`gradlab.make_train_step`, :class:`gradlab.GradNormLogger`,
:func:`gradlab.time_report`, the distributed comparisons, the explorers' engines and the
exercises' reference computations) calls it:

* :mod:`~gradlab.core.inputs`: input coercion and shape checks that name ``x``/``y``/
  ``sample_weight``; NaN/inf in the data found as a data problem; a batch split over replicas;
* :mod:`~gradlab.core.loss`: the loss (``loss_fn``, else the compiled loss, else mean squared
  error in the model's dtype; ``model.losses`` always added; ``sample_weight`` as Keras weighs it);
* :mod:`~gradlab.core.norms`: float64 norms and the finite check;
* :mod:`~gradlab.core.clipping`: clipping by value, norm and global norm (``IndexedSlices``
  and ``None`` handled);
* :mod:`~gradlab.core.update`: loss scaling for mixed precision and the update step, also
  under ``tf.distribute``;
* :mod:`~gradlab.core.state`: save/restore of everything a step can touch (variables, RNN
  states, metric and loss trackers, optimizer state);
* :mod:`~gradlab.core.layers`: the layer walker and the per-layer taps;
* :mod:`~gradlab.core.step`: the one composed training step (forward, loss with its checks,
  loss scaling, gradients, clipping, the update) and its named parts, which every tool calls
  instead of putting the step together again.
"""

from __future__ import annotations

from .clipping import CLIP_MODES, check_clip, clip_gradients, clip_with
from .inputs import (
    check_model,
    coerce_batch,
    coerce_sample_weight,
    data_problems,
    example_count,
    output_dtype,
    split_batch,
)
from .layers import (
    NORMALIZATION_LAYERS,
    LayerCall,
    Taps,
    attribute_variables,
    has_custom_train_step,
    is_normalization,
    is_recurrent,
    layer_groups,
    leaf_layers,
    nested_layers,
    normalization_inside,
    stateful_rnn_layers,
    sublayers,
    tap_layers,
    variable_layers,
    variable_path,
)
from .loss import Loss, mean_squared_error, reduce_weighted, resolve_loss
from .norms import (
    all_finite,
    axis_norms64,
    dedupe,
    global_norm,
    group_norms,
    is_finite,
    map_values,
    norm64,
    step_norms,
    true_global_norm,
    true_norm,
)
from .state import State, restore, snapshot, snapshot_variables, state_variables
from .step import (
    Pass,
    check_batch,
    compute_loss,
    forward_loss,
    loss_and_gradients,
    measuring_optimizer,
    tapped_call,
    train_step,
)
from .update import (
    apply_update,
    check_optimizer,
    compute_gradients,
    fit_optimizer,
    loss_scale,
    loss_scale_optimizer,
    settle_loss_scale,
)

__all__ = [
    "CLIP_MODES",
    "NORMALIZATION_LAYERS",
    "LayerCall",
    "Loss",
    "Pass",
    "State",
    "Taps",
    "all_finite",
    "apply_update",
    "axis_norms64",
    "check_batch",
    "check_clip",
    "check_model",
    "check_optimizer",
    "clip_gradients",
    "clip_with",
    "coerce_batch",
    "coerce_sample_weight",
    "compute_gradients",
    "compute_loss",
    "data_problems",
    "dedupe",
    "example_count",
    "fit_optimizer",
    "forward_loss",
    "global_norm",
    "group_norms",
    "has_custom_train_step",
    "is_finite",
    "is_normalization",
    "is_recurrent",
    "layer_groups",
    "leaf_layers",
    "loss_and_gradients",
    "loss_scale",
    "loss_scale_optimizer",
    "map_values",
    "mean_squared_error",
    "measuring_optimizer",
    "norm64",
    "normalization_inside",
    "output_dtype",
    "reduce_weighted",
    "resolve_loss",
    "restore",
    "settle_loss_scale",
    "snapshot",
    "snapshot_variables",
    "split_batch",
    "state_variables",
    "attribute_variables",
    "nested_layers",
    "stateful_rnn_layers",
    "step_norms",
    "sublayers",
    "tap_layers",
    "tapped_call",
    "train_step",
    "true_global_norm",
    "true_norm",
    "variable_layers",
    "variable_path",
]
