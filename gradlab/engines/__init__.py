"""The explorers' fast engines (layer 4): one traced function per mode whose controls are tensors,
so a control change never retraces; chapter 01/05's MLP engine and its paper presets, chapter
07's recurrent engine and chapter 09's Transformer engine.
"""

from . import mlp, presets, rnn, transformer

#: The modules of this package, for ``gl.engines.<module>``.
MODULES = ('mlp', 'presets', 'rnn', 'transformer')

__all__ = ["MODULES", "mlp", "presets", "rnn", "transformer"]
