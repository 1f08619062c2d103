"""The one training core every gradlab tool runs on (chapters 01, 03 and 04).

Pure computation: TensorFlow and Keras in, tensors, NumPy numbers and small dataclasses out.
Nothing here imports ipywidgets. :func:`gradlab.gradient_report`, :func:`gradlab.train_mlp`,
:func:`gradlab.inspect_training_step`, :func:`gradlab.train_steps`, :func:`gradlab.check_trains`,
:func:`gradlab.make_train_step`, :class:`gradlab.GradNormTrainStep` and
:class:`gradlab.GradNormLogger` all use the pieces below, so each mechanism exists once:

* **inputs** (:func:`coerce_batch`): NumPy float64 arrays and Python lists become tensors of
  the model's input dtype (as ``fit`` converts them); a ``tf.data.Dataset`` or a generator gets
  a message saying to pass one batch; ``x`` and ``y`` must hold the same number of examples and
  ``x`` must match the model's input shape (the ``ValueError`` names the argument and the shape);
  an empty batch is a ``ValueError`` about the data. :func:`data_problems` finds NaN/inf *in the
  data*, so that a tool can report it as a data problem instead of blaming the model.
* **the loss** (:func:`resolve_loss`): ``loss_fn(y, y_pred)`` when given; otherwise the model's
  compiled loss through ``model.compute_loss`` (which adds ``model.losses``) when the model is
  compiled with a loss; otherwise the mean squared error, the documented default, plus
  ``model.losses`` (weight regularizers, ``add_loss``). The default refuses a ``y`` whose shape
  differs from the output's, since it would broadcast into a wrong loss.
* **mixed precision** (:func:`fit_optimizer`, :func:`loss_scale`, :func:`compute_gradients`):
  the loss is scaled with ``optimizer.scale_loss`` and the gradients are unscaled before anyone
  reads them; a ``mixed_float16`` model gets a ``LossScaleOptimizer`` as ``compile`` gives it.
* **clipping** (:func:`clip_gradients`, :func:`global_norm`): exactly ``tf.clip_by_value``,
  ``_norm`` and ``_global_norm`` for dense gradients, correct for ``IndexedSlices`` (duplicate
  rows are summed *before* clipping, so the bound holds for the dense gradient), ``None`` passed
  through in every mode; one global norm, in float64, for every tool.
* **one update** (:func:`apply_update`): clip, check finiteness, apply (skipping non-finite steps
  when asked; a ``LossScaleOptimizer`` sees the rescaled gradients and adapts its scale).
* **one layer walker** (:func:`leaf_layers`, :func:`variable_layers`): nested models expanded
  into their layers; and **one per-layer tap** (:func:`tap_layers`), which records every layer
  call *made by the model's own call* (Sequential, functional, nested or subclassed): each
  call's input and outputs, and for ``Dense`` layers the pre-activation, all watched by the tape.
* **state** (:func:`snapshot`, :func:`restore`): every model variable, trainable or not
  (BatchNorm statistics, dropout seeds), so an inspection can put the model back bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "CLIP_MODES",
    "LayerCall",
    "Loss",
    "Taps",
    "all_finite",
    "apply_update",
    "check_clip",
    "check_model",
    "check_optimizer",
    "clip_gradients",
    "coerce_batch",
    "compute_gradients",
    "data_problems",
    "fit_optimizer",
    "has_custom_train_step",
    "global_norm",
    "is_recurrent",
    "leaf_layers",
    "loss_scale",
    "resolve_loss",
    "restore",
    "snapshot",
    "tap_layers",
    "variable_layers",
    "variable_path",
]

#: Clipping modes: what ``tf.clip_by_value``, ``tf.clip_by_norm`` and ``tf.clip_by_global_norm`` do.
CLIP_MODES: tuple[str, ...] = ("value", "norm", "global_norm")


# ----------------------------------------------------------------------------- models
def check_model(model, *, built: bool = False) -> None:
    """``model`` must be a ``keras.Model`` (and built, with ``built=True``)."""
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    if built and not model.built:
        raise ValueError(
            "model must be built before its training step is traced, so that no variable is "
            "created inside tf.function; call model.build(input_shape) or model(x) once first"
        )


def has_custom_train_step(model) -> bool:
    """True when ``model``'s class overrides ``train_step`` outside Keras and gradlab, so that
    ``fit`` runs the learner's own step (whose loss gradlab cannot see unless it is compiled)."""
    for cls in type(model).__mro__:
        if "train_step" in cls.__dict__:
            module = getattr(cls, "__module__", "") or ""
            return not (module.startswith("keras") or module.startswith("gradlab."))
    return False


