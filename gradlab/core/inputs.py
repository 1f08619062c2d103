"""Inputs, once for every tool: one batch ``(x, y[, sample_weight])`` as tensors, checked.

* :func:`coerce_batch` converts NumPy arrays (float64 included), Python lists and dicts or
  tuples of them into tensors of the dtypes the model runs in, as ``fit`` converts them
  (a ``tf.SparseTensor`` or ``tf.RaggedTensor``, which Keras runs through ``Input(sparse=True)``
  or ``Input(ragged=True)``, passes unchanged but for its dtype), and
  checks ``x`` against the model's inputs and against ``y`` (the ``ValueError`` names the
  argument and the shape). A ``tf.data.Dataset`` or a generator gets a message saying to
  pass one batch; an empty batch is a ``ValueError`` about the data.
* :func:`coerce_sample_weight` does the same for ``sample_weight`` (Keras's meaning: one
  non-negative weight per example, or a dict/list of them for several outputs).
* :func:`data_problems` finds NaN/inf *in the data*, so that a tool can report it as a data
  problem instead of blaming the model.
* :func:`split_batch` hands each replica of a ``tf.distribute`` strategy its slice of one
  global batch (chapter 08).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import numpy as np

from .._env import quiet_import_tensorflow
from ..i18n import ngettext
from .layers import leaf_layers

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "check_model",
    "coerce_batch",
    "coerce_sample_weight",
    "data_problems",
    "example_count",
    "output_dtype",
    "split_batch",
]


def check_model(model, *, built: bool = False) -> None:
    """``model`` must be a ``keras.Model`` (and built, with ``built=True``)."""
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model, got {type(model).__name__}")
    if built and not model.built:
        raise ValueError(
            "model must be built before its training step is traced, so that no variable is "
            "created inside tf.function; call model.build(input_shape) or model(x) once first"
        )


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


def _model_output_specs(model) -> list | None:
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        return None
    return list(tf.nest.flatten(outputs)) if outputs else None


def output_dtype(model):
    """The dtype in which the model's outputs come out when it is known (float64 for a float64
    model), else ``None``."""
    specs = _model_output_specs(model)
    if specs:
        dtypes = {tf.as_dtype(s.dtype) for s in specs if getattr(s, "dtype", None) is not None}
        if tf.float64 in dtypes:
            return tf.float64
        if dtypes:
            return sorted(dtypes, key=lambda d: d.size)[-1]
    if getattr(model, "compute_dtype", None) == "float64":
        return tf.float64
    return None


def _to_tensor(name: str, value, dtype=None, *, strings: bool = False):
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
    if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        return _composite(name, value, dtype)
    try:
        t = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as err:
        kind = type(value).__name__
        if isinstance(value, (list, tuple)):
            raise ValueError(
                f"{name} is a {kind} whose rows have different lengths (or hold something else than numbers), so "
                "it is not one array; for a model with a ragged input (keras.Input(..., ragged=True)) pass "
                f"tf.ragged.constant({name}), otherwise pad the rows to one length"
            ) from err
        raise ValueError(
            f"{name} must be an array or tensor of numbers (a NumPy array, tf.Tensor, tf.SparseTensor or "
            f"tf.RaggedTensor); got {type(value).__module__}.{kind}, which TensorFlow cannot convert"
        ) from err
    if t.shape.rank is None or t.shape.rank == 0:
        raise ValueError(f"{name} must have a batch axis; got a scalar {name}")
    if t.dtype == tf.bool:
        t = tf.cast(t, keras.backend.floatx())
    if t.dtype == tf.string and strings:  # a model whose input is keras.Input(dtype="string")
        return t
    if not (t.dtype.is_floating or t.dtype.is_integer):
        raise ValueError(f"{name} must hold numbers; got dtype {t.dtype.name}")
    if dtype is not None and t.dtype != dtype:
        t = tf.cast(t, dtype)
    return t


def _composite(name: str, value, dtype=None):
    """A ``tf.SparseTensor`` or ``tf.RaggedTensor`` as Keras runs it: unchanged but for its dtype."""
    kind = type(value).__name__
    if value.shape.rank is not None and value.shape.rank < 1:
        raise ValueError(f"{name} must have a batch axis; got a {kind} of rank 0")
    if value.dtype == tf.bool:
        value = tf.cast(value, keras.backend.floatx())
    if not (value.dtype.is_floating or value.dtype.is_integer):
        raise ValueError(f"{name} must hold numbers; got a {kind} of dtype {value.dtype.name}")
    return value if dtype is None or value.dtype == dtype else tf.cast(value, dtype)


def _check_composite_input(name: str, t, spec) -> None:
    """A sparse or ragged ``x`` needs an input that takes one, as Keras's ``Input(sparse=True)``."""
    for kind, flag in ((tf.SparseTensor, "sparse"), (tf.RaggedTensor, "ragged")):
        if isinstance(t, kind) and getattr(spec, flag, None) is False:
            dense = "tf.sparse.to_dense(x)" if flag == "sparse" else "x.to_tensor() (padded)"
            raise ValueError(
                f"{name} is a tf.{kind.__name__}, but the model's input is not {flag}: build it with "
                f"keras.Input(..., {flag}=True), or pass {dense}"
            )


