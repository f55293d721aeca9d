"""Numerics that know nothing about attention: Butcher tableaus and explicit RK integration."""

from odet.ode.adaptive import (
    ADAPTIVE_METHODS,
    SolverError,
    SolveResult,
    SolveStats,
    SolveStatus,
    odeint_adaptive,
)
from odet.ode.multistep import (
    History,
    adams_bashforth_coefficients,
    adams_bashforth_fractions,
    adams_bashforth_step,
    odeint_multistep,
)
from odet.ode.runge_kutta import combine, odeint_fixed, rk_stages, rk_step
from odet.ode.tableau import TABLEAUS, ButcherTableau, get_tableau, rooted_trees

__all__ = [
    "ADAPTIVE_METHODS",
    "TABLEAUS",
    "ButcherTableau",
    "History",
    "SolveResult",
    "SolveStats",
    "SolveStatus",
    "SolverError",
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
]