def check_optimizer(optimizer, variables) -> None:
    """A ``ValueError`` when ``optimizer`` was already built for other variables (another model's).

    A Keras optimizer keeps one slot per variable it was built with and refuses any other
    variable, deep inside ``apply_gradients`` (inside a ``tf.function`` the message arrives
    wrapped in a long traceback). Checked eagerly, before anything is traced or trained.
    """
    inner = optimizer
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        inner = optimizer.inner_optimizer
    if not getattr(inner, "built", False):
        return
    known = getattr(inner, "_trainable_variables", None)
    if known is None:  # pragma: no cover - a Keras version without the attribute
        return
    ids = {id(v) for v in known}
    foreign = [variable_path(v) for v in variables if id(v) not in ids]
    if foreign:
        raise ValueError(
            f"optimizer was already built for other variables (another model's, {len(known)} of them), "
            f"so it cannot update {foreign[0]!r}{' and others' if len(foreign) > 1 else ''}: build a fresh "
            "optimizer for each model, e.g. optimizer=keras.optimizers.SGD(0.01)"
        )


def variable_path(v) -> str:
    return getattr(v, "path", None) or v.name


def leaf_layers(model) -> list:
    """Every layer of ``model`` that is not itself a model, nested models expanded, in order.

    A layer reached twice (shared between nested models) is listed once. Layers that hold
    sub-layers but are not models (``LSTM`` and its cell, ``MultiHeadAttention``,
    ``Bidirectional``) are one leaf each.
    """
    out, seen = [], set()

    def walk(layer):
        if isinstance(layer, keras.Model):
            for sub in layer.layers:
                walk(sub)
        elif id(layer) not in seen and not isinstance(layer, keras.layers.InputLayer):
            seen.add(id(layer))
            out.append(layer)

    walk(model)
    return out


def variable_layers(model) -> dict[int, str]:
    """``id(variable) -> name`` of the leaf layer that owns it (``"?"`` not listed)."""
    owner: dict[int, str] = {}
    for layer in leaf_layers(model):
        for v in layer.variables:
            owner.setdefault(id(v), layer.name)
    return owner


def is_recurrent(layer) -> bool:
    """True for ``SimpleRNN``/``LSTM``/``GRU``/any ``keras.layers.RNN`` and ``Bidirectional``."""
    return isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional))


# ----------------------------------------------------------------------------- state
def snapshot(model) -> list:
    """Copies of every variable of ``model`` (trainable or not, seeds included)."""
    return [(v, tf.identity(tf.convert_to_tensor(v))) for v in model.variables]


def restore(saved) -> None:
    """Put back what :func:`snapshot` copied."""
    for v, value in saved:
        v.assign(value)


# ----------------------------------------------------------------------------- inputs
def _is_generator(value) -> bool:
    return inspect.isgenerator(value) or (
        isinstance(value, Iterator) and not isinstance(value, (np.ndarray, tf.Tensor))
    )


def _model_input_specs(model) -> list | None:
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    return list(inputs) if inputs else None


def _first_leaf(model):
    leaves = leaf_layers(model)
    return leaves[0] if leaves else None


