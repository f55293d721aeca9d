"""Adaptive ODE solves of ``dy/dt = F(t, y)`` for continuous-depth models, with solver statistics.

A continuous-depth Transformer integrates one weight-tied, time-conditioned layer ``F`` over
``t ∈ [t0, t1]``; an adaptive solver picks the steps, so the number of function evaluations (NFE,
the model's "depth") depends on the input.

Why library backends: adaptive step control (error estimates, error norms, step-size
controllers, initial-step selection, dense output) is subtle numerics that well-kept libraries
have tested against reference solvers; ``torchode`` also steps every sample with its own step
size, which is what makes depth adapt *per input*. odet does not re-implement that. Backends:

- ``"torchode"`` (default): per-sample step sizes (``AutoDiffAdjoint`` + ``IntegralController``),
  backpropagation through the solver.
- ``"torchdiffeq"``: one step size shared by the batch (every sample pays for the hardest);
  ``odeint``, or ``odeint_adjoint`` with ``adjoint=True`` (memory O(1) in the number of steps).

What odet adds on top:

- one time convention: ``f(t, y)`` always receives ``t`` as a ``(B,)`` tensor in ``y``'s dtype
  and ``y`` shaped like ``y0`` (any ``(B, ...)``, e.g. ``(B, T, D)``), whatever the backend;
- :class:`SolveStats`, returned rather than counted on modules: NFE per sample and of the
  batched field, accepted/rejected steps, the time reached and a status per sample;
- the arclength ``∫‖F(t, y)‖ dt`` per sample, integrated as an extra state component under the
  same error control (so it is exact to solver tolerance) and differentiable, for use as a
  regulariser (loss + λ·mean arclength, as in the N-ODE Transformer);
- typed failures: reaching ``max_steps``, a step-size underflow or a non-finite state never
  hangs; it raises :class:`SolverError` naming the samples, the time reached and the limit, or,
  with ``on_failure="flag"``, returns the state reached with the per-sample status flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
import torchdiffeq
import torchode
from torch import Tensor, nn
from torchode.single_step_methods import StepResult
from torchode.step_size_controllers import IntegralState, rms_norm

from odet.ode.options import SolverOptions
from odet.ode.runge_kutta import check_derivative, check_state, rk_step
from odet.ode.tableau import get_tableau

__all__ = [
    "SolveResult",
    "SolveStats",
    "SolveStatus",
    "SolverError",
    "odeint_adaptive",
    "solve",
]

VectorField = Callable[[Tensor, Tensor], Tensor]


class SolveStatus(str, Enum):
    """How the solve of one sample ended: it reached ``t1``; it used up ``max_steps``; the
    step size fell below what moves ``t`` (a singularity, a blow-up or extreme stiffness); the
    state or error turned inf/NaN; or it was left unfinished because another sample of the batch
    failed (torchode stops the whole batch at the first failure)."""

    SUCCESS = "success"
    MAX_STEPS = "max_steps"
    STEP_UNDERFLOW = "step_underflow"
    NON_FINITE = "non_finite"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class SolveStats:
    """Statistics of one batched adaptive solve; per-sample tensors have shape ``(B,)``.

    ``nfe[i]`` counts the evaluations of ``f`` made while sample ``i`` was still being solved
    (its depth); ``nfe_total`` counts the calls of the batched field, which is what costs time.
    With the batch-shared ``"torchdiffeq"`` backend every sample gets the batch's counts.
    ``accepted``/``rejected`` count steps, ``t_final`` is the time reached, ``arclength`` is
    ``∫‖F‖dt`` (differentiable) when it was asked for, else ``None``. All counts cover the
    forward solve only (an adjoint's backward solve happens after the stats are returned).
    """

    nfe: Tensor
    nfe_total: int
    accepted: Tensor
    rejected: Tensor
    t_final: Tensor
    status: tuple[SolveStatus, ...]
    arclength: Tensor | None = None

    def __post_init__(self) -> None:
        batch = len(self.status)
        counts = {"nfe": self.nfe, "accepted": self.accepted, "rejected": self.rejected}
        for name, value in counts.items():
            if value.dtype != torch.long or value.shape != (batch,):
                raise ValueError(
                    f"SolveStats.{name} must be a LongTensor of shape ({batch},), "
                    f"got {value.dtype} {tuple(value.shape)}"
                )
        per_sample = {"t_final": self.t_final, "arclength": self.arclength}
        for name, value in per_sample.items():
            if value is not None and value.shape != (batch,):
                raise ValueError(
                    f"SolveStats.{name} must have shape ({batch},), got {tuple(value.shape)}"
                )
        if self.nfe_total < 0:
            raise ValueError(f"SolveStats.nfe_total must be >= 0, got {self.nfe_total}")

    @property
    def ok(self) -> bool:
        """Whether every sample reached ``t1``."""
        return all(status is SolveStatus.SUCCESS for status in self.status)

    @property
    def failed(self) -> tuple[int, ...]:
        """Indices of the samples that did not reach ``t1``."""
        return tuple(i for i, status in enumerate(self.status) if status is not SolveStatus.SUCCESS)


@dataclass(frozen=True)
class SolveResult:
    """The state at the end of the solve, shaped like ``y0``, and the solve's statistics."""

    y: Tensor
    stats: SolveStats

    def __post_init__(self) -> None:
        if self.y.shape[:1] != self.stats.t_final.shape:
            raise ValueError(
                f"SolveResult.y has batch size {self.y.shape[0]} but the stats describe "
                f"{self.stats.t_final.shape[0]} samples"
            )


class SolverError(RuntimeError):
    """A solve failed for some samples (adaptive, or fixed steps whose state turned inf/NaN);
    ``result`` holds what was reached."""

    def __init__(self, message: str, result: SolveResult) -> None:
        super().__init__(message)
        self.result = result


class _Field(nn.Module):
    """``F`` on flat states ``(B, m)``: unflattens, applies ``f``, appends ``‖F‖`` if asked.

    Registered as a module so that ``f``'s parameters are the adjoint's parameters; ``calls``
    counts evaluations of the batched field for this one solve.
    """

    def __init__(self, f: VectorField, shape: torch.Size, arclength: bool) -> None:
        super().__init__()
        self.f = f
        self.shape = shape
        self.n = math.prod(shape[1:])
        self.arclength = arclength
        self.calls = 0

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        self.calls += 1
        batch = self.shape[0]
        t = t.to(z.dtype).expand(batch)  # one convention for both backends: t is (B,)
        y = z[:, : self.n].reshape(self.shape)
        dy = check_derivative(self.f(t, y), y, "f(t, y)").reshape(batch, self.n)
        if not self.arclength:
            return dy
        speed = torch.linalg.vector_norm(dy, dim=1, keepdim=True)  # (B, 1)
        return torch.cat([dy, speed], dim=1)


@dataclass(frozen=True)
class _Problem:
    """What a backend solves: ``dz/dt = field(t, z)`` from ``z0`` ``(B, m)``, t0 → t1."""

    field: _Field
    z0: Tensor
    t0: float
    t1: float
    method: str
    rtol: float
    atol: float
    max_steps: int
    first_step: float | None
    adjoint: bool
    grad_through_step_size: bool = True

    @property
    def dt_min(self) -> float:
        """Smallest useful step: below it ``t + dt`` no longer moves ``t`` (a step underflow)."""
        return 4.0 * torch.finfo(self.z0.dtype).eps * max(abs(self.t0), abs(self.t1))


@dataclass(frozen=True)
class _RawSolve:
    """A backend's answer on flat states; statuses are final except for unfinished successes."""

    z: Tensor
    t_final: Tensor
    status: tuple[SolveStatus, ...]
    nfe: Tensor
    accepted: Tensor
    rejected: Tensor


# ---------------------------------------------------------------------------------- torchode


def _split_rms_norm(n: int) -> Callable[[Tensor], Tensor]:
    """Per-sample error norm ``(B, n + 1) -> (B,)``: RMS over the state, and the arclength
    component held to tolerance on its own (it would weigh only ``1/(n+1)`` in a plain RMS)."""

    def norm(error: Tensor) -> Tensor:
        state = torch.linalg.vector_norm(error[:, :n], dim=1) / math.sqrt(n)
        return torch.maximum(state, error[:, n].abs())

    return norm


class _TrackingController(torchode.IntegralController):
    """torchode's integral controller that also records, per sample, the time and state
    reached, the evaluations made while running, and step-size underflow.

    torchode exposes neither the time reached nor the state at a failure, and its own
    ``dt_min`` flags samples that already finished (their step is clamped to 0), so the
    bookkeeping sits here, in the one hook that sees every step of every sample.
    """

    def __init__(self, problem: _Problem, t_end: Tensor) -> None:
        n = problem.field.n
        super().__init__(
            atol=problem.atol,
            rtol=problem.rtol,
            norm=_split_rms_norm(n) if problem.field.arclength else rms_norm,
        )
        self.field = problem.field
        self.t_end = t_end
        self.min_step = problem.dt_min
        self.calls_seen = 0
        batch = t_end.shape[0]
        self.nfe = torch.zeros(batch, dtype=torch.long, device=t_end.device)
        self.t_reached = torch.full_like(t_end, problem.t0)
        self.z_reached = problem.z0

    def adapt_step_size(
        self,
        t0: Tensor,
        dt: Tensor,
        y0: Tensor,
        step_result: StepResult,
        state: IntegralState,
        stats: dict[str, Any],
    ) -> tuple[Tensor, Tensor, IntegralState, Tensor]:
        accept, dt_next, state, status = super().adapt_step_size(
            t0, dt, y0, step_result, state, stats
        )
        running = t0 < self.t_end
        calls = self.field.calls
        self.nfe = self.nfe + (calls - self.calls_seen) * running
        self.calls_seen = calls
        advance = accept & running
        self.t_reached = torch.where(advance, t0 + dt, t0)
        self.z_reached = torch.where(advance[:, None], step_result.y, y0)
        underflow = running & (self.t_end - t0 > self.min_step) & (dt_next.abs() < self.min_step)
        status = torch.where(underflow, torchode.Status.REACHED_DT_MIN.value, status)
        return accept, dt_next, state, status


_TORCHODE_STEPPERS: dict[str, Callable[..., nn.Module]] = {
    "dopri5": torchode.Dopri5,
    "tsit5": torchode.Tsit5,
    "heun": torchode.Heun,
}

# torchode's GENERAL_ERROR is never emitted by its explicit RK steppers and controllers.
_TORCHODE_STATUS: dict[int, SolveStatus] = {
    torchode.Status.SUCCESS.value: SolveStatus.INTERRUPTED,  # only looked up if unfinished
    torchode.Status.REACHED_MAX_STEPS.value: SolveStatus.MAX_STEPS,
    torchode.Status.REACHED_DT_MIN.value: SolveStatus.STEP_UNDERFLOW,
    torchode.Status.INFINITE_NORM.value: SolveStatus.NON_FINITE,
}


def _solve_torchode(problem: _Problem) -> _RawSolve:
    z0 = problem.z0
    batch = z0.shape[0]
    t_start = z0.new_full((batch,), problem.t0)
    t_end = z0.new_full((batch,), problem.t1)
    term = torchode.ODETerm(problem.field, with_stats=False)
    controller = _TrackingController(problem, t_end)
    solver = torchode.AutoDiffAdjoint(
        _TORCHODE_STEPPERS[problem.method](term=term),
        controller,
        max_steps=problem.max_steps,
        backprop_through_step_size_control=problem.grad_through_step_size,
    )
    dt0 = None if problem.first_step is None else z0.new_full((batch,), problem.first_step)
    solution = solver.solve(torchode.InitialValueProblem(z0, t_start, t_end), term=term, dt0=dt0)
    finished = controller.t_reached >= t_end
    # A finished sample's answer is torchode's; an unfinished one's is the last accepted state
    # (torchode would extrapolate the last step's interpolant to t1).
    z = torch.where(finished[:, None], solution.ys[:, -1], controller.z_reached)
    status = tuple(
        SolveStatus.SUCCESS if done else _TORCHODE_STATUS[code]
        for done, code in zip(finished.tolist(), solution.status.tolist(), strict=True)
    )
    n_steps, accepted = solution.stats["n_steps"], solution.stats["n_accepted"]
    return _RawSolve(
        z=z,
        t_final=controller.t_reached.detach(),
        status=status,
        nfe=controller.nfe,
        accepted=accepted,
        rejected=n_steps - accepted,
    )


# ------------------------------------------------------------------------------- torchdiffeq


class _AbortSolveError(Exception):
    def __init__(self, status: SolveStatus) -> None:
        super().__init__(status.value)
        self.status = status


class _StepWatch(nn.Module):
    """The field with torchdiffeq's step callbacks (torchdiffeq looks them up by name).

    Counts accepted/rejected steps, remembers the last accepted state, and stops the solve at
    ``max_steps``, a step-size underflow or a non-finite state. These are checked here rather
    than left to torchdiffeq's ``assert``\\ s, which ``python -O`` strips.
    """

    def __init__(self, problem: _Problem) -> None:
        super().__init__()
        self.field = problem.field
        self.max_steps = problem.max_steps
        self.t1 = problem.t1
        self.dt_min = problem.dt_min
        self.accepted = 0
        self.rejected = 0
        self.t_reached = problem.t0
        self.z_reached = problem.z0

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        return self.field(t, z)

    def callback_step(self, t0: Tensor, y0: Tensor, dt: Tensor) -> None:
        self.t_reached, self.z_reached = float(t0.detach()), y0
        if not bool(torch.isfinite(y0).all()):
            raise _AbortSolveError(SolveStatus.NON_FINITE)
        if self.accepted + self.rejected >= self.max_steps:
            raise _AbortSolveError(SolveStatus.MAX_STEPS)
        if float(dt.detach()) < self.dt_min and self.t1 - self.t_reached > self.dt_min:
            raise _AbortSolveError(SolveStatus.STEP_UNDERFLOW)

    def callback_accept_step(self, t0: Tensor, y0: Tensor, dt: Tensor) -> None:
        self.accepted += 1

    def callback_reject_step(self, t0: Tensor, y0: Tensor, dt: Tensor) -> None:
        self.rejected += 1


def _split_batch_rms_norm(n: int) -> Callable[[Tensor], Tensor]:
    """Batch-shared error norm ``(B, n + 1) -> ()``, the analogue of :func:`_split_rms_norm`."""

    def norm(error: Tensor) -> Tensor:
        state = error[:, :n].pow(2).mean().sqrt()
        return torch.maximum(state, error[:, n].pow(2).mean().sqrt())

    return norm


def _solve_torchdiffeq(problem: _Problem) -> _RawSolve:
    z0 = problem.z0
    watch = _StepWatch(problem)
    # Time in float64 (torchdiffeq's own default for time-like values); f still sees z's dtype.
    t = torch.tensor([problem.t0, problem.t1], dtype=torch.float64, device=z0.device)
    # step_t: land a step exactly on t1 (as torchode does) instead of reading y(t1) off the dense
    # output, whose error is well above tolerance for bosh3 and dopri8 (~10x on y' = Ay).
    options: dict[str, object] = {"max_num_steps": problem.max_steps + 1, "step_t": t[1:]}
    if problem.first_step is not None:
        options["first_step"] = problem.first_step
    if problem.field.arclength:
        options["norm"] = _split_batch_rms_norm(problem.field.n)
    odeint = torchdiffeq.odeint_adjoint if problem.adjoint else torchdiffeq.odeint
    status = SolveStatus.SUCCESS
    try:
        z = odeint(
            watch,
            z0,
            t,
            rtol=problem.rtol,
            atol=problem.atol,
            method=problem.method,
            options=options,
        )[-1]
        t_final = problem.t1
    except _AbortSolveError as abort:
        status, z, t_final = abort.status, watch.z_reached, watch.t_reached
    batch = z0.shape[0]
    counts = torch.ones(batch, dtype=torch.long, device=z0.device)
    return _RawSolve(
        z=z,
        t_final=z0.new_full((batch,), t_final),
        status=(status,) * batch,
        nfe=counts * problem.field.calls,
        accepted=counts * watch.accepted,
        rejected=counts * watch.rejected,
    )


# ---------------------------------------------------------------------------------- registry


_SOLVERS: dict[str, Callable[[_Problem], _RawSolve]] = {
    "torchode": _solve_torchode,
    "torchdiffeq": _solve_torchdiffeq,
}
"""The solve of each backend of ``ADAPTIVE_METHODS``."""


def odeint_adaptive(
    f: VectorField,
    y0: Tensor,
    t0: float = 0.0,
    t1: float = 1.0,
    *,
    method: str = "dopri5",
    **options: Any,
) -> SolveResult:
    """Solve ``dy/dt = f(t, y)`` from ``y(t0) = y0`` to ``t1`` with an adaptive method.

    ``options`` are the other fields of :class:`~odet.ode.SolverOptions` (``backend``,
    ``rtol``, ``atol``, ``max_steps``, ``arclength``, ``adjoint``, ``first_step``,
    ``on_failure``); ``method`` is its ``solver``. See :func:`solve`.
    """
    if "fixed_steps" in options or "solver" in options:
        raise ValueError("odeint_adaptive takes method=; for fixed steps call odet.ode.solve")
    return solve(f, y0, SolverOptions(t0=t0, t1=t1, solver=method, **options))


def solve(f: VectorField, y0: Tensor, options: SolverOptions) -> SolveResult:
    """Solve ``dy/dt = f(t, y)`` from ``y(options.t0) = y0`` to ``options.t1``.

    ``f(t, y)`` gets ``t`` of shape ``(B,)`` in ``y0``'s dtype (a python float with fixed
    steps) and ``y`` shaped like ``y0`` (``(B, ...)``, e.g. ``(B, T, D)``), and returns ``dy/dt``
    shaped like ``y``. ``max_steps`` bounds the steps (accepted + rejected) per sample.
    ``arclength=True`` also integrates ``∫‖f‖dt`` per sample (norm over all non-batch
    features) into ``stats.arclength``. ``adjoint=True`` (torchdiffeq only; ``f`` must be an
    ``nn.Module``) backpropagates by solving the adjoint ODE instead of through the solver's
    operations. On failure (max_steps, step-size underflow, non-finite state) raises
    :class:`SolverError`, or with ``on_failure="flag"`` returns the last accepted state with the
    per-sample status flagged (differentiable, except after a failed adjoint solve, whose
    forward runs without autograd). With ``fixed_steps`` the tableau ``solver`` takes that many
    equal steps: ``fixed_steps × stages`` evaluations for every input; a sample whose state
    turns inf/NaN fails (``NON_FINITE``) as above.
    """
    if not isinstance(options, SolverOptions):
        raise TypeError(
            f"options must be a SolverOptions, got {type(options).__name__} (build one with "
            "SolverOptions(**fields), or call odeint_adaptive with keyword options)"
        )
    check_state(y0, "y0")
    if options.adjoint and not isinstance(f, nn.Module):
        raise ValueError(
            f"adjoint=True needs f to be an nn.Module (its parameters get the adjoint "
            f"gradients), got {type(f).__name__}"
        )
    if not y0.is_floating_point() or y0.ndim < 1 or y0.shape[0] == 0:
        raise ValueError(
            f"y0 must be a non-empty floating (B, ...) tensor, got {y0.dtype} {tuple(y0.shape)}"
        )
    if options.fixed_steps is not None:
        return _solve_fixed(f, y0, options, options.fixed_steps)

    field = _Field(f, y0.shape, options.arclength)
    z0 = y0.reshape(y0.shape[0], -1)
    if options.arclength:
        z0 = torch.cat([z0, z0.new_zeros(z0.shape[0], 1)], dim=1)
    problem = _Problem(
        field=field, z0=z0, t0=float(options.t0), t1=float(options.t1), method=options.solver,
        rtol=options.rtol, atol=options.atol, max_steps=options.max_steps,
        first_step=options.first_step, adjoint=options.adjoint,
        grad_through_step_size=options.grad_through_step_size,
    )  # fmt: skip
    raw = _SOLVERS[options.backend](problem)

    stats = SolveStats(
        nfe=raw.nfe,
        nfe_total=field.calls,
        accepted=raw.accepted,
        rejected=raw.rejected,
        t_final=raw.t_final,
        status=raw.status,
        arclength=raw.z[:, field.n] if options.arclength else None,
    )
    result = SolveResult(y=raw.z[:, : field.n].reshape(y0.shape), stats=stats)
    if options.on_failure == "raise" and not stats.ok:
        raise SolverError(_failure_message(options, stats), result)
    return result


def _solve_fixed(f: VectorField, y: Tensor, options: SolverOptions, steps: int) -> SolveResult:
    """Fixed steps; the arclength rides along as an extra state component, integrated by the
    same tableau (the adaptive path does the same under error control).

    A sample whose state turns inf/NaN is flagged ``NON_FINITE`` (its ``t_final`` the start of
    the step that broke it) and raises or is returned as computed, per ``on_failure``: the
    same contract as an adaptive solve, for one ``(B,)`` read per solve."""
    batch, n = y.shape[0], y[0].numel()

    def g(t: float, z: Tensor) -> Tensor:
        state = z[:, :n].reshape(y.shape)
        dy = check_derivative(f(t, state), state, "f(t, y)").reshape(batch, n)  # type: ignore[arg-type]
        if not options.arclength:
            return dy
        return torch.cat([dy, torch.linalg.vector_norm(dy, dim=1, keepdim=True)], dim=1)

    z = y.reshape(batch, n)
    if options.arclength:
        z = torch.cat([z, z.new_zeros(batch, 1)], dim=1)
    tableau = get_tableau(options.solver)
    h = (options.t1 - options.t0) / steps
    t_final = y.new_full((batch,), options.t1)
    finite = torch.ones(batch, dtype=torch.bool, device=y.device)
    for i in range(steps):
        t = options.t0 + i * h
        z = rk_step(g, z, tableau, h, t=t)
        broke = finite & ~torch.isfinite(z.detach()).all(dim=1)
        t_final = t_final.masked_fill(broke, t)
        finite = finite & ~broke
    nfe = steps * tableau.num_stages
    accepted = torch.full((batch,), steps, dtype=torch.long, device=y.device)
    stats = SolveStats(
        nfe=torch.full_like(accepted, nfe),
        nfe_total=nfe,
        accepted=accepted,
        rejected=torch.zeros_like(accepted),
        t_final=t_final,
        status=tuple(
            SolveStatus.SUCCESS if ok else SolveStatus.NON_FINITE for ok in finite.tolist()
        ),
        arclength=z[:, n] if options.arclength else None,
    )
    result = SolveResult(y=z[:, :n].reshape(y.shape), stats=stats)
    if options.on_failure == "raise" and not stats.ok:
        raise SolverError(_failure_message(options, stats), result)
    return result


def _failure_message(options: SolverOptions, stats: SolveStats) -> str:
    failed = list(stats.failed)
    shown = failed[:8]
    reasons = sorted({stats.status[i].value for i in failed})
    reached = [round(float(stats.t_final[i]), 6) for i in shown]
    more = f" (+{len(failed) - len(shown)} more)" if len(failed) > len(shown) else ""
    hint = "pass on_failure='flag' to get the partial result instead of this error"
    if options.fixed_steps is not None:
        return (
            f"fixed-step solve ({options.solver}, {options.fixed_steps} steps) failed "
            f"({', '.join(reasons)}) for samples {shown}{more}: the state turned inf/NaN in the "
            f"step from t = {reached} (t1 = {options.t1}); {hint}"
        )
    return (
        f"adaptive solve ({options.backend}, {options.solver}) failed ({', '.join(reasons)}) for "
        f"samples {shown}{more}: reached t = {reached} of t1 = {options.t1} with max_steps = "
        f"{options.max_steps} "
        f"(steps taken: {[int(stats.accepted[i] + stats.rejected[i]) for i in shown]}); {hint}"
    )
