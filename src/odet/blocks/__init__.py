"""ODE blocks: RK steps over shared layers, their coefficient schemes, and stacks of them
(one-step, multistep, DLCL, predictor–corrector, implicit)."""

from odet.blocks.base import STAGE_CACHES, Stack, StackResult, stage_evaluator
from odet.blocks.coefficients import (
    ANY_STAGE_SCHEMES,
    COEFFICIENTS,
    GATED_SCHEMES,
    Coefficients,
    CoefficientScheme,
    EMACoefficients,
    FixedCoefficients,
    GatedCoefficients,
    LearnedCoefficients,
    SchemeEntry,
    make_coefficients,
)
from odet.blocks.continuous import (
    ContinuousEncoder,
    ContinuousStack,
    build_continuous_encoder,
    merge_stats,
)
from odet.blocks.implicit import ImplicitEulerBlock
from odet.blocks.multistep import AdamsBashforthStack, DLCLStack, MultistepBlock
from odet.blocks.ode_block import ODEBlock
from odet.blocks.predictor_corrector import PredictorCorrectorBlock
from odet.blocks.stack import (
    LAYER_HISTORIES,
    STACK_METHODS,
    LayerHistory,
    RungeKuttaStack,
    StackMethod,
    StackOptions,
    build_stack,
    coefficient_problem,
    history_problem,
)

__all__ = [
    "ANY_STAGE_SCHEMES",
    "COEFFICIENTS",
    "GATED_SCHEMES",
    "LAYER_HISTORIES",
    "STACK_METHODS",
    "STAGE_CACHES",
    "AdamsBashforthStack",
    "CoefficientScheme",
    "Coefficients",
    "ContinuousEncoder",
    "ContinuousStack",
    "DLCLStack",
    "EMACoefficients",
    "FixedCoefficients",
    "GatedCoefficients",
    "ImplicitEulerBlock",
    "LayerHistory",
    "LearnedCoefficients",
    "MultistepBlock",
    "ODEBlock",
    "PredictorCorrectorBlock",
    "RungeKuttaStack",
    "SchemeEntry",
    "Stack",
    "StackMethod",
    "StackOptions",
    "StackResult",
    "build_continuous_encoder",
    "build_stack",
    "coefficient_problem",
    "history_problem",
    "make_coefficients",
    "merge_stats",
    "stage_evaluator",
]
