"""The shared self-checks of every chapter's exercises (gradlab.exercises.feedback, compare, answers,
training): right answers and typical wrong ones."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import gradlab as gl
from gradlab import i18n
from gradlab.exercises import answers, checks, compare, feedback, training
from gradlab.reports.diagnostics import keras, tf
from tests._helpers import fails as _fails

EXPECTED = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


# ----------------------------------------------------------------------------- CheckResult
def test_check_result_is_truthy_and_prints_one_line():
    ok = feedback.CheckResult("x", True, "fine")
    bad = feedback.CheckResult("x", False, "shape (2,)")
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
    r = compare.check_array("a", got, EXPECTED)
    assert r and "match" in r.feedback and str(r).startswith("✅")


def test_check_array_accepts_a_tensor_as_expected_and_small_rounding():
    assert compare.check_array("a", EXPECTED + 1e-7, tf.constant(EXPECTED))


def test_check_array_none_points_to_the_none_gallery():
    _fails(compare.check_array("a", None, EXPECTED), "got None", "chapter 02")


def test_check_array_transposed_says_transpose():
    _fails(compare.check_array("a", EXPECTED.T, EXPECTED), "shape (3, 2)", "expected (2, 3)", "transpose")


def test_check_array_fewer_dimensions_suggests_a_reduction():
    _fails(compare.check_array("a", EXPECTED.sum(axis=0), EXPECTED), "shape (3,)", "fewer dimensions")


def test_check_array_wrong_shape_other():
    r = compare.check_array("a", np.ones((2, 3, 4)), EXPECTED)
    _fails(r, "shape (2, 3, 4)", "expected (2, 3)")
    assert "transpose" not in r.feedback and "fewer" not in r.feedback


def test_check_array_nan_and_inf_are_counted():
    got = EXPECTED.copy()
    got[0, 0] = np.nan
    got[1, 2] = np.inf
    _fails(compare.check_array("a", got, EXPECTED), "2 of 6 values are NaN or inf")


def test_check_array_wrong_values_name_the_largest_gap():
    got = EXPECTED.copy()
    got[1, 1] = 7.5
    _fails(compare.check_array("a", got, EXPECTED), "values differ", "largest gap 2.5", "index (1, 1)",
           "got 7.5", "expected 5")


def test_check_array_wrong_scalar():
    _fails(compare.check_array("s", 3.0, 2.0), "values differ", "got 3", "expected 2")
    assert compare.check_array("s", tf.constant(2.0), 2.0)


def test_check_array_strings_and_ragged_lists():
    _fails(compare.check_array("a", "1, 2, 3", EXPECTED), "got a str", "expected numbers", "not its printed text")
    _fails(compare.check_array("a", [[1.0, 2.0], [3.0]], EXPECTED), "ragged list", "different shapes ((2,), (1,))")
    _fails(compare.check_array("a", np.array([1.0, None], dtype=object), np.zeros(2)), "holds None at index (1,)")
    _fails(compare.check_array("a", np.array([{}, 1], dtype=object), np.zeros(2)), "not a rectangular array")
    _fails(compare.check_array("a", np.array(["a", "b"]), np.zeros(2)), "not numeric")
    _fails(compare.check_array("a", {"x": 1.0}, 1.0), "got a dict")


@pytest.mark.parametrize("text", ["3", " 3.0 ", b"3"])
def test_check_array_reads_a_number_written_as_a_string(text):
    r = compare.check_array("n", text, 3)
    assert r and "was read as the number 3" in r.feedback
    _fails(compare.check_array("n", "4", 3), "values differ", "got 4, expected 3", "read as the number 4")


def test_check_array_a_list_holding_none_says_where():
    _fails(compare.check_array("a", [[1.0, 2.0, None], [4.0, 5.0, 6.0]], EXPECTED), "holds None at list[0][2]",
           "chapter 02")
    r = compare.check_array("a", [1.0, None], np.zeros(2), if_none="Did a NumPy call break the tape?")
    _fails(r, "holds None", "Did a NumPy call break the tape?")
    assert "NumPy" not in compare.check_array("a", [1.0, 2.0], np.zeros(2), if_none="NumPy?").feedback


def test_check_array_scalar_against_an_array_and_back():
    _fails(compare.check_array("a", 1.5, EXPECTED), "got a single number (1.5)", "expected an array of shape (2, 3)",
           "a loss")
    _fails(compare.check_array("s", np.array([2.0]), 2.0), "one number wrapped in an array")
    _fails(compare.check_array("s", np.ones(3), 2.0), "shape (3,), expected ()", "a whole array")


@pytest.mark.parametrize("got, expected, words", [
    (np.ones((8, 1)), np.ones(8), ["shape (8, 1), expected (8,)", "an extra axis of length 1", "(n, n)"]),
    (np.ones(8), np.ones((8, 1)), ["shape (8,), expected (8, 1)", "a missing axis of length 1", "keepdims"]),
])
def test_check_array_says_8_1_against_8(got, expected, words):
    r = compare.check_array("y", got, expected)
    _fails(r, *words)
    assert "transpose" not in r.feedback


def test_check_array_single_numbers_mention_only_telling_factors():
    _fails(compare.check_array("s", -2.0, 2.0), "That is -1× the expected value: the sign is flipped")
    _fails(compare.check_array("s", 16.0, 2.0), "That is 8× the expected value", "batch size")
    r = compare.check_array("s", 2.5, 2.0)
    _fails(r, "got 2.5, expected 2")
    assert "×" not in r.feedback


def test_check_array_more_dimensions():
    _fails(compare.check_array("a", np.ones((2, 2, 3)), EXPECTED), "more dimensions")


def test_check_array_common_factor_hints_sum_instead_of_mean():
    _fails(compare.check_array("g", EXPECTED * 8, EXPECTED), "Every value is 8× the expected one", "batch size")
    _fails(compare.check_array("g", -EXPECTED, EXPECTED), "-1× the expected", "sign is flipped")
    _fails(compare.check_array("g", EXPECTED / 4, EXPECTED), "0.25× the expected", "(1/4)", "a mean where a sum")
    r = compare.check_array("g", EXPECTED + 1, EXPECTED)
    _fails(r, "values differ")
    assert "Every value" not in r.feedback


def test_check_array_indexed_slices_are_compared_dense():
    table = tf.Variable(tf.reshape(tf.range(6.0), (3, 2)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [0, 2, 2]))
    g = tape.gradient(loss, table)
    assert isinstance(g, tf.IndexedSlices)
    r = compare.check_array("g", g, [[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    assert r and "IndexedSlices" in r.feedback
    _fails(compare.check_array("g", g, np.ones((3, 2))), "values differ", "index (1, 0)")


def test_check_array_chapter_hints_known_wrong_answer_and_predicate():
    hints = [(EXPECTED * 2, "you doubled it"), (lambda a: a.max() > 100, "far too large"),
             (lambda a: 1 / 0, "a broken hint never shows")]
    r = compare.check_array("a", EXPECTED * 2, EXPECTED, hints=hints)
    _fails(r, "Hint: you doubled it")
    assert "far too large" not in r.feedback and "broken" not in r.feedback
    _fails(compare.check_array("a", EXPECTED * 200, EXPECTED, hints=hints), "Hint: far too large")
    _fails(compare.check_array("a", np.ones(3) * 500, EXPECTED, hints=hints), "shape (3,)", "Hint: far too large")
    assert compare.check_array("a", EXPECTED, EXPECTED, hints=hints).feedback == "shape (2, 3) and values match"


def test_check_array_tolerances():
    assert not compare.check_array("a", EXPECTED * 1.01, EXPECTED)
    assert compare.check_array("a", EXPECTED * 1.01, EXPECTED, rtol=0.02)


# ----------------------------------------------------------------------------- check_arrays
def _pair():
    return [np.array([1.0, 2.0]), np.array([[3.0], [4.0]])]


def test_check_arrays_right_answer():
    r = compare.check_arrays("grads", [tf.constant(a) for a in _pair()], _pair())
    assert r and "all 2 arrays match" in r.feedback


def test_check_arrays_none_instead_of_a_list():
    _fails(compare.check_arrays("grads", None, _pair()), "got None, expected a list of 2 arrays", "chapter 02")


def test_check_arrays_wrong_length():
    _fails(compare.check_arrays("grads", _pair()[:1], _pair()), "got 1 arrays, expected 2")


def test_check_arrays_names_the_bad_item():
    _fails(compare.check_arrays("grads", [_pair()[0], None], _pair()), "item 1", "got None")
    _fails(compare.check_arrays("grads", [_pair()[0], np.array([3.0, 4.0])], _pair()), "item 1", "shape (2,)",
           "a missing axis of length 1")
    _fails(compare.check_arrays("grads", [_pair()[0], np.array([[3.0, 4.0]])], _pair()), "item 1", "shape (1, 2)",
           "transpose")
    _fails(compare.check_arrays("grads", [np.array([1.0, np.nan]), _pair()[1]], _pair()), "item 0", "NaN")
    _fails(compare.check_arrays("grads", [np.array([1.0, 2.5]), _pair()[1]], _pair()), "item 0", "values differ")


def test_check_arrays_a_string_is_not_a_list():
    _fails(compare.check_arrays("grads", "ab", _pair()), "expected a list", "str")


@pytest.mark.parametrize("loss", [tf.constant(1.949), 1.949, np.float32(1.949), np.array([1.949])])
def test_check_arrays_a_scalar_loss_instead_of_the_gradients(loss):
    _fails(compare.check_arrays("grads", loss, _pair()), "got a single number (1.949)", "a list of 2 arrays",
           "a loss or a norm", "tape.gradient(loss, variables)")


def test_check_arrays_one_flat_tensor_instead_of_several():
    flat = tf.constant([1.0, 2.0, 3.0, 4.0])
    _fails(compare.check_arrays("grads", flat, _pair()), "got one array of shape (4,)", "as many numbers as all of them",
           "concatenated")
    _fails(compare.check_arrays("grads", tf.ones((2, 5)), _pair()), "first axis has length 2", "stacked")
    _fails(compare.check_arrays("grads", tf.ones((3, 3)), _pair()), "got one array of shape (3, 3)",
           "with shapes (2,), (2, 1)")


def test_check_arrays_the_clip_by_global_norm_pair():
    grads = [tf.constant(a) for a in _pair()]
    pair = tf.clip_by_global_norm(grads, 1.0)
    assert isinstance(pair, tuple) and len(pair) == 2  # what TensorFlow returns
    _fails(compare.check_arrays("clipped", pair, _pair()), "a pair (a list of 2 arrays, one number)",
           "tf.clip_by_global_norm", "keep its first item")
    _fails(compare.check_arrays("clipped", pair, _pair() + _pair()), "a pair")


def test_check_arrays_list_of_nones_dicts_and_generators():
    _fails(compare.check_arrays("grads", [None, None], _pair()), "every item is None", "inside the `with` block")
    _fails(compare.check_arrays("grads", {"a": 1}, _pair()), "got a dict", "as a list")
    assert compare.check_arrays("grads", (tf.constant(a) for a in _pair()), _pair())
    assert compare.check_arrays("grads", map(tf.constant, _pair()), _pair())
    _fails(compare.check_arrays("grads", 3 + 4j, _pair()), "complex")


def test_check_arrays_labels_count_and_common_factor():
    r = compare.check_arrays("grads", [8 * a for a in _pair()], _pair(), labels=["dense/kernel", "dense/bias"])
    _fails(r, "item 0 (dense/kernel)", "Item 1 (dense/bias) is wrong too.", "Across all items every value is 8×", "batch size")
    assert r.feedback.count("8×") == 1
    r = compare.check_arrays("grads", [8 * a for a in _pair()], _pair(), hints=[(lambda arrs: True, "sum, not mean")])
    _fails(r, "Across all items every value is 8× the expected one. Hint: sum, not mean")
    assert "whole number" not in r.feedback
    r = compare.check_arrays("grads", [a for a in _pair()[:1]], _pair(), what="one per variable")
    _fails(r, "got 1 arrays, expected 2 (one per variable, with shapes (2,), (2, 1))")
    hints = [(lambda arrs: arrs[1][0, 0] == 30.0, "the bias is scaled"), ([_pair()[0], 2 * _pair()[1]], "known")]
    _fails(compare.check_arrays("grads", [_pair()[0], 10 * _pair()[1]], _pair(), hints=hints), "item 1",
           "Hint: the bias is scaled")
    r = compare.check_arrays("grads", [_pair()[0], 2 * _pair()[1]], _pair(), hints=hints)
    _fails(r, "Hint: known")
    assert "Across all items" not in r.feedback  # only one item is off: no common factor claimed


def test_check_arrays_ends_each_sentence_itself():
    # a shape message has no full stop of its own: the "more items" sentence must not run into it
    r = compare.check_arrays("grads", [np.ones(3), np.ones((5, 5))], _pair())
    _fails(r, "item 0: shape (3,), expected (2,). Item 1 is wrong too.")
    # a value message ends in its own full stop: no second one, one space before the next sentence
    r = compare.check_arrays("grads", [_pair()[0] + 1, _pair()[1] + 1], _pair())
    assert ". Item 1 is wrong too." in r.feedback and ".." not in r.feedback and "  " not in r.feedback
    three = [np.ones(2), np.ones((2, 1)), np.ones(3)]
    r = compare.check_arrays("grads", [a + 1 for a in three], three, labels=["k", "b", "c"])
    _fails(r, "item 0 (k):", "Items 1 (b), 2 (c) are wrong too.")
    _fails(compare.check_arrays("grads", [a + 1 for a in three], three), "Items 1, 2 are wrong too.")
    # hints are whole sentences, and a matching hint replaces the generic guess at the factor's cause
    r = compare.check_array("a", 2 * EXPECTED, EXPECTED, hints=[(2 * EXPECTED, "twice"), (lambda a: True, "any")])
    _fails(r, "Every value is 2× the expected one. Hint: twice. Hint: any.")
    _fails(compare.check_array("a", 8 * EXPECTED, EXPECTED), "a whole number, as when a sum is taken")
    r = compare.check_array("a", 8 * EXPECTED, EXPECTED, hints=[(lambda a: True, "known cause")])
    _fails(r, "Every value is 8× the expected one. Hint: known cause.")
    assert "whole number" not in r.feedback


def test_check_arrays_names_items_in_another_order():
    got = compare.check_arrays("grads", _pair()[::-1], _pair(), labels=["dense/kernel", "dense/bias"])
    _fails(got, "in a different order", "dense/kernel, dense/bias")
    # same shapes, swapped values: also another order
    same = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    _fails(compare.check_arrays("grads", same[::-1], same), "in a different order")
    # a wrong item is not an order problem
    assert "order" not in compare.check_arrays("grads", [same[1], same[1]], same).feedback


def test_check_array_says_when_float32_rounding_explains_the_gap():
    exact = np.float64(1.0) / 3.0
    r = compare.check_array("third", np.float32(exact), exact, rtol=1e-12, atol=0.0)
    _fails(r, "The answer is float32", "float64")
    assert "typed in" not in r.feedback
    # the same gap in float64 is a rounded copy, not float32 rounding
    r = compare.check_array("third", float(np.float32(exact)), exact, rtol=1e-12, atol=0.0)
    _fails(r, "typed in")
    assert "float32" not in r.feedback


def test_clean_message_drops_function_node_prefixes():
    text = ("{{function_node __wrapped__Split_num_split_5_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
            "Number of ways to split should evenly divide the split dimension [Op:Split]")
    assert feedback.clean_message(RuntimeError(text)) == (
        "Number of ways to split should evenly divide the split dimension")
    assert i18n.end_sentence("done?") == "done?" and i18n.end_sentence("done") == "done."
    assert i18n.join_sentences("A.", "", "B.") == "A. B."


def test_check_status_wrong_types_and_spellings():
    class Report:
        status = "healthy"

    _fails(compare.check_status("s", Report(), "healthy"), "got a Report", "pass its .status", "'healthy'")
    _fails(compare.check_status("s", " Healthy", "healthy"), "spelled differently")
    _fails(compare.check_status("s", "fine", "healthy", allowed=("healthy", "vanishing")), "not one of 'healthy'")
    _fails(compare.check_status("s", 3, "healthy"), "status is 3")


# ----------------------------------------------------------------------------- check_status
def test_check_status():
    assert compare.check_status("s", "healthy", "healthy")
    _fails(compare.check_status("s", "vanishing", "healthy"), "'vanishing'", "expected 'healthy'")
    _fails(compare.check_status("s", None, "healthy"), "None", "expected 'healthy'")
    _fails(compare.check_status("s", "Healthy", "healthy"), "'Healthy'")


# ----------------------------------------------------------------------------- check_true
def test_check_true_with_values_and_callables():
    r = compare.check_true("t", True, "no", "yes")
    assert r and r.feedback == "yes"
    assert compare.check_true("t", 1 == 1, "no").feedback == "as expected"
    _fails(compare.check_true("t", False, "it was false"), "it was false")
    assert compare.check_true("t", lambda: True, "no")
    _fails(compare.check_true("t", lambda: 1 / 0, "no"), "raised ZeroDivisionError")


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
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5)
    assert r, r.feedback
    assert "final loss (mean of the last 10 steps)" in r.feedback and "< 0.5" in r.feedback
    assert "first below it at step" in r.feedback and "no None gradients" in r.feedback


def test_check_trains_shows_progress_step_k_of_n(capsys):
    """A Progress bar counts every step (issue 27: chapter 04's capstone runs 10-34 s); off in tests by default."""
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=40, below=5.0,
                              progress=True)
    assert r, r.feedback
    out = capsys.readouterr().out
    frames = out.split("\r")
    assert [f.rsplit("▏ ", 1)[1].split()[0] for f in frames if "▏ " in f][-1] == "40/40"
    assert sum("/40" in f for f in frames) >= 41, out  # one redraw per step, plus the start and the close
    assert frames[-1].startswith("training 40 steps ▕") and out.endswith("\n")
    training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=5.0)
    assert capsys.readouterr().out == ""


