"""Plots for chapter 03 (step-time bars, gradient-norm histories)."""

from __future__ import annotations

__all__: list[str] = []
