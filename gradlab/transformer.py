"""A small causal Transformer and the gradient that reaches each of its blocks (chapter 09).

Pure computation (TensorFlow and Keras in, NumPy and small dataclasses out; no widgets):

* :func:`build_transformer` writes a decoder-only language model the way a learner writes one:
  token and position embeddings, ``num_layers`` blocks of causal ``MultiHeadAttention`` and a
  ReLU feed-forward network, each with its residual connection and ``LayerNormalization``
  (``norm_position="post"``: ``x = LN(x + f(x))`` as in Vaswani et al. 2017; ``"pre"``:
  ``x = x + f(LN(x))`` plus a final LayerNorm), and a ``Dense`` layer that returns logits.
  Block ``i``'s variables have paths under ``block_{i}/``. Every weight is drawn from a seed
  derived from ``seed`` and its place in the model, so block ``i`` is the same in a model of any
  depth and in both norm positions: changing one setting changes only that setting.
* :func:`markov_tokens` draws token sequences from a fixed sparse Markov chain (each token has
  a few possible successors), so there is something to learn: the loss can fall from
  ``ln(vocab_size)`` towards ``ln(branching)``; ``targets="random"`` gives unlearnable labels.
* :func:`block_gradient_report` measures, with a plain ``GradientTape`` on a Keras model, the
  float64 norm of the gradient over each block's variables (and of each block's second FFN
  kernel, the parameter Xiong et al. 2020 analyse) and the size of the residual stream
  after each block. :class:`TransformerGradientEngine` measures the same thing for the live
  explorer from one ``tf.function`` per norm position, with the depth as a tensor, so moving
  a control never retraces.
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np

from . import core, tracing
from ._env import quiet_import_tensorflow
from ._validate import check_choice, check_int
from .i18n import _

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "BLOCK_WEIGHTS",
    "EMBEDDING_INITIALIZERS",
    "NORM_POSITIONS",
    "TokenAndPositionEmbedding",
    "TransformerBlock",
    "TransformerGradientEngine",
    "TransformerReport",
    "block_gradient_report",
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


def _seed(seed: int, where: str) -> int:
    """A seed for the weight at ``where``: the same for every depth and norm position."""
    return zlib.crc32(f"{seed}/{where}".encode()) & 0x7FFFFFFF


def _embedding_initializer(name: str, seed: int):
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
            vocab_size, d_model, embeddings_initializer=_embedding_initializer(initializer, _seed(seed, "token")),
            name="token")
        self.position = keras.layers.Embedding(
            seq_len, d_model, embeddings_initializer=keras.initializers.RandomUniform(
                -0.05, 0.05, seed=_seed(seed, "position")), name="position")
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
                                        kernel_initializer=keras.initializers.GlorotUniform(_seed(seed, "ffn_1")))
        self.ffn_2 = keras.layers.Dense(d_model, name="ffn_2",
                                        kernel_initializer=keras.initializers.GlorotUniform(_seed(seed, "ffn_2")))

    _ATTENTION_AXES = {"query": ((0,), (1, 2)), "key": ((0,), (1, 2)), "value": ((0,), (1, 2)),
                       "output": ((0, 1), (2,))}

    def _attention_initializer(self, part: str):
        axes = self._ATTENTION_AXES[part]
        return keras.initializers.GlorotUniform(seed=_seed(self.seed, part), input_axes=axes[0],
                                                output_axes=axes[1])

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


def _check_model_args(num_layers, d_model, num_heads, ff_dim, vocab_size, seq_len, norm_position,
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
    ff_dim = _check_model_args(num_layers, d_model, num_heads, ff_dim, vocab_size, seq_len, norm_position,
                               embedding_initializer, scale_embedding, seed)
    tokens = keras.Input((seq_len,), dtype="int32", name="tokens")
    h = TokenAndPositionEmbedding(vocab_size, seq_len, d_model, initializer=embedding_initializer,
                                  scale=scale_embedding, seed=seed, name="embedding")(tokens)
    for i in range(num_layers):
        h = TransformerBlock(d_model, num_heads, ff_dim, norm_position=norm_position,
                             seed=_seed(seed, f"block_{i}"), name=f"block_{i}")(h)
    if norm_position == "pre":
        h = keras.layers.LayerNormalization(epsilon=LN_EPSILON, name="final_norm")(h)
    logits = keras.layers.Dense(vocab_size, name="logits",
                                kernel_initializer=keras.initializers.GlorotUniform(_seed(seed, "logits")))(h)
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


# ----------------------------------------------------------------------------- reports
@dataclasses.dataclass(frozen=True)
class TransformerReport:
    """Per-block gradients of a Transformer at one batch, earliest block first (chapter 09).

    ``layer_grad_norms[i]`` is the float64 global norm of the gradient over every variable of
    block ``i``; ``ffn_grad_norms[i]`` the norm of block ``i``'s second FFN kernel alone;
    ``stream_rms[i]`` the root-mean-square of the residual stream entering block ``i``
    (``stream_rms[-1]``: leaving the last block).
    """

    norm_position: str
    num_layers: int
    loss: float
    layer_grad_norms: np.ndarray
    ffn_grad_norms: np.ndarray
    stream_rms: np.ndarray

    @property
    def ratio(self) -> float:
        """Last block's gradient norm over the first's (1: flat; < 1: falls towards the output)."""
        n = self.layer_grad_norms
        return float(n[-1] / n[0]) if n[0] > 0 else math.inf

    def summary(self) -> str:
        norms = " ".join(f"{v:.3g}" for v in self.layer_grad_norms)
        return _("{position}-LN, {blocks} blocks: loss {loss}; block gradient norms {norms} "
                 "(last/first {ratio})").format(position=self.norm_position, blocks=self.num_layers,
                                                loss=f"{self.loss:.4g}", norms=norms, ratio=f"{self.ratio:.3g}")

    def __str__(self) -> str:
        return self.summary()


def block_paths(model) -> list[str]:
    """The block prefixes of a :func:`build_transformer` model, ``["block_0/", ...]``, in order."""
    blocks = sorted({core.variable_path(v).split("/")[0] for v in model.trainable_variables
                     if core.variable_path(v).startswith("block_")}, key=lambda s: int(s.split("_")[1]))
    if not blocks:
        raise ValueError(f"model {model.name!r} has no variables under block_<i>/: build it with gl.build_transformer")
    return [b + "/" for b in blocks]


def _sparse_loss(y, logits):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def _rms(t) -> float:
    return float(tf.sqrt(tf.reduce_mean(tf.square(tf.cast(t, tf.float64)))).numpy())


def block_gradient_report(model, x, y) -> TransformerReport:
    """Per-block gradient norms of a :func:`build_transformer` model on ``(x, y)``, from a plain tape.

    The loss is the mean sparse categorical cross-entropy of the logits (the loss the chapter
    compiles with). Norms are taken in float64 (:func:`gradlab.core.global_norm`).
    """
    core.check_model(model)
    prefixes = block_paths(model)
    x = tf.convert_to_tensor(x, tf.int32)
    y = tf.convert_to_tensor(y, tf.int32)
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = _sparse_loss(y, model(x, training=False))
    grads = tape.gradient(loss, variables)
    paths = [core.variable_path(v) for v in variables]
    layer = [float(core.global_norm([g for p, g in zip(paths, grads, strict=True) if p.startswith(b)]).numpy())
             for b in prefixes]
    ffn = [float(core.global_norm([g for p, g in zip(paths, grads, strict=True)
                                   if p == b + "ffn_2/kernel"]).numpy()) for b in prefixes]
    h = model.get_layer("embedding")(x)
    rms = [_rms(h)]
    for b in prefixes:
        h = model.get_layer(b[:-1])(h)
        rms.append(_rms(h))
    position = "pre" if any(layer.name == "final_norm" for layer in model.layers) else "post"
    return TransformerReport(position, len(prefixes), float(loss.numpy()), np.array(layer), np.array(ffn),
                             np.array(rms))


# ----------------------------------------------------------------------------- the explorer's engine
_FFN_2 = BLOCK_WEIGHTS.index("ffn_2/kernel")


def _layer_norm(x, gamma, beta):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + LN_EPSILON) * gamma + beta


def _attention(x, w, causal, key_dim):
    wq, bq, wk, bk, wv, bv, wo, bo = w
    q = (tf.einsum("abc,cde->abde", x, wq) + bq) * (1.0 / math.sqrt(key_dim))
    k = tf.einsum("abc,cde->abde", x, wk) + bk
    v = tf.einsum("abc,cde->abde", x, wv) + bv
    scores = tf.einsum("aecd,abcd->acbe", k, q) + causal        # (batch, heads, query, key)
    probs = tf.nn.softmax(scores, axis=-1)
    return tf.einsum("abcd,cde->abe", tf.einsum("acbe,aecd->abcd", probs, v), wo) + bo


def _block(x, w, pre, causal, key_dim):
    """One block in both positions at once: ``pre`` is 1.0 (pre-LN) or 0.0 (post-LN).

    Each blend ``p * a + (1 - p) * b`` with ``p`` exactly 0 or 1 is exactly ``a`` or ``b``, and
    so is its gradient, so one traced function serves both norm positions.
    """
    attn, (g1, b1, g2, b2), (k1, c1, k2, c2) = w[:8], w[8:12], w[12:]
    if isinstance(pre, (int, float)) and pre in (0, 1):   # a fixed position: only its own branch
        if pre:
            x = x + _attention(_layer_norm(x, g1, b1), attn, causal, key_dim)
            return x + tf.nn.relu(_layer_norm(x, g2, b2) @ k1 + c1) @ k2 + c2
        x = _layer_norm(x + _attention(x, attn, causal, key_dim), g1, b1)
        return _layer_norm(x + tf.nn.relu(x @ k1 + c1) @ k2 + c2, g2, b2)
    post = 1.0 - pre
    s = x + _attention(pre * _layer_norm(x, g1, b1) + post * x, attn, causal, key_dim)
    x = pre * s + post * _layer_norm(s, g1, b1)
    s = x + tf.nn.relu((pre * _layer_norm(x, g2, b2) + post * x) @ k1 + c1) @ k2 + c2
    return pre * s + post * _layer_norm(s, g2, b2)


class TransformerGradientEngine:
    """Per-block gradient norms at initialization for the TransformerExplorer (chapter 09).

    Draws the initial weights of a :func:`build_transformer` model of ``max_layers`` blocks for
    any seed (every weight of a shallower model or of the other norm position is among them,
    see :func:`build_transformer`; they come from the same initializers, without building a
    Keras model) and holds one batch :attr:`data` from :func:`markov_tokens`. The forward pass
    is written once more in plain TensorFlow as one ``tf.function`` whose depth, norm position,
    embedding, weights and batch are all inputs (a ``tf.while_loop`` over the blocks), so no
    control change and no other seed retraces. :meth:`report` equals
    :func:`block_gradient_report` on :meth:`model` (the tests check it against an independent tape).
    """

    def __init__(self, *, max_layers: int = 12, d_model: int = 64, num_heads: int = 4, ff_dim: int | None = None,
                 vocab_size: int = 64, seq_len: int = 32, batch_size: int = 8,
                 embedding_initializer: str = "uniform", scale_embedding: bool = False, seed: int = 0):
        self.max_layers = check_int("max_layers", max_layers, 1, MAX_LAYERS)
        ff_dim = _check_model_args(1, d_model, num_heads, ff_dim, vocab_size, seq_len, "pre",
                                   embedding_initializer, scale_embedding, seed)
        self.batch_size = check_int("batch_size", batch_size, 1, 100_000)
        self.model_kwargs = dict(d_model=d_model, num_heads=num_heads, ff_dim=ff_dim, vocab_size=vocab_size,
                                 seq_len=seq_len, embedding_initializer=embedding_initializer,
                                 scale_embedding=scale_embedding, seed=seed)
        self.data = markov_tokens(batch_size, seq_len, vocab_size, seed=seed)
        self._weights: dict[int, tuple] = {}
        self._tokens: dict[tuple[str, int], tf.Tensor] = {}
        self._final = (tf.ones((d_model,)), tf.zeros((d_model,)))
        self._key_dim = d_model // num_heads
        allowed = tf.linalg.band_part(tf.ones([seq_len, seq_len]), -1, 0)
        self._causal = (1.0 - allowed) * -1e9
        self._x = tf.constant(self.data[0])
        self._y = tf.constant(self.data[1])
        tokens = tf.TensorSpec([None, seq_len], tf.int32)
        stacked = [tf.TensorSpec([self.max_layers, *w.shape[1:]], tf.float32) for w in self._seed_weights(seed)[0]]
        self._function = tf.function(self._measure, input_signature=(
            tokens, tokens, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
            tf.TensorSpec([vocab_size, d_model], tf.float32), tf.TensorSpec([], tf.float32),
            tf.TensorSpec([seq_len, d_model], tf.float32), tf.TensorSpec([d_model, vocab_size], tf.float32),
            stacked))

    def _seed_weights(self, seed: int) -> tuple:
        """``(stacked block weights, position embedding, head kernel)`` of ``seed`` (cached)."""
        if seed not in self._weights:
            kw = self.model_kwargs
            d, v, t = kw["d_model"], kw["vocab_size"], kw["seq_len"]
            blocks = [TransformerBlock(d, kw["num_heads"], kw["ff_dim"], seed=_seed(seed, f"block_{i}"))
                      .initial_values() for i in range(self.max_layers)]
            stacked = [tf.stack([b[j] for b in blocks]) for j in range(len(BLOCK_WEIGHTS))]
            position = TokenAndPositionEmbedding(v, t, d, seed=seed).position.embeddings_initializer((t, d))
            head = keras.initializers.GlorotUniform(_seed(seed, "logits"))((d, v))
            self._weights[seed] = (stacked, position, head)
        return self._weights[seed]

    def _token_embedding(self, initializer: str, seed: int) -> tf.Tensor:
        if (initializer, seed) not in self._tokens:
            kw = self.model_kwargs
            layer = TokenAndPositionEmbedding(kw["vocab_size"], kw["seq_len"], kw["d_model"], initializer=initializer,
                                              seed=seed)
            self._tokens[initializer, seed] = layer.token.embeddings_initializer((kw["vocab_size"], kw["d_model"]))
        return self._tokens[initializer, seed]

    def model(self, num_layers: int, norm_position: str = "pre", **overrides) -> keras.Model:
        """A fresh :func:`build_transformer` model with the engine's weights (what :meth:`report` measures).

        ``overrides``: ``embedding_initializer``, ``scale_embedding`` and ``seed``, as in :meth:`report`.
        """
        check_int("num_layers", num_layers, 1, self.max_layers)
        unknown = set(overrides) - {"embedding_initializer", "scale_embedding", "seed"}
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)}; allowed: embedding_initializer, "
                             "scale_embedding, seed")
        return build_transformer(num_layers, norm_position=norm_position, **{**self.model_kwargs, **overrides})

    def initial_weights(self, *, seed: int | None = None, embedding_initializer: str | None = None,
                        scale_embedding: bool | None = None) -> dict:
        """The initial weights of :meth:`model` as tensors, for :meth:`forward` (chapter 09's runs).

        ``token`` and ``position`` embeddings, the embedding ``multiplier``, ``blocks`` (one
        tensor per entry of :data:`BLOCK_WEIGHTS`, stacked over the ``max_layers`` blocks),
        ``final`` (the final LayerNorm's gamma and beta) and ``head`` (the logits' kernel, bias).
        """
        kw = self.model_kwargs
        seed = kw["seed"] if seed is None else seed
        initializer = kw["embedding_initializer"] if embedding_initializer is None else embedding_initializer
        scale = kw["scale_embedding"] if scale_embedding is None else scale_embedding
        _check_model_args(1, kw["d_model"], kw["num_heads"], kw["ff_dim"], kw["vocab_size"], kw["seq_len"], "pre",
                          initializer, scale, seed)
        stacked, position, head = self._seed_weights(seed)
        return {"token": self._token_embedding(initializer, seed), "position": position,
                "multiplier": math.sqrt(kw["d_model"]) if scale else 1.0, "blocks": list(stacked),
                "final": self._final, "head": (head, tf.zeros((kw["vocab_size"],)))}

    def forward(self, x, weights: dict, num_layers, pre):
        """Logits of the first ``num_layers`` blocks (a tensor is fine) and the stream's rms per block.

        ``weights`` as :meth:`initial_weights` returns them (tensors or variables), ``pre`` 1.0
        for pre-LN, 0.0 for post-LN. The same computation as :meth:`model`'s call. With
        ``weights["block_list"]`` (one list of :data:`BLOCK_WEIGHTS` per block) instead of the
        stacked ``blocks``, the blocks are unrolled (a fixed depth, faster to differentiate) and
        the rms is not computed (``None``).
        """
        causal, key_dim = self._causal, self._key_dim
        h = tf.gather(weights["token"], x) * weights["multiplier"] + weights["position"]
        if "block_list" in weights:
            for w in weights["block_list"][:num_layers]:
                h = _block(h, w, pre, causal, key_dim)
            if isinstance(pre, (int, float)):
                h = _layer_norm(h, *weights["final"]) if pre else h
            else:
                h = pre * _layer_norm(h, *weights["final"]) + (1.0 - pre) * h
            return h @ weights["head"][0] + weights["head"][1], None
        stacked = weights["blocks"]
        rms = tf.TensorArray(tf.float32, size=self.max_layers + 1, clear_after_read=False)
        rms = rms.write(0, tf.sqrt(tf.reduce_mean(tf.square(h))))

        def body(i, h, rms):  # one block per iteration: traced once, whatever the depth
            h = _block(h, [w[i] for w in stacked], pre, causal, key_dim)
            return i + 1, h, rms.write(i + 1, tf.sqrt(tf.reduce_mean(tf.square(h))))

        __, h, rms = tf.while_loop(lambda i, h, rms: i < num_layers, body, (0, h, rms),
                                   maximum_iterations=self.max_layers)
        h = pre * _layer_norm(h, *weights["final"]) + (1.0 - pre) * h
        return h @ weights["head"][0] + weights["head"][1], rms.gather(tf.range(num_layers + 1))

    def _measure(self, x, y, num_layers, pre, token, multiplier, position, head, stacked):
        weights = {"token": token, "multiplier": multiplier, "position": position, "blocks": stacked,
                   "final": self._final, "head": (head, 0.0)}          # the head's bias starts at 0
        with tf.GradientTape() as tape:
            tape.watch(stacked)
            logits, rms = self.forward(x, weights, num_layers, pre)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, stacked)  # each (max_layers, ...): zero beyond the depth
        sq = [tf.reduce_sum(tf.reshape(tf.square(tf.cast(g, tf.float64)), [self.max_layers, -1]), axis=1)
              for g in grads]
        return loss, tf.sqrt(tf.add_n(sq)), tf.sqrt(sq[_FFN_2]), rms

    def tracing_count(self) -> int:
        """How many times the engine's function has been traced (1 after the first report)."""
        return tracing.tracing_count(self._function)

    def report(self, num_layers: int = 6, norm_position: str = "pre", *, embedding_initializer: str | None = None,
               scale_embedding: bool | None = None, data=None, seed: int | None = None) -> TransformerReport:
        """The :class:`TransformerReport` of :meth:`model` ``(num_layers, norm_position, ...)``.

        Measured on :attr:`data`, or on ``data=(x, y)`` (int32 tokens of shape ``(batch, seq_len)``,
        any batch size); ``embedding_initializer``, ``scale_embedding`` and ``seed`` (the
        model's weights) default to the engine's.
        """
        num_layers = check_int("num_layers", num_layers, 1, self.max_layers)
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        kw = self.model_kwargs
        initializer = kw["embedding_initializer"] if embedding_initializer is None else embedding_initializer
        scale = kw["scale_embedding"] if scale_embedding is None else scale_embedding
        seed = kw["seed"] if seed is None else seed
        _check_model_args(num_layers, kw["d_model"], kw["num_heads"], kw["ff_dim"], kw["vocab_size"],
                          kw["seq_len"], norm_position, initializer, scale, seed)
        x, y = (self._x, self._y) if data is None else self._check_data(data)
        multiplier = math.sqrt(kw["d_model"]) if scale else 1.0
        stacked, position, head = self._seed_weights(seed)
        loss, per_block, ffn, rms = self._function(
            x, y, tf.constant(num_layers, tf.int32), tf.constant(1.0 if norm_position == "pre" else 0.0),
            self._token_embedding(initializer, seed), tf.constant(multiplier, tf.float32), position, head, stacked)
        return TransformerReport(norm_position, num_layers, float(loss.numpy()),
                                 per_block.numpy()[:num_layers], ffn.numpy()[:num_layers],
                                 rms.numpy().astype(np.float64))

    def mean_report(self, num_layers: int = 6, norm_position: str = "pre", *, seeds=range(8),
                    **kwargs) -> TransformerReport:
        """:meth:`report` averaged over the initializations ``seeds``: the mean of each norm (chapter 09).

        One model's per-block norms vary a lot from one random initialization to the next;
        their mean over many is the *expected* gradient norm that mean-field analyses describe.
        ``kwargs`` are :meth:`report`'s (``embedding_initializer``, ``scale_embedding``, ``data``).
        """
        seeds = list(seeds)
        if not seeds:
            raise ValueError("seeds must hold at least one seed")
        reports = [self.report(num_layers, norm_position, seed=seed, **kwargs) for seed in seeds]
        return TransformerReport(norm_position, num_layers, float(np.mean([r.loss for r in reports])),
                                 np.mean([r.layer_grad_norms for r in reports], axis=0),
                                 np.mean([r.ffn_grad_norms for r in reports], axis=0),
                                 np.mean([r.stream_rms for r in reports], axis=0))

    def _check_data(self, data):
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ValueError(f"data must be an (x, y) pair of token arrays; got {type(data).__name__}")
        out = []
        for name, t in zip(("x", "y"), data, strict=True):
            a = np.asarray(t)
            if a.ndim != 2 or a.shape[1] != self.model_kwargs["seq_len"] or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"data's {name} must be integer tokens of shape (batch, "
                                 f"{self.model_kwargs['seq_len']}); got {a.dtype} {a.shape}")
            if a.min() < 0 or a.max() >= self.model_kwargs["vocab_size"]:
                raise ValueError(f"data's {name} holds tokens outside 0..{self.model_kwargs['vocab_size'] - 1}")
            out.append(tf.constant(a, tf.int32))
        return tuple(out)
