"""Fixed-step explicit Runge–Kutta integration: one generic stage loop over any tableau."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from odet.ode.tableau import ButcherTableau, get_tableau

StageFn = Callable[[int, Tensor], Tensor]
"""``f(stage_index, z) -> dz``: a vector field that may also want to know which stage it serves
(an RK decoder block caches each stage's self-attention keys and values separately)."""


def rk_stages(
    f: StageFn, y: Tensor, tableau: ButcherTableau, h: float | Tensor = 1.0
) -> list[Tensor]:
    """The stage derivatives ``k_i = f(i, y + h Σ_{j<i} a_ij k_j)`` of one explicit step."""
    k: list[Tensor] = []
    for i, row in enumerate(tableau.a):
        z = y
        for j in range(i):
            if row[j] != 0.0:
                z = z + (h * row[j]) * k[j]
        k.append(f(i, z))
    return k


def combine(y: Tensor, k: Sequence[Tensor], weights: Sequence[float], h: float | Tensor) -> Tensor:
    """``y + h Σ_i w_i k_i`` (zero weights skipped)."""
    out = y
    for w, ki in zip(weights, k):
        if w != 0.0:
            out = out + (h * w) * ki
    return out


def rk_step(
    f: Callable[..., Tensor],
    y: Tensor,
    method: str | ButcherTableau = "rk4",
    h: float | Tensor = 1.0,
    *,
    t: float | Tensor | None = None,
) -> Tensor:
    """One explicit step of ``y' = f(y)``; with ``t`` given, of ``y' = f(t, y)`` from time ``t``.

    Example:
        >>> import torch
        >>> rk_step(lambda y: -y, torch.ones(2), "rk4", h=0.1)
        tensor([0.9048, 0.9048])
    """
    tableau = get_tableau(method)
    if t is None:
        k = rk_stages(lambda _i, z: f(z), y, tableau, h)
    else:
        t0 = t
        k = rk_stages(lambda i, z: f(t0 + tableau.c[i] * h, z), y, tableau, h)
    return combine(y, k, tableau.b, h)


def odeint_fixed(
    f: Callable[..., Tensor],
    y0: Tensor,
    t0: float = 0.0,
    t1: float = 1.0,
    steps: int = 1,
    method: str | ButcherTableau = "rk4",
    *,
    autonomous: bool = True,
) -> Tensor:
    """Integrate ``y' = f(y)`` (or ``f(t, y)`` when ``autonomous=False``) from ``t0`` to ``t1``
    in ``steps`` equal steps; returns ``y(t1)``. Cost: ``steps × stages`` evaluations of f."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    tableau = get_tableau(method)
    h = (t1 - t0) / steps
    y = y0
    for n in range(steps):
        y = rk_step(f, y, tableau, h, t=None if autonomous else t0 + n * h)
    return y
