"""The shared self-checks of every chapter's exercises: right answers and typical wrong ones."""

from __future__ import annotations

import numpy as np
import pytest

import gradlab as gl
from gradlab.diagnostics import keras, tf

EXPECTED = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def _fails(result, *needles):
    assert not result and result.ok is False
    for needle in needles:
        assert needle in result.feedback, result.feedback
    assert str(result).startswith("❌")


# ----------------------------------------------------------------------------- CheckResult
def test_check_result_is_truthy_and_prints_one_line():
    ok = gl.CheckResult("x", True, "fine")
    bad = gl.CheckResult("x", False, "shape (2,)")
    assert ok and not bad
    assert str(ok) == "✅ x: fine" and repr(bad) == "❌ x: shape (2,)"

    class P:
        text_out = None

        def text(self, t):
            self.text_out = t

    p = P()
    ok._repr_pretty_(p, False)
    assert p.text_out == "✅ x: fine"


# ----------------------------------------------------------------------------- check_array
@pytest.mark.parametrize("got", [EXPECTED, EXPECTED.tolist(), tf.constant(EXPECTED, tf.float32),
                                 tf.Variable(EXPECTED)])
def test_check_array_right_answer_in_any_container(got):
    r = gl.check_array("a", got, EXPECTED)
    assert r and "match" in r.feedback and str(r).startswith("✅")


def test_check_array_accepts_a_tensor_as_expected_and_small_rounding():
    assert gl.check_array("a", EXPECTED + 1e-7, tf.constant(EXPECTED))


def test_check_array_none_points_to_the_none_gallery():
    _fails(gl.check_array("a", None, EXPECTED), "got None", "chapter 02")


def test_check_array_transposed_says_transpose():
    _fails(gl.check_array("a", EXPECTED.T, EXPECTED), "shape (3, 2)", "expected (2, 3)", "transpose")


def test_check_array_fewer_dimensions_suggests_a_reduction():
    _fails(gl.check_array("a", EXPECTED.sum(axis=0), EXPECTED), "shape (3,)", "fewer dimensions")


def test_check_array_wrong_shape_other():
    r = gl.check_array("a", np.ones((2, 3, 4)), EXPECTED)
    _fails(r, "shape (2, 3, 4)", "expected (2, 3)")
    assert "transpose" not in r.feedback and "fewer" not in r.feedback


def test_check_array_nan_and_inf_are_counted():
    got = EXPECTED.copy()
    got[0, 0] = np.nan
    got[1, 2] = np.inf
    _fails(gl.check_array("a", got, EXPECTED), "2 of 6 values are NaN or inf")


def test_check_array_wrong_values_name_the_largest_gap():
    got = EXPECTED.copy()
    got[1, 1] = 7.5
    _fails(gl.check_array("a", got, EXPECTED), "values differ", "largest gap 2.5", "index (1, 1)",
           "got 7.5", "expected 5")


def test_check_array_wrong_scalar():
    _fails(gl.check_array("s", 3.0, 2.0), "values differ", "got 3", "expected 2")
    assert gl.check_array("s", tf.constant(2.0), 2.0)


def test_check_array_strings_and_ragged_lists():
    _fails(gl.check_array("a", "1, 2, 3", EXPECTED), "got a str", "expected numbers")
    _fails(gl.check_array("a", [[1.0, 2.0], [3.0]], EXPECTED), "could not turn a list into an array")
    _fails(gl.check_array("a", np.array([1.0, None], dtype=object), np.zeros(2)), "not a rectangular array")
    _fails(gl.check_array("a", np.array(["a", "b"]), np.zeros(2)), "not numeric")


def test_check_array_tolerances():
    assert not gl.check_array("a", EXPECTED * 1.01, EXPECTED)
    assert gl.check_array("a", EXPECTED * 1.01, EXPECTED, rtol=0.02)


