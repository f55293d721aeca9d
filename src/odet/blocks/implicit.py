"""An implicit-Euler block solved by fixed-point iteration (after IIET, arXiv 2509.22463).

The implicit Euler step of ``dy/dt = F(y)`` defines ``y_next`` by ``y_next = y + h F(y_next)``.
The block approximates it by a fixed number of fixed-point (Picard) iterations started from the
explicit Euler prediction::

    z_0     = y + h F(y)                    (explicit Euler)
    z_{m+1} = y + h F(z_m)                  m = 0 … M − 1
    y_next  = z_M

Each of the ``1 + M`` layer evaluations is a decoder stage with its own self-attention cache.
The iteration converges when ``h F`` is a contraction; for a linear ``F(z) = A z`` the result
is the truncated Neumann series ``Σ_{m ≤ M+1} (hA)^m y`` of ``(I − hA)^{-1} y``. A fixed
iteration count makes the block an explicit RK method in disguise (``a_{i,i−1} = 1``, ``b`` the
last unit vector), so it needs no parameters beyond its layer and stays exactly cacheable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from odet.blocks.base import stage_evaluator

DEFAULT_ITERATIONS = 2


class ImplicitEulerBlock(nn.Module):
    """``y_next ≈ y + h F(y_next)`` by ``iterations`` fixed-point steps (module docstring).

    Args:
        field: any module computing ``dy = field(z, **kwargs)``.
        iterations: fixed-point iterations after the explicit Euler start (``M ≥ 0``;
            ``0`` is explicit Euler).
        h: the step size.
    """

    def __init__(self, field: nn.Module, iterations: int = DEFAULT_ITERATIONS, *, h: float = 1.0):
        super().__init__()
        if not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"iterations must be a non-negative int, got {iterations!r}")
        self.field = field
        self.iterations = iterations
        self.h = h

    @property
    def num_stages(self) -> int:
        """The explicit start plus one layer evaluation per iteration."""
        return 1 + self.iterations

    def forward(
        self, y: Tensor, *, cache: Sequence[Any] | None = None, **field_kwargs: Any
    ) -> Tensor:
        """``y (B, T, D) -> y_next (B, T, D)``; ``cache`` holds one entry per stage."""
        evaluate = stage_evaluator(self.field, self.num_stages, cache, field_kwargs)
        z = y
        for i in range(self.num_stages):
            z = y + self.h * evaluate(i, z)
        return z

    def extra_repr(self) -> str:
        return f"iterations={self.iterations}, h={self.h}"
