"""One-call inspection of a training step (chapter 04). Pure computation, no widgets."""

from __future__ import annotations

__all__: list[str] = []