def _several(value) -> bool:
    return isinstance(value, dict) or (
        isinstance(value, (tuple, list)) and bool(value) and hasattr(value[0], "shape"))


def _structure(name, value, convert):
    if isinstance(value, dict):
        return {k: convert(f"{name}[{k!r}]", v) for k, v in value.items()}
    if isinstance(value, tuple) or (isinstance(value, list) and value and hasattr(value[0], "shape")):
        return type(value)(convert(f"{name}[{i}]", v) for i, v in enumerate(value))
    return convert(name, value)


def example_count(x) -> int:
    """The number of examples in a coerced batch ``x`` (its leading axis)."""
    return int(tf.nest.flatten(x)[0].shape[0])


def coerce_batch(model, x, y=None):
    """``(x, y)`` as tensors, checked against each other and against the model's inputs.

    ``x`` becomes the dtype of the model's input (``floatx``, float32, when the model does not
    say, as ``fit`` converts NumPy float64; a float64 model keeps float64; integers stay
    integers for a model whose first layer is an ``Embedding``). ``y`` keeps integers (class
    labels); a float ``y`` becomes the dtype of the model's output when that is float64 (so a
    float64 model's loss is not rounded to float32), else ``floatx``. Dicts, tuples and lists
    of arrays are accepted for models with several inputs or outputs. ``y`` is required
    (``None`` is a ``ValueError`` naming ``y``): every tool needs the loss.
    """
    check_model(model)
    specs = _model_input_specs(model)
    leaves = leaf_layers(model)
    first = leaves[0] if leaves else None
    float64_model = getattr(model, "compute_dtype", None) == "float64"

    def convert_x(name, value, spec=None):
        t = _to_tensor(name, value, strings=getattr(spec, "dtype", None) in ("string", tf.string))
        want = None
        if spec is not None and getattr(spec, "dtype", None) is not None:
            want = tf.as_dtype(spec.dtype)
        elif t.dtype.is_floating:
            want = tf.float64 if float64_model else tf.as_dtype(keras.backend.floatx())
        elif t.dtype.is_integer and not isinstance(first, keras.layers.Embedding):
            want = tf.float64 if float64_model else tf.as_dtype(keras.backend.floatx())
        if want is not None and t.dtype != want:
            t = tf.cast(t, want)
        _check_composite_input(name, t, spec)
        if spec is not None and spec.shape is not None:
            expected = tuple(spec.shape)
            got = tuple(t.shape)
            if len(expected) != len(got) or any(e is not None and e != g
                                                for e, g in zip(expected[1:], got[1:], strict=True)):
                shown = "(" + ", ".join("batch" if i == 0 else str(d) for i, d in enumerate(expected)) + ")"
                raise ValueError(
                    f"{name} has shape {got}, but the model expects {shown}; reshape {name} "
                    "(one row per example, batch axis first)"
                )
        return t

    if specs is not None and len(specs) == 1 and _several(x):
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

    y_float = output_dtype(model)
    y_float = tf.float64 if y_float == tf.float64 else tf.as_dtype(keras.backend.floatx())

    def convert_y(name, value):
        t = _to_tensor(name, value)
        if t.dtype.is_floating and t.dtype != y_float:
            t = tf.cast(t, y_float)
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
    for t in tf.nest.flatten(ys):
        if int(t.shape[0]) != nx:
            raise ValueError(
                f"x and y must hold the same number of examples; x has {nx}, y has shape "
                f"{tuple(t.shape)}"
            )
    return xs, ys


