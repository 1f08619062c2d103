"""gradlab: the helper package of the workbook on gradient problems in TensorFlow 2.

``import gradlab as gl`` imports TensorFlow quietly (see :mod:`gradlab._env`), then exposes

* computation (no widgets): :mod:`gradlab.grads` and the other topic modules,
* plotting: :mod:`gradlab.plots`,
* self-checks for exercises: :mod:`gradlab.checks`,
* explorers (ipywidgets, imported on first use): :mod:`gradlab.widgets`.
"""

from __future__ import annotations

from ._env import quiet_import_tensorflow, setup

quiet_import_tensorflow()

from .i18n import language_from_env, set_language  # noqa: E402

set_language(language_from_env())

from . import (  # noqa: E402
    causes,
    checks,
    diagnostics,
    distribute,
    engine,
    grads,
    intro,
    jacobians,
    mlp,
    plots,
    recurrent,
    tracing,
)
from .causes import *  # noqa: E402,F403
from .checks import *  # noqa: E402,F403
from .diagnostics import *  # noqa: E402,F403
from .distribute import *  # noqa: E402,F403
from .engine import *  # noqa: E402,F403
from .grads import *  # noqa: E402,F403
from .intro import *  # noqa: E402,F403
from .jacobians import *  # noqa: E402,F403
from .mlp import *  # noqa: E402,F403
from .plots import *  # noqa: E402,F403
from .recurrent import *  # noqa: E402,F403
from .tracing import *  # noqa: E402,F403

__version__ = "0.1.0"

# Widgets load ipywidgets; they are imported only when a notebook first asks for one.
_WIDGETS = {"GradientExplorer", "TangentExplorer", "JacobianViewer", "TracingLab", "TimeExplorer"}


def __getattr__(name: str):
    if name in _WIDGETS:
        from . import widgets

        try:
            return getattr(widgets, name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'gradlab' has no attribute {name!r}")


__all__ = [
    "setup",
    "quiet_import_tensorflow",
    *causes.__all__,
    *checks.__all__,
    *diagnostics.__all__,
    *distribute.__all__,
    *engine.__all__,
    *grads.__all__,
    *intro.__all__,
    *jacobians.__all__,
    *mlp.__all__,
    *plots.__all__,
    *tracing.__all__,
    *recurrent.__all__,
    *sorted(_WIDGETS),
]
