import pytest
import torch
from torch import nn

from odet.blocks import AdamsBashforthStack, DLCLStack, MultistepBlock, build_stack
from odet.ode.multistep import History
from tests.blocks.fields import TanhField, ZeroField


def test_ab3_stack_equals_hand_formula_with_euler_then_ab2_start():
    torch.manual_seed(0)
    stack = build_stack("ab3", TanhField, 4)
    F = [block.field for block in stack.blocks]
    y0 = torch.randn(2, 3, 6)
    f0 = F[0](y0)
    y1 = y0 + f0
    f1 = F[1](y1)
    y2 = y1 + 1.5 * f1 - 0.5 * f0
    f2 = F[2](y2)
    y3 = y2 + (23 * f2 - 16 * f1 + 5 * f0) / 12
    f3 = F[3](y3)
    y4 = y3 + (23 * f3 - 16 * f2 + 5 * f1) / 12
    torch.testing.assert_close(stack(y0), y4, atol=1e-6, rtol=1e-6)
    assert stack.stage_counts == (1, 1, 1, 1)


def test_ab2_stack_equals_hand_formula():
    torch.manual_seed(1)
    stack = build_stack("ab2", TanhField, 3)
    F = [block.field for block in stack.blocks]
    y0 = torch.randn(2, 3, 6)
    f0 = F[0](y0)
    y1 = y0 + f0
    f1 = F[1](y1)
    y2 = y1 + 1.5 * f1 - 0.5 * f0
    y3 = y2 + 1.5 * F[2](y2) - 0.5 * f1
    torch.testing.assert_close(stack(y0), y3, atol=1e-6, rtol=1e-6)


def test_learned_multistep_coefficients_start_at_adams_bashforth_and_train():
    torch.manual_seed(2)
    fields = [TanhField() for _ in range(3)]
    fixed = AdamsBashforthStack(fields, 3, "fixed")
    learned = AdamsBashforthStack(fields, 3, "learned")
    y = torch.randn(2, 3, 6)
    torch.testing.assert_close(learned(y), fixed(y), atol=1e-6, rtol=1e-6)
    weights = [block.coefficients.weight for block in learned.blocks]
    torch.testing.assert_close(weights[2].detach(), torch.tensor([23 / 12, -16 / 12, 5 / 12]))
    learned(y).pow(2).sum().backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in weights)


def test_multistep_stack_keeps_no_history_between_calls():
    torch.manual_seed(3)
    stack = build_stack("ab3", TanhField, 3)
    a, b = torch.randn(2, 3, 6), torch.randn(2, 3, 6)
    first = stack(b)
    stack(a)
    torch.testing.assert_close(stack(b), first, atol=0, rtol=0)


def test_multistep_block_rejects_a_short_history_and_wrong_cache_count():
    block = MultistepBlock(ZeroField(), (23 / 12, -16 / 12, 5 / 12))
    y = torch.zeros(1, 2, 6)
    with pytest.raises(ValueError, match="3-step block got a history of 1 derivatives"):
        block(y, History(capacity=3))
    with pytest.raises(ValueError, match="expected 1 stage cache, got 2"):
        block(y, History(capacity=3), cache=["a", "b"])
    with pytest.raises(ValueError, match="unknown multistep coefficient scheme 'ema'"):
        MultistepBlock(ZeroField(), (1.0,), "ema")  # type: ignore[arg-type]


def _layer_norm(x: torch.Tensor) -> torch.Tensor:
    return nn.functional.layer_norm(x, x.shape[-1:])


def test_dlcl_equals_hand_formula_with_uniform_initial_weights():
    torch.manual_seed(4)
    stack = build_stack("dlcl", TanhField, 2, d_model=6)
    F = [block.field for block in stack.blocks]
    y0 = torch.randn(2, 3, 6)
    y1 = y0 + F[0](y0)  # x_0 = y_0 (W[0, 0] = 1)
    n1 = _layer_norm(y1)  # LN_k at initialisation: weight 1, bias 0
    x1 = (y0 + n1) / 2
    y2 = x1 + F[1](x1)
    expected = (y0 + n1 + _layer_norm(y2)) / 3
    torch.testing.assert_close(stack(y0), expected, atol=1e-6, rtol=1e-6)


def test_dlcl_with_zero_field_averages_normalised_copies_and_is_not_the_identity():
    stack = build_stack("dlcl", ZeroField, 2, d_model=6)
    y0 = torch.randn(2, 3, 6)
    n1 = _layer_norm(y0)
    expected = (y0 + n1 + _layer_norm((y0 + n1) / 2)) / 3
    out = stack(y0)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(out, y0)


def test_dlcl_weights_are_a_uniform_lower_triangle_with_one_norm_per_layer():
    fields = [TanhField() for _ in range(3)]
    stack = DLCLStack(fields, 6)
    expected = torch.tensor(
        [[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 4, 1 / 4, 1 / 4, 1 / 4]]
    )
    torch.testing.assert_close(stack.combination_weights(), expected)
    field_params = sum(p.numel() for f in fields for p in f.parameters())
    assert sum(p.numel() for p in stack.parameters()) == field_params + 10 + 3 * 2 * 6
    assert stack.stage_counts == (1, 1, 1)


def test_dlcl_gradients_reach_weights_norms_and_fields():
    torch.manual_seed(5)
    stack = build_stack("dlcl", TanhField, 3, d_model=6)
    stack(torch.randn(2, 3, 6)).pow(2).sum().backward()
    for name, p in stack.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
