import pytest
import torch
from torch import nn

from odet.blocks import (
    EMACoefficients,
    GatedCoefficients,
    ODEBlock,
    build_stack,
)
from odet.nn import EncoderField
from odet.ode import TABLEAUS
from tests.blocks.fields import TanhField, ZeroField


def _textbook(method: str, F, y):
    if method == "euler":
        return y + F(y)
    if method == "rk2":
        k1 = F(y)
        k2 = F(y + k1)
        return y + (k1 + k2) / 2
    if method == "rk3":
        k1 = F(y)
        k2 = F(y + k1 / 2)
        k3 = F(y - k1 + 2 * k2)
        return y + (k1 + 4 * k2 + k3) / 6
    if method == "rk4":
        k1 = F(y)
        k2 = F(y + k1 / 2)
        k3 = F(y + k2 / 2)
        k4 = F(y + k3)
        return y + (k1 + 2 * k2 + 2 * k3 + k4) / 6
    raise AssertionError(method)


@pytest.mark.parametrize("method", ["euler", "rk2", "rk3", "rk4"])
def test_block_equals_textbook_formula(method):
    torch.manual_seed(0)
    field = TanhField()
    y = torch.randn(2, 5, 6)
    expected = _textbook(method, field, y)
    torch.testing.assert_close(ODEBlock(field, method)(y), expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("method", sorted(TABLEAUS))
@pytest.mark.parametrize("scheme", ["fixed", "learned", "ema"])
def test_zero_field_gives_identity(method, scheme):
    y = torch.randn(2, 3, 6)
    torch.testing.assert_close(ODEBlock(ZeroField(), method, scheme)(y), y, atol=0, rtol=0)


@pytest.mark.parametrize("scheme", ["gated", "gated_norm"])
def test_zero_field_gives_identity_with_gated_rk2(scheme):
    y = torch.randn(2, 3, 6)
    block = ODEBlock(ZeroField(), "rk2", scheme, d_model=6)
    torch.testing.assert_close(block(y), y, atol=0, rtol=0)


@pytest.mark.parametrize("method", ["rk2", "rk3", "rk4", "dopri5"])
def test_learned_coefficients_at_initialisation_equal_fixed(method):
    torch.manual_seed(1)
    field = TanhField()
    y = torch.randn(2, 4, 6)
    fixed = ODEBlock(field, method, "fixed")(y)
    learned = ODEBlock(field, method, "learned")
    torch.testing.assert_close(learned(y), fixed, atol=1e-6, rtol=1e-6)
    assert learned.coefficients.weight.requires_grad


def test_gated_rk2_matches_the_papers_formula():
    torch.manual_seed(2)
    field = TanhField()
    block = ODEBlock(field, "rk2", "gated", d_model=6)
    gate = block.coefficients.gate
    y = torch.randn(2, 4, 6)
    k1 = field(y)
    k2 = field(y + k1)
    g = torch.sigmoid(torch.cat([k1, k2], -1) @ gate.weight.T + gate.bias)
    torch.testing.assert_close(block(y), y + g * k1 + (1 - g) * k2, atol=1e-6, rtol=1e-6)
    assert torch.all(gate.bias == 0)


def test_normalised_gate_starts_as_heun_and_matches_its_formula():
    torch.manual_seed(3)
    field = TanhField()
    block = ODEBlock(field, "rk2", "gated_norm", d_model=6)
    y = torch.randn(2, 4, 6)
    heun = ODEBlock(field, "rk2", "fixed")(y)
    torch.testing.assert_close(block(y), heun, atol=1e-6, rtol=1e-6)
    gate = block.coefficients.gate
    with torch.no_grad():
        gate.weight.normal_()
        gate.bias.fill_(0.3)
    k1 = field(y)
    k2 = field(y + k1)
    x = torch.cat([k1, k2], -1)
    x = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    g = torch.sigmoid(x @ gate.weight.T + gate.bias)
    torch.testing.assert_close(block(y), y + g * k1 + (1 - g) * k2, atol=1e-6, rtol=1e-6)


def test_normalised_gate_does_not_grow_with_the_stages_but_the_plain_gate_does():
    torch.manual_seed(4)
    k1, k2 = torch.randn(2, 5, 6), torch.randn(2, 5, 6)
    normalised = GatedCoefficients(6, normalize=True)
    plain = GatedCoefficients(6)
    with torch.no_grad():
        normalised.gate.weight.copy_(plain.gate.weight)
    torch.testing.assert_close(
        normalised.gate_values(100 * k1, 100 * k2),
        normalised.gate_values(k1, k2),
        atol=1e-5,
        rtol=0,
    )
    saturated = plain.gate_values(100 * k1, 100 * k2)
    assert ((saturated < 0.01) | (saturated > 0.99)).float().mean() > 0.5
    assert sum(p.numel() for p in normalised.parameters()) == sum(
        p.numel() for p in plain.parameters()
    )


def test_ema_weights_sum_to_one_and_start_as_heun_for_two_stages():
    torch.testing.assert_close(EMACoefficients(2).weights(), torch.tensor([0.5, 0.5]))
    ema = EMACoefficients(4, alpha=0.3)
    a = 0.3
    expected = torch.tensor([(1 - a) ** 3, a * (1 - a) ** 2, a * (1 - a), a])
    torch.testing.assert_close(ema.weights(), expected)
    assert ema.weights().sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["rk2", "rk3", "rk4"])