def _to_tensor(name: str, value, dtype=None):
    if value is None or isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{name} must be an array or tensor of numbers (one batch); got {value!r}")
    if isinstance(value, tf.data.Dataset):
        raise ValueError(
            f"{name} is a tf.data.Dataset; this tool looks at one batch. Pass one batch, e.g. "
            "x, y = next(iter(dataset))"
        )
    if _is_generator(value):
        raise ValueError(
            f"{name} is a generator or iterator ({type(value).__name__}); this tool looks at one "
            "batch. Pass one batch, e.g. x, y = next(generator)"
        )
    if isinstance(value, keras.utils.PyDataset):
        raise ValueError(f"{name} is a keras.utils.PyDataset; pass one batch, e.g. x, y = dataset[0]")
    try:
        t = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} must be an array or tensor of numbers (a ragged list cannot be one); got "
            f"{type(value).__name__}"
        ) from err
    if t.shape.rank is None or t.shape.rank == 0:
        raise ValueError(f"{name} must have a batch axis; got a scalar {name}")
    if t.dtype == tf.bool:
        t = tf.cast(t, keras.backend.floatx())
    if not (t.dtype.is_floating or t.dtype.is_integer):
        raise ValueError(f"{name} must hold numbers; got dtype {t.dtype.name}")
    if dtype is not None and t.dtype != dtype:
        t = tf.cast(t, dtype)
    return t


def _structure(name, value, convert):
    if isinstance(value, dict):
        return {k: convert(f"{name}[{k!r}]", v) for k, v in value.items()}
    if isinstance(value, tuple) or (isinstance(value, list) and value and hasattr(value[0], "shape")):
        return type(value)(convert(f"{name}[{i}]", v) for i, v in enumerate(value))
    return convert(name, value)


def coerce_batch(model, x, y=None):
    """``(x, y)`` as tensors, checked against each other and against the model's inputs.

    ``x`` becomes the dtype of the model's input (``floatx``, float32, when the model does not
    say, as ``fit`` converts NumPy float64; integers stay integers for a model whose first layer
    is an ``Embedding``); ``y`` keeps integers (class labels) and becomes ``floatx`` otherwise.
    Dicts, tuples and lists of arrays are accepted for models with several inputs or outputs.
    ``y`` is required (``None`` is a ``ValueError`` naming ``y``): every tool needs the loss.
    """
    specs = _model_input_specs(model)
    first = _first_leaf(model)

    def convert_x(name, value, spec=None):
        t = _to_tensor(name, value)
        want = None
        if spec is not None and getattr(spec, "dtype", None) is not None:
            want = tf.as_dtype(spec.dtype)
        elif t.dtype.is_floating:
            want = tf.as_dtype(keras.backend.floatx())
        elif t.dtype.is_integer and not isinstance(first, keras.layers.Embedding):
            want = tf.as_dtype(keras.backend.floatx())
        if want is not None and t.dtype != want:
            t = tf.cast(t, want)
        if spec is not None and spec.shape is not None:
            expected = tuple(spec.shape)
            got = tuple(t.shape)
            if len(expected) != len(got) or any(e is not None and e != g for e, g in zip(expected[1:], got[1:], strict=True)):
                shown = "(" + ", ".join("batch" if i == 0 else str(d) for i, d in enumerate(expected)) + ")"
                raise ValueError(
                    f"{name} has shape {got}, but the model expects {shown}; reshape {name} "
                    "(one row per example, batch axis first)"
                )
        return t

    several = isinstance(x, dict) or (isinstance(x, (tuple, list)) and x and hasattr(x[0], "shape"))
    if specs is not None and len(specs) == 1 and several:
        raise ValueError(
            f"x is a {type(x).__name__} of {len(x)} arrays, but the model has a single input; pass a "
            "single array or tensor"
        )
    if specs is not None and len(specs) == 1:
        xs = convert_x("x", x, specs[0])
    elif specs is not None and isinstance(x, (list, tuple)) and len(x) == len(specs):
        xs = type(x)(convert_x(f"x[{i}]", v, s) for i, (v, s) in enumerate(zip(x, specs, strict=True)))
    else:
        xs = _structure("x", x, convert_x)

    def convert_y(name, value):
        t = _to_tensor(name, value)
        if t.dtype.is_floating and t.dtype != tf.as_dtype(keras.backend.floatx()):
            t = tf.cast(t, keras.backend.floatx())
        return t

    if y is None:
        raise ValueError(
            "y is None: gradlab's tools need the targets of the batch (the y you would pass to fit) "
            "to compute the loss; pass y, e.g. x, y = next(iter(dataset))"
        )
    ys = _structure("y", y, convert_y)
    n = {int(t.shape[0]) for t in tf.nest.flatten(xs)}
    if len(n) != 1:
        raise ValueError(f"every input in x must hold the same number of examples; got {sorted(n)}")
    nx = n.pop()
    if nx == 0:
        raise ValueError(
            "x is an empty batch (0 examples): this is a problem with the data, not the model. "
            "Pass at least one example (check the slicing or filtering that produced the batch)"
        )
    if ys is not None:
        for t in tf.nest.flatten(ys):
            if int(t.shape[0]) != nx:
                raise ValueError(
                    f"x and y must hold the same number of examples; x has {nx}, y has shape "
                    f"{tuple(t.shape)}"
                )
    return xs, ys


