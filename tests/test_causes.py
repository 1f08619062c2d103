"""gradlab.reports.causes: each cause of a None gradient and each birthplace of a NaN is named.

The reference for "which gradients are None / non-finite" is a plain GradientTape run in
each test; the functions under test must name the op that a reader of the model can see.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradlab as gl
from gradlab._env import quiet_import_tensorflow

tf = quiet_import_tensorflow()
import keras  # noqa: E402

X = tf.random.stateless_normal([16, 4], seed=[3, 4])
Y = tf.random.stateless_normal([16, 1], seed=[5, 6])


class TwoLayer(keras.Model):
    """dense2(middle(dense1(x))): ``middle`` is the op under test."""

    def __init__(self, middle, use_second=True):
        super().__init__()
        self.dense1 = keras.layers.Dense(3, name="first")
        self.dense2 = keras.layers.Dense(1, name="second")
        self.unused = keras.layers.Dense(2, name="spare")
        self.unused.build((None, 4))  # built, never called
        self.middle = middle
        self.use_second = use_second

    def call(self, x):
        h = self.middle(self.dense1(x))
        return self.dense2(h) if self.use_second else tf.reduce_sum(h, axis=1, keepdims=True)


def setup_model(middle, **kw):
    keras.utils.set_random_seed(0)
    model = TwoLayer(middle, **kw)
    model(X)
    variables = model.trainable_variables

    def loss_fn():
        return tf.reduce_mean(tf.square(Y - model(X)))

    return loss_fn, variables


def none_positions(loss_fn, variables):
    """Independent reference: which gradients a plain tape returns as None."""
    with tf.GradientTape() as tape:
        loss = loss_fn()
    return {i for i, g in enumerate(tape.gradient(loss, variables)) if g is None}


def paths(variables, positions):
    return sorted("/".join(variables[i].path.split("/")[-2:]) for i in positions)


@pytest.mark.parametrize(
    ("middle", "words"),
    [
        (lambda h: tf.cast(tf.argmax(h, axis=1)[:, None], tf.float32), ["ArgMax", "tf.argmax"]),
        (tf.round, ["Round", "tf.round"]),
        (lambda h: tf.cast(tf.cast(h * 10.0, tf.int32), tf.float32), ["Cast to int32"]),
        (lambda h: tf.cast(h > 0.0, tf.float32), ["comparison", "Greater"]),
        (tf.stop_gradient, ["tf.stop_gradient", "StopGradient"]),
    ],
    ids=["argmax", "round", "int-cast", "comparison", "stop-gradient"],
)
def test_op_that_cuts_the_path_is_named(middle, words):
    loss_fn, variables = setup_model(middle)
    causes = gl.explain_none_gradients(loss_fn, variables)
    expected = none_positions(loss_fn, variables)
    # the first layer is cut off, the second layer still trains, the spare layer is never used
    assert paths(variables, expected) == ["first/bias", "first/kernel", "spare/bias", "spare/kernel"]
    assert set(causes) == expected
    for i in expected:
        if "first" in variables[i].path:
            for w in words:
                assert w in causes[i], causes[i]
            assert "two_layer" in causes[i]  # the graph name locates the op in the model
        else:
            assert "never read" in causes[i]


def test_unused_layer_is_named_as_never_read():
    loss_fn, variables = setup_model(tf.nn.relu)
    causes = gl.explain_none_gradients(loss_fn, variables)
    assert set(causes) == none_positions(loss_fn, variables)
    assert paths(variables, causes) == ["spare/bias", "spare/kernel"]
    assert all("never read by the loss computation" in c for c in causes.values())


def test_layer_called_but_output_discarded():
    v = tf.Variable([1.0, 2.0])
    w = tf.Variable([3.0, 4.0])

    def loss_fn():
        _ = tf.reduce_sum(w * 2.0)  # computed, then thrown away
        return tf.reduce_sum(v * v)

    causes = gl.explain_none_gradients(loss_fn, [v, w])
    assert list(causes) == [1] and "nothing computed from it reaches the loss" in causes[1]


def test_cut_inside_a_nested_function_or_branch_and_a_selecting_comparison():
    v = tf.Variable([1.0, 2.0])

    @tf.function
    def inner(t):
        return tf.round(t)

    def cond_loss():
        return tf.cond(tf.reduce_sum(v) > 0, lambda: tf.reduce_sum(tf.round(v)), lambda: tf.reduce_sum(v))

    def where_loss():  # selects between constants: only the comparison connects v to the loss
        return tf.reduce_sum(tf.where(v > 1.5, 1.0, 0.0))

    for fn in (lambda: tf.reduce_sum(inner(v * 2.0)), cond_loss, where_loss):
        assert none_positions(fn, [v]) == {0}
    assert "inside a nested tf.function" in gl.explain_none_gradients(lambda: tf.reduce_sum(inner(v * 2.0)), [v])[0]
    text = gl.explain_none_gradients(cond_loss, [v])[0]
    assert "inside a tf.cond branch" in text and "Greater" not in text  # the predicate is not the cut
    assert "comparison (Greater)" in gl.explain_none_gradients(where_loss, [v])[0]


def test_numpy_round_trip():
    loss_fn, variables = setup_model(lambda h: tf.constant(np.tanh(h.numpy())))
    causes = gl.explain_none_gradients(loss_fn, variables)
    assert set(causes) == none_positions(loss_fn, variables)
    first = [c for i, c in causes.items() if "first" in variables[i].path]
    spare = [c for i, c in causes.items() if "spare" in variables[i].path]
    assert len(first) == 2 and all("NumPy round-trip" in c for c in first)
    assert len(spare) == 2 and all("never read" in c for c in spare)


def test_integer_variable():
    n = tf.Variable(3)
    v = tf.Variable(2.0)

    def loss_fn():
        return tf.cast(n, tf.float32) * v

    assert gl.explain_none_gradients(loss_fn, [n, v]) == {
        0: gl.explain_none_gradients(loss_fn, [n])[0]
    }
    assert "integer dtype" in gl.explain_none_gradients(loss_fn, [n])[0]
    assert "int32" in gl.explain_none_gradients(loss_fn, [n])[0]


def test_healthy_model_has_nothing_to_explain():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])

    def loss_fn():
        return tf.reduce_mean(tf.square(Y - model(X)))

    assert gl.explain_none_gradients(loss_fn, model.trainable_variables) == {}
    assert gl.find_nonfinite_source(loss_fn, model.trainable_variables) is None


# ----------------------------------------------------------------------------- NaN and inf
V = np.array([-1.0, 0.0, 2.0], np.float32)


def grads_and_loss(loss_fn, v):
    with tf.GradientTape() as tape:
        loss = loss_fn()
    return float(loss), tape.gradient(loss, v).numpy()


def test_where_trap_is_traced_to_the_unselected_pow():
    v = tf.Variable(V)

    def loss_fn():
        return tf.reduce_sum(tf.where(v > 0, v**0.5, 0.0))

    loss, g = grads_and_loss(loss_fn, v)
    assert math.isclose(loss, math.sqrt(2.0), rel_tol=1e-6)  # the loss is finite ...
    assert np.isnan(g[0]) and math.isclose(g[2], 0.5 / math.sqrt(2.0), rel_tol=1e-5)  # ... its gradient is not
    text = gl.find_nonfinite_source(loss_fn, [v])
    assert "forward pass, in Pow" in text and "unselected" in text and "double where" in text
    assert np.isnan(float(tf.math.log(-1.0)))  # check_numerics is off again: a NaN raises no error

    def fixed():
        safe = tf.where(v > 0, v, 1.0)
        return tf.reduce_sum(tf.where(v > 0, safe**0.5, 0.0))

    assert gl.find_nonfinite_source(fixed, [v]) is None
    assert np.all(np.isfinite(grads_and_loss(fixed, v)[1]))


def test_log_of_zero_in_the_forward_pass():
    v = tf.Variable(V)

    def loss_fn():
        return tf.reduce_sum(tf.math.log(v * v))

    loss, _ = grads_and_loss(loss_fn, v)
    assert loss == -math.inf
    text = gl.find_nonfinite_source(loss_fn, [v])
    assert text.startswith("The first NaN/inf is born in the forward pass, in Log") and "-Inf" in text
    assert "unselected" not in text  # the loss itself is -inf: this NaN is used
    assert "from_logits" in text


def test_sqrt_at_zero_in_the_backward_pass():
    v = tf.Variable(V)

    def loss_fn():
        return tf.reduce_sum(tf.sqrt(v * v))

    loss, g = grads_and_loss(loss_fn, v)
    assert math.isclose(loss, 3.0) and np.isnan(g[1]) and g[0] == -1.0
    text = gl.find_nonfinite_source(loss_fn, [v])
    # the NaN/inf count belongs to the op that produced it (SqrtGrad), the graph name to Sqrt
    assert "backward pass, in SqrtGrad (1 Inf), the gradient of Sqrt ('Sqrt')" in text, text
    assert "forward pass is finite" in text and "epsilon" in text
    # the finding and the fix apart (the inspector puts its own "Fix:" before the fix)
    assert "Fix:" not in text.finding and "epsilon" in text.fix and not text.fix.endswith(".")
    assert text == f"{text.finding} Fix: {text.fix}."


def test_division_by_zero_in_a_keras_model():
    keras.utils.set_random_seed(0)
    loss_fn, variables = setup_model(lambda h: 1.0 / (h - h))
    text = gl.find_nonfinite_source(loss_fn, variables)
    assert "forward pass, in RealDiv" in text and "divide_no_nan" in text and "two_layer" in text


@pytest.mark.parametrize(
    ("args", "word"),
    [((1.0, []), "loss_fn"), ((lambda: tf.constant(1.0), tf.Variable(1.0)), "variables"),
     ((lambda: tf.constant(1.0), [np.ones(2)]), "variables[0]")],
)
def test_bad_input_names_the_argument(args, word):
    for fn in (gl.explain_none_gradients, gl.find_nonfinite_source):
        with pytest.raises(ValueError, match=word.replace("[", r"\[")):
            fn(*args)


# ----------------------------------------------------------------------------- through the inspector
def _sequential(*middle):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="first"), *middle,
                             keras.layers.Dense(1, name="last")])


class SpareLayerModel(keras.Model):
    # no leading underscore: Keras names a model after its class, and tf.function cannot trace a
    # root name scope that starts with "_" (Keras then leaves its name scope open)
    def __init__(self):
        super().__init__()
        self.first = keras.layers.Dense(1, name="first")
        self.spare = keras.layers.Dense(1, name="spare")

    def build(self, shape):
        self.first.build(shape)
        self.spare.build(shape)

    def call(self, x):
        return self.first(x)


def _unused_model():
    keras.utils.set_random_seed(0)
    model = SpareLayerModel()
    model.build((None, 4))
    return model


@pytest.mark.parametrize(
    ("make", "loss_fn", "kind", "words"),
    [
        (lambda: _sequential(), lambda yt, yp: tf.reduce_mean(tf.cast(tf.argmax(yp * [[1.0, -1.0]], 1), tf.float32)),
         "none-gradient", "ArgMax"),
        (lambda: _sequential(), lambda yt, yp: tf.reduce_mean(tf.square(yt - tf.round(yp))), "none-gradient", "Round"),
        (lambda: _sequential(keras.layers.Lambda(tf.stop_gradient)), None, "none-gradient", "tf.stop_gradient"),
        (_unused_model, None, "none-gradient", "never read"),
        (lambda: _sequential(keras.layers.Lambda(lambda h: tf.where(h > 0, h**0.5, 0.0))), None,
         "non-finite-gradient", "unselected branch of a tf.where"),
    ],
    ids=["argmax", "round", "stop-gradient", "unused-layer", "where-trap"],
)
def test_inspect_training_step_names_the_cause(make, loss_fn, kind, words):
    model = make()
    report = gl.inspect_training_step(model, X, Y, loss_fn)
    found = [p for p in report.problems if p.kind == kind]
    assert found, report.problem_kinds
    assert words in found[0].finding, found[0].finding
    fix_words = {"ArgMax": "stand-in", "Round": "straight-through", "tf.stop_gradient": "deliberate",
                 "never read": "in call", "unselected branch of a tf.where": "the double where"}
    assert fix_words[words] in found[0].fix, found[0].fix  # the fix matches the named cause
    # the finding holds no fix of its own: the printed problem says "Fix:" exactly once
    assert "Fix:" not in found[0].finding and found[0].fix.count("Fix:") == 0 and str(found[0]).count("Fix:") == 1


# ----------------------------------------------------------------------------- a head without a loss (diag 4)
def _two_heads():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    trunk = keras.layers.Dense(16, activation="relu", name="trunk")(inputs)
    head_a = keras.layers.Dense(1, name="head_a")(trunk)
    head_b = keras.layers.Dense(2, name="head_b")(keras.layers.Dense(4, name="head_b_hidden")(trunk))
    return keras.Model(inputs, [head_a, head_b])


HX = tf.random.stateless_normal([16, 8], [4, 1])
HY = [tf.random.stateless_normal([16, 1], [4, 2]), tf.random.stateless_normal([16, 2], [4, 3])]


@pytest.mark.parametrize("loss", [["mse", None], {"head_a": "mse", "head_b": None}])
def test_a_head_compiled_without_a_loss_is_named(loss):
    model = _two_heads()
    model.compile(optimizer="sgd", loss=loss)
    # the independent view: Keras 3 leaves that output out of the loss, so its own variables get None
    with tf.GradientTape() as tape:
        value = model.compute_loss(HX, HY, model(HX, training=True))
    grads = tape.gradient(value, model.trainable_variables)
    none = [v.path for v, g in zip(model.trainable_variables, grads, strict=True) if g is None]
    assert none == ["head_b_hidden/kernel", "head_b_hidden/bias", "head_b/kernel", "head_b/bias"]
    report = gl.inspect_training_step(model, HX, HY)
    assert report.none_gradients == tuple(none) and report.problem_kinds == ("none-gradient",)
    p = report.problems[0]
    assert "'head_b' has no loss" in p.finding and "discarded" not in p.finding
    assert "loss_weights" in p.fix and "trainable = False" in p.fix and "use the layer's output" not in p.fix
    assert report.status == "healthy"  # a None gradient says nothing about the size of the others


def test_both_heads_with_a_loss_have_nothing_to_explain():
    model = _two_heads()
    model.compile(optimizer="sgd", loss=["mse", "mse"])
    report = gl.inspect_training_step(model, HX, HY)
    assert report.none_gradients == () and "none-gradient" not in report.problem_kinds


def test_a_lossless_head_with_a_loss_passed_in_is_not_blamed():
    """loss= given to the inspector: the compiled None is not what ran."""
    model = _two_heads()
    model.compile(optimizer="sgd", loss=["mse", None])
    report = gl.inspect_training_step(model, HX, HY, loss=lambda y, p: tf.reduce_mean(tf.square(y[0] - p[0])))
    p = next(p for p in report.problems if p.kind == "none-gradient")
    assert "has no loss" not in p.finding


# ----------------------------------------------------------------------------- the learner's op, not TF's helper (issue 38)
@pytest.mark.parametrize("op, fn", [
    ("Acos", lambda v: tf.acos(v)), ("Asin", lambda v: tf.asin(v)),
    ("Sqrt", lambda v: tf.sqrt(v - tf.constant([1.0, 0.0]))),
])
def test_a_backward_nan_names_the_learners_op_and_its_fix(op, fn):
    v = tf.Variable([1.0, 0.5])  # acos, asin at 1 and sqrt at 0: finite forward, infinite derivative
    found = gl.find_nonfinite_source(lambda: tf.reduce_sum(fn(v)), [v])
    assert "backward pass" in found.finding and f"the gradient of {op} ('{op}')" in found.finding, found
    assert "divide_no_nan" not in found and "1/x at 0" not in found
    if op != "Sqrt":  # the fix applies to the learner's op: clip it inside (-1, 1)
        assert f"tf.{op.lower()}(tf.clip_by_value(" in found.fix
        with tf.GradientTape() as tape:
            safe = tf.reduce_sum(fn(tf.clip_by_value(v, -1 + 1e-6, 1 - 1e-6)))
        assert bool(tf.reduce_all(tf.math.is_finite(tape.gradient(safe, v))))


def test_a_fractional_power_at_0_names_pow():
    v = tf.Variable([1.0, 0.5])
    found = gl.find_nonfinite_source(lambda: tf.reduce_sum((v - tf.constant([1.0, 0.0])) ** (1 / 3)), [v])
    assert "backward pass, in Pow" in found.finding and "divide_no_nan" not in found
