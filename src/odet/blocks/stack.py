"""Stacks of blocks: the integrator over a depth of layers, built from a method name."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from odet.blocks.coefficients import Coefficients, CoefficientScheme, make_coefficients
from odet.blocks.ode_block import ODEBlock
from odet.ode import TABLEAUS, get_tableau


class RungeKuttaStack(nn.Module):
    """``y_{l+1} = block_l(y_l)`` for ``L`` one-step RK blocks, each over its own layer."""

    def __init__(self, blocks: Sequence[ODEBlock]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    @property
    def stage_counts(self) -> tuple[int, ...]:
        """Stages per block: the number of (block, stage) self-attention caches a decoder needs."""
        return tuple(block.num_stages for block in self.blocks)

    def forward(
        self,
        y: Tensor,
        *,
        block_kwargs: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """``y (B, T, D)``; ``kwargs`` reach every block, ``block_kwargs[l]`` only block ``l``."""
        for l, block in enumerate(self.blocks):
            extra = block_kwargs[l] if block_kwargs is not None else {}
            y = block(y, **kwargs, **extra)
        return y


def build_stack(
    method: str,
    make_field: Callable[[], nn.Module],
    num_layers: int,
    *,
    coefficients: CoefficientScheme = "fixed",
    d_model: int | None = None,
    share_gate: bool = False,
) -> RungeKuttaStack:
    """``num_layers`` blocks of ``method``, each over a fresh field from ``make_field()``.

    One-stage methods (Euler) ignore ``coefficients``: they are the plain residual stack.
    ``share_gate=True`` gives every block of the stack the same RK2 gate (the paper's code).
    """
    if method not in STACK_METHODS:
        raise ValueError(f"unknown stack method {method!r}; choose one of {sorted(STACK_METHODS)}")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    tableau = get_tableau(method)
    scheme: CoefficientScheme = coefficients if tableau.num_stages > 1 else "fixed"
    per_block: CoefficientScheme | Coefficients = scheme
    if scheme == "gated" and share_gate:
        per_block = make_coefficients("gated", tableau, d_model=d_model)
    blocks = [
        ODEBlock(make_field(), tableau, per_block, d_model=d_model) for _ in range(num_layers)
    ]
    return RungeKuttaStack(blocks)


STACK_METHODS: dict[str, str] = {name: "runge_kutta" for name in TABLEAUS}
"""Every method usable as ``encoder_method`` / ``decoder_method``, with its stack family."""