def test_check_trains_none_instead_of_a_model():
    _fails(training.check_trains("fit", None, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=0.5),
           "got None instead of a model")


def test_check_trains_not_a_model_or_optimizer():
    _fails(training.check_trains("fit", lambda x: x, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5,
                           below=0.5), "expected a keras.Model")
    _fails(training.check_trains("fit", _model(), *_data(), optimizer=0.05, steps=5, below=0.5),
           "expected a keras optimizer")


def test_check_trains_names_a_none_gradient():
    model = keras.Sequential([keras.Input((4,)), _Forgotten(name="forgotten"), keras.layers.Dense(1, name="out")],
                             name="n")
    _fails(training.check_trains("fit", model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=50, below=10.0),
           "no gradient (None)", "n/forgotten/gain")


def test_check_trains_reports_divergence_with_the_step():
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(5.0), steps=200, below=0.5)
    _fails(r, "at step", "diverged", "learning rate")


def test_check_trains_reports_a_loss_that_stays_too_high():
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(1e-4), steps=5, below=0.01)
    _fails(r, "after 5 steps the final loss (mean of the last 5 steps)", "not below 0.01", "best")


def test_check_trains_wrong_target_shape_is_feedback():
    x, y = _data()
    _fails(training.check_trains("fit", _model(), x, tf.squeeze(y, 1), optimizer=keras.optimizers.SGD(0.05),
                           steps=5, below=0.5), "could not train", "broadcast")


