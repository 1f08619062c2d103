"""The shape of the public API and of the code (issue 27): one spelling per concept across
``gl.__all__``, an old spelling answered by a TypeError that names the new one, and no function in
``gradlab/`` longer than 100 lines."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import gradlab as gl

PACKAGE = Path(gl.__file__).resolve().parent
MAX_FUNCTION_LINES = 100

#: Each concept has one keyword across gl.__all__; these spellings name the same concepts.
SYNONYMS = {
    "loss": ("loss_fn", "loss_function", "compute_loss"),
    "clip": ("clip_global_norm", "clip_norm", "clipnorm", "global_clipnorm", "clip_mode", "clip_value"),
    "sample_weight": ("sample_weights", "weights"),
    "training": ("is_training", "train"),
}


def _callables():
    for name in gl.__all__:
        obj = getattr(gl, name)
        if inspect.isclass(obj):
            yield f"{name}.__init__", obj.__init__
        elif callable(obj):
            yield name, obj


def _parameters(fn) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return []


def test_the_public_api_is_read():
    names = dict(_callables())
    assert "inspect_training_step" in names and "GradNormSequential.__init__" in names
    assert "loss" in _parameters(names["inspect_training_step"])


def test_one_spelling_per_concept_across_the_public_api():
    bad = [f"{name}({p}=): the concept is spelled {concept}= everywhere"
           for name, fn in _callables() for p in _parameters(fn)
           for concept, others in SYNONYMS.items() if p in others]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["inspect_training_step", "gradient_report", "time_report", "train_steps",
                                  "make_train_step"])
def test_an_old_loss_spelling_names_the_new_one(name):
    fn = getattr(gl, name)
    with pytest.raises(TypeError, match=r"loss="):
        fn(None, None, None, loss_fn=None) if name != "make_train_step" else fn(None, None, loss_fn=None)


@pytest.mark.parametrize("name, old", [("make_train_step", "clip_global_norm")])
def test_an_old_clip_spelling_names_the_new_one(name, old):
    with pytest.raises(TypeError, match=r"clip="):
        getattr(gl, name)(None, None, **{old: 1.0})


def _long_functions():
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_the_length_reader_sees_functions():
    # a function of 101 lines written here is found: the reader is not blind
    src = "def f():\n" + "    x = 1\n" * 100
    node = ast.parse(src).body[0]
    assert node.end_lineno - node.lineno + 1 == 101


def test_no_function_runs_past_100_lines():
    long = _long_functions()
    assert not long, "split these into named stages:\n" + "\n".join(long)
