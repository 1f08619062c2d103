"""The TransformerExplorer's fast engine (chapter 09): :class:`TransformerGradientEngine`.

It measures what :func:`gradlab.reports.transformer.block_gradient_report` measures, from one
``tf.function`` per norm position with the depth as a tensor, so moving a control never
retraces; each report is computed once per input.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from .._env import quiet_import_tensorflow
from .._validate import check_choice, check_int
from ..models.transformer import (
    BLOCK_WEIGHTS,
    LN_EPSILON,
    MAX_LAYERS,
    NORM_POSITIONS,
    TokenAndPositionEmbedding,
    TransformerBlock,
    build_transformer,
    check_model_args,
    markov_tokens,
    weight_seed,
)
from ..reports.transformer import TransformerReport
from ..topics import tracing

tf = quiet_import_tensorflow()
import keras  # noqa: E402

__all__ = [
    "TransformerGradientEngine",
]


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


#: The reports of every engine, by configuration (see ``TransformerGradientEngine.__init__``).
_SHARED_REPORTS: dict[tuple, dict] = {}


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
        ff_dim = check_model_args(1, d_model, num_heads, ff_dim, vocab_size, seq_len, "pre",
                                   embedding_initializer, scale_embedding, seed)
        self.batch_size = check_int("batch_size", batch_size, 1, 100_000)
        self.model_kwargs = dict(d_model=d_model, num_heads=num_heads, ff_dim=ff_dim, vocab_size=vocab_size,
                                 seq_len=seq_len, embedding_initializer=embedding_initializer,
                                 scale_embedding=scale_embedding, seed=seed)
        self.data = markov_tokens(batch_size, seq_len, vocab_size, seed=seed)
        self._weights: dict[int, tuple] = {}
        self._tokens: dict[tuple[str, int], tf.Tensor] = {}
        # report() is deterministic: each is computed once, and shared by every engine of the same
        # configuration (chapter 09's solutions and its self-checks measure the same stacks).
        config = (self.max_layers, self.batch_size, tuple(sorted(self.model_kwargs.items())))
        self._reports: dict[tuple, TransformerReport] = _SHARED_REPORTS.setdefault(config, {})
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
            blocks = [TransformerBlock(d, kw["num_heads"], kw["ff_dim"], seed=weight_seed(seed, f"block_{i}"))
                      .initial_values() for i in range(self.max_layers)]
            stacked = [tf.stack([b[j] for b in blocks]) for j in range(len(BLOCK_WEIGHTS))]
            position = TokenAndPositionEmbedding(v, t, d, seed=seed).position.embeddings_initializer((t, d))
            head = keras.initializers.GlorotUniform(weight_seed(seed, "logits"))((d, v))
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
        check_model_args(1, kw["d_model"], kw["num_heads"], kw["ff_dim"], kw["vocab_size"], kw["seq_len"], "pre",
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
        check_model_args(num_layers, kw["d_model"], kw["num_heads"], kw["ff_dim"], kw["vocab_size"],
                          kw["seq_len"], norm_position, initializer, scale, seed)
        x, y = (self._x, self._y) if data is None else self._check_data(data)
        # Chapter 09 measures the same (depth, position, seed, batch) in several experiments
        # (single seeds, their mean, the depth sweep): the same inputs give the same report.
        key = (num_layers, norm_position, initializer, bool(scale), seed,
               hashlib.sha1(x.numpy().tobytes() + b"|" + y.numpy().tobytes()).hexdigest(), tuple(x.shape))
        if key in self._reports:
            return self._reports[key]
        multiplier = math.sqrt(kw["d_model"]) if scale else 1.0
        stacked, position, head = self._seed_weights(seed)
        loss, per_block, ffn, rms = self._function(
            x, y, tf.constant(num_layers, tf.int32), tf.constant(1.0 if norm_position == "pre" else 0.0),
            self._token_embedding(initializer, seed), tf.constant(multiplier, tf.float32), position, head, stacked)
        report = TransformerReport(norm_position, num_layers, float(loss.numpy()),
                                   per_block.numpy()[:num_layers], ffn.numpy()[:num_layers],
                                   rms.numpy().astype(np.float64))
        self._reports[key] = report
        return report

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
