"""Plotting (matplotlib, no widgets). One module per topic; everything is re-exported here."""

from . import gradients, intro, jacobians, recurrent, tracing
from .gradients import *  # noqa: F403
from .intro import *  # noqa: F403
from .jacobians import *  # noqa: F403
from .recurrent import *  # noqa: F403
from .tracing import *  # noqa: F403

__all__ = [*gradients.__all__, *intro.__all__, *jacobians.__all__, *recurrent.__all__, *tracing.__all__]