def data_problems(x, y=None) -> list[str]:
    """Plain-words findings about NaN/inf in the batch itself (empty list when it is clean)."""
    out = []
    for name, value in (("x", x), ("y", y)):
        if value is None:
            continue
        for t in tf.nest.flatten(value):
            if not t.dtype.is_floating:
                continue
            bad = tf.logical_not(tf.math.is_finite(t))
            count = int(tf.reduce_sum(tf.cast(bad, tf.int64)).numpy())
            if count:
                rows = int(tf.reduce_sum(tf.cast(
                    tf.reduce_any(tf.reshape(bad, [tf.shape(t)[0], -1]), axis=1), tf.int64)).numpy())
                out.append(f"{name} holds {count} NaN/inf value{'s' if count > 1 else ''} "
                           f"(in {rows} of {int(t.shape[0])} examples)")
    return out


# ----------------------------------------------------------------------------- the loss
@dataclasses.dataclass(frozen=True)
class Loss:
    """The loss every tool uses; ``loss(x, y, y_pred, training)`` is a float32 scalar tensor.

    ``kind`` is ``"given"`` (``loss_fn``), ``"compiled"`` (``model.compute_loss``) or ``"mse"``;
    every kind includes ``model.losses`` (regularizers, ``add_loss``).
    """

    model: object
    kind: str
    fn: Callable | None = None

    @property
    def description(self) -> str:
        if self.default_for_custom_step:
            return ("mean squared error + model.losses (the default: the model has its own train_step "
                    "and no compiled loss, so the loss it trains with is unknown here; pass loss_fn)")
        return {"given": "loss_fn", "compiled": "the model's compiled loss",
                "mse": "mean squared error"}[self.kind] + " + model.losses"

    @property
    def default_for_custom_step(self) -> bool:
        """True when the MSE default stands in for the unknown loss of a custom ``train_step``."""
        return self.kind == "mse" and has_custom_train_step(self.model)

    def _sparse_categorical(self) -> bool:
        fn = self.fn if self.kind == "given" else getattr(self.model, "loss", None) if self.kind == "compiled" else None
        return (isinstance(fn, keras.losses.SparseCategoricalCrossentropy)
                or fn is keras.losses.sparse_categorical_crossentropy
                or (isinstance(fn, str) and fn in ("sparse_categorical_crossentropy", "SparseCategoricalCrossentropy")))

    def _check_sparse_labels(self, y, y_pred) -> None:
        """Shape and range of the integer labels a SparseCategoricalCrossentropy needs."""
        ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        if len(ys) != 1 or len(ps) != 1:
            return
        t, p = ys[0], ps[0]
        a, b = tuple(t.shape), tuple(p.shape)
        if not b or b[-1] is None:
            return
        classes = int(b[-1])
        fix = (f"pass integer class labels 0..{classes - 1} of shape {b[:-1]} (np.argmax(y, axis=-1) turns "
               "one-hot rows into labels), or use CategoricalCrossentropy for one-hot y")
        if len(a) == len(b) and a[-1] == classes and classes > 1:
            raise ValueError(
                f"y has shape {a} and looks one-hot, but the loss is SparseCategoricalCrossentropy, "
                f"which wants one integer label per example: {fix}")
        def same(u, v):
            return len(u) == len(v) and all(i is None or j is None or i == j for i, j in zip(u, v, strict=True))

        if not (same(a, b[:-1]) or (len(a) == len(b) and a[-1] == 1 and same(a[:-1], b[:-1]))):
            raise ValueError(
                f"y has shape {a}, but SparseCategoricalCrossentropy on an output of shape {b} wants "
                f"labels of shape {b[:-1]}: {fix}")
        if not tf.executing_eagerly() or not hasattr(t, "numpy"):
            return
        values = np.asarray(t.numpy(), dtype=np.float64)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values >= classes)
        if bad.any():
            shown = values[bad].ravel()[:3]
            raise ValueError(
                f"y holds {int(bad.sum())} label{'s' if bad.sum() > 1 else ''} outside the classes 0..{classes - 1} "
                f"of the model's {classes}-unit output (e.g. {', '.join(f'{v:g}' for v in shown)}): "
                f"SparseCategoricalCrossentropy needs integer labels 0..{classes - 1}; relabel y (e.g. "
                "labels 1..n shifted by -1), or give the output layer one unit per class")

    def check(self, y, y_pred) -> None:
        """Shape checks of ``y`` against the output (called eagerly, outside any tf.function).

        The default MSE refuses a ``y`` that would broadcast; a SparseCategoricalCrossentropy
        (compiled or ``loss_fn``) refuses one-hot ``y`` and labels outside ``0..n-1``.
        """
        if self._sparse_categorical():
            self._check_sparse_labels(y, y_pred)
        if self.kind != "mse":
            return
        ys, ps = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        if isinstance(y_pred, dict) and not isinstance(y, dict):
            if len(ps) == 1:
                ps = ps[:1]
            else:
                raise ValueError(
                    f"the model returns a dict of {len(ps)} outputs ({', '.join(sorted(y_pred))}); "
                    "y must be a dict with the same keys for the default mean squared error, or pass loss_fn"
                )
        if len(ys) != len(ps):
            raise ValueError(f"y holds {len(ys)} arrays but the model returns {len(ps)} outputs; "
                             "give one target per output, or pass loss_fn")
        for t, p in zip(ys, ps, strict=True):
            a, b = tuple(t.shape), tuple(p.shape)
            if len(a) != len(b) or any(i is not None and j is not None and i != j
                                       for i, j in zip(a, b, strict=True)):
                raise ValueError(
                    f"y has shape {tuple(t.shape)} but the model's output has shape {tuple(p.shape)}; "
                    "the default mean squared error would broadcast them into a wrong loss. "
                    f"Reshape y to {tuple(p.shape)} (e.g. y.reshape(-1, 1)), or pass your own loss_fn"
                )

    def __call__(self, x, y, y_pred, training: bool = True):
        model = self.model
        if self.kind == "compiled":
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=training)
            return tf.cast(loss, tf.float32)
        if self.kind == "given":
            loss = tf.convert_to_tensor(self.fn(y, y_pred))
            if loss.shape.rank != 0:
                raise ValueError(
                    f"loss_fn must return a scalar, it returned shape {tuple(loss.shape)}. "
                    "tape.gradient would silently differentiate the sum of its elements (chapter 02); "
                    "reduce it, e.g. with tf.reduce_mean"
                )
            loss = tf.cast(loss, tf.float32)
        else:
            if isinstance(y_pred, dict) and isinstance(y, dict):
                pairs = [(y[k], y_pred[k]) for k in sorted(y_pred)]
            else:
                pairs = list(zip(tf.nest.flatten(y), tf.nest.flatten(y_pred), strict=False))
            loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32) - tf.cast(p, tf.float32)))
                             for t, p in pairs])
        extra = [tf.cast(v, tf.float32) for v in model.losses]
        return loss + tf.add_n(extra) if extra else loss


