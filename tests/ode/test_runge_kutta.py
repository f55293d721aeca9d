import math

import pytest
import torch

from odet.ode import TABLEAUS, ButcherTableau, odeint_fixed, rk_step


def _stable_matrix(n: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=g, dtype=torch.float64)
    skew = (m - m.T) / 2
    s = torch.randn(n, n, generator=g, dtype=torch.float64)
    return skew - s @ s.T / n - 0.1 * torch.eye(n, dtype=torch.float64)


def _fitted_order(
    tableau: ButcherTableau, steps: list[int], device: torch.device | str = "cpu"
) -> float:
    a = _stable_matrix().to(device)
    y0 = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64, device=device)
    exact = torch.linalg.matrix_exp(a) @ y0
    log_h, log_err = [], []
    for n in steps:
        approx = odeint_fixed(lambda y: a @ y, y0, 0.0, 1.0, steps=n, method=tableau)
        log_h.append(math.log(1.0 / n))
        log_err.append(math.log((approx - exact).norm().item()))
    mean_h, mean_e = sum(log_h) / len(log_h), sum(log_err) / len(log_err)
    cov = sum((h - mean_h) * (e - mean_e) for h, e in zip(log_h, log_err))
    return cov / sum((h - mean_h) ** 2 for h in log_h)


def _steps_for(order: int) -> list[int]:
    return [16, 32, 64, 128] if order <= 2 else [4, 8, 16, 32]


@pytest.mark.parametrize("name", sorted(TABLEAUS))
def test_convergence_order_on_linear_ode_matches_declared_order(name, device):
    tab = TABLEAUS[name]
    assert _fitted_order(tab, _steps_for(tab.order), device) == pytest.approx(tab.order, abs=0.3)


@pytest.mark.parametrize("name", ["bosh3", "dopri5"])
def test_embedded_solution_converges_at_its_embedded_order(name, device):
    tab = TABLEAUS[name]
    b_hat = tuple(b - e for b, e in zip(tab.b, tab.b_error))
    embedded = ButcherTableau(a=tab.a, b=b_hat, c=tab.c, order=tab.embedded_order)
    assert _fitted_order(embedded, _steps_for(embedded.order), device) == pytest.approx(
        embedded.order, abs=0.3
    )


def test_rk4_step_matches_hand_expansion_for_exponential_decay():
    h = 0.1
    y = torch.tensor([1.0], dtype=torch.float64)
    # For y' = −y one RK4 step multiplies by the degree-4 Taylor polynomial of e^{−h}.
    expected = 1 - h + h**2 / 2 - h**3 / 6 + h**4 / 24
    assert rk_step(lambda z: -z, y, "rk4", h).item() == pytest.approx(expected, rel=1e-14)


def test_time_dependent_field_uses_stage_times(device):
    # y' = t: every stage sees its node time, so RK4 integrates the linear function exactly.
    y0 = torch.zeros(1, device=device)
    y = odeint_fixed(lambda t, y: torch.full_like(y, t), y0, 0.0, 2.0, 3, "rk4", autonomous=False)
    assert y.device == y0.device and y.item() == pytest.approx(2.0)
    y = odeint_fixed(
        lambda t, y: torch.full_like(y, t**2),
        torch.zeros(1, dtype=torch.float64, device=device),
        0.0,
        1.0,
        1,
        "rk3",
        autonomous=False,
    )
    assert y.item() == pytest.approx(1 / 3, rel=1e-12)


def test_odeint_fixed_rejects_non_positive_steps():
    with pytest.raises(ValueError, match="steps must be a positive int"):
        odeint_fixed(lambda y: y, torch.ones(1), steps=0)


def test_rk_step_is_differentiable():
    y = torch.ones(3, requires_grad=True)
    rk_step(lambda z: torch.sin(z), y, "rk4", 0.5).sum().backward()
    assert y.grad is not None and torch.all(y.grad != 0)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (lambda y: y.sum(0), r"f\(y\) must return dy/dt shaped like y \(2, 3\), got \(3,\)"),
        (lambda y: y.sum(-1), r"shaped like y \(2, 3\), got \(2,\)"),
        (lambda y: -y.double(), "of y's dtype torch.float32, got torch.float64"),
        (lambda y: (-y,), "must return a torch.Tensor shaped like y, got tuple"),
    ],
)
def test_a_field_of_the_wrong_shape_or_dtype_is_named_not_broadcast(field, message):
    """``(3,)`` for a ``(2, 3)`` state used to broadcast into a wrong solution."""
    y0 = torch.ones(2, 3)
    error = TypeError if "tuple" in message else ValueError
    with pytest.raises(error, match=message):
        rk_step(field, y0, "rk4", h=0.1)
    with pytest.raises(error, match=message):
        odeint_fixed(field, y0, steps=2)


def test_bad_states_and_times_are_refused_before_the_first_step():
    with pytest.raises(TypeError, match="y0 must be a floating-point torch.Tensor, got list"):
        odeint_fixed(lambda y: -y, [1.0], steps=2)
    with pytest.raises(TypeError, match="y must be a floating-point torch.Tensor, got torch.int64"):
        rk_step(lambda y: -y, torch.ones(2, dtype=torch.long), "rk4", h=0.1)
    with pytest.raises(ValueError, match="h must be a finite number, got nan"):
        rk_step(lambda y: -y, torch.ones(2), "rk4", h=math.nan)
    with pytest.raises(ValueError, match="t1 must be a finite number, got inf"):
        odeint_fixed(lambda y: -y, torch.ones(2), 0.0, math.inf, steps=2)
    with pytest.raises(ValueError, match="steps must be a positive int, got True"):
        odeint_fixed(lambda y: -y, torch.ones(2), steps=True)
