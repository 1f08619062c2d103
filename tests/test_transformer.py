"""gradlab.models.transformer, gradlab.reports.transformer and gradlab.engines.transformer: build_transformer, markov_tokens, the per-block report and the explorer's engine."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab  # noqa: F401  (imports TensorFlow quietly)
from gradlab.engines import transformer as tengines
from gradlab.models import transformer as tmodels
from gradlab.reports import transformer as treports

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

SMALL = dict(d_model=16, num_heads=2, vocab_size=11, seq_len=5)


def tape_block_norms(model, x, y):
    """The reference: a plain tape on the model, the chapter's loss, norms in NumPy float64."""
    with tf.GradientTape() as tape:
        logits = model(tf.constant(x), training=False)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    blocks: dict[int, float] = {}
    ffn: dict[int, float] = {}
    for v, g in zip(model.trainable_variables, grads, strict=True):
        if not v.path.startswith("block_"):
            continue
        i = int(v.path.split("/")[0].split("_")[1])
        sq = float(np.sum(np.square(np.asarray(g, dtype=np.float64))))
        blocks[i] = blocks.get(i, 0.0) + sq
        if v.path.endswith("ffn_2/kernel"):
            ffn[i] = np.sqrt(sq)
    n = len(blocks)
    return np.sqrt([blocks[i] for i in range(n)]), np.array([ffn[i] for i in range(n)]), float(loss)


@pytest.fixture(scope="module")
def engine():
    return tengines.TransformerGradientEngine(max_layers=4, batch_size=3, **SMALL)


def test_build_both_positions_paths_and_shapes():
    x, _ = tmodels.markov_tokens(2, 5, 11)
    for position in tmodels.NORM_POSITIONS:
        model = tmodels.build_transformer(3, norm_position=position, **SMALL)
        assert model(x).shape == (2, 5, 11)
        paths = [v.path for v in model.trainable_variables]
        for i in range(3):
            block = [p for p in paths if p.startswith(f"block_{i}/")]
            assert {p[len(f"block_{i}/"):] for p in block} == set(tmodels.BLOCK_WEIGHTS)
        assert ("final_norm/gamma" in paths) == (position == "pre")
        assert tmodels.block_paths(model) == ["block_0/", "block_1/", "block_2/"]


def test_weights_depend_only_on_seed_and_path():
    a = tmodels.build_transformer(2, norm_position="pre", **SMALL)
    b = tmodels.build_transformer(3, norm_position="post", **SMALL)
    c = tmodels.build_transformer(2, norm_position="pre", seed=1, **SMALL)
    wa = {v.path: np.asarray(v) for v in a.variables}
    wb = {v.path: np.asarray(v) for v in b.variables}
    for path in wa:
        if path in wb:
            np.testing.assert_array_equal(wa[path], wb[path], err_msg=path)
    assert not np.allclose(wa["block_0/ffn_1/kernel"], np.asarray(c.get_layer("block_0").ffn_1.kernel))


def test_attention_kernels_are_distinct_glorot_draws():
    # A seeded kernel_initializer given to MultiHeadAttention is cloned for query, key, value and
    # output, which then start equal; build_transformer draws each kernel from its own seed.
    keras_mha = keras.layers.MultiHeadAttention(2, 8, kernel_initializer=keras.initializers.GlorotUniform(3))
    z = np.zeros((1, 4, 16), "float32")
    keras_mha(z, z)
    np.testing.assert_array_equal(np.asarray(keras_mha.query_dense.kernel), np.asarray(keras_mha.key_dense.kernel))
    model = tmodels.build_transformer(1, d_model=64, num_heads=4, vocab_size=11, seq_len=5)
    att = model.get_layer("block_0").attention
    kernels = [np.asarray(getattr(att, f"{p}_dense").kernel) for p in ("query", "key", "value", "output")]
    for i in range(4):
        # Glorot uniform for a 64 -> 64 map: standard deviation sqrt(2 / 128) = 0.125
        assert abs(kernels[i].std() - 0.125) < 0.01
        for j in range(i):
            assert not np.allclose(kernels[i].ravel(), kernels[j].ravel())


def test_embedding_options_set_the_input_scale():
    x, _ = tmodels.markov_tokens(4, 5, 11)
    scales = {}
    for init, scale in (("uniform", False), ("uniform", True), ("normal", False), ("normal", True)):
        model = tmodels.build_transformer(1, embedding_initializer=init, scale_embedding=scale, **SMALL)
        scales[init, scale] = np.asarray(model.get_layer("embedding").token.embeddings).std()
    assert scales["uniform", False] == pytest.approx(0.05 / np.sqrt(3), rel=0.25)
    assert scales["normal", False] == pytest.approx(1.0, rel=0.25)
    emb = tmodels.build_transformer(1, scale_embedding=True, **SMALL).get_layer("embedding")
    plain = tmodels.build_transformer(1, **SMALL).get_layer("embedding")
    tokens = tf.constant(x)
    got = np.asarray(emb(tokens)) - np.asarray(emb.position(tf.range(5)))
    want = np.sqrt(16) * (np.asarray(plain(tokens)) - np.asarray(plain.position(tf.range(5))))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_attention_is_causal():
    model = tmodels.build_transformer(2, **SMALL)
    x, _ = tmodels.markov_tokens(2, 5, 11)
    changed = x.copy()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    a, b = np.asarray(model(x)), np.asarray(model(changed))
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[:, -1], b[:, -1])