def resolve_loss(model, loss_fn=None) -> Loss:
    """The loss of :class:`Loss`: ``loss_fn``, else the compiled loss, else MSE (all + ``model.losses``)."""
    if loss_fn is not None:
        if not callable(loss_fn):
            raise ValueError(
                "loss_fn must be None (the model's compiled loss, or mean squared error) or a "
                f"callable (y_true, y_pred) -> scalar; got {loss_fn!r}"
            )
        return Loss(model, "given", loss_fn)
    if getattr(model, "compiled", False) and getattr(model, "loss", None) is not None:
        return Loss(model, "compiled")
    return Loss(model, "mse")


# ----------------------------------------------------------------------------- mixed precision
def fit_optimizer(model, optimizer):
    """``optimizer`` as ``compile`` would use it: wrapped in a ``LossScaleOptimizer`` for a
    ``mixed_float16`` model, so float16 gradients do not underflow."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"optimizer must be a keras.optimizers.Optimizer; got {type(optimizer).__name__}")
    policy = getattr(getattr(model, "dtype_policy", None), "name", "")
    if policy == "mixed_float16" and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def loss_scale(optimizer):
    """The current loss scale of a ``LossScaleOptimizer`` as a tensor, ``None`` otherwise."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        if optimizer.built:
            return tf.cast(tf.convert_to_tensor(optimizer.dynamic_scale), tf.float32)
        return tf.constant(float(optimizer.initial_scale), tf.float32)
    return None