def test_check_trains_rejects_a_bad_threshold():
    with pytest.raises(ValueError, match="below must be a number > 0"):
        training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below="low")


def _fake_run(monkeypatch, losses):
    """Make check_trains see a training run with these losses (its decision logic alone)."""
    import gradlab.train.steps as steps

    run = steps.TrainingRun(tuple(losses), tuple(1.0 for _ in losses), (), None, len(losses))
    monkeypatch.setattr(training, "train_steps", lambda *a, **k: run)


def test_check_trains_fails_a_loss_that_dips_below_and_rises_again(monkeypatch):
    losses = [1.0] * 150 + [0.05] + [0.3] * 49  # below 0.1 at step 151 only, ends at 0.3
    _fake_run(monkeypatch, losses)
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    _fails(r, "mean of the last 10 steps) is 0.3", "dipped below 0.1 at step 151", "did not stay",
           "a lower learning rate")


def test_check_trains_a_loss_still_falling_at_the_end_gets_other_advice(monkeypatch):
    _fake_run(monkeypatch, [1.0] * 190 + [0.2, 0.18, 0.16, 0.14, 0.12, 0.1, 0.09, 0.08, 0.07, 0.06])
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    _fails(r, "is 0.12", "first went below 0.1 at step 197 and is still falling", "momentum")
    assert "did not stay" not in r.feedback


