"""Model builders and their synthetic data (layer 2: models): the MLP of chapters 01 and 05, the
recurrent networks of chapter 07, the small causal Transformer of chapter 09, and a model's
float64 copy (chapter 04).
"""

from . import mlp, precision, rnn, transformer

#: The modules of this package, for ``gl.models.<module>``.
MODULES = ('mlp', 'precision', 'rnn', 'transformer')

__all__ = ["MODULES", "mlp", "precision", "rnn", "transformer"]
