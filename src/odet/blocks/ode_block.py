"""One explicit Runge–Kutta step over one shared layer: the ODE Transformer's block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from odet.blocks.base import stage_evaluator
from odet.blocks.coefficients import Coefficients, CoefficientScheme, make_coefficients
from odet.ode import ButcherTableau, get_tableau, rk_stages


class ODEBlock(nn.Module):
    """``y_next = y + h Σ_i w_i k_i`` with ``k_i = F(y + h Σ_j a_ij k_j)`` and one field ``F``.

    Every stage evaluates the *same* ``field`` (shared parameters), so an RK4 block costs four
    layer evaluations but no extra parameters. ``method="euler"`` with ``"fixed"`` coefficients
    is exactly a pre-norm residual layer ``y + F(y)``.

    Args:
        field: any module computing ``dy = field(z, **kwargs)``, shape-preserving.
        method: a name in ``odet.ode.TABLEAUS`` or a ``ButcherTableau``.
        coefficients: ``"fixed" | "learned" | "gated" | "gated_norm" | "ema"`` or a
            ``Coefficients`` module (pass the same instance to several blocks to share it, e.g.
            one RK2 gate per stack).
        d_model: feature width, needed by ``"gated"`` and ``"gated_norm"``.
        h: the step size.

    Example:
        >>> import torch
        >>> block = ODEBlock(torch.nn.Linear(4, 4), method="rk4")
        >>> block(torch.randn(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(
        self,
        field: nn.Module,
        method: str | ButcherTableau = "euler",
        coefficients: CoefficientScheme | Coefficients = "fixed",
        *,
        d_model: int | None = None,
        h: float = 1.0,
    ):
        super().__init__()
        self.field = field
        self.tableau = get_tableau(method)
        self.coefficients = make_coefficients(coefficients, self.tableau, d_model=d_model)
        self.h = h

    @property
    def num_stages(self) -> int:
        return self.tableau.num_stages

    def stages(
        self, y: Tensor, *, cache: Sequence[Any] | None = None, **field_kwargs: Any
    ) -> list[Tensor]:
        """The stage derivatives ``[k_1 … k_s]``, each shaped like ``y``.

        ``cache``, if given, holds one entry per stage; stage ``i`` receives ``cache=cache[i]``
        (the decoder's per-stage self-attention caches). Other keyword arguments reach every stage.
        """
        evaluate = stage_evaluator(self.field, self.num_stages, cache, field_kwargs)
        return rk_stages(evaluate, y, self.tableau, self.h)

    def forward(
        self, y: Tensor, *, cache: Sequence[Any] | None = None, **field_kwargs: Any
    ) -> Tensor:
        """``y (B, T, D) -> y_next (B, T, D)``."""
        k = self.stages(y, cache=cache, **field_kwargs)
        update = self.coefficients(k)
        return y + (update if self.h == 1.0 else self.h * update)

    def extra_repr(self) -> str:
        return f"method={self.tableau.name!r}, stages={self.num_stages}, h={self.h}"
