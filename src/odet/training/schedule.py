"""Learning-rate schedule: linear warmup, then inverse square root (Vaswani et al.; fairseq)."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def inverse_sqrt_factor(step: int, warmup: int, init_ratio: float = 0.0) -> float:
    """The multiplier of the peak lr after ``step`` updates: linear from ``init_ratio`` to 1 over
    ``warmup`` updates, then ``sqrt(warmup / step)``."""
    if warmup <= 0:
        return 1.0 / math.sqrt(max(step, 1))
    if step < warmup:
        return init_ratio + (1.0 - init_ratio) * step / warmup
    return math.sqrt(warmup / step)


def inverse_sqrt_schedule(optimizer: Optimizer, warmup: int, warmup_init_lr: float) -> LambdaLR:
    """A ``LambdaLR`` over ``optimizer`` whose peak is the optimizer's configured lr."""
    peak = optimizer.param_groups[0]["lr"]
    ratio = min(warmup_init_lr / peak, 1.0)
    return LambdaLR(optimizer, lambda step: inverse_sqrt_factor(step, warmup, ratio))
