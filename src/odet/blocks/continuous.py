"""Continuous stacks: one weight-tied field ``F(t, y)`` integrated over ``t ∈ [0, t1]``.

The N-ODE Transformer (Baier-Reinio & De Sterck, 2020) replaces a stack of residual layers by
``dy/dt = F(t, y)``, solved by an adaptive method (dopri5), so the number of evaluations of ``F``
— the depth — depends on the input. :class:`ContinuousStack` does that solve (or a fixed-step
one with a Butcher tableau, whose cost is known in advance and which ``torch.compile`` can
trace); :class:`ContinuousEncoder` chains several such stacks, one ODE each.

Both return a :class:`~odet.ode.SolveResult` ``(y, stats)``: statistics (NFE per sample,
accepted/rejected steps, arclength ``∫‖F‖dt``) are returned, never stored on the modules.

Padding: the field's value at padded positions is set to zero, so padded states stay at their
initial value. Real positions never see them (attention masks padded keys); they add nothing to
the arclength and no local error. The adaptive error norm is an RMS over all ``T·D`` features of
a sample, so padded features still count in its denominator: a sample with ``T_real < T`` is held
to a tolerance looser by ``√(T / T_real)`` on its real features than when solved unpadded.
Bucketing batches by length avoids this; with fixed steps padding changes nothing.

The field protocol: ``field(t, y, padding_mask=mask) -> dy/dt`` with ``y (B, T, D)``, ``t`` a
python float (fixed steps) or a ``(B,)`` tensor (adaptive), ``mask (B, T)`` True at padding or
``None`` — e.g. :class:`~odet.nn.time.TimeConditionedEncoderField`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from odet.ode import (
    ADAPTIVE_METHODS,
    TABLEAUS,
    SolveResult,
    SolveStats,
    SolveStatus,
    get_tableau,
    odeint_adaptive,
    odeint_fixed,
)
from odet.ode.adaptive import AdaptiveBackend, OnFailure


class ContinuousStack(nn.Module):
    """``y(t1)`` of ``dy/dt = field(t, y)``, ``y(0) = y``: ``(B, T, D) -> SolveResult``.

    Args:
        field: the vector field (module docstring for its protocol).
        t1: the integration time ("total depth").
        solver: an adaptive method of ``backend`` (``odet.ode.ADAPTIVE_METHODS``) when
            ``fixed_steps`` is None, else a tableau name (``odet.ode.TABLEAUS``, e.g. ``"rk4"``).
        backend: ``"torchode"`` (per-sample step sizes: depth adapts per input) or
            ``"torchdiffeq"`` (one step size for the batch).
        rtol, atol, max_steps, adjoint, on_failure: as in :func:`odet.ode.odeint_adaptive`.
        fixed_steps: integrate with this many equal steps of tableau ``solver`` instead:
            ``fixed_steps × stages`` evaluations for every input.
        arclength: also compute ``∫‖F‖dt`` per sample (norm over all ``T·D`` features),
            differentiable, in ``stats.arclength`` (for the arclength regulariser).

    Example:
        >>> import torch
        >>> from odet.nn.time import TimeConditionedEncoderField
        >>> field = TimeConditionedEncoderField(16, 2, 32, time_conditioning="film")
        >>> out = ContinuousStack(field, arclength=True)(torch.randn(3, 5, 16))
        >>> out.y.shape, out.stats.nfe.shape, out.stats.arclength.shape
        (torch.Size([3, 5, 16]), torch.Size([3]), torch.Size([3]))
    """

    def __init__(
        self,
        field: nn.Module,
        *,
        t1: float = 1.0,
        solver: str = "dopri5",
        backend: AdaptiveBackend = "torchode",
        rtol: float = 1e-3,
        atol: float = 1e-3,
        max_steps: int = 1000,
        fixed_steps: int | None = None,
        arclength: bool = False,
        adjoint: bool = False,
        on_failure: OnFailure = "raise",
    ) -> None:
        super().__init__()
        if not (math.isfinite(t1) and t1 > 0):
            raise ValueError(f"t1 must be a finite number > 0, got {t1}")
        if fixed_steps is None:
            if backend not in ADAPTIVE_METHODS:
                raise ValueError(
                    f"unknown backend {backend!r}; choose one of {list(ADAPTIVE_METHODS)}"
                )
            if solver not in ADAPTIVE_METHODS[backend]:
                raise ValueError(
                    f"solver {solver!r} is not an adaptive method of backend {backend!r}; "
                    f"choose one of {list(ADAPTIVE_METHODS[backend])}, or set fixed_steps to "
                    f"use a tableau ({sorted(TABLEAUS)})"
                )
            if rtol < 0 or atol < 0 or rtol + atol == 0:
                raise ValueError(f"need rtol, atol >= 0, not both 0; got {rtol}, {atol}")
            if max_steps < 1:
                raise ValueError(f"max_steps must be >= 1, got {max_steps}")
            if on_failure not in ("raise", "flag"):
                raise ValueError(f"unknown on_failure {on_failure!r}; allowed: ['raise', 'flag']")
        else:
            if isinstance(fixed_steps, bool) or not isinstance(fixed_steps, int) or fixed_steps < 1:
                raise ValueError(f"fixed_steps must be a positive int or None, got {fixed_steps!r}")
            if solver not in TABLEAUS:
                raise ValueError(
                    f"with fixed_steps, solver must be a tableau; got {solver!r}, choose one of "
                    f"{sorted(TABLEAUS)}"
                )
            if adjoint:
                raise ValueError("adjoint=True needs an adaptive solver (fixed_steps=None)")
        self.field = field
        self.t1 = float(t1)
        self.solver = solver
        self.backend = backend
        self.rtol = rtol
        self.atol = atol
        self.max_steps = max_steps
        self.fixed_steps = fixed_steps
        self.arclength = arclength
        self.adjoint = adjoint
        self.on_failure = on_failure

    @property
    def adaptive(self) -> bool:
        return self.fixed_steps is None

    def forward(self, y: Tensor, *, padding_mask: Tensor | None = None) -> SolveResult:
        """``y (B, T, D)``, ``padding_mask (B, T)`` True at padding → ``SolveResult``."""
        if y.ndim != 3:
            raise ValueError(f"y must be (B, T, D), got shape {tuple(y.shape)}")
        if padding_mask is not None and padding_mask.shape != y.shape[:2]:
            raise ValueError(
                f"padding_mask must be (B, T) = {tuple(y.shape[:2])}, "
                f"got {tuple(padding_mask.shape)}"
            )
        keep = None if padding_mask is None else (~padding_mask).unsqueeze(-1).to(y.dtype)

        def f(t: float | Tensor, z: Tensor) -> Tensor:
            dz = self.field(t, z, padding_mask=padding_mask)
            return dz if keep is None else dz * keep

        if self.fixed_steps is None:
            return odeint_adaptive(
                f, y, 0.0, self.t1, method=self.solver, backend=self.backend, rtol=self.rtol,
                atol=self.atol, max_steps=self.max_steps, arclength=self.arclength,
                adjoint=self.adjoint, on_failure=self.on_failure,
            )  # fmt: skip
        return self._solve_fixed(f, y, self.fixed_steps)

    def _solve_fixed(
        self, f: Callable[[float | Tensor, Tensor], Tensor], y: Tensor, steps: int
    ) -> SolveResult:
        """Fixed steps; the arclength rides along as an extra state component, integrated by
        the same tableau (the adaptive path does the same under error control)."""
        batch, n = y.shape[0], y[0].numel()

        def g(t: float, z: Tensor) -> Tensor:
            dy = f(t, z[:, :n].reshape(y.shape)).reshape(batch, n)
            if not self.arclength:
                return dy
            return torch.cat([dy, torch.linalg.vector_norm(dy, dim=1, keepdim=True)], dim=1)

        z0 = y.reshape(batch, n)
        if self.arclength:
            z0 = torch.cat([z0, z0.new_zeros(batch, 1)], dim=1)
        z = odeint_fixed(g, z0, 0.0, self.t1, steps, self.solver, autonomous=False)
        nfe = steps * get_tableau(self.solver).num_stages
        accepted = torch.full((batch,), steps, dtype=torch.long, device=y.device)
        stats = SolveStats(
            nfe=torch.full_like(accepted, nfe),
            nfe_total=nfe,
            accepted=accepted,
            rejected=torch.zeros_like(accepted),
            t_final=y.new_full((batch,), self.t1),
            status=(SolveStatus.SUCCESS,) * batch,
            arclength=z[:, n] if self.arclength else None,
        )
        return SolveResult(y=z[:, :n].reshape(y.shape), stats=stats)

    def extra_repr(self) -> str:
        how = (
            f"solver={self.solver!r}, backend={self.backend!r}, rtol={self.rtol}, atol={self.atol}"
            if self.adaptive
            else f"solver={self.solver!r}, fixed_steps={self.fixed_steps}"
        )
        return f"t1={self.t1}, {how}, arclength={self.arclength}"


def merge_stats(stats: Sequence[SolveStats]) -> SolveStats:
    """The statistics of consecutive solves of one batch, as one: counts, times and arclengths
    add up; a sample's status is its first failure (or success)."""
    if not stats:
        raise ValueError("merge_stats needs at least one SolveStats")
    have_arclength = {s.arclength is not None for s in stats}
    if len(have_arclength) > 1:
        raise ValueError("cannot merge solves with and without arclength")
    status = tuple(
        next((s for s in per_sample if s is not SolveStatus.SUCCESS), SolveStatus.SUCCESS)
        for per_sample in zip(*(s.status for s in stats), strict=True)
    )
    arclengths = [s.arclength for s in stats if s.arclength is not None]
    return SolveStats(
        nfe=sum((s.nfe for s in stats[1:]), stats[0].nfe),
        nfe_total=sum(s.nfe_total for s in stats),
        accepted=sum((s.accepted for s in stats[1:]), stats[0].accepted),
        rejected=sum((s.rejected for s in stats[1:]), stats[0].rejected),
        t_final=sum((s.t_final for s in stats[1:]), stats[0].t_final),
        status=status,
        arclength=sum(arclengths[1:], arclengths[0]) if arclengths else None,
    )