def compute_gradients(tape, loss, variables, optimizer=None):
    """``tape.gradient`` of ``loss`` scaled as ``optimizer.scale_loss`` scales it, then unscaled.

    Returns the gradients of the *unscaled* loss (``None`` kept), computed the way ``fit``
    computes them, so float16 gradients that the scale keeps from underflowing are kept.
    """
    scale = None if optimizer is None else loss_scale(optimizer)
    if scale is None:
        return tape.gradient(loss, variables)
    # d(scale * loss) = scale * d(loss): the scale enters as the output gradient, exactly where
    # optimizer.scale_loss puts it, so every float16 gradient below it is scaled up.
    grads = tape.gradient(loss, variables, output_gradients=tf.cast(scale, loss.dtype))
    return [None if g is None else _map_values(g, lambda v: v / tf.cast(scale, v.dtype)) for g in grads]


# ----------------------------------------------------------------------------- clipping and norms
def check_clip(clip):
    """``None`` or a validated ``(mode, threshold)`` clip setting (see :func:`clip_gradients`)."""
    if clip is None:
        return None
    if (
        not isinstance(clip, (tuple, list))
        or len(clip) != 2
        or clip[0] not in CLIP_MODES
        or isinstance(clip[1], bool)
        or not isinstance(clip[1], (int, float, np.floating, np.integer))
        or not clip[1] > 0
        or not math.isfinite(clip[1])
    ):
        raise ValueError(
            "clip must be None or (mode, threshold) with mode one of "
            f"{', '.join(CLIP_MODES)} and a finite threshold > 0; got {clip!r}"
        )
    return (clip[0], float(clip[1]))


def _map_values(g, fn):
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)
    return fn(g)


def _dedupe(g):
    """An ``IndexedSlices`` with each row once (duplicates summed, as the dense gradient has them)."""
    if not isinstance(g, tf.IndexedSlices):
        return g
    unique, pos = tf.unique(g.indices)
    values = tf.math.unsorted_segment_sum(g.values, pos, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, g.dense_shape)


def _sumsq64(g):
    v = g.values if isinstance(g, tf.IndexedSlices) else g
    return tf.reduce_sum(tf.square(tf.cast(v, tf.float64)))


def global_norm(grads):
    """The joint L2 norm of ``grads`` as a float64 tensor: ``None`` skipped, ``IndexedSlices``
    rows summed first (as the dense gradient), squares taken in float64 so tiny gradients do
    not flush to 0. Works eagerly and inside ``tf.function``; every gradlab tool uses it."""
    parts = [_sumsq64(_dedupe(g)) for g in grads if g is not None]
    if not parts:
        return tf.constant(0.0, tf.float64)
    return tf.sqrt(tf.add_n(parts))


