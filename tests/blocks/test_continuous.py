import pytest
import torch
from torch import nn

from odet.blocks.continuous import (
    ContinuousEncoder,
    ContinuousStack,
    build_continuous_encoder,
    merge_stats,
)
from odet.nn.time import TimeConditionedEncoderField
from odet.ode import SolveStatus


class LinearField(nn.Module):
    """``dy/dt = y Aᵀ`` on ``(B, T, D)``: ``y(t) = y0 exp(tA)ᵀ``."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a)

    def forward(self, t, y, *, padding_mask=None):
        return y @ self.a.T


class CubicField(nn.Module):
    """``dy/dt = -y³``: stiff for large ``|y|``, easy near 0."""

    def forward(self, t, y, *, padding_mask=None):
        return -(y**3)


class ConstantField(nn.Module):
    """``dy/dt = c`` everywhere: ``y(t) = y0 + tc``, arclength ``t·‖c‖`` per token row set."""

    def __init__(self, c: torch.Tensor) -> None:
        super().__init__()
        self.c = c

    def forward(self, t, y, *, padding_mask=None):
        return self.c.expand_as(y)


def _matrix(d: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    m = torch.randn(d, d, generator=g, dtype=torch.float64)
    return (m - m.T) / 2 - 0.3 * torch.eye(d, dtype=torch.float64)


def _y0(batch: int = 2, length: int = 3, d: int = 4) -> torch.Tensor:
    return torch.randn(batch, length, d, generator=torch.Generator().manual_seed(1)).double()


def _attention_field(conditioning: str = "film") -> TimeConditionedEncoderField:
    """A smooth (GELU) time-dependent field: with ReLU the field has kinks, RK methods lose
    their order and tight tolerances cost hundreds of steps."""
    torch.manual_seed(0)
    field = TimeConditionedEncoderField(
        8, 2, 16, time_conditioning=conditioning, layer_norm=False, activation="gelu",
        max_frequency=3.0,
    )  # fmt: skip
    if conditioning == "film":  # identity at init: make the field depend on t
        for module in (field.attn_time, field.ffn_time):
            nn.init.normal_(module.proj.weight, std=0.3)
    return field.double()


@pytest.mark.parametrize("backend", ["torchode", "torchdiffeq"])
def test_linear_field_matches_matrix_exponential(backend):
    a, y0 = _matrix(), _y0()
    stack = ContinuousStack(LinearField(a), t1=1.5, backend=backend, rtol=1e-8, atol=1e-8)
    exact = y0 @ torch.linalg.matrix_exp(1.5 * a).T
    result = stack(y0)
    torch.testing.assert_close(result.y, exact, atol=1e-6, rtol=0)
    assert result.stats.ok


def test_fixed_rk4_matches_matrix_exponential_to_fourth_order():
    a, y0 = _matrix(), _y0()
    exact = y0 @ torch.linalg.matrix_exp(a).T
    errors = [
        (ContinuousStack(LinearField(a), solver="rk4", fixed_steps=n)(y0).y - exact).abs().max()
        for n in (8, 16)
    ]
    assert 12 < errors[0] / errors[1] < 20  # 2^4 = 16


def test_fixed_step_and_adaptive_agree_on_attention_field_at_tight_tolerance():
    field, y0 = _attention_field(), torch.randn(2, 5, 8, dtype=torch.float64)
    adaptive = ContinuousStack(field, rtol=1e-8, atol=1e-8)(y0)
    fixed = ContinuousStack(field, solver="rk4", fixed_steps=40)(y0)
    torch.testing.assert_close(fixed.y, adaptive.y, atol=2e-7, rtol=0)


def test_fixed_step_stats_count_steps_times_stages():
    stats = ContinuousStack(_attention_field(), solver="rk4", fixed_steps=3)(
        torch.randn(2, 4, 8, dtype=torch.float64)
    ).stats
    assert stats.nfe.tolist() == [12, 12] and stats.nfe_total == 12
    assert stats.accepted.tolist() == [3, 3] and stats.rejected.tolist() == [0, 0]
    assert stats.status == (SolveStatus.SUCCESS,) * 2


def test_per_sample_nfe_is_larger_for_the_stiffer_sample_in_one_batch():
    y0 = torch.stack([torch.full((2, 3), 0.1), torch.full((2, 3), 8.0)]).double()
    stats = ContinuousStack(CubicField(), rtol=1e-5, atol=1e-5)(y0).stats
    easy, hard = stats.nfe.tolist()
    assert hard > 2 * easy
    assert stats.nfe_total == hard


@pytest.mark.parametrize("fixed_steps", [None, 10])
def test_arclength_of_constant_field_is_time_times_norm(fixed_steps):
    c = torch.tensor([3.0, 4.0], dtype=torch.float64)  # one token: ‖F‖ = 5
    solver = "dopri5" if fixed_steps is None else "rk4"
    stack = ContinuousStack(
        ConstantField(c), t1=2.0, solver=solver, fixed_steps=fixed_steps, arclength=True
    )
    result = stack(torch.zeros(3, 1, 2, dtype=torch.float64))
    torch.testing.assert_close(result.stats.arclength, torch.full((3,), 10.0).double())
    torch.testing.assert_close(result.y, (2.0 * c).expand(3, 1, 2))


def _padded_batch(y0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``y0 (1, T, D)`` padded to ``T + 2`` with garbage, batched with an unpadded sample."""
    other = torch.randn(1, y0.shape[1] + 2, y0.shape[2], dtype=y0.dtype)
    padded = torch.cat([y0, 50 * torch.randn(1, 2, y0.shape[2], dtype=y0.dtype)], dim=1)
    mask = torch.zeros(2, y0.shape[1] + 2, dtype=torch.bool)
    mask[0, -2:] = True
    return torch.cat([padded, other]), mask


