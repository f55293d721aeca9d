"""Tests across training seeds: the paired t-test of two variants' scores, seed against seed.

The p-value is exact for integer degrees of freedom (the closed-form Student t distribution of
Abramowitz & Stegun 26.7.3–4), so no statistics package is needed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from odet.data.checks import check_int, check_real


@dataclass(frozen=True)
class PairedTTest:
    """Mean difference ``system − baseline`` over paired runs and its two-sided t-test."""

    delta: float
    t: float
    df: int
    p_value: float


def paired_t_test(baseline: Sequence[float], system: Sequence[float]) -> PairedTTest:
    """The paired t-test of ``system[i] − baseline[i]`` (two or more pairs); a zero spread of
    the differences gives ``t = ±inf`` and ``p = 0`` (``p = 1`` when every difference is 0)."""
    for name, scores in (("baseline", baseline), ("system", system)):
        _check_scores(scores, name)
    if len(baseline) != len(system):
        raise ValueError(f"{len(baseline)} baseline scores but {len(system)} system scores")
    if len(baseline) < 2:
        raise ValueError("a paired t-test needs at least two pairs")
    diffs = [s - b for b, s in zip(baseline, system)]
    mean = statistics.fmean(diffs)
    spread = statistics.stdev(diffs)
    df = len(diffs) - 1
    if spread == 0.0:
        t = math.copysign(math.inf, mean) if mean else 0.0
        return PairedTTest(mean, t, df, float(not mean))
    t = mean / (spread / math.sqrt(len(diffs)))
    return PairedTTest(mean, t, df, student_t_two_sided_p(t, df))


def student_t_two_sided_p(t: float, df: int) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df >= 1`` degrees of freedom (``t`` may be
    infinite, not NaN)."""
    check_real(t, "t")
    check_int(df, "df", None)
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = math.sin(theta) * total
    return min(1.0, max(0.0, 1.0 - inside))


def _check_scores(scores: object, name: str) -> None:
    """``TypeError`` / ``ValueError`` unless ``scores`` is a sequence of finite numbers."""
    if not isinstance(scores, Sequence | np.ndarray) or isinstance(scores, str):
        raise TypeError(f"{name} must be a sequence of scores, got {type(scores).__name__}")
    for i, value in enumerate(scores):
        if not math.isfinite(check_real(value, f"{name}[{i}]")):
            raise ValueError(f"{name}[{i}] = {value} is not a finite score")
