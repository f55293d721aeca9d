"""Linear multistep methods: Adams–Bashforth steps over an explicit history of derivatives.

The ``k``-step Adams–Bashforth method advances ``y' = f(y)`` by integrating the polynomial that
interpolates the ``k`` most recent derivatives ``f_n, f_{n−1}, …, f_{n−k+1}``::

    y_{n+1} = y_n + h Σ_{j<k} β_j f_{n−j}        (order k; one new evaluation of f per step)

The history is a value (``History``) passed from step to step, never state hidden in a module.
A method needs ``k`` past derivatives that the first steps do not have: ``odeint_multistep``
either starts with a Runge–Kutta step of matching order (the textbook way, which keeps the
global order ``k``) or with lower-order Adams–Bashforth steps (Euler, AB2, …: what a Transformer
stack does, since its first blocks have no earlier layers; one Euler step costs the global order,
which then is 2 at most).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from torch import Tensor

from odet.ode.runge_kutta import check_derivative, check_finite, check_state, rk_step
from odet.ode.tableau import ButcherTableau


def _poly_mul(p: list[Fraction], q: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, pi in enumerate(p):
        for j, qj in enumerate(q):
            out[i + j] += pi * qj
    return out


@functools.cache
def adams_bashforth_fractions(order: int) -> tuple[Fraction, ...]:
    """Exact ``β_0 … β_{k−1}`` (newest derivative first) of the ``k = order``-step method.

    ``β_j = ∫_0^1 L_j(s) ds`` where ``L_j`` is the Lagrange basis polynomial of the node
    ``s = −j`` among the nodes ``0, −1, …, −(k−1)`` (time in units of ``h`` from ``t_n``).
    """
    if not isinstance(order, int) or order < 1:
        raise ValueError(f"Adams–Bashforth order must be a positive int, got {order!r}")
    betas = []
    for j in range(order):
        basis = [Fraction(1)]  # coefficients of L_j, lowest degree first
        for i in range(order):
            if i != j:
                basis = _poly_mul(basis, [Fraction(i, i - j), Fraction(1, i - j)])
        betas.append(sum(c / (d + 1) for d, c in enumerate(basis)))
    return tuple(betas)


def adams_bashforth_coefficients(order: int) -> tuple[float, ...]:
    """``β_0 … β_{k−1}`` as floats: ``(1,)``, ``(3/2, −1/2)``, ``(23/12, −16/12, 5/12)``, …"""
    return tuple(float(b) for b in adams_bashforth_fractions(order))


@dataclass(frozen=True)
class History:
    """The most recent values of a sequence (oldest first), at most ``capacity`` of them.

    ``push`` returns a new history; the old one is unchanged, so a step's inputs stay explicit.
    ``capacity=None`` keeps everything (a dense layer history such as DLCL's).
    """

    values: tuple[Tensor, ...] = ()
    capacity: int | None = None

    def __post_init__(self) -> None:
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"History capacity must be >= 1 or None, got {self.capacity}")
        if self.capacity is not None and len(self.values) > self.capacity:
            raise ValueError(
                f"History holds {len(self.values)} values, more than its capacity {self.capacity}"
            )

    def push(self, value: Tensor) -> History:
        values = (*self.values, value)
        if self.capacity is not None:
            values = values[-self.capacity :]
        return History(values, self.capacity)

    def newest_first(self) -> tuple[Tensor, ...]:
        return self.values[::-1]

    def __len__(self) -> int:
        return len(self.values)


def adams_bashforth_step(y: Tensor, history: History, h: float, order: int) -> Tensor:
    """``y + h Σ_j β_j f_{n−j}`` with the newest ``f_n`` last in ``history``.

    With fewer than ``order`` derivatives available the step uses as many as there are
    (the lower-order start: Euler, then AB2, …).
    """
    if len(history) == 0:
        raise ValueError("an Adams–Bashforth step needs at least one derivative in its history")
    k = min(order, len(history))
    out = y
    for beta, f in zip(adams_bashforth_coefficients(k), history.newest_first()):
        out = out + (h * beta) * f
    return out


def odeint_multistep(
    f: Callable[[Tensor], Tensor],
    y0: Tensor,
    t0: float = 0.0,
    t1: float = 1.0,
    steps: int = 1,
    order: int = 2,
    *,
    starter: str | ButcherTableau | None = "rk4",
) -> Tensor:
    """Integrate ``y' = f(y)`` from ``t0`` to ``t1`` with the ``order``-step Adams–Bashforth
    method in ``steps`` equal steps; returns ``y(t1)``.

    The first ``order − 1`` steps lack history: ``starter`` names the one-step RK method that
    takes them (its order should be at least ``order − 1`` to keep the global order), or
    ``None`` for lower-order Adams–Bashforth steps (Euler, AB2, …) as in a multistep layer stack.
    Cost: one evaluation of ``f`` per step, plus the starter's extra stages.
    """
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    check_state(y0, "y0")
    check_finite(t0=t0, t1=t1)
    adams_bashforth_fractions(order)  # validates ``order``
    h = (t1 - t0) / steps
    history = History(capacity=order)
    y = y0
    for _ in range(steps):
        history = history.push(check_derivative(f(y), y))
        if starter is not None and len(history) < order:
            y = rk_step(f, y, starter, h)
        else:
            y = adams_bashforth_step(y, history, h, order)
    return y
