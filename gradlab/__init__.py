"""gradlab: the helper package of the workbook on gradient problems in TensorFlow 2.

``import gradlab as gl`` imports TensorFlow quietly (see :mod:`gradlab._env`), then exposes the
tools meant for your own project (``gl.__all__``, documented with examples in ``docs/api.md``):

* inspect one training step: :func:`inspect_training_step`, :func:`gradient_report`,
  :func:`time_report`, :func:`explain_none_gradients`, :func:`find_nonfinite_source`;
* measure and judge gradients: :func:`true_norm`, :func:`true_global_norm`,
  :func:`clip_gradients`, :func:`judge` / :func:`diagnose`, :func:`per_layer_gain`;
* train and watch: :func:`make_train_step`, :func:`train_steps`, :class:`GradNormLogger`,
  :class:`GradNormTrainStep`, :class:`GradNormSequential`, :class:`TraceCounter`,
  :func:`tracing_count`, :func:`time_step`;
* beyond the source: :func:`check_gradient` (chapter 10), :func:`per_example_gradients`
  (chapter 10), :func:`build_transformer` and :func:`markov_tokens` (chapter 09);
* the explorers (ipywidgets, imported on first use): :class:`GradientExplorer`, ...

The workbook's own machinery stays in its modules, reachable as ``gl.<module>.<name>``: the
core (:mod:`gradlab.core`), model builders (``gl.models.mlp.build_mlp``, ``gl.models.rnn.build_rnn``),
engines, Jacobian helpers (``gl.topics.jacobians``, ``gl.topics.jacobian_timing``), chapter 07's theory
(``gl.topics.rnn_theory``), the distributed comparisons (``gl.train.distribute``), plots (``gl.plots``) and
self-checks (``gl.exercises.checks``, ``gradlab.exercises``).
"""

from __future__ import annotations

import importlib
import re
import warnings

from ._env import quiet_import_tensorflow

#: gradlab's version: the one place it is written (pyproject.toml reads it, tool.hatch.version).
__version__ = "0.1.0"

#: The oldest TensorFlow and Keras on which every tool in ``__all__`` is tested (``make test-oldest``
#: installs the wheel with exactly these); pyproject.toml's dependencies state the same lower
#: bounds (tests/test_versions.py). Keras 3.3 lacks ``compute_loss(training=)``, which the core's
#: loss passes on, while on Keras 3.4.0 every tool's test passes. TensorFlow 2.16.1 is the first
#: 2.16 release on PyPI (the first with Keras 3); TensorFlow 2.15 requires keras<2.16, so pip builds
#: no environment of it with Keras 3. The newest versions, which the chapters' outputs come from,
#: are in requirements.txt.
SUPPORTED_VERSIONS = {"tensorflow": "2.16.1", "keras": "3.4.0"}


def _release(version: str) -> tuple[int, ...]:
    """``"2.16.2"`` -> ``(2, 16, 2)``: the numeric release, a pre-release or local tail dropped."""
    numbers = []
    for piece in str(version).split(".")[:3]:
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def _too_old(found: dict[str, str]) -> list[str]:
    """The packages of ``found`` (name -> version) older than :data:`SUPPORTED_VERSIONS`."""
    return [name for name, oldest in SUPPORTED_VERSIONS.items()
            if name in found and _release(found[name]) < _release(oldest)]


_tf = quiet_import_tensorflow()

import keras  # noqa: E402  (imported by quiet_import_tensorflow: free here)

from .i18n import _, language_from_env, set_language  # noqa: E402

set_language(language_from_env())


def _warn_if_too_old() -> None:
    """One line, at import, when TensorFlow or Keras is older than the tested range."""
    found = {"tensorflow": _tf.__version__, "keras": keras.__version__}
    if _too_old(found):
        warnings.warn(_("gradlab {version} needs TensorFlow >= {tf_min} and Keras >= {keras_min}, "
                        "this environment has TensorFlow {tf} and Keras {keras}: "
                        "pip install -U \"tensorflow>={tf_min}\" \"keras>={keras_min}\"").format(
                            version=__version__, tf_min=SUPPORTED_VERSIONS["tensorflow"],
                            keras_min=SUPPORTED_VERSIONS["keras"], tf=found["tensorflow"], keras=found["keras"]),
                      RuntimeWarning, stacklevel=3)


_warn_if_too_old()

from . import core, engines, exercises, models, plots, reports, topics, train  # noqa: E402,F401  (the layers, as gl.<package>)
from .core import clip_gradients, true_global_norm, true_norm  # noqa: E402
from .models.transformer import build_transformer, markov_tokens  # noqa: E402
from .reports.causes import explain_none_gradients, find_nonfinite_source  # noqa: E402
from .reports.diagnostics import inspect_training_step  # noqa: E402
from .reports.gradients import GradientReport, gradient_report  # noqa: E402
from .reports.report import Problem, StepReport  # noqa: E402
from .reports.time import TimeReport, time_report  # noqa: E402
from .reports.verdict import Verdict, diagnose, judge, per_layer_gain  # noqa: E402
from .session import setup  # noqa: E402
from .topics.gradcheck import check_gradient  # noqa: E402
from .topics.per_example import per_example_gradients  # noqa: E402
from .topics.tracing import TraceCounter, time_step, tracing_count  # noqa: E402
from .train.fit import GradNormLogger, GradNormSequential, GradNormTrainStep  # noqa: E402
from .train.steps import TrainingRun, make_train_step, train_steps  # noqa: E402

# Widgets load ipywidgets; they are imported only when a notebook first asks for one.
_WIDGETS = {"GradientExplorer": "gradient_explorer", "TangentExplorer": "tangent_explorer",
            "JacobianViewer": "jacobian_viewer", "TracingLab": "tracing_lab", "TimeExplorer": "time_explorer",
            "TransformerExplorer": "transformer_explorer", "TrainingExplorer": "training_explorer"}

#: Where the workbook's own names live (for the error that points an old ``gl.<name>`` there).
_MODULES = tuple(f"{package.__name__.split('.', 1)[1]}.{module}"
                 for package in (core, models, topics, reports, engines, train, plots, exercises)
                 for module in getattr(package, "MODULES", ()))


def __getattr__(name: str):
    if name in _WIDGETS:  # the package facade may load the top layer lazily (ipywidgets on first use)
        return getattr(importlib.import_module(f".widgets.{_WIDGETS[name]}", __name__), name)
    home = next((m for m in _MODULES if name in getattr(importlib.import_module(f".{m}", __name__), "__all__", ())),
                None)
    if home is not None:
        raise AttributeError(f"module 'gradlab' has no attribute {name!r}: it is workbook machinery, "
                             f"reachable as gl.{home}.{name} (gl.__all__ lists the tools for your own project)")
    raise AttributeError(f"module 'gradlab' has no attribute {name!r}")


__all__ = [
    "GradNormLogger",
    "GradNormSequential",
    "GradNormTrainStep",
    "GradientReport",
    "Problem",
    "StepReport",
    "TimeReport",
    "TraceCounter",
    "TrainingRun",
    "Verdict",
    "build_transformer",
    "check_gradient",
    "clip_gradients",
    "diagnose",
    "explain_none_gradients",
    "find_nonfinite_source",
    "gradient_report",
    "inspect_training_step",
    "judge",
    "make_train_step",
    "markov_tokens",
    "per_example_gradients",
    "per_layer_gain",
    "setup",
    "time_report",
    "time_step",
    "tracing_count",
    "train_steps",
    "true_global_norm",
    "true_norm",
    *sorted(_WIDGETS),
]
