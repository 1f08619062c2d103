"""A small causal Transformer and its data (chapter 09).

* :func:`build_transformer` writes a decoder-only language model the way a learner writes one:
  token and position embeddings, ``num_layers`` blocks of causal ``MultiHeadAttention`` and a
  ReLU feed-forward network, each with its residual connection and ``LayerNormalization``
  (``norm_position="post"``: ``x = LN(x + f(x))``; ``"pre"``: ``x = x + f(LN(x))`` plus a final
  LayerNorm), and a ``Dense`` layer that returns logits. Block ``i``'s variables sit under
  ``block_{i}/``; every weight is drawn from a seed derived from ``seed`` and its place, so
  block ``i`` is the same in a model of any depth and in both norm positions.
* :func:`markov_tokens` draws token sequences from a fixed sparse Markov chain, so there is
  something to learn; ``targets="random"`` gives unlearnable labels.
"""

from __future__ import annotations

import inspect
import math
import zlib

import numpy as np

from .. import core
from .._env import quiet_import_tensorflow
from .._validate import check_choice, check_int

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "BLOCK_WEIGHTS",
    "EMBEDDING_INITIALIZERS",
    "LN_EPSILON",
    "MAX_LAYERS",
    "NORM_POSITIONS",
    "TokenAndPositionEmbedding",
    "TransformerBlock",
    "block_paths",
    "build_transformer",
    "markov_tokens",
]

#: Where each block's LayerNorms sit: ``"post"`` (after the residual sum, Vaswani et al. 2017)
#: or ``"pre"`` (inside the residual branch, plus a final LayerNorm).
NORM_POSITIONS: tuple[str, ...] = ("pre", "post")

#: The token embedding's initializer: Keras's default ``"uniform"`` (U(-0.05, 0.05), standard
#: deviation 0.029), ``"glorot_uniform"`` (Xavier, as for every other kernel) or ``"normal"``
#: (N(0, 1), PyTorch's ``nn.Embedding`` default).
EMBEDDING_INITIALIZERS: tuple[str, ...] = ("uniform", "glorot_uniform", "normal")

#: LayerNorm's epsilon. Keras's default, 1e-3, is larger than the variance of a Keras-default
#: embedding (0.029² = 8.3e-4), so the first LayerNorm would scale that stream to about 0.7 rms
#: instead of 1; 1e-6 normalizes it.
LN_EPSILON = 1e-6
MAX_LAYERS = 48

#: The variables of one block, by their path under ``block_{i}/``.
BLOCK_WEIGHTS = ("attention/query/kernel", "attention/query/bias", "attention/key/kernel",
                  "attention/key/bias", "attention/value/kernel", "attention/value/bias",
                  "attention/attention_output/kernel", "attention/attention_output/bias",
                  "norm_1/gamma", "norm_1/beta", "norm_2/gamma", "norm_2/beta",
                  "ffn_1/kernel", "ffn_1/bias", "ffn_2/kernel", "ffn_2/bias")


def weight_seed(seed: int, where: str) -> int:
    """A seed for the weight at ``where``: the same for every depth and norm position."""
    return zlib.crc32(f"{seed}/{where}".encode()) & 0x7FFFFFFF


#: Keras 3.15 added ``input_axes``/``output_axes`` to the variance-scaling initializers.
_AXES_KEYWORDS = "input_axes" in inspect.signature(keras.initializers.GlorotUniform).parameters