def test_check_trains_judges_the_mean_of_the_last_ten_steps(monkeypatch):
    _fake_run(monkeypatch, [1.0] * 190 + [0.05] * 9 + [0.5])  # final step above, mean 0.095 below
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200, below=0.1)
    assert r, r.feedback
    assert "is 0.095 < 0.1" in r.feedback and "first below it at step 191" in r.feedback
    _fake_run(monkeypatch, [1.0] * 190 + [0.05] * 5 + [0.2] * 5)  # mean 0.125: fails
    _fails(training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=200,
                           below=0.1), "is 0.125", "not below 0.1")


def test_check_trains_fails_a_real_run_that_overshoots():
    # SGD(0.35) reaches a loss near 0.14 early, then jumps up and stalls above 1
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.35), steps=60, below=0.2)
    _fails(r, "not below 0.2", "dipped below 0.2 at step")


def test_check_trains_requires_named_variables_to_exist():
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5,
                        require_variables=("standardize/scale", "hidden/kernel"))
    _fails(r, "no trainable variable 'standardize/scale'", "not a fix")
    assert "hidden/kernel" not in r.feedback
    r = training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=100, below=0.5,
                        require_variables=["hidden/kernel", "out/bias"])
    assert r, r.feedback
    assert "hidden/kernel, out/bias present and trained" in r.feedback