def clip_gradients(grads: Sequence, clip):
    """Clip a list of gradients exactly as ``tf.clip_by_value``/``_norm``/``_global_norm`` (chapter 01).

    ``clip`` is ``None`` or ``(mode, threshold)``; ``value`` clips to ``[-t, t]`` element by
    element, ``norm`` rescales each tensor whose L2 norm exceeds ``t``, ``global_norm``
    rescales all together when their joint norm exceeds ``t``. ``None`` gradients stay ``None``
    in every mode. An ``IndexedSlices`` gradient (from an ``Embedding`` or ``tf.gather``) has its
    duplicate rows summed first, so the bound holds for the dense gradient it stands for
    (``tf.clip_by_value`` on the raw slices clips each duplicate, and their sum can exceed it).
    """
    clip = check_clip(clip)
    grads = list(grads)
    if clip is None:
        return grads
    mode, t = clip
    out = []
    if mode == "global_norm":
        norm = global_norm(grads)
        for g in grads:
            if g is None:
                out.append(None)
                continue
            g = _dedupe(g)

            def scale(v):  # tf.clip_by_global_norm's own formula, NaN for a non-finite norm
                n = tf.cast(norm, v.dtype)
                return v * (t * tf.minimum(1.0 / n, 1.0 / t) + (n - n))

            out.append(_map_values(g, scale))
        return out
    for g in grads:
        if g is None:
            out.append(None)
        elif mode == "value":
            out.append(_map_values(_dedupe(g), lambda v: tf.clip_by_value(v, -t, t)))
        else:
            g = _dedupe(g)
            out.append(_map_values(g, lambda v: tf.clip_by_norm(v, t)))
    return out


def all_finite(grads):
    """A boolean tensor: every non-``None`` gradient is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
              for g in grads if g is not None]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def apply_update(optimizer, grads, variables, *, clip=None, check_finite: bool = True) -> dict:
    """Clip ``grads`` (of the unscaled loss), check them and apply them with ``optimizer``.

    Returns a dict of tensors: ``global_norm`` (before clipping, float64), ``clipped_norm``,
    ``finite``, ``applied`` and ``grads`` (the gradients the norms were taken of). ``None``
    gradients are left out of the update. With ``check_finite`` a step with NaN/inf gradients
    is skipped. A ``LossScaleOptimizer`` gets the clipped gradients multiplied back by its
    scale, so that it unscales them, skips a step that overflowed in float16 and lowers its
    scale, exactly as in ``fit``.

    Under a ``tf.distribute`` strategy with several replicas (chapter 08) the replicas'
    gradients are summed first, so that the norm, the clipping and the finite check see the
    global-batch gradient, the same on every replica; each replica then applies its share.
    """
    grads = list(grads)
    ctx = tf.distribute.get_replica_context()
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    if replicas > 1:
        present = [i for i, g in enumerate(grads) if g is not None]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
        for i, g in zip(present, reduced, strict=True):
            grads[i] = g
    norm = global_norm(grads)
    finite = all_finite(grads)
    clipped = clip_gradients(grads, clip)
    clipped_norm = global_norm(clipped)
    scale = loss_scale(optimizer)
    pairs = [(g, v) for g, v in zip(clipped, variables, strict=True) if g is not None]
    shares = [g for g, _ in pairs]
    if replicas > 1:  # a Keras optimizer sums the replicas' gradients itself
        shares = [_map_values(g, lambda v: v / replicas) for g in shares]
    if scale is not None:
        shares = [_map_values(g, lambda v: v * tf.cast(scale, v.dtype)) for g in shares]
    targets = [v for _, v in pairs]

    def apply(shares=shares):
        if targets:
            optimizer.apply_gradients(zip(shares, targets, strict=True))
        return tf.constant(True)

    def cond_across_replicas(strategy, finite, shares):
        # A cond whose branch synchronises replicas must run in cross-replica context (as
        # keras.optimizers.LossScaleOptimizer does); every replica holds the same `finite`.
        def apply_all():
            strategy.extended.call_for_each_replica(apply, args=(shares,))
            return tf.constant(True)

        first = strategy.experimental_local_results(finite)[0]
        return tf.cond(first, apply_all, lambda: tf.constant(False))

    if scale is not None:  # the LossScaleOptimizer checks and adapts its scale itself
        apply()
        applied = finite
    elif not check_finite:
        applied = apply()
    elif replicas == 1 or tf.__internal__.distribute.strategy_supports_no_merge_call():
        applied = tf.cond(finite, apply, lambda: tf.constant(False))
    else:
        applied = ctx.merge_call(cond_across_replicas, args=(finite, shares))
    return {"global_norm": norm, "clipped_norm": clipped_norm, "finite": finite, "applied": applied,
            "grads": grads}


# ----------------------------------------------------------------------------- per-layer taps
@dataclasses.dataclass
class LayerCall:
    """One call of one leaf layer during the model's own forward pass."""

    layer: object
    index: int  # 0 for the layer's first call, 1 for its second, ...
    inputs: object  # the first positional argument (a tensor, or a structure of tensors)
    outputs: list  # the float outputs, flattened
    pre_activation: object = None  # Dense only: the tensor its activation received
    #: The Keras mask the call received (``Embedding(mask_zero=True)`` padding), or ``None``.
    mask: object = None

    @property
    def name(self) -> str:
        return self.layer.name if self.index == 0 else f"{self.layer.name} (call {self.index + 1})"


