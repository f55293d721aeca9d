"""A predictor–corrector block over one shared layer (after PCformer, arXiv 2411.03042).

One block of layer ``F``::

    k_i     = F(y + Σ_{j<i} a_ij k_j)           i = 1 … s   (predictor stages, an RK tableau)
    P       = y + Σ_i w_i k_i                               (predictor; EMA weights in PCformer)
    k_c     = F(P)                                          (one corrector evaluation, same F)
    y_next  = y + Σ_i γ_i k_i + γ_c k_c                     (corrector)

``γ`` starts at the trapezoidal (two-step Adams–Moulton) rule ``γ_1 = γ_c = ½`` and the other
``γ_i = 0``: ``y + ½ F(y) + ½ F(P)`` is the classic PECE pair, a consistent, second-order method
for any predictor of order ≥ 1. With ``"fixed"`` coefficients the whole block is the explicit
RK method with ``s + 1`` stages whose last row of ``a`` is the predictor's ``b`` (for the default
RK2 predictor: ``a = [[], [1], [½, ½]]``, ``b = (½, 0, ½)``); with ``"learned"`` or ``"ema"``
the predictor weights ``w`` follow that scheme and ``γ`` become free scalars.

Relation to the paper: PCformer's predictor is a high-order RK step with EMA coefficients, as
here. Its corrector is a *multistep* (Adams–Moulton-like) combination of ``F(P)`` with the
derivatives of the current and *earlier* blocks ``F_t, F_{t−1}, …``; this block keeps the
corrector inside the block (``k_1 = F(y)`` is the paper's ``F_t``), so the trapezoidal start
equals the paper's two-step corrector, and the other predictor stages replace the older
blocks' derivatives. Every evaluation of ``F`` is a decoder stage with its own cache:
``s + 1`` stages per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from odet.blocks.base import stage_evaluator
from odet.blocks.coefficients import (
    ANY_STAGE_SCHEMES,
    Coefficients,
    CoefficientScheme,
    check_scheme,
    fixed_or_learned,
    make_coefficients,
)
from odet.ode import ButcherTableau, get_tableau, rk_stages

PC_SCHEMES: tuple[CoefficientScheme, ...] = ANY_STAGE_SCHEMES
"""The predictor's weights follow any scheme that weighs any number of stages."""


def trapezoidal_corrector_weights(num_predictor_stages: int) -> tuple[float, ...]:
    """``γ`` at initialisation: ``½`` on ``k_1`` and on the corrector stage, ``0`` between."""
    return (0.5, *(0.0,) * (num_predictor_stages - 1), 0.5)


class PredictorCorrectorBlock(nn.Module):
    """RK predictor + one corrector evaluation of the same ``field`` (module docstring).

    Args:
        field: any module computing ``dy = field(z, **kwargs)``.
        predictor: the predictor's tableau (name or ``ButcherTableau``); RK2 (Heun) by default.
        coefficients: ``"fixed"`` (tableau ``b`` and trapezoidal ``γ``), ``"learned"`` (both
            free) or ``"ema"`` (EMA predictor weights as in PCformer, free ``γ``).
        h: the step size.
    """

    def __init__(
        self,
        field: nn.Module,
        predictor: str | ButcherTableau = "rk2",
        coefficients: CoefficientScheme = "fixed",
        *,
        h: float = 1.0,
    ):
        super().__init__()
        check_scheme(coefficients, PC_SCHEMES, "predictor–corrector ")
        self.field = field
        self.tableau = get_tableau(predictor)
        self.predictor_coefficients = make_coefficients(coefficients, self.tableau)
        gamma = trapezoidal_corrector_weights(self.tableau.num_stages)
        self.corrector_coefficients: Coefficients = fixed_or_learned(coefficients, gamma)
        self.h = h

    @property
    def num_stages(self) -> int:
        """Predictor stages plus the corrector's evaluation."""
        return self.tableau.num_stages + 1

    def forward(
        self, y: Tensor, *, cache: Sequence[Any] | None = None, **field_kwargs: Any
    ) -> Tensor:
        """``y (B, T, D) -> y_next (B, T, D)``; ``cache`` holds one entry per stage."""
        evaluate = stage_evaluator(self.field, self.num_stages, cache, field_kwargs)
        k = rk_stages(evaluate, y, self.tableau, self.h)
        prediction = y + self.h * self.predictor_coefficients(k)
        k.append(evaluate(len(k), prediction))
        return y + self.h * self.corrector_coefficients(k)

    def extra_repr(self) -> str:
        return f"predictor={self.tableau.name!r}, stages={self.num_stages}, h={self.h}"