def test_padding_changes_nothing_with_fixed_steps_and_padded_states_stay_frozen():
    field, y0 = _attention_field(), torch.randn(1, 4, 8, dtype=torch.float64)
    stack = ContinuousStack(field, solver="rk4", fixed_steps=4, arclength=True)
    batch, mask = _padded_batch(y0)
    alone, padded = stack(y0), stack(batch, padding_mask=mask)
    torch.testing.assert_close(padded.y[0, :4], alone.y[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(padded.y[0, 4:], batch[0, 4:], atol=0, rtol=0)
    torch.testing.assert_close(padded.stats.arclength[0], alone.stats.arclength[0])


def test_padding_changes_adaptive_result_only_within_tolerance():
    field, y0 = _attention_field(), torch.randn(1, 4, 8, dtype=torch.float64)
    stack = ContinuousStack(field, rtol=1e-8, atol=1e-8, arclength=True)
    batch, mask = _padded_batch(y0)
    alone, padded = stack(y0), stack(batch, padding_mask=mask)
    torch.testing.assert_close(padded.y[0, :4], alone.y[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(padded.y[0, 4:], batch[0, 4:], atol=0, rtol=0)
    torch.testing.assert_close(
        padded.stats.arclength[0], alone.stats.arclength[0], atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("conditioning", ["concat", "embedding", "film"])
@pytest.mark.parametrize("fixed_steps", [None, 2])
def test_gradients_of_the_arclength_alone_reach_every_parameter(conditioning, fixed_steps):
    torch.manual_seed(0)
    field = TimeConditionedEncoderField(8, 2, 16, time_conditioning=conditioning)
    solver = "dopri5" if fixed_steps is None else "rk2"
    stack = ContinuousStack(field, solver=solver, fixed_steps=fixed_steps, arclength=True)
    stack(torch.randn(2, 3, 8)).stats.arclength.sum().backward()
    for name, p in field.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_encoder_chains_solves_and_sums_their_stats():
    a1, a2, y0 = _matrix(), _matrix().T, _y0()
    stacks = [
        ContinuousStack(LinearField(a), rtol=1e-8, atol=1e-8, arclength=True) for a in (a1, a2)
    ]
    result = ContinuousEncoder(stacks)(y0)
    exact = y0 @ torch.linalg.matrix_exp(a1).T @ torch.linalg.matrix_exp(a2).T
    torch.testing.assert_close(result.y, exact, atol=1e-6, rtol=0)
    middle = stacks[0](y0)
    first, second = middle.stats, stacks[1](middle.y).stats
    torch.testing.assert_close(result.stats.nfe, first.nfe + second.nfe, atol=0, rtol=0)
    torch.testing.assert_close(result.stats.arclength, first.arclength + second.arclength)
    torch.testing.assert_close(result.stats.t_final, torch.full((2,), 2.0).double())


def test_merge_stats_keeps_each_samples_first_failure():
    y0 = torch.stack([torch.full((1, 1), 0.1), torch.full((1, 1), 30.0)]).double()
    ok = ContinuousStack(CubicField())(y0).stats
    failing = ContinuousStack(CubicField(), max_steps=3, on_failure="flag")(y0).stats
    merged = merge_stats([ok, failing])
    assert merged.status[0] is SolveStatus.SUCCESS
    assert merged.status[1] is SolveStatus.MAX_STEPS


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"solver": "rk4"}, r"solver = 'rk4' is not an adaptive method of backend 'torchode'"),
        ({"solver": "tsit5", "fixed_steps": 4}, r"'tsit5' with fixed_steps must be a tableau"),
        ({"solver": "rk4", "fixed_steps": 0}, r"fixed_steps must be a positive int"),
        ({"t1": 0.0}, r"t1 must be a finite number > 0"),
        ({"backend": "scipy"}, r"unknown backend 'scipy'"),
        ({"solver": "rk4", "fixed_steps": 2, "adjoint": True}, r"adjoint=True needs"),
        ({"rtol": 0.0, "atol": 0.0}, r"need rtol, atol >= 0, not both 0"),
        ({"max_steps": 0}, r"max_steps must be >= 1, got 0"),
        ({"on_failure": "ignore"}, r"unknown on_failure 'ignore'"),
    ],
)
def test_bad_stack_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ContinuousStack(CubicField(), **kwargs)


def test_encoder_rejects_mixed_arclength_and_bad_mask():
    with pytest.raises(ValueError, match="agree on arclength"):
        ContinuousEncoder([ContinuousStack(CubicField(), arclength=a) for a in (True, False)])
    with pytest.raises(ValueError, match=r"padding_mask must be \(B, T\)"):
        ContinuousStack(CubicField())(torch.zeros(2, 3, 4), padding_mask=torch.zeros(2, 4).bool())


def test_build_continuous_encoder_gives_each_stack_its_own_field_and_options():
    encoder = build_continuous_encoder(
        lambda: _attention_field("concat"), 2, solver="rk2", fixed_steps=3, arclength=True
    )
    assert len(encoder.stacks) == 2
    assert encoder.stacks[0].field is not encoder.stacks[1].field
    stats = encoder(torch.randn(2, 3, 8, dtype=torch.float64)).stats
    assert stats.nfe.tolist() == [12, 12]  # 2 stacks × 3 steps × 2 stages
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        build_continuous_encoder(CubicField, 0)