def test_check_trains_required_variable_without_gradient_fails():
    model = keras.Sequential([keras.Input((4,)), _Forgotten(name="forgotten"), keras.layers.Dense(1, name="out")],
                             name="n")
    _fails(training.check_trains("fit", model, *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=10.0,
                           require_variables=["forgotten/gain"]), "no gradient (None)", "n/forgotten/gain")


@pytest.mark.parametrize("bad", ["standardize/scale", [""], [3], None])
def test_check_trains_rejects_bad_require_variables(bad):
    with pytest.raises(ValueError, match="require_variables must be a list or tuple of non-empty strings"):
        training.check_trains("fit", _model(), *_data(), optimizer=keras.optimizers.SGD(0.05), steps=5, below=0.5,
                        require_variables=bad)


# ----------------------------------------------------------------------------- quoting a learner's error
def test_clean_message_strips_ansi_frames_and_keras_argument_dumps():
    keras_text = ("Exception encountered when calling Cond.call().\n\n\x1b[1mNo gradients provided for any "
                  "variable.\x1b[0m\n\nArguments received by Cond.call():\n  • args=('tf.Tensor(shape=(), dtype=bool)',"
                  " '<function f at 0x7f>')\n  • kwargs=<class 'inspect._empty'>")
    assert feedback.clean_message(keras_text) == "No gradients provided for any variable."
    autograph = ('in user code:\n\n    File "/tmp/x.py", line 8, in step  *\n        optimizer.apply(grads)\n\n'
                 '    ValueError: None values not supported.\n')
    assert feedback.clean_message(autograph) == "None values not supported."
    graph = ("Graph execution error:\n\nDetected at node foo defined at (most recent call last):\n  File \"a.py\", "
             "line 3, in <module>\n    x = 1\n\nlog : Tensor had Inf values\n\t [[{{node CheckNumerics}}]] "
             "[Op:__inference_f_12]")
    assert feedback.clean_message(graph) == "log : Tensor had Inf values"
    assert len(feedback.clean_message("x" * 1000, limit=50)) == 50


