"""The self-checks of each chapter's exercises, one module per chapter (``ch00`` ... ``ch10``).

A chapter imports its own module, ``from gradlab.exercises import ch01``, and each exercise
cell shows the task and one call such as ``ch01.check_clip(my_clip)``. The generic machinery
lives in four modules, one concern each: :mod:`~gradlab.exercises.feedback` (``CheckResult``
and the learner's errors as text), :mod:`~gradlab.exercises.compare` (arrays, lists, status
words), :mod:`~gradlab.exercises.answers` (reading a number) and
:mod:`~gradlab.exercises.training` (``check_trains``); :mod:`gradlab.exercises.checks` gathers
them in one namespace. The chapter modules only say what each exercise expects and which
hints fit its typical wrong answers.
"""

from . import answers, checks, compare, feedback, training

#: The modules of this package that ``import gradlab`` loads (the chapter modules load on demand).
MODULES = ("feedback", "compare", "answers", "training", "checks")

__all__ = ["MODULES", "answers", "checks", "compare", "feedback", "training"]
