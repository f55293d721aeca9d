"""Dropout with a mask drawn from random 16-bit integers instead of ``bernoulli_``.

``nn.Dropout`` on CPU draws one Bernoulli variate per element (``bernoulli_``), a visible share
of a small model's training step. This module draws 64 random bits per four elements with
``random_`` and compares 16-bit slices against a threshold (half ``bernoulli_``'s cost or
less), with the same semantics up to the rounding of ``p`` to a multiple of 2⁻¹⁶
(|Δp| ≤ 2⁻¹⁷): every element is dropped independently with probability
``p' = round(p · 2¹⁶) / 2¹⁶`` and survivors are scaled by ``1 / (1 − p')``, so the expectation
is exactly the input. Draws come from torch's default generator, so ``torch.manual_seed`` makes
them reproducible. Measurements: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LEVELS = 1 << 16


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device) -> Tensor:
    """Boolean mask of ``shape``, each element True independently with probability ``1 − p'``."""
    if torch.compiler.is_compiling():
        # In-place ``random_`` breaks the graph; compiled code draws its uniform int16s out of
        # place, which fuses with the comparison (same distribution, other draws).
        halves = torch.randint(-(_LEVELS >> 1), _LEVELS >> 1, shape, device=device)
        return halves >= _drop_levels(p) - (_LEVELS >> 1)
    numel = 1
    for n in shape:
        numel *= n
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device)
    words.random_(-(1 << 63), None)  # all 64 bits uniform
    halves = words.view(torch.int16)[:numel].view(shape)  # uniform on [-2¹⁵, 2¹⁵)
    return halves >= _drop_levels(p) - (_LEVELS >> 1)


def _drop_levels(p: float) -> int:
    return min(round(p * _LEVELS), _LEVELS - 1)


def quantised_drop_rate(p: float) -> float:
    """The drop probability ``p'`` actually used for ``p``: the nearest multiple of 2⁻¹⁶
    (at most ``1 − 2⁻¹⁶``)."""
    return _drop_levels(p) / _LEVELS


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Functional form of :class:`Dropout` for ``x`` of any shape."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    drop = quantised_drop_rate(p)
    if not training or drop == 0.0:
        return x
    keep = keep_mask(x.shape, p, x.device)
    # The scale is a Python float, so the multiply runs in the ops' fp32 "opmath" and only the
    # product is rounded: in bf16 a rounded scale tensor (1/0.9 → 1.109375) would shrink every
    # survivor by 0.16 %. Autograd keeps the boolean mask, not a float noise tensor.
    return torch.where(keep, x * (1.0 / (1.0 - drop)), 0.0)


class Dropout(nn.Module):
    """Drop-in replacement for ``nn.Dropout(p)`` (see the module docstring)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
