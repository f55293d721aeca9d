"""The coefficient registry is the one list of schemes: the Literal and every subset agree."""

import typing

from odet.blocks import ANY_STAGE_SCHEMES, COEFFICIENTS, GATED_SCHEMES, STACK_METHODS
from odet.blocks.coefficients import CoefficientScheme
from odet.blocks.predictor_corrector import PC_SCHEMES


def test_the_literal_names_exactly_the_registered_schemes():
    assert typing.get_args(CoefficientScheme) == tuple(COEFFICIENTS)


def test_scheme_subsets_are_derived_from_the_registry():
    assert set(GATED_SCHEMES) | set(ANY_STAGE_SCHEMES) == set(COEFFICIENTS)
    assert PC_SCHEMES == ANY_STAGE_SCHEMES
    assert STACK_METHODS["rk2"].schemes == tuple(COEFFICIENTS)
    assert STACK_METHODS["rk4"].schemes == ANY_STAGE_SCHEMES
