"""gradlab.models.precision.float64_copy: the same model in float64, its weights cast exactly (issue 28)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradlab.models.precision import float64_copy


def _sequential():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(2)])


def _functional():
    keras.utils.set_random_seed(4)
    x = keras.Input((6,))
    h = keras.layers.Dense(4, activation="relu")(x)
    return keras.Model(x, keras.layers.Add()([h, keras.layers.Dense(4)(x)]))


@pytest.mark.parametrize("build", [_sequential, _functional])
def test_copy_is_float64_with_the_same_weights_and_leaves_the_model_alone(build):
    model = build()
    before = [w.copy() for w in model.get_weights()]
    copy = float64_copy(model)
    assert copy is not model
    assert {str(v.dtype) for v in copy.weights} == {"float64"}
    assert {str(v.dtype) for v in model.weights} == {"float32"}
    for a, b in zip(model.get_weights(), copy.get_weights(), strict=True):
        assert b.dtype == np.float64 and np.array_equal(a.astype(np.float64), b)  # exact
    for a, b in zip(before, model.get_weights(), strict=True):
        assert np.array_equal(a, b)
    x = tf.random.stateless_normal([3, model.inputs[0].shape[-1]], seed=[1, 2])
    y32, y64 = model(x), copy(x)
    assert y64.dtype == tf.float64
    np.testing.assert_allclose(y64.numpy(), y32.numpy(), rtol=1e-4, atol=1e-5)
    assert not np.array_equal(y64.numpy(), y32.numpy().astype(np.float64))  # really computed in float64


def test_a_float64_model_is_returned_as_it_is():
    copy = float64_copy(_sequential())
    assert float64_copy(copy) is copy or {str(v.dtype) for v in float64_copy(copy).weights} == {"float64"}


def test_refusals_name_the_argument():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(2)

        def call(self, x):
            return self.d(x)

    sub = Sub()
    sub(tf.zeros([1, 3]))
    with pytest.raises(ValueError, match="subclassed Sub"):
        float64_copy(sub)
    with pytest.raises(ValueError, match="model must be a Keras model; got list"):
        float64_copy([1])
    with pytest.raises(ValueError, match="built"):
        float64_copy(keras.Sequential([keras.layers.Dense(2)]))


def test_a_layer_whose_config_loses_a_setting_is_not_copied():
    class Half(keras.layers.Layer):
        def __init__(self, on=True, **kw):
            super().__init__(**kw)
            self.on = on

        def call(self, x):
            return x * 0.5 if self.on else x

    # Keras 3 rebuilds a layer from the arguments its constructor was given: a setting changed
    # afterwards comes back as it was given
    changed = Half(name="half")
    changed.on = False
    model = keras.Sequential([keras.Input((3,)), changed, keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"layer 'half'.*is not copied"):
        float64_copy(model)
    class Shift(keras.layers.Layer):  # chapter 04's kind of layer: nothing of its own in __init__
        def build(self, input_shape):
            self.shift = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="shift")

        def call(self, x):
            return x - self.shift

    kept = float64_copy(keras.Sequential([keras.Input((3,)), Shift(name="standardize"), keras.layers.Dense(2)]))
    assert kept.layers[0].name == "standardize" and kept.weights[0].path.endswith("standardize/shift")
