import math

import pytest
import torch
from torch import nn

from odet.ode import (
    ADAPTIVE_METHODS,
    SolverError,
    SolverOptions,
    SolveStats,
    SolveStatus,
    odeint_adaptive,
    solve,
)

METHODS = [(backend, method) for backend, methods in ADAPTIVE_METHODS.items() for method in methods]
LOW_ORDER = {"heun", "adaptive_heun"}  # second order: a tight tolerance costs thousands of steps


def _stable_matrix(n: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=g, dtype=torch.float64)
    s = torch.randn(n, n, generator=g, dtype=torch.float64)
    return (m - m.T) / 2 - s @ s.T / n - 0.1 * torch.eye(n, dtype=torch.float64)


def _linear_problem(dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu"):
    a = _stable_matrix()
    y0 = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = y0 @ torch.linalg.matrix_exp(a).T  # y(1) = exp(A) y0, row-wise
    a, y0, exact = a.to(device, dtype), y0.to(device, dtype), exact.to(device)
    return (lambda t, y: y @ a.T), y0, exact


class _Attention(nn.Module):
    """A tiny time-conditioned pre-norm attention + MLP field on (B, T, D)."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.time = nn.Linear(1, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.Tanh(), nn.Linear(2 * d, d))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.norm(y + self.time(t[:, None, None].expand(*y.shape[:2], 1)))  # (B, T, D)
        a, _ = self.attn(h, h, h, need_weights=False)
        return a + self.mlp(h + a)


@pytest.mark.parametrize(("backend", "method"), METHODS)
def test_linear_ode_error_is_within_small_multiple_of_tolerance(backend, method, device):
    f, y0, exact = _linear_problem(device=device)
    tol = 1e-4 if method in LOW_ORDER else 1e-6
    result = odeint_adaptive(f, y0, method=method, backend=backend, rtol=tol, atol=tol)
    error = (result.y - exact).abs().max().item()
    assert error < 10 * tol
    assert result.y.device == result.stats.nfe.device == y0.device
    assert result.stats.ok
    assert result.stats.t_final.tolist() == [1.0] * 3


@pytest.mark.parametrize(("backend", "method"), METHODS)
def test_nfe_rises_as_tolerance_tightens(backend, method):
    f, y0, _ = _linear_problem()
    tols = [1e-2, 1e-3, 1e-4] if method in LOW_ORDER else [1e-4, 1e-6, 1e-8]
    nfe = [
        odeint_adaptive(f, y0, method=method, backend=backend, rtol=tol, atol=tol).stats.nfe_total
        for tol in tols
    ]
    assert nfe[0] < nfe[1] < nfe[2]


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_float32_solve_matches_exact_solution(backend, device):
    f, y0, exact = _linear_problem(torch.float32, device)
    result = odeint_adaptive(f, y0, backend=backend, rtol=1e-5, atol=1e-5)
    assert result.y.dtype == torch.float32
    assert result.stats.t_final.dtype == torch.float32
    assert (result.y.double() - exact).abs().max().item() < 1e-4


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_field_sees_per_sample_time_in_state_dtype_and_state_shape(backend, device):
    seen = []

    def f(t, y):
        seen.append((tuple(t.shape), t.dtype, t.device, tuple(y.shape)))
        return torch.cos(t)[:, None, None].expand_as(y)

    y0 = torch.zeros(2, 3, 5, dtype=torch.float32, device=device)
    result = odeint_adaptive(f, y0, 1.0, 2.0, backend=backend, rtol=1e-6, atol=1e-6)
    assert set(seen) == {((2,), torch.float32, y0.device, (2, 3, 5))}
    expected = math.sin(2.0) - math.sin(1.0)  # y(2) = y(1) + ∫_1^2 cos t dt
    torch.testing.assert_close(result.y, torch.full_like(y0, expected), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_nfe_counts_every_field_call_and_steps_add_up(backend):
    calls = []

    def f(t, y):
        calls.append(1)
        return -y

    result = odeint_adaptive(f, torch.ones(2, 3, dtype=torch.float64), backend=backend)
    stats = result.stats
    assert stats.nfe_total == len(calls)
    assert stats.nfe.tolist() == [len(calls)] * 2
    # dopri5 is FSAL: 6 new evaluations a step, plus f(y0) and one trial for the initial step.
    assert stats.nfe_total == 2 + 6 * int(stats.accepted[0] + stats.rejected[0])


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
@pytest.mark.parametrize("omega", [1.0, 3.0])
def test_arclength_of_rotation_is_omega_times_radius_times_duration(backend, omega, device):
    generator = torch.tensor([[0.0, -omega], [omega, 0.0]], dtype=torch.float64, device=device)
    y0 = torch.tensor([[1.0, 0.0], [3.0, 4.0]], dtype=torch.float64, device=device)
    result = odeint_adaptive(
        lambda t, y: y @ generator.T, y0, 0.5, 2.0, backend=backend, arclength=True,
        rtol=1e-7, atol=1e-7,
    )  # fmt: skip
    expected = omega * torch.tensor([1.0, 5.0], dtype=torch.float64, device=device) * 1.5
    torch.testing.assert_close(result.stats.arclength, expected, rtol=1e-5, atol=0)


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_arclength_of_constant_field_is_its_norm_times_duration(backend):
    c = torch.tensor([[3.0, 4.0], [0.0, -2.0]])  # norms 5 and 2, repeated over 7 tokens
    result = odeint_adaptive(lambda t, y: c.view(2, 1, 2).expand_as(y), torch.zeros(2, 7, 2),
                             1.0, 3.0, backend=backend, arclength=True)  # fmt: skip
    expected = torch.tensor([5.0, 2.0]) * math.sqrt(7) * 2.0  # norm over all (T, D) features
    torch.testing.assert_close(result.stats.arclength, expected, rtol=1e-5, atol=0)
    assert odeint_adaptive(lambda t, y: -y, torch.ones(2, 2)).stats.arclength is None


def test_torchode_gives_hard_sample_more_nfe_than_easy_sample_in_one_batch():
    rates = torch.tensor([[1.0], [1.0], [200.0]], dtype=torch.float64)
    result = odeint_adaptive(lambda t, y: -rates * y, torch.ones(3, 1, dtype=torch.float64))
    nfe = result.stats.nfe.tolist()
    assert nfe[0] == nfe[1] < nfe[2]
    assert result.stats.nfe_total == nfe[2]
    assert result.stats.accepted[2] > result.stats.accepted[0]
    torch.testing.assert_close(result.y, torch.exp(-rates), rtol=0, atol=3e-3)


def test_torchdiffeq_gives_every_sample_the_batch_nfe():
    rates = torch.tensor([[1.0], [200.0]], dtype=torch.float64)
    result = odeint_adaptive(lambda t, y: -rates * y, torch.ones(2, 1, dtype=torch.float64),
                             backend="torchdiffeq")  # fmt: skip
    assert result.stats.nfe.tolist() == [result.stats.nfe_total] * 2


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
def test_backends_agree_on_the_same_field_to_tolerance(method):
    field = _Attention().double()
    y0 = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        per_sample = odeint_adaptive(field, y0, method=method, rtol=1e-7, atol=1e-7)
        shared = odeint_adaptive(field, y0, backend="torchdiffeq", rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(per_sample.y, shared.y, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("backend", "adjoint"), [("torchode", False), ("torchdiffeq", False), ("torchdiffeq", True)]
)
def test_gradients_of_state_and_arclength_match_analytic_derivatives(backend, adjoint, device):
    class Growth(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rate = nn.Parameter(torch.tensor(0.7, dtype=torch.float64))

        def forward(self, t, y):
            return self.rate * y

    field = Growth().to(device)
    y0 = torch.tensor([[1.0], [2.0]], dtype=torch.float64, device=device)
    result = odeint_adaptive(field, y0, backend=backend, adjoint=adjoint, arclength=True,
                             rtol=1e-8, atol=1e-8)  # fmt: skip
    # y(1) = y0·e^a and arclength = ∫ a·y0·e^{at} dt = y0·(e^a − 1): both have d/da = y0·e^a.
    e = math.exp(0.7)
    torch.testing.assert_close(result.stats.arclength, y0[:, 0] * (e - 1), rtol=1e-7, atol=0)
    (grad_y,) = torch.autograd.grad(result.y.sum(), field.rate, retain_graph=True)
    (grad_arc,) = torch.autograd.grad(result.stats.arclength.sum(), field.rate)
    assert grad_y.item() == pytest.approx(3 * e, rel=1e-6)
    assert grad_arc.item() == pytest.approx(3 * e, rel=1e-6)


@pytest.mark.parametrize(
    ("backend", "adjoint"), [("torchode", False), ("torchdiffeq", False), ("torchdiffeq", True)]
)
def test_attention_field_on_btd_batch_solves_and_backpropagates(backend, adjoint, device):
    torch.manual_seed(0)
    field = _Attention().to(device)
    y0 = torch.randn(4, 6, 8).to(device).requires_grad_()
    result = odeint_adaptive(field, y0, backend=backend, adjoint=adjoint, arclength=True)
    assert result.y.shape == (4, 6, 8)
    assert result.stats.ok and result.stats.nfe_total > 0
    loss = result.y.pow(2).mean() + 0.1 * result.stats.arclength.mean()
    loss.backward()
    grads = [p.grad for p in field.parameters()] + [y0.grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert field.attn.in_proj_weight.grad.abs().sum() > 0


def test_adjoint_and_backprop_gradients_agree_on_attention_field():
    field = _Attention().double()
    y0 = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    grads = []
    for adjoint in (False, True):
        result = odeint_adaptive(field, y0, backend="torchdiffeq", adjoint=adjoint,
                                 rtol=1e-8, atol=1e-8)  # fmt: skip
        grads.append(torch.autograd.grad(result.y.pow(2).sum(), field.attn.in_proj_weight)[0])
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def _blow_up(t, y):
    return y * y  # y(t) = y0 / (1 − y0·t): singular at t = 1/y0


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_blow_up_raises_solver_error_naming_sample_time_and_limit(backend):
    y0 = torch.tensor([[0.1], [1.0]], dtype=torch.float64)
    with pytest.raises(SolverError, match=r"step_underflow\) for samples \[.*1\]") as info:
        odeint_adaptive(_blow_up, y0, 0.0, 2.0, backend=backend)
    message = str(info.value)
    assert "t1 = 2.0" in message and "max_steps = 1000" in message
    t_final = info.value.result.stats.t_final
    assert 0.99 < t_final[1].item() < 1.0  # stopped just before the singularity


def test_blow_up_flagged_per_sample_with_torchode_keeps_finished_samples():
    y0 = torch.tensor([[0.1], [1.0], [0.2]], dtype=torch.float64)
    result = odeint_adaptive(_blow_up, y0, 0.0, 2.0, on_failure="flag")
    stats = result.stats
    assert stats.status == (SolveStatus.SUCCESS, SolveStatus.STEP_UNDERFLOW, SolveStatus.SUCCESS)
    assert stats.failed == (1,) and not stats.ok
    expected = y0[[0, 2], 0] / (1 - 2 * y0[[0, 2], 0])
    torch.testing.assert_close(result.y[[0, 2], 0], expected, rtol=1e-3, atol=0)
    assert stats.nfe[1] > 5 * stats.nfe[0]


def test_torchdiffeq_flags_the_whole_batch_on_failure():
    y0 = torch.tensor([[0.1], [1.0]], dtype=torch.float64)
    stats = odeint_adaptive(_blow_up, y0, 0.0, 2.0, backend="torchdiffeq", on_failure="flag").stats
    assert stats.status == (SolveStatus.STEP_UNDERFLOW,) * 2
    assert stats.t_final[0] == stats.t_final[1] < 1.0


@pytest.mark.parametrize("backend", sorted(ADAPTIVE_METHODS))
def test_max_steps_stops_the_solve_and_returns_last_accepted_state(backend):
    rate = 50.0
    y0 = torch.ones(2, 1, dtype=torch.float64)
    with pytest.raises(SolverError, match="max_steps = 4"):
        odeint_adaptive(lambda t, y: -rate * y, y0, backend=backend, max_steps=4)
    result = odeint_adaptive(lambda t, y: -rate * y, y0, backend=backend, max_steps=4,
                             on_failure="flag")  # fmt: skip
    stats = result.stats
    assert stats.status == (SolveStatus.MAX_STEPS,) * 2
    assert (stats.accepted + stats.rejected).tolist() == [4, 4]
    assert (stats.t_final < 1.0).all()
    # The returned state is the solution at the time reached, not an extrapolation to t1.
    torch.testing.assert_close(result.y[:, 0], torch.exp(-rate * stats.t_final), rtol=0, atol=1e-3)


def test_torchode_failure_of_one_sample_interrupts_unfinished_others():
    fast_rotation = torch.tensor([[0.0, -200.0], [200.0, 0.0]], dtype=torch.float64)

    def f(t, y):  # sample 0: a fast oscillator (many steps); sample 1: y' = y², blows up at t = 1
        return torch.stack([y[0] @ fast_rotation.T, torch.stack([y[1, 0] ** 2, y[1, 1]])])

    y0 = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    stats = odeint_adaptive(f, y0, 0.0, 2.0, on_failure="flag").stats
    assert stats.status == (SolveStatus.INTERRUPTED, SolveStatus.STEP_UNDERFLOW)
    assert stats.t_final[0] < 2.0


def test_non_finite_field_is_reported_not_looped_on():
    def f(t, y):
        return torch.where(t[:, None] > 0.3, torch.nan, 1.0).expand_as(y)

    for backend in sorted(ADAPTIVE_METHODS):
        stats = odeint_adaptive(f, torch.zeros(2, 3), backend=backend, on_failure="flag").stats
        assert not stats.ok
        assert set(stats.status) <= {SolveStatus.NON_FINITE, SolveStatus.STEP_UNDERFLOW}


def test_first_step_is_used_by_both_backends():
    for backend in sorted(ADAPTIVE_METHODS):
        stats = odeint_adaptive(lambda t, y: torch.zeros_like(y), torch.ones(1, 2),
                                backend=backend, first_step=1.0).stats  # fmt: skip
        # y' = 0 is integrated exactly: one accepted step of the given size, no initial-step trial.
        assert stats.accepted.tolist() == [1] and stats.nfe_total == 7


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "scipy"}, r"unknown backend 'scipy'; allowed: \['torchdiffeq', 'torchode'\]"),
        (
            {"method": "rk45"},
            r"'rk45' is not an adaptive method of backend 'torchode'; "
            r"allowed: \['dopri5', 'tsit5', 'heun'\]",
        ),
        ({"backend": "torchdiffeq", "method": "tsit5"}, r"allowed: \['dopri5', 'dopri8'"),
        ({"adjoint": True}, r"adjoint=True is not supported by backend 'torchode'.*torchdiffeq"),
        ({"backend": "torchdiffeq", "adjoint": True}, "needs f to be an nn.Module"),
        ({"on_failure": "warn"}, r"unknown on_failure 'warn'; allowed: \['raise', 'flag'\]"),
        ({"t1": 0.0}, "need t1 > t0"),
        ({"rtol": 0.0, "atol": 0.0}, "not both 0"),
        ({"max_steps": 0}, "max_steps must be >= 1"),
        ({"first_step": 2.0}, "first_step must be in"),
    ],
)
def test_invalid_arguments_raise_value_error_naming_allowed_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        odeint_adaptive(lambda t, y: -y, torch.ones(2, 3), **kwargs)


def test_field_returning_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match=r"shaped like y \(2, 3\), got \(2, 1\)"):
        odeint_adaptive(lambda t, y: y[:, :1], torch.ones(2, 3))


def test_solve_stats_rejects_inconsistent_shapes():
    ones = torch.ones(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"SolveStats.nfe must be a LongTensor of shape \(2,\)"):
        SolveStats(ones.float(), 1, ones, ones, torch.ones(2), (SolveStatus.SUCCESS,) * 2)
    with pytest.raises(ValueError, match=r"SolveStats.arclength must have shape \(2,\)"):
        SolveStats(ones, 1, ones, ones, torch.ones(2), (SolveStatus.SUCCESS,) * 2, torch.ones(3))


@pytest.mark.parametrize("backend", ["torchode", "torchdiffeq"])
def test_a_field_of_another_dtype_is_named_not_cast_or_a_torch_error(backend):
    """torchode failed with 'expected scalar type Float but found Double'; torchdiffeq cast
    the float64 field back to float32 without a word."""
    with pytest.raises(
        ValueError, match="f\\(t, y\\) must return dy/dt of y's dtype torch.float32"
    ):
        odeint_adaptive(lambda t, y: -y.double(), torch.ones(2, 3), backend=backend)


def test_a_fixed_step_solve_names_a_field_of_the_wrong_shape():
    options = SolverOptions(fixed_steps=2, solver="rk4")
    with pytest.raises(ValueError, match=r"shaped like y \(2, 3\), got \(1, 3\)"):
        solve(lambda t, y: y.sum(0, keepdim=True), torch.ones(2, 3), options)


def test_solve_takes_solver_options_and_a_tensor_state():
    with pytest.raises(TypeError, match="options must be a SolverOptions, got dict"):
        solve(lambda t, y: -y, torch.ones(2, 3), {"t1": 1.0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="y0 must be a floating-point torch.Tensor, got list"):
        odeint_adaptive(lambda t, y: -y, [[1.0]])  # type: ignore[arg-type]


def _breaks_sample_1_after(t_break: float):
    def f(t, y):  # sample 1's derivative turns NaN from t_break on; sample 0 decays
        bad = torch.tensor([False, t >= t_break])[:, None]
        return torch.where(bad, torch.nan, -y)

    return f


def test_a_fixed_step_solve_flags_the_sample_whose_state_turned_non_finite():
    """It reported success with a NaN state: the status and t_final now say which sample and
    from which step, as an adaptive solve's do."""
    options = SolverOptions(fixed_steps=4, solver="rk4", on_failure="flag")
    result = solve(_breaks_sample_1_after(0.6), torch.ones(2, 3, dtype=torch.float64), options)
    stats = result.stats
    assert stats.status == (SolveStatus.SUCCESS, SolveStatus.NON_FINITE)
    assert stats.failed == (1,) and not stats.ok
    assert stats.t_final.tolist() == [1.0, 0.5]  # its stage at 0.625 broke the step from 0.5
    torch.testing.assert_close(result.y[0], torch.full((3,), math.exp(-1.0), dtype=torch.float64),
                               rtol=1e-3, atol=0)  # fmt: skip
    assert torch.isnan(result.y[1]).all()


def test_a_fixed_step_solve_raises_on_a_non_finite_state_by_default():
    options = SolverOptions(fixed_steps=4, solver="euler")
    expected = r"fixed-step solve \(euler, 4 steps\) failed \(non_finite\) for samples \[1\]: "
    with pytest.raises(SolverError, match=expected + r".* from t = \[0.25\]") as info:
        solve(_breaks_sample_1_after(0.25), torch.ones(2, 3), options)
    assert info.value.result.stats.status[0] is SolveStatus.SUCCESS


def test_a_finite_fixed_step_solve_still_succeeds_with_arclength():
    options = SolverOptions(fixed_steps=3, solver="rk4", arclength=True)
    stats = solve(lambda t, y: -y, torch.ones(2, 3), options).stats
    assert stats.ok and stats.t_final.tolist() == [1.0, 1.0]
