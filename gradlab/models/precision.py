"""A float64 copy of a Keras model, for results that every CPU reproduces (chapter 04).

A float32 matmul or convolution on an x86 CPU runs oneDNN's kernels, whose summation order
depends on the CPU's instruction set (AVX2, AVX-512, ...) and on whether the oneDNN graph
rewrites are on (``TF_ENABLE_ONEDNN_OPTS``): the last bit of a result differs from one CPU to
another. Two hundred training steps, or the gradient of a 155-layer backbone, grow that bit into
the printed digits and, at the edge of divergence, into another verdict. A float64 matmul runs
Eigen's code, the same on every x86 CPU, and its rounding error is far below anything printed.
:func:`float64_copy` therefore trains or inspects a float64 copy of the model whose starting
weights are the float32 model's own, cast exactly: the same experiment, in digits that hold.
"""

from __future__ import annotations

import numpy as np

from .._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()

__all__ = ["float64_copy"]


def float64_copy(model):
    """A float64 copy of a Sequential or functional Keras ``model``, with its weights cast exactly.

    Every layer is rebuilt from its config with ``dtype="float64"`` (variables and computation in
    float64; float32 inputs are cast by the first layer), then given the model's own weights,
    which float64 holds exactly. The model itself is not changed. A model that is already float64
    is returned as it is. A subclassed model has no config to rebuild its layers from: it raises
    ``ValueError``, as does anything that is not a built Keras model.
    """
    import keras

    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a Keras model; got {type(model).__name__}")
    if not model.built:
        raise ValueError("model must be built (call it once, or give it a keras.Input) before it is copied")
    if all(v.dtype == "float64" for v in model.weights if "float" in str(v.dtype)) and \
            getattr(model.dtype_policy, "compute_dtype", None) == "float64":
        return model
    def as_float64(layer):
        config = layer.get_config()
        config["dtype"] = "float64"
        return type(layer).from_config(config)

    try:  # Keras clones Sequential and functional models layer by layer, and refuses the others
        copy = keras.models.clone_model(model, clone_function=as_float64)
    except ValueError as err:
        if "Sequential" not in str(err):
            raise
        raise ValueError(f"model must be a Sequential or functional model to be copied layer by layer; "
                         f"got the subclassed {type(model).__name__}: build it with dtype='float64' instead") from None
    _check_faithful(model, copy)
    copy.set_weights([np.asarray(w).astype(np.float64) if np.issubdtype(np.asarray(w).dtype, np.floating)
                      else w for w in model.get_weights()])
    return copy


def _settings(layer) -> dict:
    """A layer's plain public settings (``use_scale=False``, ``units=32``): what its config must carry."""
    return {k: v for k, v in vars(layer).items()
            if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))}


def _check_faithful(model, copy) -> None:
    """Refuse a copy whose layers are not the model's: a custom layer whose ``get_config`` leaves out
    a setting (``use_scale``) would come back with its default, and a renamed layer moves its
    variables' paths."""
    import keras

    ours, theirs = list(model._flatten_layers(include_self=False)), list(copy._flatten_layers(include_self=False))
    if len(ours) != len(theirs):
        raise ValueError(f"the copy has {len(theirs)} layers where the model has {len(ours)}: it is not copied")
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, keras.layers.InputLayer):
            continue
        if a.name != b.name:
            raise ValueError(f"layer {a.name!r} comes back from its config as {b.name!r}: its variables' paths "
                             "would change, so the model is not copied")
        lost = {k: v for k, v in _settings(a).items() if _settings(b).get(k, v) != v and k != "dtype"}
        if lost:
            raise ValueError(f"layer {a.name!r} ({type(a).__name__}) does not keep {sorted(lost)} in its get_config(): "
                             "a copy would differ from the model, so it is not copied")
    if [v.path for v in model.weights] != [v.path for v in copy.weights]:
        raise ValueError("the copy's variables are not the model's (another structure or other paths)")