def test_describe_error_and_call_answer_never_raise():
    assert feedback.describe_error(ValueError("bad.")) == "ValueError: bad"
    value, problem = feedback.call_answer("c", lambda: 1 / 0)
    assert value is None and not problem and "ZeroDivisionError" in problem.feedback
    value, problem = feedback.call_answer("c", None)
    assert value is None and "expected a function" in problem.feedback
    assert feedback.call_answer("c", lambda a: a + 1, 1) == (2, None)


@pytest.mark.parametrize("answer", [1024, 1024.0, np.float32(1024), np.int64(1024), np.array(1024.0),
                                    tf.constant(1024), tf.constant(1024.0), tf.Variable(1024.0)])
def test_as_number_answer_accepts_every_number_form(answer):
    assert answers.as_number_answer("n", answer, "a number") == (1024.0, None)


@pytest.mark.parametrize(("answer", "needle"), [
    (None, "got None"), (True, "a bool"), ("1024", "the string"), (float("nan"), "finite"),
    (np.array([1.0, 2.0]), "of 2 values"), (np.array([7.0]), "holding one value"), ([1, 2], "of 2 values"),
    (1 + 2j, "complex"),
])
def test_as_number_answer_names_what_is_wrong(answer, needle):
    value, problem = answers.as_number_answer("n", answer, "a number")
    assert value is None and not problem
    assert needle in problem.feedback or (needle == "complex" and "expected a number" in problem.feedback), problem


