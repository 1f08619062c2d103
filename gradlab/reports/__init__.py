"""Reports and finders (layer 3): the verdict on a list of norms, per-layer and per-step reports,
the inspector of one training step with its rules, the cause finders for ``None``/NaN gradients
and the explorers' settings-aware advice.
"""

from . import advice, causes, diagnostics, gradients, report, rules, time, transformer, verdict

#: The modules of this package, for ``gl.reports.<module>``.
MODULES = ('advice', 'causes', 'diagnostics', 'gradients', 'report', 'rules', 'time', 'transformer', 'verdict')

__all__ = ["MODULES", "advice", "causes", "diagnostics", "gradients", "report", "rules", "time", "transformer", "verdict"]
