"""Training tools (layer 5): training steps and runs, Keras callbacks and train steps that watch
the gradients, distributed comparisons (chapter 08) and warmup runs (chapter 09).
"""

from . import distribute, fit, steps, warmup

#: The modules of this package, for ``gl.train.<module>``.
MODULES = ('distribute', 'fit', 'steps', 'warmup')

__all__ = ["MODULES", "distribute", "fit", "steps", "warmup"]
