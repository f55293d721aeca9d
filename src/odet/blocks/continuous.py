"""Continuous stacks: one weight-tied field ``F(t, y)`` integrated over ``t ∈ [0, t1]``.

The N-ODE Transformer (Baier-Reinio & De Sterck, 2020) replaces a stack of residual layers by
``dy/dt = F(t, y)``, solved by an adaptive method (dopri5), so the number of evaluations of ``F``
— the depth — depends on the input. :class:`ContinuousStack` does that solve (or a fixed-step
one with a Butcher tableau, whose cost is known in advance and which ``torch.compile`` can
trace); :class:`ContinuousEncoder` chains several such stacks, one ODE each.

A stack returns a :class:`~odet.ode.SolveResult` ``(y, stats)``, the encoder a
:class:`~odet.blocks.StackResult` ``(y, stats)`` as every encoder does: statistics (NFE per
sample, accepted/rejected steps, arclength ``∫‖F‖dt``) are returned, never stored on modules.

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

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn
from torch.nn.utils import parametrize

from odet.blocks.base import StackResult
from odet.ode import SolveResult, SolverOptions, SolveStats, SolveStatus, solve


class ContinuousStack(nn.Module):
    """``y(t1)`` of ``dy/dt = field(t, y)``, ``y(t0) = y``: ``(B, T, D) -> SolveResult``.

    Args:
        field: the vector field (module docstring for its protocol).
        options: how to solve (:class:`~odet.ode.SolverOptions`: interval, adaptive method and
            tolerances, or ``fixed_steps`` of a tableau, arclength, adjoint, on_failure).
        **fields: instead of ``options``, its fields as keywords (``SolverOptions(**fields)``).

    Example:
        >>> import torch
        >>> from odet.nn.time import TimeConditionedEncoderField
        >>> field = TimeConditionedEncoderField(16, 2, 32, time_conditioning="film")
        >>> out = ContinuousStack(field, arclength=True)(torch.randn(3, 5, 16))
        >>> out.y.shape, out.stats.nfe.shape, out.stats.arclength.shape
        (torch.Size([3, 5, 16]), torch.Size([3]), torch.Size([3]))
    """

    def __init__(
        self, field: nn.Module, options: SolverOptions | None = None, **fields: Any
    ) -> None:
        super().__init__()
        if options is not None and fields:
            raise ValueError(f"pass SolverOptions or its fields {sorted(fields)}, not both")
        self.field = field
        self.options = SolverOptions(**fields) if options is None else options

    @property
    def arclength(self) -> bool:
        return self.options.arclength

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

        if not any(parametrize.is_parametrized(m) for m in self.field.modules()):
            return solve(f, y, self.options)
        with parametrize.cached():  # one parametrised weight (e.g. spectral norm) per solve
            return solve(f, y, self.options)

    def extra_repr(self) -> str:
        o = self.options
        how = (
            f"solver={o.solver!r}, backend={o.backend!r}, rtol={o.rtol}, atol={o.atol}"
            if o.adaptive
            else f"solver={o.solver!r}, fixed_steps={o.fixed_steps}"
        )
        return f"t1={o.t1}, {how}, arclength={o.arclength}"


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
    make_field: Callable[[], nn.Module],
    num_layers: int,
    options: SolverOptions | None = None,
    **fields: Any,
) -> ContinuousEncoder:
    """``num_layers`` continuous stacks, each over a fresh field from ``make_field()`` and
    solved with ``options`` (or ``SolverOptions(**fields)``) — the continuous analogue of
    :func:`odet.blocks.build_stack`."""
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    options = SolverOptions(**fields) if options is None else options
    return ContinuousEncoder([ContinuousStack(make_field(), options) for _ in range(num_layers)])


class ContinuousEncoder(nn.Module):
    """Continuous stacks in sequence, one ODE each: ``(B, T, D) -> StackResult``.

    The result's stats are :func:`merge_stats` of the stacks' (NFE, steps, arclength summed).
    """

    def __init__(self, stacks: Sequence[ContinuousStack]) -> None:
        super().__init__()
        if not stacks:
            raise ValueError("ContinuousEncoder needs at least one ContinuousStack")
        if len({stack.arclength for stack in stacks}) > 1:
            raise ValueError("all stacks of a ContinuousEncoder must agree on arclength")
        self.stacks = nn.ModuleList(stacks)

    def forward(self, y: Tensor, *, padding_mask: Tensor | None = None) -> StackResult:
        """``y (B, T, D)``, ``padding_mask (B, T)`` True at padding → ``StackResult``."""
        all_stats = []
        for stack in self.stacks:
            result = stack(y, padding_mask=padding_mask)
            y = result.y
            all_stats.append(result.stats)
        return StackResult(y, merge_stats(all_stats))

    def integrate(self, y: Tensor, *, padding_mask: Tensor | None = None) -> StackResult:
        """The same as calling the encoder: what every encoder returns (``Stack.integrate``)."""
        return self(y, padding_mask=padding_mask)
