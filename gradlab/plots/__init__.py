"""Plotting (matplotlib, no widgets). One module per topic; everything is re-exported here."""

from .gradients import *  # noqa: F403
from .gradients import __all__ as _gradients_all
from .intro import *  # noqa: F403
from .intro import __all__ as _intro_all

__all__ = [*_gradients_all, *_intro_all]
