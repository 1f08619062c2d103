"""The self-checks of each chapter's exercises, one module per chapter (``ch00`` ... ``ch10``).

A chapter imports its own module, ``from gradlab.exercises import ch01``, and each exercise
cell shows the task and one call such as ``ch01.check_clip(my_clip)``. The generic machinery
(``CheckResult``, array comparison, training checks) lives in :mod:`gradlab.exercises.checks`;
the chapter modules only say what each exercise expects and which hints fit its typical wrong
answers.
"""

from . import checks

#: The modules of this package that ``import gradlab`` loads (the chapter modules load on demand).
MODULES = ("checks",)

__all__ = ["MODULES", "checks"]