@pytest.mark.parametrize("position", tmodels.NORM_POSITIONS)
def test_post_and_pre_compute_their_own_formulas(position):
    """One block against NumPy: post x = LN(x + f(x)), pre x = x + f(LN(x)) (here f = the FFN,
    with the attention's output kernel zeroed so the attention branch is its output bias, 0)."""
    block = tmodels.TransformerBlock(8, 2, 12, norm_position=position)
    block.build((1, 3, 8))
    block.attention.output_dense.kernel.assign(np.zeros(block.attention.output_dense.kernel.shape, "float32"))
    x = np.random.default_rng(1).normal(size=(1, 3, 8)).astype("float32")
    k1, c1 = np.asarray(block.ffn_1.kernel, np.float64), np.asarray(block.ffn_1.bias, np.float64)
    k2, c2 = np.asarray(block.ffn_2.kernel, np.float64), np.asarray(block.ffn_2.bias, np.float64)

    def ln(h):
        return (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + tmodels.LN_EPSILON)

    def ffn(h):
        return np.maximum(h @ k1 + c1, 0) @ k2 + c2

    h = x.astype(np.float64)
    want = h + ffn(ln(h)) if position == "pre" else ln(ln(h) + ffn(ln(h)))
    np.testing.assert_allclose(np.asarray(block(x)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_layers=0), "num_layers"), (dict(num_layers=2.0), "num_layers"),
    (dict(num_layers=2, d_model=10, num_heads=4), "multiple of num_heads"),
    (dict(num_layers=2, norm_position="middle"), "norm_position"),
    (dict(num_layers=2, embedding_initializer="zeros"), "embedding_initializer"),
    (dict(num_layers=2, scale_embedding="yes"), "scale_embedding"),
    (dict(num_layers=2, vocab_size=1), "vocab_size"), (dict(num_layers=2, seq_len=0), "seq_len"),
    (dict(num_layers=2, ff_dim=0), "ff_dim"), (dict(num_layers=2, seed=-1), "seed"),
    (dict(num_layers=2, num_heads=0), "num_heads"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    num_layers = kwargs.pop("num_layers")
    with pytest.raises(ValueError, match=name):
        tmodels.build_transformer(num_layers, **kwargs)


def test_markov_tokens():
    x, y = tmodels.markov_tokens(6, 9, 13, branching=2, seed=4)
    assert x.shape == y.shape == (6, 9) and x.dtype == y.dtype == np.int32
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])        # y is the next token
    x2, y2 = tmodels.markov_tokens(6, 9, 13, branching=2, seed=4)
    np.testing.assert_array_equal(x, x2)
    successors = {}
    for a, b in zip(x.ravel(), y.ravel(), strict=True):
        successors.setdefault(int(a), set()).add(int(b))
    assert max(len(s) for s in successors.values()) <= 2        # each token has 2 successors
    _, yr = tmodels.markov_tokens(6, 9, 13, targets="random", seed=4)
    assert not np.array_equal(yr, y) and yr.min() >= 0 and yr.max() < 13
    for kwargs, name in ((dict(targets="real"), "targets"), (dict(branching=0), "branching"),
                         (dict(batch_size=0), "batch_size")):
        with pytest.raises(ValueError, match=name):
            tmodels.markov_tokens(**kwargs)


@pytest.mark.parametrize("position", tmodels.NORM_POSITIONS)
def test_block_gradient_report_matches_tape(position):
    model = tmodels.build_transformer(3, norm_position=position, **SMALL)
    x, y = tmodels.markov_tokens(4, 5, 11, seed=2)
    report = treports.block_gradient_report(model, x, y)
    blocks, ffn, loss = tape_block_norms(model, x, y)
    np.testing.assert_allclose(report.layer_grad_norms, blocks, rtol=1e-6)
    np.testing.assert_allclose(report.ffn_grad_norms, ffn, rtol=1e-6)
    assert report.loss == pytest.approx(loss, rel=1e-6)
    assert report.norm_position == position and report.stream_rms.shape == (4,)
    with pytest.raises(ValueError, match="block_"):
        treports.block_gradient_report(keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)]), x, y)


