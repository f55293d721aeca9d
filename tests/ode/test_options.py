"""SolverOptions: the one validated value for continuous solves, and solve() on it."""

import dataclasses

import pytest
import torch

from odet.config import ConfigError
from odet.ode import ADAPTIVE_METHODS, SolverOptions, odeint_adaptive, solve
from odet.ode.adaptive import _SOLVERS, _TORCHODE_STEPPERS


def test_defaults_are_a_valid_adaptive_solve_and_the_value_is_frozen():
    options = SolverOptions()
    assert options.adaptive and options.solver == "dopri5" and options.t1 == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.rtol = 1.0  # type: ignore[misc]
    assert not SolverOptions(solver="rk4", fixed_steps=2).adaptive


def test_every_backend_has_a_solve_and_its_methods_are_the_listed_ones():
    assert set(_SOLVERS) == set(ADAPTIVE_METHODS)
    assert tuple(_TORCHODE_STEPPERS) == ADAPTIVE_METHODS["torchode"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "scipy"}, r"SolverOptions.backend: unknown backend 'scipy'; allowed: \["),
        ({"on_failure": "warn"}, r"SolverOptions.on_failure: unknown on_failure 'warn'"),
        ({"rtol": "tight"}, r"SolverOptions.rtol = 'tight' \(str\) is invalid"),
        ({"t0": 1.0, "t1": 1.0}, r"SolverOptions.t1 must be a finite number > 1.0"),
        ({"solver": "rk4"}, r"SolverOptions.solver = 'rk4' is not an adaptive method"),
        ({"solver": "rk4", "fixed_steps": 0}, r"SolverOptions.fixed_steps must be a positive int"),
        ({"solver": "tsit5", "fixed_steps": 2}, r"'tsit5' with fixed_steps must be a tableau"),
        ({"first_step": 0.0}, r"SolverOptions.first_step must be in \(0, t1 - t0 = 1.0\]"),
    ],
)
def test_bad_options_name_the_field_and_the_allowed_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SolverOptions(**kwargs)


def test_ints_are_accepted_for_float_fields():
    assert SolverOptions(t1=2, rtol=1, atol=0).t1 == 2.0


def test_solve_with_fixed_steps_integrates_with_the_tableau():
    y0 = torch.ones(2, 3, dtype=torch.float64)
    options = SolverOptions(t0=0.5, t1=1.5, solver="rk4", fixed_steps=20, arclength=True)
    result = solve(lambda t, y: -y, y0, options)
    torch.testing.assert_close(result.y, y0 * torch.exp(torch.tensor(-1.0)), rtol=1e-7, atol=0)
    assert result.stats.nfe.tolist() == [80, 80]
    assert result.stats.t_final.tolist() == [1.5, 1.5]


def test_odeint_adaptive_is_solve_with_the_method_as_solver():
    y0 = torch.ones(2, 3, dtype=torch.float64)
    a = odeint_adaptive(lambda t, y: -y, y0, 0.0, 2.0, method="tsit5", rtol=1e-6, atol=1e-6)
    b = solve(lambda t, y: -y, y0, SolverOptions(t1=2.0, solver="tsit5", rtol=1e-6, atol=1e-6))
    torch.testing.assert_close(a.y, b.y, rtol=0, atol=0)
    with pytest.raises(ValueError, match="for fixed steps call odet.ode.solve"):
        odeint_adaptive(lambda t, y: -y, y0, fixed_steps=3)