@dataclasses.dataclass
class Taps:
    """What :func:`tap_layers` recorded: the layer calls in the order the model made them."""

    calls: list
    #: True when some layer ran inside a ``tf.function`` (its tensors cannot be tapped eagerly).
    untapped: bool = False

    def count(self, layer) -> int:
        return sum(1 for c in self.calls if c.layer is layer)


def _float_tensors(value) -> list:
    return [t for t in tf.nest.flatten(value) if isinstance(t, tf.Tensor) and t.dtype.is_floating]


@contextlib.contextmanager
def tap_layers(model, tape):
    """Record every leaf-layer call made by ``model``'s own call, watched by ``tape``.

    Inside the ``with`` block, each leaf layer's ``call`` (and a ``Dense`` layer's activation)
    is wrapped on the instance: the wrapper runs the original, watches its outputs (and the
    Dense pre-activation, and a recurrent layer's input) on ``tape`` and appends a
    :class:`LayerCall`. Nothing is re-implemented, so the numbers are those of the model as it
    runs (float16 under mixed precision, shared layers called twice recorded twice, skip
    connections of subclassed models included). The wrappers are removed on exit.
    """
    taps = Taps([])
    patched = []
    try:
        _patch_layers(model, tape, taps, patched)
        yield taps
    finally:
        for layer, attr, original in reversed(patched):
            if original is _ABSENT:
                object.__delattr__(layer, attr)
            else:
                object.__setattr__(layer, attr, original)


_ABSENT = object()


def _patch_layers(model, tape, taps, patched) -> None:
    for layer in leaf_layers(model):
        original_call = layer.call
        counter = {"n": 0}

        def make(layer=layer, original_call=original_call, counter=counter):
            state = {"z": None}
            if isinstance(layer, keras.layers.Dense) and layer.activation is not None:
                original_act = layer.activation

                def activation(z):
                    tape.watch(z)
                    state["z"] = z
                    return original_act(z)

                object.__setattr__(layer, "activation", activation)
                patched.append((layer, "activation", original_act))

            def call(*args, **kwargs):
                if not tf.executing_eagerly():  # called while a tf.function traces: nothing to tap
                    taps.untapped = True
                    return original_call(*args, **kwargs)
                state["z"] = None
                inputs = args[0] if args else next(iter(kwargs.values()), None)
                if is_recurrent(layer):
                    for t in _float_tensors(inputs):
                        tape.watch(t)
                mask = kwargs.get("mask")
                if mask is None:  # Keras attaches the mask of a masked tensor to the tensor itself
                    mask = getattr(inputs, "_keras_mask", None)
                out = original_call(*args, **kwargs)
                outs = _float_tensors(out)
                for t in outs:
                    tape.watch(t)
                taps.calls.append(LayerCall(layer, counter["n"], inputs, outs, state["z"], mask))
                counter["n"] += 1
                return out

            return call

        own = layer.__dict__.get("call", _ABSENT)  # an instance-level call the learner set stays
        object.__setattr__(layer, "call", make())
        patched.append((layer, "call", own))
