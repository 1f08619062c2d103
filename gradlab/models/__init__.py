"""Model builders and their synthetic data (layer 2: models): the MLP of chapters 01 and 05, the
recurrent networks of chapter 07 and the small causal Transformer of chapter 09.
"""

from . import mlp, rnn, transformer

#: The modules of this package, for ``gl.models.<module>``.
MODULES = ('mlp', 'rnn', 'transformer')

__all__ = ["MODULES", "mlp", "rnn", "transformer"]
