"""Learning-rate schedules: linear warmup, then a decay chosen by name.

- ``inverse_sqrt`` (Vaswani et al.; fairseq's default, the ODE Transformer recipes): after
  ``warmup`` updates the multiplier is ``sqrt(warmup / step)``. It needs no training length.
- ``cosine`` and ``linear``: decay from the peak to ``min_ratio`` × peak at ``total`` updates
  (half a cosine, or a straight line), then stay there. For fixed-budget recipes, where the
  whole schedule fits the run and the last checkpoints are averaged.

Every schedule is a multiplier of the optimizer's configured (peak) lr, evaluated by a
``LambdaLR``, so its state is one step counter and resume is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

ScheduleName = Literal["inverse_sqrt", "cosine", "linear"]


def _warmup(step: int, warmup: int, init_ratio: float) -> float:
    return init_ratio + (1.0 - init_ratio) * step / warmup


def inverse_sqrt_factor(step: int, warmup: int, init_ratio: float = 0.0) -> float:
    """The multiplier of the peak lr after ``step`` updates: linear from ``init_ratio`` to 1 over
    ``warmup`` updates, then ``sqrt(warmup / step)``."""
    if warmup <= 0:
        return 1.0 / math.sqrt(max(step, 1))
    if step < warmup:
        return _warmup(step, warmup, init_ratio)
    return math.sqrt(warmup / step)


def _decay_progress(step: int, warmup: int, total: int) -> float:
    """Fraction of the decay phase done after ``step`` updates, in [0, 1]."""
    return min(max(step - warmup, 0) / max(total - warmup, 1), 1.0)


def cosine_factor(
    step: int, warmup: int, total: int, init_ratio: float = 0.0, min_ratio: float = 0.0
) -> float:
    """Linear warmup to 1, then half a cosine from 1 to ``min_ratio`` at update ``total``."""
    if step < warmup:
        return _warmup(step, warmup, init_ratio)
    progress = _decay_progress(step, warmup, total)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear_factor(
    step: int, warmup: int, total: int, init_ratio: float = 0.0, min_ratio: float = 0.0
) -> float:
    """Linear warmup to 1, then a straight line from 1 to ``min_ratio`` at update ``total``."""
    if step < warmup:
        return _warmup(step, warmup, init_ratio)
    return 1.0 - (1.0 - min_ratio) * _decay_progress(step, warmup, total)


def _inverse_sqrt(step: int, warmup: int, total: int, init_ratio: float, min_ratio: float) -> float:
    return inverse_sqrt_factor(step, warmup, init_ratio)


SCHEDULES: dict[str, Callable[[int, int, int, float, float], float]] = {
    "inverse_sqrt": _inverse_sqrt,
    "cosine": cosine_factor,
    "linear": linear_factor,
}
"""Schedule name → multiplier ``f(step, warmup, total, init_ratio, min_ratio)``."""


def make_schedule(
    optimizer: Optimizer,
    name: ScheduleName = "inverse_sqrt",
    *,
    warmup: int,
    warmup_init_lr: float = 0.0,
    total: int = 0,
    min_ratio: float = 0.0,
) -> LambdaLR:
    """A ``LambdaLR`` over ``optimizer`` whose peak is the optimizer's configured lr.

    ``total`` (the run's number of updates) is required by ``cosine`` and ``linear``.
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown lr schedule {name!r}; choose one of {sorted(SCHEDULES)}")
    if name != "inverse_sqrt" and total <= warmup:
        raise ValueError(
            f"the {name!r} schedule needs a total number of updates above the warmup "
            f"({warmup}), got {total}; set train.max_updates"
        )
    factor = SCHEDULES[name]
    ratio = min(warmup_init_lr / optimizer.param_groups[0]["lr"], 1.0)
    return LambdaLR(optimizer, lambda step: factor(step, warmup, total, ratio, min_ratio))


def inverse_sqrt_schedule(optimizer: Optimizer, warmup: int, warmup_init_lr: float) -> LambdaLR:
    """A ``LambdaLR`` over ``optimizer`` whose peak is the optimizer's configured lr."""
    return make_schedule(optimizer, "inverse_sqrt", warmup=warmup, warmup_init_lr=warmup_init_lr)
