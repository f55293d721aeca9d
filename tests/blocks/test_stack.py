import pytest
import torch
from torch import nn

from odet.blocks import (
    STACK_METHODS,
    StackMethod,
    StackOptions,
    build_stack,
    coefficient_problem,
)
from tests.blocks.fields import ZeroField


class CountingField(nn.Module):
    """A small field that records which stage cache each evaluation received."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.linear = nn.Linear(d, d)
        self.caches: list[object] = []

    def forward(self, z, cache=None):
        self.caches.append(cache)
        return torch.tanh(self.linear(z))


def _options(method: str) -> dict:
    """A coefficient scheme every method accepts and that exercises its weights."""
    schemes = STACK_METHODS[method].schemes
    return {"coefficients": "learned" if "learned" in schemes else "fixed", "d_model": 6}


@pytest.mark.parametrize("method", sorted(STACK_METHODS))
def test_stage_counts_equal_the_field_evaluations_of_each_block(method):
    stack = build_stack(method, CountingField, 3, **_options(method))
    caches = [[f"{l}.{i}" for i in range(n)] for l, n in enumerate(stack.stage_counts)]
    stack(torch.randn(2, 3, 6), block_kwargs=[{"cache": c} for c in caches])
    for block, expected in zip(stack.blocks, caches):
        assert block.field.caches == expected
    fixed = STACK_METHODS[method].stages
    assert fixed is None or stack.stage_counts == (fixed,) * 3


def test_stage_counts_of_the_new_methods():
    counts = {m: build_stack(m, CountingField, 2, d_model=6).stage_counts for m in STACK_METHODS}
    assert counts["ab2"] == counts["ab3"] == counts["dlcl"] == (1, 1)
    assert counts["pc"] == (3, 3)  # RK2 predictor + corrector
    assert counts["implicit_euler"] == (3, 3)  # explicit start + 2 iterations
    assert build_stack("implicit_euler", CountingField, 2, iterations=4).stage_counts == (5, 5)


@pytest.mark.parametrize("method", sorted(set(STACK_METHODS) - {"dlcl"}))
def test_zero_field_gives_identity_for_every_method_but_dlcl(method):
    y = torch.randn(2, 3, 6)
    stack = build_stack(method, ZeroField, 3, **_options(method))
    torch.testing.assert_close(stack(y), y, atol=0, rtol=0)


def test_coefficient_problems_name_the_method_and_the_allowed_schemes():
    assert coefficient_problem("pc", "gated") == (
        "'gated' coefficients do not apply to method 'pc'; use 'fixed', 'learned', 'ema'"
    )
    assert coefficient_problem("ab3", "ema") == (
        "'ema' coefficients do not apply to method 'ab3'; use 'fixed', 'learned'"
    )
    assert coefficient_problem("rk4", "gated").startswith(
        "'gated' needs a two-stage method, but 'rk4' has 4 stages"
    )
    assert coefficient_problem("rk3", "gated_norm").startswith(
        "'gated_norm' needs a two-stage method, but 'rk3' has 3 stages"
    )
    for method in ("euler", "dlcl", "implicit_euler"):  # no stage weights: the scheme is ignored
        assert coefficient_problem(method, "gated") == ""
    assert coefficient_problem("rk2", "gated") == coefficient_problem("pc", "ema") == ""


def test_build_stack_rejects_bad_arguments_clearly():
    with pytest.raises(ValueError, match="unknown stack method 'ab4'; choose one of"):
        build_stack("ab4", CountingField, 2)
    with pytest.raises(ValueError, match="'gated' coefficients do not apply to method 'pc'"):
        build_stack("pc", CountingField, 2, coefficients="gated", d_model=6)
    with pytest.raises(ValueError, match="dlcl stack needs d_model"):
        build_stack("dlcl", CountingField, 2)
    with pytest.raises(ValueError, match="num_layers must be >= 1, got 0"):
        build_stack("ab2", CountingField, 0)
    with pytest.raises(ValueError, match="iterations must be a non-negative int, got -1"):
        build_stack("implicit_euler", CountingField, 2, iterations=-1)
    with pytest.raises(ValueError, match="unknown coefficient scheme 'gate'"):
        StackOptions(coefficients="gate")  # type: ignore[arg-type]


def test_every_block_exposes_its_own_field():
    for method in STACK_METHODS:
        stack = build_stack(method, CountingField, 2, d_model=6)
        fields = [block.field for block in stack.blocks]
        assert len({id(f) for f in fields}) == 2 and all(
            isinstance(f, CountingField) for f in fields
        )


def test_stack_method_entries_validate_themselves():
    build = STACK_METHODS["dlcl"].build
    with pytest.raises(ValueError, match="unknown stack family 'discrete'"):
        StackMethod("discrete", build)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown coefficient schemes \['gate'\]"):
        StackMethod("dlcl", build, ("gate",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stages per block must be >= 1 or None, got 0"):
        StackMethod("dlcl", build, (), 0)