# ----------------------------------------------------------------------------- check_arrays
def _pair():
    return [np.array([1.0, 2.0]), np.array([[3.0], [4.0]])]


def test_check_arrays_right_answer():
    r = gl.check_arrays("grads", [tf.constant(a) for a in _pair()], _pair())
    assert r and "all 2 arrays match" in r.feedback


def test_check_arrays_none_instead_of_a_list():
    _fails(gl.check_arrays("grads", None, _pair()), "expected a list of 2 arrays", "NoneType")


def test_check_arrays_wrong_length():
    _fails(gl.check_arrays("grads", _pair()[:1], _pair()), "got 1 arrays, expected 2")


def test_check_arrays_names_the_bad_item():
    _fails(gl.check_arrays("grads", [_pair()[0], None], _pair()), "item 1", "got None")
    _fails(gl.check_arrays("grads", [_pair()[0], np.array([3.0, 4.0])], _pair()), "item 1", "shape (2,)",
           "transpose")
    _fails(gl.check_arrays("grads", [np.array([1.0, np.nan]), _pair()[1]], _pair()), "item 0", "NaN")
    _fails(gl.check_arrays("grads", [np.array([1.0, 2.5]), _pair()[1]], _pair()), "item 0", "values differ")


def test_check_arrays_a_string_is_not_a_list():
    _fails(gl.check_arrays("grads", "ab", _pair()), "expected a list", "str")


# ----------------------------------------------------------------------------- check_status
def test_check_status():
    assert gl.check_status("s", "healthy", "healthy")
    _fails(gl.check_status("s", "vanishing", "healthy"), "'vanishing'", "expected 'healthy'")
    _fails(gl.check_status("s", None, "healthy"), "None", "expected 'healthy'")
    _fails(gl.check_status("s", "Healthy", "healthy"), "'Healthy'")


# ----------------------------------------------------------------------------- check_true
def test_check_true_with_values_and_callables():
    r = gl.check_true("t", True, "no", "yes")
    assert r and r.feedback == "yes"
    assert gl.check_true("t", 1 == 1, "no").feedback == "as expected"
    _fails(gl.check_true("t", False, "it was false"), "it was false")
    assert gl.check_true("t", lambda: True, "no")
    _fails(gl.check_true("t", lambda: 1 / 0, "no"), "raised ZeroDivisionError")


# ----------------------------------------------------------------------------- check_trains
def _data():
    x = tf.random.stateless_normal([64, 4], seed=[0, 1])
    return x, tf.reduce_sum(x, axis=1, keepdims=True)


def _model(name="m", seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(1, name="out")], name=name)


class _Forgotten(keras.layers.Layer):
    def build(self, input_shape):
        self.gain = self.add_weight(shape=(1,), initializer="ones", name="gain")

    def call(self, inputs):
        return inputs


def test_check_trains_passes_a_working_setup():
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5)
    assert r, r.feedback
    assert "final loss (mean of the last 10 steps)" in r.feedback and "< 0.5" in r.feedback
    assert "first below it at step" in r.feedback and "no None gradients" in r.feedback


def test_check_trains_none_instead_of_a_model():
    _fails(gl.check_trains("fit", None, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=0.5),
           "got None instead of a model")


def test_check_trains_not_a_model_or_optimizer():
    _fails(gl.check_trains("fit", lambda x: x, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5,
                           below=0.5), "expected a keras.Model")
    _fails(gl.check_trains("fit", _model(), *_data(), optimizer=0.05, steps=5, below=0.5),
           "expected a keras optimizer")


def test_check_trains_names_a_none_gradient():
    model = keras.Sequential([keras.Input((4,)), _Forgotten(name="forgotten"), keras.layers.Dense(1, name="out")],
                             name="n")
    _fails(gl.check_trains("fit", model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=50, below=10.0),
           "no gradient (None)", "n/forgotten/gain")


def test_check_trains_reports_divergence_with_the_step():
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(5.0), steps=200, below=0.5)
    _fails(r, "at step", "diverged", "learning rate")


