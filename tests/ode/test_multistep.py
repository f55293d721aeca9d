import math
from fractions import Fraction

import pytest
import torch

from odet.ode.multistep import (
    History,
    adams_bashforth_fractions,
    adams_bashforth_step,
    odeint_multistep,
)


def _stable_matrix(n: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=g, dtype=torch.float64)
    s = torch.randn(n, n, generator=g, dtype=torch.float64)
    return (m - m.T) / 2 - s @ s.T / n - 0.1 * torch.eye(n, dtype=torch.float64)


def _fitted_order(order: int, starter, steps: list[int]) -> float:
    """Least-squares slope of log(error) against log(h) on y' = Ay, y(1) = exp(A) y0."""
    a = _stable_matrix()
    y0 = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64)
    exact = torch.linalg.matrix_exp(a) @ y0
    log_h, log_err = [], []
    for n in steps:
        approx = odeint_multistep(lambda y: a @ y, y0, 0.0, 1.0, n, order, starter=starter)
        log_h.append(math.log(1.0 / n))
        log_err.append(math.log((approx - exact).norm().item()))
    mean_h, mean_e = sum(log_h) / len(log_h), sum(log_err) / len(log_err)
    cov = sum((h - mean_h) * (e - mean_e) for h, e in zip(log_h, log_err))
    return cov / sum((h - mean_h) ** 2 for h in log_h)


def test_coefficients_equal_the_published_adams_bashforth_tables():
    assert adams_bashforth_fractions(1) == (1,)
    assert adams_bashforth_fractions(2) == (Fraction(3, 2), Fraction(-1, 2))
    assert adams_bashforth_fractions(3) == (Fraction(23, 12), Fraction(-16, 12), Fraction(5, 12))
    assert adams_bashforth_fractions(4) == tuple(Fraction(x, 24) for x in (55, -59, 37, -9))
    assert adams_bashforth_fractions(5) == tuple(
        Fraction(x, 720) for x in (1901, -2774, 2616, -1274, 251)
    )


@pytest.mark.parametrize("order", [2, 3, 4])
def test_convergence_order_with_runge_kutta_start_equals_the_step_count(order):
    slope = _fitted_order(order, "rk4", [16, 32, 64, 128])
    assert slope == pytest.approx(order, abs=0.3)


@pytest.mark.parametrize(("order", "expected"), [(1, 1), (2, 2), (3, 2)])
def test_lower_order_start_limits_the_global_order_to_two(order, expected):
    # The first (Euler) step's local error O(h²) is never averaged away: AB3 started the way a
    # layer stack starts converges at order 2, not 3.
    slope = _fitted_order(order, None, [16, 32, 64, 128])
    assert slope == pytest.approx(expected, abs=0.3)


def test_step_uses_newest_derivative_first_and_starts_at_lower_order():
    y = torch.tensor([1.0], dtype=torch.float64)
    f0, f1, f2 = (torch.tensor([v], dtype=torch.float64) for v in (2.0, 3.0, 5.0))
    h = 0.5
    one = History(capacity=3).push(f0)
    assert adams_bashforth_step(y, one, h, 3).item() == pytest.approx(1 + h * 2)
    two = one.push(f1)
    assert adams_bashforth_step(y, two, h, 3).item() == pytest.approx(1 + h * (1.5 * 3 - 0.5 * 2))
    three = two.push(f2)
    expected = 1 + h * (23 * 5 - 16 * 3 + 5 * 2) / 12
    assert adams_bashforth_step(y, three, h, 3).item() == pytest.approx(expected)


def test_history_is_an_immutable_bounded_window():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    h1 = History(capacity=2).push(a)
    h3 = h1.push(b).push(c)
    assert len(h1) == 1 and h1.values[0] is a
    assert h3.values == (b, c) and h3.newest_first() == (c, b)
    assert len(History().push(a).push(b).push(c)) == 3  # unbounded


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="order must be a positive int, got 0"):
        adams_bashforth_fractions(0)
    with pytest.raises(ValueError, match="needs at least one derivative"):
        adams_bashforth_step(torch.ones(1), History(), 1.0, 2)
    with pytest.raises(ValueError, match="capacity must be >= 1 or None, got 0"):
        History(capacity=0)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        odeint_multistep(lambda y: y, torch.ones(1), steps=0)


def test_a_field_that_would_broadcast_into_the_state_is_an_error():
    with pytest.raises(ValueError, match=r"shaped like y \(2, 3\), got \(3,\)"):
        odeint_multistep(lambda y: y.sum(0), torch.ones(2, 3), steps=4, starter=None)
    with pytest.raises(ValueError, match="t0 must be a finite number, got nan"):
        odeint_multistep(lambda y: -y, torch.ones(2, 3), math.nan, 1.0, steps=4)
