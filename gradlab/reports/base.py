"""The one report base: a report that holds its verdict and derives the rest from it (chapters 01, 05, 07).

:class:`gradlab.GradientReport` (and the explorer's ``EngineReport`` on it) and
:class:`gradlab.TimeReport` keep a :class:`gradlab.reports.verdict.Verdict` and nothing copied
from it: ``ratio``, ``gain``, ``status``, ``message`` and ``finding`` are read from the verdict,
so a report can never disagree with the verdict it came from.
"""

from __future__ import annotations

import dataclasses
import math

from .verdict import Verdict

__all__ = ["VerdictReport", "given_verdict"]


def given_verdict(*, ratio: float, status: str, message: str, gain: float = math.nan, depth: int = 0) -> Verdict:
    """A :class:`Verdict` that states given numbers and words (a report built by hand, not by the rule):
    ``message`` is its whole finding, with no advice and no cause."""
    return Verdict(status, message, "", float(ratio), float(gain), int(depth), "none")


@dataclasses.dataclass(frozen=True)
class VerdictReport:
    """A report with a :class:`Verdict` (keyword ``verdict``); its ratio, gain and words come from it."""

    verdict: Verdict | None = dataclasses.field(default=None, kw_only=True)

    @property
    def ratio(self) -> float:
        """The verdict's total ratio, first entry over last (NaN without a verdict)."""
        return self.verdict.ratio if self.verdict is not None else math.nan

    @property
    def gain(self) -> float:
        """The verdict's average factor per layer (or per step)."""
        return self.verdict.gain if self.verdict is not None else math.nan

    @property
    def status(self) -> str:
        """The verdict's status (one of :data:`gradlab.reports.verdict.STATUSES`; ``"n/a"`` without one)."""
        return self.verdict.status if self.verdict is not None else "n/a"

    @property
    def message(self) -> str:
        """The verdict's finding followed by its advice, in the current language."""
        return self.verdict.message if self.verdict is not None else ""

    @property
    def finding(self) -> str:
        """What the rule measured (the verdict without its advice)."""
        return self.verdict.finding if self.verdict is not None else ""
