"""Analysis of trained models: per-block update sizes and learned coefficients, and how a
continuous encoder's depth (NFE per sentence) follows length and difficulty.

The probes themselves are pure functions of a model and live in :mod:`odet.models.probes`
(training logs them too); this package applies them to run directories and plots them.
"""

from odet.analysis.depth import DepthReport, analyze_depth, depth_vs_difficulty
from odet.analysis.report import analyze_runs
from odet.models.probes import (
    GateStats,
    coefficient_snapshot,
    gate_statistics,
    has_learned_coefficients,
    update_sizes,
)

__all__ = [
    "DepthReport",
    "GateStats",
    "analyze_depth",
    "analyze_runs",
    "coefficient_snapshot",
    "depth_vs_difficulty",
    "gate_statistics",
    "has_learned_coefficients",
    "update_sizes",
]
