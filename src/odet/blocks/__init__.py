"""ODE blocks: RK steps over shared layers, their coefficient schemes, and stacks of them."""

from odet.blocks.coefficients import (
    COEFFICIENTS,
    Coefficients,
    CoefficientScheme,
    EMACoefficients,
    FixedCoefficients,
    GatedCoefficients,
    LearnedCoefficients,
    make_coefficients,
)
from odet.blocks.ode_block import ODEBlock
from odet.blocks.stack import STACK_METHODS, RungeKuttaStack, build_stack

__all__ = [
    "COEFFICIENTS",
    "STACK_METHODS",
    "CoefficientScheme",
    "Coefficients",
    "EMACoefficients",
    "FixedCoefficients",
    "GatedCoefficients",
    "LearnedCoefficients",
    "ODEBlock",
    "RungeKuttaStack",
    "build_stack",
    "make_coefficients",
]