def coerce_sample_weight(sample_weight, y):
    """``sample_weight`` as a float tensor (or a structure of them matching ``y``), checked.

    Keras's meaning: one weight per example (shape ``(batch,)`` or ``(batch, 1)``; a weight
    per time step, ``(batch, time)``, for sequence outputs), finite and not negative; a dict or
    list of them, one per output, for a model with several outputs. ``None`` stays ``None``.
    ``y`` is the coerced target (:func:`coerce_batch`).
    """
    if sample_weight is None:
        return None
    n = int(tf.nest.flatten(y)[0].shape[0])
    dtype = tf.float64 if any(t.dtype == tf.float64 for t in tf.nest.flatten(y)) \
        else tf.as_dtype(keras.backend.floatx())

    def convert(name, value):
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"{name} must hold one weight per example (shape ({n},)); got the number "
                             f"{value!r}")
        t = _to_tensor(name, value, dtype)
        if int(t.shape[0]) != n:
            raise ValueError(f"{name} must hold one weight per example: y has {n} examples, {name} has "
                             f"shape {tuple(t.shape)}")
        if t.shape.rank > 2 and not all(d == 1 for d in t.shape[2:]):
            raise ValueError(f"{name} must have shape ({n},), ({n}, 1) or ({n}, time); got "
                             f"{tuple(t.shape)}")
        values = t.numpy()
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name} holds NaN/inf; every weight must be a finite number >= 0")
        if np.any(values < 0):
            raise ValueError(f"{name} holds negative weights (e.g. {values[values < 0].ravel()[0]:g}); "
                             "every weight must be >= 0")
        return t

    if isinstance(sample_weight, dict):
        if not isinstance(y, dict):
            raise ValueError("sample_weight is a dict, so y must be a dict with the same keys (one per output)")
        unknown = sorted(set(sample_weight) - set(y))
        if unknown:
            raise ValueError(f"sample_weight has keys {unknown} that y does not have; y has {sorted(y)}")
        return {k: convert(f"sample_weight[{k!r}]", v) for k, v in sample_weight.items()}
    if isinstance(sample_weight, (list, tuple)) and _several(sample_weight):
        ys = tf.nest.flatten(y)
        if len(sample_weight) != len(ys):
            raise ValueError(f"sample_weight holds {len(sample_weight)} arrays but y holds {len(ys)}; "
                             "give one per output (or one array for all outputs)")
        return type(sample_weight)(convert(f"sample_weight[{i}]", v) for i, v in enumerate(sample_weight))
    return convert("sample_weight", sample_weight)


def data_problems(x, y=None, sample_weight=None) -> list[str]:
    """Plain-words findings about NaN/inf in the batch itself (empty list when it is clean)."""
    out = []
    for name, value in (("x", x), ("y", y), ("sample_weight", sample_weight)):
        if value is None:
            continue
        for t in tf.nest.flatten(value):
            if t is None or not t.dtype.is_floating:
                continue
            count, rows, n = _nonfinite_rows(t)
            if count:
                out.append(ngettext("{name} holds {count} NaN/inf value (in {rows} of {n} examples)",
                                    "{name} holds {count} NaN/inf values (in {rows} of {n} examples)",
                                    count).format(name=name, count=count, rows=rows, n=n))
    return out


def _nonfinite_rows(t) -> tuple[int, int, int]:
    """``(NaN/inf values, examples holding one, examples)`` of a dense, sparse or ragged tensor."""
    if isinstance(t, tf.SparseTensor):
        bad = tf.logical_not(tf.math.is_finite(t.values)).numpy()
        return int(bad.sum()), np.unique(t.indices.numpy()[bad, 0]).size, int(t.dense_shape[0])
    if isinstance(t, tf.RaggedTensor):
        flat = t.flat_values
        bad = tf.logical_not(tf.math.is_finite(flat)).numpy().reshape(int(tf.shape(flat)[0]), -1)
        row = np.arange(bad.shape[0])
        for splits in reversed(t.nested_row_splits):  # each flat value's example
            row = np.searchsorted(splits.numpy(), row, side="right") - 1
        return int(bad.sum()), np.unique(row[bad.any(axis=1)]).size, int(t.nrows())
    bad = tf.logical_not(tf.math.is_finite(t))
    rows = int(tf.reduce_sum(tf.cast(tf.reduce_any(tf.reshape(bad, [tf.shape(t)[0], -1]), axis=1), tf.int64)).numpy())
    return int(tf.reduce_sum(tf.cast(bad, tf.int64)).numpy()), rows, int(t.shape[0])


def split_batch(strategy, x, y, sample_weight=None):
    """``(x, y)`` (and ``sample_weight`` when given) as per-replica values (chapter 08).

    Replica ``i`` of ``n`` gets rows ``i*B/n`` to ``(i+1)*B/n``. With
    ``MultiWorkerMirroredStrategy`` every worker passes the same global batch and keeps its own
    slice (``replica_id_in_sync_group`` counts replicas across workers). The batch size must be
    divisible by the number of replicas, so that every replica's mean is over the same number of
    examples (otherwise the replicas' means do not add up to the global mean).
    """
    if not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(f"strategy must be a tf.distribute.Strategy, got {type(strategy).__name__}")
    parts = [x, y] + ([sample_weight] if sample_weight is not None else [])
    parts = [tf.nest.map_structure(tf.convert_to_tensor, p) for p in parts]
    replicas = strategy.num_replicas_in_sync
    sizes = {int(t.shape[0]) for p in parts for t in tf.nest.flatten(p)}
    if len(sizes) != 1 or next(iter(sizes)) % replicas:
        raise ValueError(
            f"x and y must have the same batch size, divisible by the {replicas} replicas; "
            f"got {sorted(sizes)}")
    share = next(iter(sizes)) // replicas

    def part(ctx):
        i = ctx.replica_id_in_sync_group
        return tuple(tf.nest.map_structure(lambda t: t[i * share:(i + 1) * share], p) for p in parts)

    return strategy.experimental_distribute_values_from_function(part)