def test_check_arrays_says_a_common_factor_once_for_all_items():
    expected = [np.array([1.0, 2.0]), np.array([3.0])]
    r = compare.check_arrays("g", [2 * e for e in expected], expected)
    assert not r and r.feedback.count("2×") == 1 and "Across all items" in r.feedback, r


def test_checks_is_a_facade_over_the_four_modules():
    """gl.exercises.checks holds no code of its own: each name is the object of its home module."""
    homes = {"feedback": feedback, "compare": compare, "answers": answers, "training": training, "i18n": i18n}
    names = {n for n, v in vars(checks).items() if not n.startswith("_") and callable(v) and not inspect.ismodule(v)}
    assert names == {"CheckResult", "as_int_answer", "as_number_answer", "call_answer", "check_array", "check_arrays",
                     "check_status", "check_trains", "check_true", "clean_message", "describe_error", "end_sentence",
                     "is_float_number", "join_sentences", "step_length_advice"}, names
    assert checks.__all__ == []  # each name is exported by its home only (tests/test_one_home.py)
    for name in names:
        obj = getattr(checks, name)
        assert obj.__module__.rsplit(".", 1)[1] in homes, (name, obj.__module__)
        assert getattr(homes[obj.__module__.rsplit(".", 1)[1]], name) is obj
    assert gl.exercises.checks.check_array is compare.check_array


def test_a_float32_answer_off_by_more_than_rounding_is_not_blamed_on_float32():
    """Issue 29: a norm typed in as 5.83 (sqrt(34) = 5.83095...) is off by 1.6e-4, 1300 float32 ulps."""
    exact = np.array([3.0, 4.0]) * (2 / np.sqrt(34.0))
    typed = np.float32([3.0, 4.0]) * np.float32(2 / 5.83)
    r = compare.check_array("clipped", typed, exact, rtol=1e-5, atol=0.0)
    _fails(r, "values differ")
    assert "float32" not in r.feedback and "float64" not in r.feedback, r.feedback
    assert "1.0002×" in r.feedback and " 1×" not in r.feedback, r.feedback  # 5.83095 / 5.83 = 1.00016, not "1×"


def test_a_factor_near_one_is_printed_with_the_digits_that_tell_it_from_one():
    r = compare.check_arrays("g", [EXPECTED * 1.0003, EXPECTED[0] * 1.0003], [EXPECTED, EXPECTED[0]])
    _fails(r, "1.0003×")
    assert "1×" not in r.feedback.replace("1.0003×", ""), r.feedback
    _fails(compare.check_array("s", 2.0006, 2.0, rtol=1e-6), "values differ")
    assert " 1×" not in compare.check_array("s", 2.0006, 2.0, rtol=1e-6).feedback