def glorot_uniform_over_axes(seed: int, input_axes: tuple[int, ...], output_axes: tuple[int, ...],
                             *, native: bool | None = None):
    """``GlorotUniform(seed, input_axes=, output_axes=)``: fans over the given axes of a kernel.

    On Keras before 3.15, which has no such keywords, the same draw: ``RandomUniform`` over
    ``±sqrt(6 / (fan_in + fan_out))`` with the same seed (tests/test_transformer.py compares the
    two). ``native=False`` forces that fallback.
    """
    if _AXES_KEYWORDS if native is None else native:
        return keras.initializers.GlorotUniform(seed=seed, input_axes=input_axes, output_axes=output_axes)

    class _OverAxes(keras.initializers.Initializer):
        def __call__(self, shape, dtype=None):
            fan_in = math.prod(shape[a] for a in input_axes)
            fan_out = math.prod(shape[a] for a in output_axes)
            limit = math.sqrt(6.0 / max(1.0, fan_in + fan_out))
            return keras.initializers.RandomUniform(-limit, limit, seed=seed)(shape, dtype=dtype)

    return _OverAxes()


def embedding_initializer(name: str, seed: int):
    if name == "uniform":
        return keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)
    if name == "glorot_uniform":
        return keras.initializers.GlorotUniform(seed=seed)
    return keras.initializers.RandomNormal(stddev=1.0, seed=seed)


