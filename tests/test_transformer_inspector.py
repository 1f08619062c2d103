"""The inspector on a default Transformer: normalization explains the signal ratio, so no initializer advice."""

from __future__ import annotations

import pytest

import gradlab as gl
from gradlab.models.transformer import build_transformer, markov_tokens

keras = pytest.importorskip("keras")


@pytest.mark.parametrize("position", ["pre", "post"])
def test_no_initializer_advice_on_a_default_transformer(position):
    model = build_transformer(6, norm_position=position)        # Keras defaults: std 0.029 embedding
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = markov_tokens(8, 32, 64)
    report = gl.inspect_training_step(model, x, y)
    # the embedding's small scale before the first LayerNorm makes the signal ratio large ...
    assert report.verdict.ratio > 10
    # ... and the verdict puts it down to the normalization, not to the initializer
    assert "initializer-scale" not in report.verdict.causes
    assert "normalization" in report.verdict.causes
    text = str(report).lower()
    assert "initializer" not in text and "he_normal" not in text and "glorot" not in text
