"""Fixed-step explicit Runge–Kutta integration: one generic stage loop over any tableau."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from odet.ode.tableau import ButcherTableau, get_tableau

StageFn = Callable[[int, Tensor], Tensor]
"""``f(stage_index, z) -> dz``: a vector field that may also want to know which stage it serves
(an RK decoder block caches each stage's self-attention keys and values separately)."""


def check_state(y: object, name: str = "y") -> None:
    """Raise ``TypeError`` unless ``y`` is a floating tensor (the state an ODE solver moves)."""
    if not isinstance(y, Tensor) or not y.is_floating_point():
        what = y.dtype if isinstance(y, Tensor) else type(y).__name__
        raise TypeError(f"{name} must be a floating-point torch.Tensor, got {what}")


def check_derivative(dy: object, y: Tensor, name: str = "f(y)") -> Tensor:
    """``dy`` if it is a derivative for state ``y``: a tensor of ``y``'s shape and dtype.

    A field of the wrong shape would broadcast into the state (``(D,)`` for ``(B, D)``: a
    silently wrong solution) or fail deep in the solver; one of another dtype would change the
    state's dtype. Under autocast a lower-precision ``dy`` is expected and cast to ``y``'s dtype.
    """
    if not isinstance(dy, Tensor):
        raise TypeError(f"{name} must return a torch.Tensor shaped like y, got {type(dy).__name__}")
    if dy.shape != y.shape:
        raise ValueError(
            f"{name} must return dy/dt shaped like y {tuple(y.shape)}, got {tuple(dy.shape)}"
        )
    if dy.dtype != y.dtype:
        if dy.is_floating_point() and torch.is_autocast_enabled(y.device.type):
            return dy.to(y.dtype)
        raise ValueError(f"{name} must return dy/dt of y's dtype {y.dtype}, got {dy.dtype}")
    return dy


def check_finite(**values: float | Tensor | None) -> None:
    """Raise ``ValueError`` for a python number among ``values`` that is inf or NaN (a time or
    step size: it would make every state NaN); tensors are not read (no device sync)."""
    for name, value in values.items():
        if isinstance(value, int | float) and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")


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
    check_state(y)
    check_finite(h=h, t=t)
    tableau = get_tableau(method)
    if t is None:
        k = rk_stages(lambda _i, z: check_derivative(f(z), z), y, tableau, h)
    else:
        t0 = t
        k = rk_stages(
            lambda i, z: check_derivative(f(t0 + tableau.c[i] * h, z), z, "f(t, y)"),
            y,
            tableau,
            h,
        )
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
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    check_state(y0, "y0")
    check_finite(t0=t0, t1=t1)
    tableau = get_tableau(method)
    h = (t1 - t0) / steps
    y = y0
    for n in range(steps):
        y = rk_step(f, y, tableau, h, t=None if autonomous else t0 + n * h)
    return y
