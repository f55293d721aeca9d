"""Analysis of trained models: per-block update sizes and learned coefficients.

The probes themselves are pure functions of a model and live in :mod:`odet.models.probes`
(training logs them too); this package applies them to run directories and plots them.
"""

from odet.analysis.report import analyze_runs
from odet.models.probes import (
    GateStats,
    coefficient_snapshot,
    gate_statistics,
    has_learned_coefficients,
    update_sizes,
)

__all__ = [
    "GateStats",
    "analyze_runs",
    "coefficient_snapshot",
    "gate_statistics",
    "has_learned_coefficients",
    "update_sizes",
]
