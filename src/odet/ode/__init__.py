"""Numerics that know nothing about attention: Butcher tableaus and explicit RK integration."""

from odet.ode.runge_kutta import combine, odeint_fixed, rk_stages, rk_step
from odet.ode.tableau import TABLEAUS, ButcherTableau, get_tableau, rooted_trees

__all__ = [
    "TABLEAUS",
    "ButcherTableau",
    "combine",
    "get_tableau",
    "odeint_fixed",
    "rk_stages",
    "rk_step",
    "rooted_trees",
]
