"""The TensorFlow and Keras versions gradlab supports, and its own version (issue 39).

Also run by ``make test-oldest`` on the oldest TensorFlow and Keras of the range, against the
installed wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import tensorflow as tf
import tomllib

import gradlab as gl

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _lower_bounds() -> dict[str, str]:
    found = {}
    for dep in PROJECT["project"]["dependencies"]:
        m = re.fullmatch(r"(tensorflow|keras)>=([0-9.]+)", dep.replace(" ", ""))
        if m:
            found[m.group(1)] = m.group(2)
    return found


def _padded(version: str) -> str:
    """``"3.5"`` -> ``"3.5.0"``."""
    parts = version.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def test_the_import_warning_and_pyproject_state_the_same_range():
    bounds = _lower_bounds()
    assert set(bounds) == {"tensorflow", "keras"}, PROJECT["project"]["dependencies"]
    assert {k: _padded(v) for k, v in bounds.items()} == gl.SUPPORTED_VERSIONS


def test_this_environment_is_inside_the_range():
    assert not gl._too_old({"tensorflow": tf.__version__, "keras": keras.__version__})


def test_release_numbers_compare_as_numbers():
    assert gl._release("2.16.2") == (2, 16, 2)
    assert gl._release("3.10.0") > gl._release("3.5.0")  # a string comparison says otherwise
    assert gl._release("2.17.0rc1") == (2, 17, 0)
    assert gl._release("3.5") < gl._release("3.5.1")
    assert gl._too_old({"tensorflow": "2.15.1", "keras": "3.5.0"}) == ["tensorflow"]
    assert gl._too_old({"tensorflow": "2.16.2", "keras": "3.3.3"}) == ["keras"]
    assert gl._too_old({"tensorflow": "2.16.1", "keras": "3.4.0"}) == []
    assert gl._too_old({"tensorflow": "2.16.0rc0", "keras": "3.4.0"}) == ["tensorflow"]
    assert gl._too_old({"tensorflow": "2.21.0", "keras": "3.15.1"}) == []


OLD_IMPORT = """
import warnings
import tensorflow as tf, keras
tf.__version__, keras.__version__ = {tf!r}, {keras!r}   # as an older environment reports them
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import gradlab
for w in caught:
    if issubclass(w.category, RuntimeWarning):
        print("WARNING|" + str(w.message) + "|" + w.filename)
"""


def _import_with(tf_version: str, keras_version: str, lang: str = "en") -> list[str]:
    # the gradlab this test imported (the checkout, or the installed wheel under make test-oldest)
    home = str(Path(gl.__file__).resolve().parents[1])
    env = {**os.environ, "GRADLAB_LANG": lang,
           "PYTHONPATH": os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", OLD_IMPORT.format(tf=tf_version, keras=keras_version)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line.split("|") for line in out.stdout.splitlines() if line.startswith("WARNING|")]


def test_import_below_the_range_warns_in_one_line_which_versions_it_needs():
    warnings = _import_with("2.15.1", "3.3.3")
    assert len(warnings) == 1, warnings
    _, message, filename = warnings[0]
    assert "\n" not in message
    for expected in (f"TensorFlow >= {gl.SUPPORTED_VERSIONS['tensorflow']}", f"Keras >= {gl.SUPPORTED_VERSIONS['keras']}",
                     "TensorFlow 2.15.1", "Keras 3.3.3", f"gradlab {gl.__version__}"):
        assert expected in message
    assert filename == "<string>"  # it points at the learner's `import gradlab`, not at gradlab's code
    # inside the range: no warning
    assert _import_with(gl.SUPPORTED_VERSIONS["tensorflow"], gl.SUPPORTED_VERSIONS["keras"]) == []


def test_the_version_is_written_once():
    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["hatch"]["version"]["path"] == "gradlab/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+", gl.__version__)
    init = (Path(gl.__file__)).read_text(encoding="utf-8")
    assert init.count("__version__ = ") == 1


def test_the_attention_initializer_is_the_same_draw_without_keras_315_axes():
    """Keras before 3.15 has no GlorotUniform(input_axes=): gradlab's fallback draws the same numbers."""
    from gradlab.models.transformer import glorot_uniform_over_axes

    shape = (16, 4, 8)  # MultiHeadAttention's query kernel: (d_model, heads, head_dim)
    fallback = glorot_uniform_over_axes(123, (0,), (1, 2), native=False)(shape, dtype="float32")
    limit = (6.0 / (16 + 4 * 8)) ** 0.5
    assert float(tf.reduce_max(tf.abs(fallback))) <= limit and float(tf.reduce_max(tf.abs(fallback))) > 0.9 * limit
    if "input_axes" in __import__("inspect").signature(keras.initializers.GlorotUniform).parameters:
        native = keras.initializers.GlorotUniform(seed=123, input_axes=(0,), output_axes=(1, 2))(shape, dtype="float32")
        assert tf.reduce_all(native == fallback)


def test_the_explorers_recompute_on_a_control_change():
    """Headless, as in pytest: part of the tier that runs on the oldest TensorFlow and Keras."""
    ex = gl.GradientExplorer(depth=6, width=8, batch_size=8)
    before = ex.report
    ex.depth.value = 12
    assert ex.report is not before and len(ex.report.signal_norms) > len(before.signal_norms)
    tx = gl.TimeExplorer(steps=20, units=8, batch_size=8)
    text = repr(tx)
    tx.steps.value = 35
    assert repr(tx) != text and "35 steps" in repr(tx)
