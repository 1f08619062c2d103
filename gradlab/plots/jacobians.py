"""Plots for chapter 02 (Jacobian heatmaps, timing plots)."""

from __future__ import annotations

__all__: list[str] = []
