"""tf.function tracing helpers, training steps and gradient-norm callbacks (chapter 03)."""

from __future__ import annotations

__all__: list[str] = []