@keras.saving.register_keras_serializable(package="gradlab")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Token embedding (times ``sqrt(d_model)`` with ``scale=True``) plus a learned position embedding."""

    def __init__(self, vocab_size: int, seq_len: int, d_model: int, *, initializer: str = "uniform",
                 scale: bool = False, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.seq_len, self.d_model = vocab_size, seq_len, d_model
        self.initializer, self.scale, self.seed = initializer, scale, seed
        self.token = keras.layers.Embedding(
            vocab_size, d_model, embeddings_initializer=embedding_initializer(initializer, weight_seed(seed, "token")),
            name="token")
        self.position = keras.layers.Embedding(
            seq_len, d_model, embeddings_initializer=keras.initializers.RandomUniform(
                -0.05, 0.05, seed=weight_seed(seed, "position")), name="position")
        self.multiplier = math.sqrt(d_model) if scale else 1.0

    def build(self, input_shape):
        self.token.build(input_shape)
        self.position.build((self.seq_len,))

    def call(self, tokens):
        positions = keras.ops.arange(keras.ops.shape(tokens)[-1])
        return self.token(tokens) * self.multiplier + self.position(positions)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "seq_len": self.seq_len,
                "d_model": self.d_model, "initializer": self.initializer, "scale": self.scale,
                "seed": self.seed}


@keras.saving.register_keras_serializable(package="gradlab")
class TransformerBlock(keras.layers.Layer):
    """Causal self-attention and a ReLU feed-forward network, each with a residual and a LayerNorm.

    ``norm_position="post"``: ``x = LN(x + attention(x)); x = LN(x + ffn(x))``.
    ``norm_position="pre"``:  ``x = x + attention(LN(x)); x = x + ffn(LN(x))``.
    """

    def __init__(self, d_model: int, num_heads: int, ff_dim: int, *, norm_position: str = "pre",
                 seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.ff_dim = d_model, num_heads, ff_dim
        self.norm_position, self.seed = norm_position, seed
        # The attention's four kernels are drawn in build(): MultiHeadAttention clones one
        # initializer for query, key, value and output, so a seeded one would make them equal.
        self.attention = keras.layers.MultiHeadAttention(num_heads, d_model // num_heads, name="attention")
        self.norm_1 = keras.layers.LayerNormalization(epsilon=LN_EPSILON, name="norm_1")
        self.norm_2 = keras.layers.LayerNormalization(epsilon=LN_EPSILON, name="norm_2")
        self.ffn_1 = keras.layers.Dense(ff_dim, activation="relu", name="ffn_1",
                                        kernel_initializer=keras.initializers.GlorotUniform(weight_seed(seed, "ffn_1")))
        self.ffn_2 = keras.layers.Dense(d_model, name="ffn_2",
                                        kernel_initializer=keras.initializers.GlorotUniform(weight_seed(seed, "ffn_2")))

    _ATTENTION_AXES = {"query": ((0,), (1, 2)), "key": ((0,), (1, 2)), "value": ((0,), (1, 2)),
                       "output": ((0, 1), (2,))}

    def _attention_initializer(self, part: str):
        axes = self._ATTENTION_AXES[part]
        return glorot_uniform_over_axes(weight_seed(self.seed, part), axes[0], axes[1])

    def build(self, input_shape):
        self.attention.build(input_shape, input_shape)
        for part in self._ATTENTION_AXES:
            kernel = getattr(self.attention, f"{part}_dense").kernel
            kernel.assign(self._attention_initializer(part)(tuple(kernel.shape), dtype=kernel.dtype))
        self.norm_1.build(input_shape)
        self.norm_2.build(input_shape)
        self.ffn_1.build(input_shape)
        self.ffn_2.build((*input_shape[:-1], self.ff_dim))

    def initial_values(self) -> list:
        """The block's initial weights, in the order of :data:`BLOCK_WEIGHTS`, without building it.

        The same initializers that :meth:`build` uses, so the values are the built block's.
        """
        d, h, k, f = self.d_model, self.num_heads, self.d_model // self.num_heads, self.ff_dim
        zeros, ones = tf.zeros, tf.ones
        att = [self._attention_initializer(p)(s) for p, s in
               (("query", (d, h, k)), ("key", (d, h, k)), ("value", (d, h, k)), ("output", (h, k, d)))]
        return [att[0], zeros((h, k)), att[1], zeros((h, k)), att[2], zeros((h, k)), att[3], zeros((d,)),
                ones((d,)), zeros((d,)), ones((d,)), zeros((d,)),
                self.ffn_1.kernel_initializer((d, f)), zeros((f,)), self.ffn_2.kernel_initializer((f, d)),
                zeros((d,))]

    def _attend(self, x):
        return self.attention(x, x, use_causal_mask=True)

    def _ffn(self, x):
        return self.ffn_2(self.ffn_1(x))

    def call(self, x):
        if self.norm_position == "pre":
            x = x + self._attend(self.norm_1(x))
            return x + self._ffn(self.norm_2(x))
        x = self.norm_1(x + self._attend(x))
        return self.norm_2(x + self._ffn(x))

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "ff_dim": self.ff_dim, "norm_position": self.norm_position, "seed": self.seed}


def check_model_args(num_layers, d_model, num_heads, ff_dim, vocab_size, seq_len, norm_position,
                      embedding_initializer, scale_embedding, seed) -> int:
    check_int("num_layers", num_layers, 1, MAX_LAYERS)
    check_int("d_model", d_model, 2, 4096)
    check_int("num_heads", num_heads, 1, d_model)
    if d_model % num_heads:
        raise ValueError(f"d_model must be a multiple of num_heads (each head gets d_model // num_heads "
                         f"dimensions); got d_model={d_model}, num_heads={num_heads}")
    ff_dim = 4 * d_model if ff_dim is None else check_int("ff_dim", ff_dim, 1, 65536)
    check_int("vocab_size", vocab_size, 2, 1_000_000)
    check_int("seq_len", seq_len, 1, 4096)
    check_choice("norm_position", norm_position, NORM_POSITIONS)
    check_choice("embedding_initializer", embedding_initializer, EMBEDDING_INITIALIZERS)
    if not isinstance(scale_embedding, bool):
        raise ValueError(f"scale_embedding must be True or False; got {scale_embedding!r}")
    check_int("seed", seed, 0, 2**31 - 1)
    return ff_dim


def build_transformer(num_layers: int, *, d_model: int = 64, num_heads: int = 4, ff_dim: int | None = None,
                      vocab_size: int = 64, seq_len: int = 32, norm_position: str = "pre",
                      embedding_initializer: str = "uniform", scale_embedding: bool = False,
                      seed: int = 0) -> keras.Model:
    """A causal Transformer language model on integer tokens that returns logits (chapter 09).

    ``tokens (batch, seq_len) → TokenAndPositionEmbedding → num_layers × TransformerBlock →
    [final LayerNorm for pre-LN] → Dense(vocab_size)``. ``ff_dim`` defaults to ``4 * d_model``.
    Keras's initializers throughout (Glorot for every kernel, zeros for biases, ones and zeros
    for LayerNorm); ``embedding_initializer`` (see :data:`EMBEDDING_INITIALIZERS`) and
    ``scale_embedding`` (multiply the token embedding by ``sqrt(d_model)``, as Vaswani et al.
    2017, section 3.4) set the scale of the residual stream at the input. Block ``i``'s
    variables are under ``block_{i}/``; every weight depends only on ``seed`` and its path, so
    two models that differ in depth or norm position share their common weights exactly.
    The model is not compiled.
    """
    ff_dim = check_model_args(num_layers, d_model, num_heads, ff_dim, vocab_size, seq_len, norm_position,
                               embedding_initializer, scale_embedding, seed)
    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    h = TokenAndPositionEmbedding(vocab_size, seq_len, d_model, initializer=embedding_initializer,
                                  scale=scale_embedding, seed=seed, name="embedding")(tokens)
    for i in range(num_layers):
        h = TransformerBlock(d_model, num_heads, ff_dim, norm_position=norm_position,
                             seed=weight_seed(seed, f"block_{i}"), name=f"block_{i}")(h)
    if norm_position == "pre":
        h = keras.layers.LayerNormalization(epsilon=LN_EPSILON, name="final_norm")(h)
    logits = keras.layers.Dense(vocab_size, name="logits",
                                kernel_initializer=keras.initializers.GlorotUniform(weight_seed(seed, "logits")))(h)
    return keras.Model(tokens, logits, name=f"transformer_{norm_position}_ln_{num_layers}")


def markov_tokens(batch_size: int = 8, seq_len: int = 32, vocab_size: int = 64, *, branching: int = 4,
                  targets: str = "markov", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: int32 token sequences of shape ``(batch_size, seq_len)`` (chapter 09).

    Sequences follow a fixed Markov chain over ``vocab_size`` tokens in which each token has
    ``branching`` equally likely successors (the chain depends only on ``vocab_size`` and
    ``branching``; ``seed`` draws the sequences). ``y`` is ``x`` shifted by one: the next token,
    which a model can learn down to a loss of ``ln(branching)``. ``targets="random"`` replaces
    ``y`` by uniform random tokens (nothing to learn: the best loss is ``ln(vocab_size)``).
    """
    check_int("batch_size", batch_size, 1, 1_000_000)
    check_int("seq_len", seq_len, 1, 4096)
    check_int("vocab_size", vocab_size, 2, 1_000_000)
    check_int("branching", branching, 1, vocab_size)
    check_choice("targets", targets, ("markov", "random"))
    check_int("seed", seed, 0, 2**31 - 1)
    chain = np.random.default_rng([vocab_size, branching, 9]).integers(0, vocab_size, (vocab_size, branching))
    rng = np.random.default_rng([seed, 10])
    s = np.empty((batch_size, seq_len + 1), dtype=np.int64)
    s[:, 0] = rng.integers(0, vocab_size, batch_size)
    picks = rng.integers(0, branching, (batch_size, seq_len))
    for t in range(seq_len):
        s[:, t + 1] = chain[s[:, t], picks[:, t]]
    x, y = s[:, :-1], s[:, 1:]
    if targets == "random":
        y = np.random.default_rng([seed, 11]).integers(0, vocab_size, (batch_size, seq_len))
    return x.astype(np.int32), y.astype(np.int32)


def block_paths(model) -> list[str]:
    """The block prefixes of a :func:`build_transformer` model, ``["block_0/", ...]``, in order."""
    blocks = sorted({core.variable_path(v).split("/")[0] for v in model.trainable_variables
                     if core.variable_path(v).startswith("block_")}, key=lambda s: int(s.split("_")[1]))
    if not blocks:
        raise ValueError(f"model {model.name!r} has no variables under block_<i>/: build it with gl.build_transformer")
    return [b + "/" for b in blocks]
