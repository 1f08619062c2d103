"""One module per topic beyond the training step (layer 2: topics): Jacobians and their timings
(chapter 02), trace counting and step timing (03), the tangent of chapter 00, chapter 07's theory
of back-propagation through time, finite-difference checks, per-example gradients and memory (10).
"""

from . import gradcheck, intro, jacobian_timing, jacobians, memory, per_example, rnn_theory, tracing

#: The modules of this package, for ``gl.topics.<module>``.
MODULES = ('gradcheck', 'intro', 'jacobian_timing', 'jacobians', 'memory', 'per_example', 'rnn_theory', 'tracing')

__all__ = ["MODULES", "gradcheck", "intro", "jacobian_timing", "jacobians", "memory", "per_example", "rnn_theory", "tracing"]