@pytest.mark.parametrize("position", tmodels.NORM_POSITIONS)
def test_engine_equals_an_independent_tape(engine, position):
    for depth in (1, 3):
        report = engine.report(depth, position)
        blocks, ffn, loss = tape_block_norms(engine.model(depth, position), *engine.data)
        assert report.layer_grad_norms.dtype == np.float64
        np.testing.assert_allclose(report.layer_grad_norms, blocks, rtol=1e-3)
        np.testing.assert_allclose(report.ffn_grad_norms, ffn, rtol=1e-3)
        assert report.loss == pytest.approx(loss, rel=1e-4)


def test_engine_embedding_and_data_overrides(engine):
    x, y = tmodels.markov_tokens(7, 5, 11, seed=9)
    report = engine.report(2, "post", embedding_initializer="normal", scale_embedding=True, data=(x, y))
    model = engine.model(2, "post", embedding_initializer="normal", scale_embedding=True)
    blocks, _, _ = tape_block_norms(model, x, y)
    np.testing.assert_allclose(report.layer_grad_norms, blocks, rtol=1e-3)
    other = engine.report(3, "pre", seed=7, data=(x, y))
    blocks, _, _ = tape_block_norms(engine.model(3, "pre", seed=7), x, y)
    np.testing.assert_allclose(other.layer_grad_norms, blocks, rtol=1e-3)
    assert not np.allclose(other.layer_grad_norms, engine.report(3, "pre", data=(x, y)).layer_grad_norms)
    with pytest.raises(ValueError, match="data"):
        engine.report(2, data=(x[:, :3], y[:, :3]))
    with pytest.raises(ValueError, match="outside"):
        engine.report(2, data=(x + 20, y))
    with pytest.raises(ValueError, match="num_layers"):
        engine.report(5)
    with pytest.raises(ValueError, match="norm_position"):
        engine.report(2, "middle")


def test_mean_report_averages_the_seeds(engine):
    reports = [engine.report(3, "post", seed=s) for s in (0, 4, 5)]
    mean = engine.mean_report(3, "post", seeds=(0, 4, 5))
    np.testing.assert_allclose(mean.ffn_grad_norms, np.mean([r.ffn_grad_norms for r in reports], axis=0))
    np.testing.assert_allclose(mean.layer_grad_norms, np.mean([r.layer_grad_norms for r in reports], axis=0))
    assert mean.norm_position == "post" and mean.num_layers == 3
    with pytest.raises(ValueError, match="seeds"):
        engine.mean_report(3, seeds=())


def test_engine_never_retraces(engine):
    engine.report(2, "pre")
    before = engine.tracing_count()
    assert before >= 1
    for depth, position in ((1, "post"), (4, "pre"), (3, "post"), (2, "pre")):
        engine.report(depth, position)
    engine.report(2, "post", embedding_initializer="glorot_uniform", data=tmodels.markov_tokens(9, 5, 11))
    engine.report(2, "post", seed=3)
    assert engine.tracing_count() - before == 0


def test_positions_differ_and_report_text(engine):
    pre, post = engine.report(3, "pre"), engine.report(3, "post")
    assert not np.allclose(pre.layer_grad_norms, post.layer_grad_norms, rtol=1e-2)
    assert "pre-LN, 3 blocks" in pre.summary() and pre.ratio == pytest.approx(
        pre.layer_grad_norms[-1] / pre.layer_grad_norms[0])
    # post-LN: every block's output is normalized (rms 1, the LayerNorm's gamma is 1 at init)
    np.testing.assert_allclose(post.stream_rms[1:], 1.0, rtol=1e-3)
    # pre-LN: the residual stream grows block by block
    assert np.all(np.diff(pre.stream_rms) > 0)


def test_engine_reports_are_computed_once_per_input(engine):
    """report() caches by every input (chapter 09 measures the same seed in several experiments):
    the same inputs return the same report without another run; any other input is measured."""
    engine._reports.clear()  # the engine is shared by this module's tests: start from an empty cache
    calls = []
    measure = engine._function
    engine._function = lambda *a: calls.append(1) or measure(*a)
    try:
        first = engine.report(3, "post", seed=5)
        assert engine.report(3, "post", seed=5) is first and len(calls) == 1
        others = [engine.report(3, "pre", seed=5), engine.report(2, "post", seed=5),
                  engine.report(3, "post", seed=6), engine.report(3, "post", seed=5, scale_embedding=True)]
        x, y = engine.data
        other_data = engine.report(3, "post", seed=5, data=(x, (y + 1) % SMALL["vocab_size"]))
        assert len(calls) == 6
    finally:
        engine._function = measure
    for r in [*others, other_data]:
        assert not np.allclose(r.ffn_grad_norms[-1], first.ffn_grad_norms[-1], rtol=1e-6, atol=0)
