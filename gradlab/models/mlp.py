"""The workbook's model family: activations, initializers, Dense stacks (plain, residual,
normalized), synthetic data.

Pure computation (chapters 01, 04, 05): :func:`build_mlp` builds the Keras model whose
gradients the explorer's engine (:mod:`gradlab.engines.mlp`) computes without Keras.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._env import quiet_import_tensorflow
from .._validate import check_choice as _check_choice
from .._validate import check_int as _check_int
from ..i18n import N_

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "ACTIVATIONS",
    "DTYPES",
    "INITIALIZERS",
    "MAX_DEPTH",
    "NORMS",
    "activation_curves",
    "build_mlp",
    "make_data",
    "make_initializer",
]

#: Activation names accepted everywhere (Keras names).
ACTIVATIONS: tuple[str, ...] = (
    "linear",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "elu",
    "selu",
    "gelu",
)

#: Initializer names, with the label the explorer shows (marked for translation). All but two are Keras names;
#: ``small_normal`` and ``large_normal`` are ``RandomNormal(stddev=0.01)`` and ``(stddev=1)``.
INITIALIZERS: dict[str, str] = {
    "zeros": N_("zeros"),
    "small_normal": N_("small normal (σ=0.01)"),
    "large_normal": N_("large normal (σ=1)"),
    "glorot_uniform": N_("glorot_uniform (Xavier)"),
    "glorot_normal": N_("glorot_normal (Xavier)"),
    "he_normal": N_("he_normal"),
    "he_uniform": N_("he_uniform"),
    "lecun_normal": N_("lecun_normal"),
    "lecun_uniform": N_("lecun_uniform"),
    "orthogonal": N_("orthogonal"),
    "standard_uniform": N_("U[±1/√n] (Glorot & Bengio's 'standard')"),
}

#: Normalization of each hidden layer's pre-activation (chapter 05): none, the batch's
#: statistics (``BatchNormalization`` in training mode) or the example's (``LayerNormalization``).
NORMS: tuple[str, ...] = ("none", "batch", "layer")
#: Compute dtypes of the forward and backward pass (chapter 05); variables stay float32.
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
#: Keras's default epsilon of ``BatchNormalization`` and ``LayerNormalization``.
NORM_EPSILON = 1e-3

MAX_DEPTH = 200


def make_initializer(name: str, seed: int = 0) -> keras.initializers.Initializer:
    """Return a seeded Keras initializer for one of :data:`INITIALIZERS` (chapter 01).

    A seeded Keras 3 initializer returns the same values every call, so the same
    ``(name, seed, shape)`` always gives the same kernel.
    """
    _check_choice("initializer", name, tuple(INITIALIZERS))
    if name == "zeros":
        return keras.initializers.Zeros()
    if name == "small_normal":
        return keras.initializers.RandomNormal(stddev=0.01, seed=seed)
    if name == "large_normal":
        return keras.initializers.RandomNormal(stddev=1.0, seed=seed)
    if name == "standard_uniform":  # U[-1/sqrt(fan_in), 1/sqrt(fan_in)]: Var W = 1/(3 fan_in)
        return keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform", seed=seed)
    return type(keras.initializers.get(name))(seed=seed)


OUTPUT_SEED_OFFSET = 10_000


def build_mlp(
    depth: int,
    *,
    width: int = 64,
    activation: str = "relu",
    initializer: str = "glorot_uniform",
    input_dim: int | None = None,
    seed: int = 0,
    residual: bool = False,
    norm: str | None = None,
) -> keras.Model:
    """Build ``depth`` hidden ``Dense(width)`` layers and a ``Dense(1)`` output (chapters 01, 04, 05).

    Hidden layer ``i`` (0-based) uses ``make_initializer(initializer, seed + i)``; the output
    layer uses Keras' default ``glorot_uniform`` with its own fixed seed, so it does not change
    with ``depth``. Biases start at zero. ``input_dim`` defaults to ``width``.

    With the defaults this is a ``keras.Sequential`` of ``Dense(width, activation=...)``
    layers named ``hidden_1`` ... With ``residual=True`` or ``norm`` in ``("batch", "layer")``
    (chapter 05) it is a functional model whose block ``i`` is ``Dense(width, name="hidden_i")``
    → optional ``BatchNormalization``/``LayerNormalization`` (``norm_i``, gamma 1, beta 0) →
    ``Activation(activation, name="act_i")`` → optional ``Add(name="residual_i")([h, a])``.
    Under a mixed-precision global policy the output layer computes in float32.
    """
    depth = _check_int("depth", depth, 1, MAX_DEPTH)
    width = _check_int("width", width, 1, 4096)
    _check_choice("activation", activation, ACTIVATIONS)
    _check_choice("initializer", initializer, tuple(INITIALIZERS))
    input_dim = width if input_dim is None else _check_int("input_dim", input_dim, 1, 100_000)
    seed = _check_int("seed", seed, 0)
    if not isinstance(residual, bool):
        raise ValueError(f"residual must be True or False; got {residual!r}")
    norm = "none" if norm is None else _check_choice("norm", norm, NORMS)
    if residual and input_dim != width:
        raise ValueError(f"residual=True needs input_dim == width (h + a); got input_dim={input_dim}, "
                         f"width={width}")
    out_kw = {"dtype": "float32"} if keras.config.dtype_policy().name.startswith("mixed") else {}
    output = keras.layers.Dense(
        1,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed + OUTPUT_SEED_OFFSET),
        name="output",
        **out_kw,
    )
    if not residual and norm == "none":
        layers = [keras.Input((input_dim,))]
        for i in range(depth):
            layers.append(
                keras.layers.Dense(
                    width,
                    activation=activation,
                    kernel_initializer=make_initializer(initializer, seed + i),
                    name=f"hidden_{i + 1}",
                )
            )
        layers.append(output)
        return keras.Sequential(layers, name=f"mlp_{depth}x{width}_{activation}")
    inputs = keras.Input((input_dim,))
    h = inputs
    for i in range(1, depth + 1):
        z = keras.layers.Dense(width, kernel_initializer=make_initializer(initializer, seed + i - 1),
                               name=f"hidden_{i}")(h)
        if norm == "batch":
            z = keras.layers.BatchNormalization(epsilon=NORM_EPSILON, name=f"norm_{i}")(z)
        elif norm == "layer":
            z = keras.layers.LayerNormalization(epsilon=NORM_EPSILON, name=f"norm_{i}")(z)
        a = keras.layers.Activation(activation, name=f"act_{i}")(z)
        h = keras.layers.Add(name=f"residual_{i}")([h, a]) if residual else a
    tag = ("_res" if residual else "") + ("" if norm == "none" else f"_{norm}norm")
    return keras.Model(inputs, output(h), name=f"mlp_{depth}x{width}_{activation}{tag}")


def make_data(batch_size: int = 128, input_dim: int = 64, seed: int = 0):
    """A synthetic regression batch ``(x, y)``: standard normal inputs and targets (chapter 01).

    Stateless random ops, so the same arguments give the same batch in any process.
    """
    batch_size = _check_int("batch_size", batch_size, 1, 1_000_000)
    input_dim = _check_int("input_dim", input_dim, 1, 100_000)
    seed = _check_int("seed", seed, 0)
    x = tf.random.stateless_normal([batch_size, input_dim], seed=[seed, 1])
    y = tf.random.stateless_normal([batch_size, 1], seed=[seed, 2])
    return x, y


def activation_curves(names: Sequence[str] = ("sigmoid", "tanh", "relu", "leaky_relu"), z=None):
    """Each activation and its derivative, the derivative taken with GradientTape (chapter 01).

    Returns ``(z, {name: (f(z), f'(z))})`` as NumPy arrays.
    """
    for name in names:
        _check_choice("activation", name, ACTIVATIONS)
    z = tf.linspace(-6.0, 6.0, 241) if z is None else tf.convert_to_tensor(z, tf.float32)
    curves = {}
    for name in names:
        act = keras.activations.get(name)
        with tf.GradientTape() as tape:
            tape.watch(z)
            f = act(z)
        curves[name] = (f.numpy(), tape.gradient(f, z).numpy())
    return z.numpy(), curves
