"""The self-check toolkit in one namespace, ``gl.exercises.checks`` (a facade, no code of its own).

The machinery lives in four modules, one concern each:

* :mod:`~gradlab.exercises.feedback`: :class:`CheckResult` and the learner's errors as text
  (:func:`clean_message`, :func:`describe_error`, :func:`call_answer`);
* :mod:`~gradlab.exercises.compare`: :func:`check_array`, :func:`check_arrays`,
  :func:`check_status`, :func:`check_true`;
* :mod:`~gradlab.exercises.answers`: reading a number, :func:`as_number_answer`,
  :func:`as_int_answer`, :func:`is_float_number`;
* :mod:`~gradlab.exercises.training`: :func:`check_trains` and :func:`step_length_advice`.

The chapter modules (``ch00`` ... ``ch10``) import from those modules; this facade keeps the
short spelling ``gl.exercises.checks.check_array`` that chapters and the README use.
Argument validation is elsewhere (:mod:`gradlab._validate`), and so are finite-difference
gradient checks (:mod:`gradlab.topics.gradcheck`).
"""

from __future__ import annotations

# The documented short spelling, ``gl.exercises.checks.<name>``: each name is imported from its one
# home (listed above), which exports it; this facade exports nothing of its own.
from ..i18n import end_sentence, join_sentences  # noqa: F401
from .answers import as_int_answer, as_number_answer, is_float_number  # noqa: F401
from .compare import check_array, check_arrays, check_status, check_true  # noqa: F401
from .feedback import CheckResult, call_answer, clean_message, describe_error  # noqa: F401
from .training import check_trains, step_length_advice  # noqa: F401

__all__: list[str] = []
