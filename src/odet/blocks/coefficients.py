"""How an RK block combines its stage derivatives ``k_1 … k_s`` into the update ``Σ w_i k_i``.

- ``fixed``: the tableau's weights ``b`` (a textbook RK step).
- ``learned``: one free scalar per stage, initialised to ``b``.
- ``gated`` (the ODE Transformer's RK2-learnable): ``g k1 + (1 − g) k2`` with
  ``g = sigmoid(W [k1; k2] + b)``, ``W: 2D → 1`` (one gate per token), Xavier init, zero bias.
- ``gated_norm``: the same gate on layer-normalised stages, ``g = sigmoid(W LN([k1; k2]) + b)``,
  with ``W`` and ``b`` zero at init (so ``g = ½``, Heun's method, and the block starts as the
  textbook RK2). The logit no longer grows with ``‖k‖``: with ``gated``, a field whose outputs
  grow during training drives ``|W [k1; k2]|`` to tens and the gate saturates at 0 or 1, after
  which one of the two evaluations gets almost no gradient (as on DialogSum, see the
  project's results). Same parameter count as ``gated`` (the norm has no affine).
- ``ema`` (PCformer-style exponential moving average over stages, ``α = sigmoid(θ)`` learnable,
  ``α = ½`` at init): the latest stage gets ``α``, the one before ``α(1 − α)``, …, ``k_2`` gets
  ``α(1 − α)^{s−2}``, and ``k_1`` the remaining ``(1 − α)^{s−1}``, so the weights always sum to one
  (a consistent method; with two stages at init this is Heun's ``½, ½``). The plain formula
  ``α(1 − α)^{s−i}`` for every stage would sum to ``1 − (1 − α)^s`` and shrink the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from odet.ode import ButcherTableau

CoefficientScheme = Literal["fixed", "learned", "gated", "gated_norm", "ema"]
"""The names of ``COEFFICIENTS`` (a test pins that they agree)."""


class Coefficients(nn.Module):
    """Base: ``forward(k) -> Σ_i w_i k_i`` for stage derivatives ``k_i (B, T, D)``."""

    def forward(self, k: Sequence[Tensor]) -> Tensor:
        raise NotImplementedError

    def weights(self) -> Tensor | None:
        """The current per-stage weights ``(s,)`` where they do not depend on the input."""
        return None


def _weights_of(source: ButcherTableau | Sequence[float]) -> tuple[float, ...]:
    return source.b if isinstance(source, ButcherTableau) else tuple(float(w) for w in source)


class FixedCoefficients(Coefficients):
    """The tableau's ``b`` (or any given weights, e.g. a multistep method's ``β``)."""

    def __init__(self, weights: ButcherTableau | Sequence[float]):
        super().__init__()
        self.b = _weights_of(weights)

    def forward(self, k: Sequence[Tensor]) -> Tensor:
        terms = [ki if w == 1.0 else w * ki for w, ki in zip(self.b, k) if w != 0.0]
        out = terms[0]
        for term in terms[1:]:
            out = out + term
        return out

    def weights(self) -> Tensor:
        return torch.tensor(self.b)


class LearnedCoefficients(Coefficients):
    """One learnable scalar per stage, initialised to ``b`` (or to the given weights)."""

    def __init__(self, weights: ButcherTableau | Sequence[float]):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(_weights_of(weights)))

    def forward(self, k: Sequence[Tensor]) -> Tensor:
        out = self.weight[0] * k[0]
        for i in range(1, len(k)):
            out = out + self.weight[i] * k[i]
        return out

    def weights(self) -> Tensor:
        return self.weight.detach()


class GatedCoefficients(Coefficients):
    """``g k1 + (1 − g) k2``, ``g = sigmoid(W [k1; k2] + b)`` per token (two stages only).

    One instance may be shared by every block of a stack, as in the paper's code. With
    ``normalize=True`` (the ``gated_norm`` scheme) the gate reads ``LN([k1; k2])`` and starts at
    ``g = ½`` (see the module doc).
    """

    def __init__(self, d_model: int, *, normalize: bool = False):
        super().__init__()
        self.gate = nn.Linear(2 * d_model, 1)
        self.norm = nn.LayerNorm(2 * d_model, elementwise_affine=False) if normalize else None
        if normalize:
            nn.init.zeros_(self.gate.weight)
        else:
            nn.init.xavier_uniform_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)

    def gate_values(self, k1: Tensor, k2: Tensor) -> Tensor:
        """``g (B, T, 1)`` from ``k1, k2 (B, T, D)``."""
        features = torch.cat([k1, k2], dim=-1)
        with torch.autocast(features.device.type, enabled=False):  # the gate is fp32 at least
            features = features.to(torch.promote_types(features.dtype, self.gate.weight.dtype))
            if self.norm is not None:
                features = self.norm(features)
            return torch.sigmoid(self.gate(features))

    def forward(self, k: Sequence[Tensor]) -> Tensor:
        if len(k) != 2:
            raise ValueError(f"gated coefficients combine exactly 2 stages, got {len(k)}")
        g = self.gate_values(k[0], k[1])
        return g * k[0] + (1.0 - g) * k[1]


class EMACoefficients(Coefficients):
    """Exponential-moving-average weights over the stages with learnable ``α`` (see module doc)."""

    def __init__(self, num_stages: int, alpha: float = 0.5):
        super().__init__()
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"ema alpha must lie in (0, 1), got {alpha}")
        self.num_stages = num_stages
        self.alpha_logit = nn.Parameter(torch.logit(torch.tensor(alpha)))

    @property
    def alpha(self) -> Tensor:
        return torch.sigmoid(self.alpha_logit)

    def _weights(self) -> Tensor:
        a, s = self.alpha, self.num_stages
        first = (1.0 - a) ** (s - 1)
        return torch.stack([first, *(a * (1.0 - a) ** (s - i) for i in range(2, s + 1))])

    def forward(self, k: Sequence[Tensor]) -> Tensor:
        w = self._weights()  # in the parameter's dtype: never rounded to a bf16 stage's
        out = w[0] * k[0]
        for i in range(1, len(k)):
            out = out + w[i] * k[i]
        return out

    def weights(self) -> Tensor:
        return self._weights().detach()


def _fixed(tableau: ButcherTableau, d_model: int | None) -> Coefficients:
    return FixedCoefficients(tableau)


def _learned(tableau: ButcherTableau, d_model: int | None) -> Coefficients:
    return LearnedCoefficients(tableau)


def _gate_width(scheme: str, tableau: ButcherTableau, d_model: int | None) -> int:
    _check_two_stages(tableau)
    if d_model is None:
        raise ValueError(f"{scheme} coefficients need d_model (the width of the stages)")
    return d_model


def _gated(tableau: ButcherTableau, d_model: int | None) -> Coefficients:
    return GatedCoefficients(_gate_width("gated", tableau, d_model))


def _gated_norm(tableau: ButcherTableau, d_model: int | None) -> Coefficients:
    return GatedCoefficients(_gate_width("gated_norm", tableau, d_model), normalize=True)


def _ema(tableau: ButcherTableau, d_model: int | None) -> Coefficients:
    return EMACoefficients(tableau.num_stages)


@dataclass(frozen=True)
class SchemeEntry:
    """One coefficient scheme: ``build(tableau, d_model) -> Coefficients``, and whether it
    combines exactly two stages (a per-token gate); every other scheme takes any stage count."""

    build: Callable[[ButcherTableau, int | None], Coefficients]
    two_stages_only: bool = False


COEFFICIENTS: dict[CoefficientScheme, SchemeEntry] = {
    "fixed": SchemeEntry(_fixed),
    "learned": SchemeEntry(_learned),
    "gated": SchemeEntry(_gated, two_stages_only=True),
    "gated_norm": SchemeEntry(_gated_norm, two_stages_only=True),
    "ema": SchemeEntry(_ema),
}
"""Coefficient schemes by name; adding one is its class and its entry here."""

GATED_SCHEMES: tuple[CoefficientScheme, ...] = tuple(
    name for name, entry in COEFFICIENTS.items() if entry.two_stages_only
)
"""The per-token gate schemes (two-stage methods only)."""

ANY_STAGE_SCHEMES: tuple[CoefficientScheme, ...] = tuple(
    name for name, entry in COEFFICIENTS.items() if not entry.two_stages_only
)
"""The schemes that weigh any number of stages."""


def check_scheme(scheme: str, allowed: Sequence[str], kind: str = "") -> None:
    """Raise ``ValueError`` naming the allowed schemes unless ``scheme`` is one of them."""
    if scheme not in allowed:
        raise ValueError(
            f"unknown {kind}coefficient scheme {scheme!r}; must be one of {list(allowed)}, "
            f"got {scheme!r}"
        )


def fixed_or_learned(scheme: str, weights: Sequence[float]) -> Coefficients:
    """``weights`` as they are (``"fixed"``), or learnable scalars initialised to them."""
    return FixedCoefficients(weights) if scheme == "fixed" else LearnedCoefficients(weights)


def make_coefficients(
    scheme: CoefficientScheme | Coefficients,
    tableau: ButcherTableau,
    *,
    d_model: int | None = None,
) -> Coefficients:
    """Build a coefficient module by name, or pass an existing (possibly shared) one through."""
    if isinstance(scheme, Coefficients):
        if isinstance(scheme, GatedCoefficients):
            _check_two_stages(tableau)
        return scheme
    check_scheme(scheme, list(COEFFICIENTS))
    return COEFFICIENTS[scheme].build(tableau, d_model)


def _check_two_stages(tableau: ButcherTableau) -> None:
    if tableau.num_stages != 2:
        raise ValueError(
            f"gated coefficients combine exactly two stages (RK2-style), but method "
            f"{tableau.name!r} has {tableau.num_stages}; use 'fixed', 'learned' or 'ema'"
        )