def test_check_trains_reports_a_loss_that_stays_too_high():
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(1e-4), steps=5, below=0.01)
    _fails(r, "after 5 steps the final loss (mean of the last 5 steps)", "not below 0.01", "best")


def test_check_trains_wrong_target_shape_is_feedback():
    x, y = _data()
    _fails(gl.check_trains("fit", _model(), x, tf.squeeze(y, 1), optimizer=keras.optimizers.SGD(0.05),
                           steps=5, below=0.5), "could not train", "broadcast")


def test_check_trains_rejects_a_bad_threshold():
    with pytest.raises(ValueError, match="below must be a number > 0"):
        gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below="low")


def _fake_run(monkeypatch, losses):
    """Make check_trains see a training run with these losses (its decision logic alone)."""
    import gradlab.diagnostics as diagnostics

    run = diagnostics.TrainingRun(tuple(losses), tuple(1.0 for _ in losses), (), None, len(losses))
    monkeypatch.setattr(diagnostics, "train_steps", lambda *a, **k: run)


def test_check_trains_fails_a_loss_that_dips_below_and_rises_again(monkeypatch):
    losses = [1.0] * 150 + [0.05] + [0.3] * 49  # below 0.1 at step 151 only, ends at 0.3
    _fake_run(monkeypatch, losses)
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    _fails(r, "mean of the last 10 steps) is 0.3", "dipped below 0.1 at step 151", "did not stay",
           "a lower learning rate")


def test_check_trains_a_loss_still_falling_at_the_end_gets_other_advice(monkeypatch):
    _fake_run(monkeypatch, [1.0] * 190 + [0.2, 0.18, 0.16, 0.14, 0.12, 0.1, 0.09, 0.08, 0.07, 0.06])
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    _fails(r, "is 0.12", "first went below 0.1 at step 197 and is still falling", "momentum")
    assert "did not stay" not in r.feedback


def test_check_trains_judges_the_mean_of_the_last_ten_steps(monkeypatch):
    _fake_run(monkeypatch, [1.0] * 190 + [0.05] * 9 + [0.5])  # final step above, mean 0.095 below
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    assert r, r.feedback
    assert "is 0.095 < 0.1" in r.feedback and "first below it at step 191" in r.feedback
    _fake_run(monkeypatch, [1.0] * 190 + [0.05] * 5 + [0.2] * 5)  # mean 0.125: fails
    _fails(gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200,
                           below=0.1), "is 0.125", "not below 0.1")


def test_check_trains_fails_a_real_run_that_overshoots():
    # SGD(0.35) reaches a loss near 0.14 early, then jumps up and stalls above 1
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.35), steps=60, below=0.2)
    _fails(r, "not below 0.2", "dipped below 0.2 at step")


def test_check_trains_requires_named_variables_to_exist():
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5,
                        require_variables=("standardize/scale", "hidden/kernel"))
    _fails(r, "no trainable variable 'standardize/scale'", "not a fix")
    assert "hidden/kernel" not in r.feedback
    r = gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5,
                        require_variables=["hidden/kernel", "out/bias"])
    assert r, r.feedback
    assert "hidden/kernel, out/bias present and trained" in r.feedback


def test_check_trains_required_variable_without_gradient_fails():
    model = keras.Sequential([keras.Input((4,)), _Forgotten(name="forgotten"), keras.layers.Dense(1, name="out")],
                             name="n")
    _fails(gl.check_trains("fit", model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=10.0,
                           require_variables=["forgotten/gain"]), "no gradient (None)", "n/forgotten/gain")


@pytest.mark.parametrize("bad", ["standardize/scale", [""], [3], None])
def test_check_trains_rejects_bad_require_variables(bad):
    with pytest.raises(ValueError, match="require_variables must be a list or tuple of non-empty strings"):
        gl.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=0.5,
                        require_variables=bad)