def build_continuous_encoder(
    make_field: Callable[[], nn.Module], num_layers: int, **stack_options: Any
) -> ContinuousEncoder:
    """``num_layers`` continuous stacks, each over a fresh field from ``make_field()`` and
    built with ``ContinuousStack(field, **stack_options)`` — the continuous analogue of
    :func:`odet.blocks.build_stack`."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    return ContinuousEncoder(
        [ContinuousStack(make_field(), **stack_options) for _ in range(num_layers)]
    )


class ContinuousEncoder(nn.Module):
    """Continuous stacks in sequence, one ODE each: ``(B, T, D) -> SolveResult``.

    The result's stats are :func:`merge_stats` of the stacks' (NFE, steps, arclength summed).
    """

    def __init__(self, stacks: Sequence[ContinuousStack]) -> None:
        super().__init__()
        if not stacks:
            raise ValueError("ContinuousEncoder needs at least one ContinuousStack")
        if len({stack.arclength for stack in stacks}) > 1:
            raise ValueError("all stacks of a ContinuousEncoder must agree on arclength")
        self.stacks = nn.ModuleList(stacks)

    def forward(self, y: Tensor, *, padding_mask: Tensor | None = None) -> SolveResult:
        """``y (B, T, D)``, ``padding_mask (B, T)`` True at padding → ``SolveResult``."""
        all_stats = []
        for stack in self.stacks:
            result = stack(y, padding_mask=padding_mask)
            y = result.y
            all_stats.append(result.stats)
        return SolveResult(y=y, stats=merge_stats(all_stats))
