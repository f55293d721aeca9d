"""Numerics that know nothing about attention: Butcher tableaus and explicit RK integration."""

from odet.ode.adaptive import (
    ADAPTIVE_METHODS,
    SolverError,
    SolveResult,
    SolveStats,
    SolveStatus,
    odeint_adaptive,
)
from odet.ode.runge_kutta import combine, odeint_fixed, rk_stages, rk_step
from odet.ode.tableau import TABLEAUS, ButcherTableau, get_tableau, rooted_trees

__all__ = [
    "ADAPTIVE_METHODS",
    "TABLEAUS",
    "ButcherTableau",
    "SolveResult",
    "SolveStats",
    "SolveStatus",
    "SolverError",
    "combine",
    "get_tableau",
    "odeint_adaptive",
    "odeint_fixed",
    "rk_stages",
    "rk_step",
    "rooted_trees",
]