def test_stages_share_the_parameters_of_one_field(method):
    field = TanhField()
    block = ODEBlock(field, method, "fixed")
    assert sum(p.numel() for p in block.parameters()) == sum(p.numel() for p in field.parameters())


def test_gradients_reach_field_and_every_coefficient_scheme():
    for method, scheme in [
        ("rk2", "gated"),
        ("rk2", "gated_norm"),
        ("rk4", "learned"),
        ("rk3", "ema"),
        ("rk4", "fixed"),
    ]:
        block = ODEBlock(TanhField(), method, scheme, d_model=6)
        block(torch.randn(2, 3, 6)).pow(2).sum().backward()
        for name, p in block.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, (method, scheme, name)


def test_invalid_combinations_are_clear_errors_at_construction():
    with pytest.raises(ValueError, match="exactly two stages.*'rk4' has 4"):
        ODEBlock(TanhField(), "rk4", "gated", d_model=6)
    with pytest.raises(ValueError, match="unknown Runge–Kutta method 'rk7'"):
        ODEBlock(TanhField(), "rk7")
    with pytest.raises(ValueError, match="unknown coefficient scheme 'gate'"):
        ODEBlock(TanhField(), "rk2", "gate")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="need d_model"):
        ODEBlock(TanhField(), "rk2", "gated")
    with pytest.raises(ValueError, match="exactly two stages"):
        ODEBlock(TanhField(), "rk3", GatedCoefficients(6))
    with pytest.raises(ValueError, match="exactly two stages.*'rk4' has 4"):
        ODEBlock(TanhField(), "rk4", "gated_norm", d_model=6)
    with pytest.raises(ValueError, match="gated_norm coefficients need d_model"):
        ODEBlock(TanhField(), "rk2", "gated_norm")


def test_stage_caches_are_passed_one_per_stage():
    seen = []

    class Recorder(nn.Module):
        def forward(self, z, cache=None):
            seen.append(cache)
            return torch.zeros_like(z)

    ODEBlock(Recorder(), "rk4")(torch.zeros(1, 1, 2), cache=["a", "b", "c", "d"])
    assert seen == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="expected 4 stage caches, got 2"):
        ODEBlock(Recorder(), "rk4")(torch.zeros(1, 1, 2), cache=["a", "b"])


@pytest.mark.parametrize("scheme", ["gated", "gated_norm"])
def test_shared_gate_is_one_module_for_the_whole_stack(scheme):
    stack = build_stack("rk2", TanhField, 3, coefficients=scheme, d_model=6, share_gate=True)
    gates = {id(block.coefficients) for block in stack.blocks}
    assert len(gates) == 1
    assert (stack.blocks[0].coefficients.norm is not None) == (scheme == "gated_norm")
    own = build_stack("rk2", TanhField, 3, coefficients=scheme, d_model=6)
    assert len({id(block.coefficients) for block in own.blocks}) == 3


def test_euler_stack_ignores_multi_stage_coefficient_schemes():
    stack = build_stack("euler", TanhField, 2, coefficients="gated", d_model=6)
    assert stack.stage_counts == (1, 1)
    y = torch.randn(1, 2, 6)
    expected = y
    for block in stack.blocks:
        expected = expected + block.field(expected)
    torch.testing.assert_close(stack(y), expected)


def test_a_padding_mask_that_would_broadcast_over_the_batch_is_refused() -> None:
    block = ODEBlock(EncoderField(16, 2, 32), method="rk2", coefficients="gated", d_model=16)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"padding_mask must be a bool tensor .* got torch.bool"):
        block(x, padding_mask=torch.zeros(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"got torch.float32 \(2, 5\) \(a 0/1 mask of the tokens"):
        block(x, padding_mask=torch.ones(2, 5))
