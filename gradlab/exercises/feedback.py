"""What a self-check says: :class:`CheckResult`, and the learner's errors as readable text.

* :class:`CheckResult`: ``ok`` plus one line of feedback (``✅ …`` / ``❌ …``), truthy when it passed;
* :func:`clean_message` / :func:`describe_error`: the readable part of an exception raised by a
  learner's code (no stack frames, node names or Keras argument dumps);
* :func:`call_answer`: call a learner's function, turning a missing function or any exception
  into a failed :class:`CheckResult`;
* ``NONE_TEXT``: why a value is ``None`` (the tape recorded no path), shared by every check.

Layer 8 (exercises); uses only :mod:`gradlab.i18n`. Every chapter module of
:mod:`gradlab.exercises` builds its results here.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..i18n import N_, _

__all__ = ["NONE_TEXT", "CheckResult", "call_answer", "clean_message", "describe_error", "short_repr"]

NONE_TEXT = N_(
    "nothing is returned or assigned yet? If it is a gradient, it is None because the target "
    "does not depend on the source through operations the tape recorded (chapter 02's gallery "
    "of None gradients)"
)


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one self-check: ``ok`` plus feedback a learner can act on.

    ``details`` may carry what the check measured (for example a training run), for a chapter
    module that wants to add more specific advice; it is not printed.
    """

    name: str
    ok: bool
    feedback: str
    details: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return ("✅ " if self.ok else "❌ ") + _("{title}: {feedback}").format(title=self.name, feedback=self.feedback)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython display
        p.text(str(self))


# ----------------------------------------------------------------------------- the learner's errors
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
#: Lines of TensorFlow's and Keras's messages that are plumbing, not the message: stack
#: frames, node names, the ``[Op:...]`` tail, the headers Keras and autograph put first.
_NOISE = re.compile(r"^(Traceback|Detected at node|defined at \(most recent call last\)|\[\[\{\{node|\[\[node"
                    r"|\[Op:|in user code:|Graph execution error:|Exception encountered when calling|"
                    r"During handling of the above exception)")
_DUMP = re.compile(r"^(Arguments received by|Call arguments received)")
_PREFIX = re.compile(r"^(\w+\.)*\w*(Error|Exception|Warning): ")


def clean_message(err, limit: int = 240) -> str:
    """The readable part of an exception's (or a text's) message, for quoting in feedback.

    Strips ANSI colour codes; Python, autograph and TensorFlow stack frames (``File "..."``
    lines and the code under them); the headers "in user code:", "Graph execution error:" and
    "Exception encountered when calling ..."; ``[[{{node ...}}]]`` and ``[Op:...]`` tails; ``{{function_node ...}}`` prefixes;
    Keras's "Arguments received by ..." dump (everything after it); and a repeated
    ``ValueError:`` prefix. Joins what is left into one line of at most ``limit`` characters.
    Used by every chapter's checks when a learner's code raises.
    """
    text = _ANSI.sub("", str(err))
    kept: list[str] = []
    frame_indent = None
    for raw in text.splitlines():
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if not line:
            continue
        if line.startswith('File "'):
            frame_indent = indent
            continue
        if frame_indent is not None and indent > frame_indent:
            continue  # the code line under a frame
        frame_indent = None
        if _DUMP.match(line):
            break  # Keras's dump of every argument follows: leave it out
        if _NOISE.match(line):
            continue
        line = _PREFIX.sub("", line)
        if line and not _NOISE.match(line) and line not in kept:
            kept.append(line)
    text = re.sub(r"\s+", " ", " ".join(kept)).strip()
    text = re.sub(r"\s*\[Op:[^\]]*\]", "", text).strip()
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text).strip()
    text = re.sub(r"\.\.+$", ".", text)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or type(err).__name__


def describe_error(err: BaseException, limit: int = 240) -> str:
    """``"ValueError: <clean message>"`` for feedback (see :func:`clean_message`), without a final period."""
    return f"{type(err).__name__}: {clean_message(err, limit).rstrip('.')}"


def call_answer(name: str, fn, *args, what: str | None = None, **kwargs):
    """Call a learner's function: ``(result, None)``, or ``(None, CheckResult)`` saying why not.

    A missing function (``None``, not callable) and any exception become a failed
    :class:`CheckResult` whose feedback quotes the cleaned message (:func:`describe_error`).
    Used by the checks of chapters 05 to 08.
    """
    if fn is None or not callable(fn):
        return None, CheckResult(name, False, _("expected a function, got {kind}").format(kind=type(fn).__name__))
    try:
        return fn(*args, **kwargs), None
    except Exception as err:  # noqa: BLE001 - any failure in the learner's code is feedback
        return None, CheckResult(name, False, _("{what} raised {error}").format(
            what=what or _("your function"), error=describe_error(err)))


def short_repr(value, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters with ``...``: how feedback quotes an answer."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
