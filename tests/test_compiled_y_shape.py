"""A y of the wrong shape with a compiled Keras loss is refused with a ValueError naming y, by every
tool that runs the core step (issue 38): TensorFlow's ``Incompatible shapes`` otherwise, or a
silent broadcast. Keras's own squeeze of a trailing axis of size 1 stays accepted."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import gradlab as gl
from gradlab._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()


def _model(units=3):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.Dense(units)])
    model.compile(optimizer="sgd", loss="mse")
    return model


X = np.random.default_rng(0).normal(size=(4, 5)).astype("float32")
TOOLS = {
    "inspect_training_step": lambda m, y: gl.inspect_training_step(m, X, y),
    "gradient_report": lambda m, y: gl.gradient_report(m, X, y),
    "train_steps": lambda m, y: gl.train_steps(m, X, y, optimizer=keras.optimizers.SGD(0.01), steps=1),
    "make_train_step": lambda m, y: gl.make_train_step(m, keras.optimizers.SGD(0.01))(X, y),
}


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize("y_shape", [(4, 2), (4,)])  # TF's Incompatible shapes; a silent broadcast
def test_a_y_of_the_wrong_shape_is_a_value_error_naming_y(tool, y_shape):
    y = np.zeros(y_shape, "float32")
    with pytest.raises(ValueError, match=rf"^y has shape \({y_shape[0]},.*output has shape \(4, 3\)"):
        TOOLS[tool](_model(), y)


def test_keras_squeezing_a_trailing_axis_of_1_is_still_accepted():
    model = _model(units=1)
    y = np.zeros(4, "float32")
    report = gl.gradient_report(model, X, y)  # y of shape (4,) for an output (4, 1), as fit takes it
    history = model.fit(X, y, epochs=1, verbose=0)  # what Keras itself does with it
    assert np.isfinite(history.history["loss"][0]) and report is not None


class SegmentMean(keras.layers.Layer):
    """The mean over each example's tokens (the ragged axis): tf.math.segment_mean over the row ids."""

    def call(self, x):
        return tf.math.segment_mean(x.values, x.value_rowids())


class BagOfTokens(keras.Model):
    def __init__(self):
        super().__init__()
        self.embed, self.mean, self.out = keras.layers.Embedding(10, 4), SegmentMean(), keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.mean(self.embed(x)))


def test_ragged_token_ids_run_where_keras_runs_them():
    keras.utils.set_random_seed(0)
    ids = tf.ragged.constant([[1, 2, 3], [4, 5], [6, 7, 8, 9]])
    y = np.zeros((3, 1), "float32")
    model = BagOfTokens()
    model.compile(optimizer="sgd", loss="mse")
    assert model(ids).shape == (3, 1)  # Keras runs it, and fits it
    assert np.isfinite(model.fit(ids, y, epochs=1, verbose=0).history["loss"][0])
    report = gl.inspect_training_step(model, ids, y)
    embedding = report.layers[0]
    # the ragged Embedding output's std over its values (was NaN: the tap skipped ragged outputs)
    expected = float(np.std(model.embed(ids).flat_values.numpy().astype(np.float64)))
    assert embedding.kind == "Embedding" and embedding.output_std == pytest.approx(expected, rel=1e-6)
    run = gl.train_steps(model, ids, y, optimizer=keras.optimizers.SGD(0.01), steps=2)
    assert np.isfinite(run.losses).all() if hasattr(run, "losses") else run is not None
