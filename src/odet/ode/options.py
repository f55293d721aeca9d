"""How to integrate ``dy/dt = F(t, y)`` over ``[t0, t1]``: one frozen, self-validating value.

:class:`SolverOptions` is the only place the continuous-solver settings are written and checked:
``odeint_adaptive`` and :func:`odet.ode.solve` take it, continuous stacks hold it, and the model
configs of continuous encoders extend it (their flat keys are its fields).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from odet.config import check, check_types
from odet.ode.tableau import TABLEAUS

__all__ = [
    "ADAPTIVE_METHODS",
    "ADJOINT_BACKENDS",
    "AdaptiveBackend",
    "OnFailure",
    "SolverOptions",
]

AdaptiveBackend = Literal["torchode", "torchdiffeq"]
OnFailure = Literal["raise", "flag"]

ADAPTIVE_METHODS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "torchode": ("dopri5", "tsit5", "heun"),
        # fehlberg2 (RKF1(2)) is left out: it advances the first-order solution.
        "torchdiffeq": ("dopri5", "dopri8", "bosh3", "adaptive_heun"),
    }
)
"""The adaptive methods each backend offers: ``{backend: (method, ...)}``."""

ADJOINT_BACKENDS: tuple[AdaptiveBackend, ...] = ("torchdiffeq",)
"""Backends with an adjoint solve (torchode's backsolve adjoint runs under vmap, where attention
has no batching rule)."""


@dataclass(frozen=True)
class SolverOptions:
    """The solve of ``dy/dt = F(t, y)`` from ``t0`` to ``t1``; validated on construction.

    Errors are ``ConfigError`` (a ``ValueError``) naming the field and the allowed values.
    """

    t0: float = 0.0
    """Start time of the integration."""
    t1: float = 1.0
    """End time (a continuous stack's "total depth")."""
    solver: str = "dopri5"
    """An adaptive method of ``backend`` (``ADAPTIVE_METHODS``), or with ``fixed_steps`` a
    tableau name (``odet.ode.TABLEAUS``, e.g. ``"rk4"``)."""
    backend: AdaptiveBackend = "torchode"
    """``"torchode"``: per-sample step sizes (depth adapts per input); ``"torchdiffeq"``: one
    step size shared by the batch."""
    rtol: float = 1e-3
    """Relative tolerance of the adaptive error control."""
    atol: float = 1e-3
    """Absolute tolerance of the adaptive error control."""
    max_steps: int = 1000
    """Bound on the steps (accepted + rejected) per sample of an adaptive solve."""
    fixed_steps: int | None = None
    """Integrate with this many equal steps of tableau ``solver`` instead (a known cost)."""
    arclength: bool = False
    """Also integrate ``∫‖F‖dt`` per sample (differentiable), for the arclength regulariser."""
    adjoint: bool = False
    """Backpropagate through the adjoint ODE (``ADJOINT_BACKENDS`` only; ``F`` an nn.Module)."""
    first_step: float | None = None
    """The adaptive solver's first step size; ``None`` lets the backend choose."""
    on_failure: OnFailure = "raise"
    """A failed solve (an adaptive one, or fixed steps whose state turned inf/NaN) raises
    ``SolverError`` or, with ``"flag"``, returns the state reached with the per-sample status
    flagged. In training, ``"raise"`` stops the run (its last update checkpointed) and
    ``"flag"`` skips the update."""
    grad_through_step_size: bool = True
    """Backpropagate through the step-size controller too (torchode's default: each step size
    is a differentiable function of the error estimates); ``False`` detaches the step sizes,
    so gradients follow the stages of the steps taken only (torchode backend)."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        backends = sorted(ADAPTIVE_METHODS)
        check(
            self.backend in ADAPTIVE_METHODS,
            f"{name}.backend: unknown backend {self.backend!r}; allowed: {backends}",
        )
        failures = list(get_args(OnFailure))
        check(
            self.on_failure in failures,
            f"{name}.on_failure: unknown on_failure {self.on_failure!r}; allowed: {failures}",
        )
        check_types(self)
        check(
            math.isfinite(self.t0) and math.isfinite(self.t1) and self.t1 > self.t0,
            f"{name}.t1 must be a finite number > {self.t0} (need t1 > t0), got t0 = "
            f"{self.t0}, t1 = {self.t1}",
        )
        if self.fixed_steps is None:
            self._check_adaptive(name)
        else:
            self._check_fixed(name)

    def _check_adaptive(self, name: str) -> None:
        methods = list(ADAPTIVE_METHODS[self.backend])
        check(
            self.solver in methods,
            f"{name}.solver = {self.solver!r} is not an adaptive method of backend "
            f"{self.backend!r}; allowed: {methods} (or set fixed_steps to use a tableau: "
            f"{sorted(TABLEAUS)})",
        )
        check(
            self.rtol >= 0 and self.atol >= 0 and self.rtol + self.atol > 0,
            f"{name}: need rtol, atol >= 0, not both 0; got rtol={self.rtol}, atol={self.atol}",
        )
        check(self.max_steps >= 1, f"{name}.max_steps must be >= 1, got {self.max_steps}")
        check(
            not self.adjoint or self.backend in ADJOINT_BACKENDS,
            f"{name}: adjoint=True is not supported by backend {self.backend!r} (torchode's "
            f"backsolve adjoint runs under vmap, where attention has no batching rule); use one "
            f"of {list(ADJOINT_BACKENDS)}",
        )
        check(
            self.grad_through_step_size or self.backend == "torchode",
            f"{name}: grad_through_step_size=False is a torchode option; backend "
            f"{self.backend!r} does not offer it",
        )
        span = self.t1 - self.t0
        check(
            self.first_step is None or 0 < self.first_step <= span,
            f"{name}.first_step must be in (0, t1 - t0 = {span}], got {self.first_step}",
        )

    def _check_fixed(self, name: str) -> None:
        check(
            self.fixed_steps is not None and self.fixed_steps >= 1,
            f"{name}.fixed_steps must be a positive int or None, got {self.fixed_steps!r}",
        )
        check(
            self.solver in TABLEAUS,
            f"{name}.solver = {self.solver!r} with fixed_steps must be a tableau; choose one of "
            f"{sorted(TABLEAUS)}",
        )
        check(not self.adjoint, f"{name}.adjoint=True needs an adaptive solver (fixed_steps=None)")
        check(
            self.grad_through_step_size,
            f"{name}.grad_through_step_size=False needs an adaptive solver (fixed_steps=None)",
        )

    @property
    def adaptive(self) -> bool:
        """Whether an adaptive method picks the steps (else ``fixed_steps`` of a tableau)."""
        return self.fixed_steps is None
