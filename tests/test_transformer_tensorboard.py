"""GradNormLogger(log_dir=...): TensorBoard's own event readers find per-layer scalars and histograms."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.models.transformer import build_transformer, markov_tokens

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tensorboard.backend.event_processing import plugin_event_accumulator  # noqa: E402

SMALL = dict(d_model=16, num_heads=2, vocab_size=11, seq_len=6)
LAYERS = ["embedding", "block_0", "block_1", "final_norm", "logits"]


def read(log_dir):
    """Both of TensorBoard's readers: the legacy EventAccumulator (TF2 summaries are tensors with
    a plugin name) and the plugin accumulator the dashboards use."""
    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    plugins = plugin_event_accumulator.EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    plugins.Reload()
    return acc, plugins


def layer_sizes(model):
    sizes = {}
    for name, idx in gl.core.layer_groups(model):
        sizes[name] = sum(int(np.prod(model.trainable_variables[i].shape)) for i in idx)
    return sizes


def tape_norms(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=False))
    grads = tape.gradient(loss, model.trainable_variables)
    out = {}
    for name, idx in gl.core.layer_groups(model):
        out[name] = np.sqrt(sum(float(np.sum(np.asarray(tf.convert_to_tensor(grads[i]), np.float64) ** 2))
                                for i in idx))
    return out


def compiled(model):
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_fit_writes_per_layer_scalars_and_histograms(tmp_path):
    model = compiled(build_transformer(2, **SMALL))
    x, y = markov_tokens(12, 6, 11)
    logger = gl.GradNormLogger(probe=(x[:4], y[:4]), every="batch", log_dir=tmp_path / "fit")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False, callbacks=[logger])
    assert logger.steps == [1, 2, 3, 4, 5, 6]
    acc, plugins = read(tmp_path / "fit")
    tags = acc.Tags()["tensors"]
    for layer in LAYERS:
        assert f"grad_norm/{layer}" in tags and f"gradients/{layer}" in tags
        assert acc.SummaryMetadata(f"grad_norm/{layer}").plugin_data.plugin_name == "scalars"
        assert acc.SummaryMetadata(f"gradients/{layer}").plugin_data.plugin_name == "histograms"
        events = acc.Tensors(f"grad_norm/{layer}")
        assert [e.step for e in events] == logger.steps
        np.testing.assert_allclose([float(tf.make_ndarray(e.tensor_proto)) for e in events],
                                   logger.history[layer], rtol=1e-6)
    assert set(plugins.PluginTagToContent("scalars")) == {f"grad_norm/{n}" for n in LAYERS}
    assert set(plugins.PluginTagToContent("histograms")) == {f"gradients/{n}" for n in LAYERS}
    # a histogram holds every value of the layer's gradient: bucket counts add up to its size
    sizes = layer_sizes(model)
    for layer in LAYERS:
        buckets = tf.make_ndarray(acc.Tensors(f"gradients/{layer}")[-1].tensor_proto)
        assert buckets.shape[1] == 3 and buckets[:, 2].sum() == pytest.approx(sizes[layer])
    # the last entry is the probe batch's gradient after training: an independent tape agrees
    reference = tape_norms(model, tf.constant(x[:4]), tf.constant(y[:4]))
    for layer in LAYERS:
        assert logger.history[layer][-1] == pytest.approx(reference[layer], rel=1e-4)


def test_custom_loop_logs_what_its_tape_gives(tmp_path):
    model = compiled(build_transformer(2, **SMALL))
    x, y = markov_tokens(4, 6, 11, seed=3)
    logger = gl.GradNormLogger(log_dir=str(tmp_path / "loop"))
    optimizer = keras.optimizers.SGD(0.1)
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        norms = logger.log_gradients(model, grads, step)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        for name, idx in gl.core.layer_groups(model):
            want = np.sqrt(sum(float(np.sum(np.asarray(tf.convert_to_tensor(grads[i]), np.float64) ** 2))
                               for i in idx))
            assert norms[name] == pytest.approx(want, rel=1e-6)
    logger.close()
    acc, plugins = read(tmp_path / "loop")
    assert [e.step for e in acc.Tensors("grad_norm/block_1")] == [0, 1, 2]
    assert set(plugins.PluginTagToContent("histograms")) == {f"gradients/{n}" for n in LAYERS}
    with pytest.raises(ValueError, match="grads holds 1 gradients"):
        logger.log_gradients(model, grads[:1], 3)
    with pytest.raises(ValueError, match="step"):
        logger.log_gradients(model, grads, -1)


def test_logs_of_a_gradnorm_model_give_scalars_only(tmp_path):
    model = gl.GradNormSequential([keras.Input((3,)), keras.layers.Dense(4, name="hidden"),
                                   keras.layers.Dense(1, name="out")])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    logger = gl.GradNormLogger(log_dir=tmp_path / "logs")
    model.fit(x, x[:, :1], epochs=2, verbose=0, callbacks=[logger])
    acc, plugins = read(tmp_path / "logs")
    assert set(plugins.PluginTagToContent("scalars")) == {"grad_norm/hidden", "grad_norm/out"}
    assert "gradients/out" not in acc.Tags()["tensors"]
    with pytest.raises(KeyError, match="histograms"):       # no histogram at all was written
        plugins.PluginTagToContent("histograms")
    assert [e.step for e in acc.Tensors("grad_norm/out")] == [1, 2]


def test_log_dir_must_be_a_path():
    with pytest.raises(ValueError, match="log_dir"):
        gl.GradNormLogger(log_dir=3)
