"""Jacobians, VJPs/JVPs and shape helpers (chapter 02). Pure computation, no widgets."""

from __future__ import annotations

__all__: list[str] = []
