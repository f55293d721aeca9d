"""Numerics that know nothing about attention: Butcher tableaus, explicit RK integration,
multistep methods, and solver options for adaptive / fixed-step solves of ``dy/dt = F(t, y)``."""

from odet.ode.adaptive import (
    SolverError,
    SolveResult,
    SolveStats,
    SolveStatus,
    odeint_adaptive,
    solve,
)
from odet.ode.multistep import (
    History,
    adams_bashforth_coefficients,
    adams_bashforth_fractions,
    adams_bashforth_step,
    odeint_multistep,
)
from odet.ode.options import (
    ADAPTIVE_METHODS,
    ADJOINT_BACKENDS,
    AdaptiveBackend,
    OnFailure,
    SolverOptions,
)
from odet.ode.runge_kutta import combine, odeint_fixed, rk_stages, rk_step
from odet.ode.tableau import TABLEAUS, ButcherTableau, get_tableau, rooted_trees

__all__ = [
    "ADAPTIVE_METHODS",
    "ADJOINT_BACKENDS",
    "TABLEAUS",
    "AdaptiveBackend",
    "ButcherTableau",
    "History",
    "OnFailure",
    "SolveResult",
    "SolveStats",
    "SolveStatus",
    "SolverError",
    "SolverOptions",
    "adams_bashforth_coefficients",
    "adams_bashforth_fractions",
    "adams_bashforth_step",
    "combine",
    "get_tableau",
    "odeint_adaptive",
    "odeint_fixed",
    "odeint_multistep",
    "rk_stages",
    "rk_step",
    "rooted_trees",
    "solve",
]
