"""odet.nn.dropout: the random-bits mask keeps dropout's semantics (rate, scaling, backward)."""

from __future__ import annotations

import math

import pytest
import torch

from odet.nn.dropout import Dropout, dropout, keep_mask, quantised_drop_rate


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_rate_matches_one_minus_p_within_binomial_error(
    p: float, device: torch.device
) -> None:
    torch.manual_seed(0)
    n = 1_000_003  # not a multiple of 4: the last 64-bit word is only partly used
    keep = keep_mask((n,), p, device)
    assert keep.device.type == device.type
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(keep.double().mean().item() - (1 - p)) < 5 * sigma


def test_mask_bits_are_independent_across_neighbouring_elements(device: torch.device) -> None:
    # The four 16-bit slices of one random word must not be correlated: P(both kept) = (1-p)².
    torch.manual_seed(1)
    keep = keep_mask((250_000, 4), 0.5, device).double()
    both = (keep[:, 0] * keep[:, 1]).mean().item()
    assert both == pytest.approx(0.25, abs=5 * math.sqrt(0.25 * 0.75 / 250_000))


def test_survivors_are_scaled_by_inverse_keep_rate_and_others_zeroed() -> None:
    torch.manual_seed(2)
    x = torch.full((1000, 100), 3.0)
    y = dropout(x, 0.2)
    scale = 1 / (1 - quantised_drop_rate(0.2))
    values = y.unique()
    assert values.tolist()[0] == 0.0
    torch.testing.assert_close(values[1:], torch.tensor([3.0 * scale]))
    assert y.mean().item() == pytest.approx(3.0, rel=0.01)


def test_quantised_rate_is_within_half_a_level_and_exact_for_dyadic_p() -> None:
    assert quantised_drop_rate(0.5) == 0.5
    assert quantised_drop_rate(0.25) == 0.25
    assert abs(quantised_drop_rate(0.1) - 0.1) <= 2**-17
    assert quantised_drop_rate(0.999_999_9) == 1 - 2**-16


def test_backward_applies_the_same_mask_and_scale() -> None:
    torch.manual_seed(3)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    kept = y.detach() != 0
    scale = 1 / (1 - quantised_drop_rate(0.3))
    expected = torch.where(kept, torch.full_like(x, scale), torch.zeros_like(x))
    torch.testing.assert_close(x.grad, expected)
    torch.testing.assert_close(y.detach(), torch.where(kept, x.detach() * scale, 0.0))


def test_eval_mode_and_zero_rate_are_the_identity() -> None:
    x = torch.randn(5, 7)
    module = Dropout(0.4).eval()
    assert module(x) is x
    assert dropout(x, 0.0) is x


def test_same_seed_gives_same_mask(device: torch.device) -> None:
    x = torch.randn(100, 10).to(device)
    torch.manual_seed(4)
    a = dropout(x, 0.1)
    torch.manual_seed(4)
    b = dropout(x, 0.1)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_probability_outside_unit_interval_is_rejected(p: float) -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(p)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        dropout(torch.ones(2), p)


def test_bf16_survivors_are_scaled_in_fp32_without_a_rounded_scale(device: torch.device) -> None:
    # Over many values of x the survivors' total equals x's total times the exact 1/(1 − p'):
    # with the scale rounded to bf16 (1/0.9 → 1.109375) it came out 0.16 % low.
    torch.manual_seed(4)
    x = torch.randn(1 << 20).bfloat16().to(device)
    y = dropout(x, 0.1)
    kept = y != 0
    exact = x[kept].double().abs().sum() / (1 - quantised_drop_rate(0.1))
    assert y.dtype == torch.bfloat16 and y.device == x.device
    assert kept.float().mean().item() == pytest.approx(0.9, abs=3e-3)
    assert y[kept].double().abs().sum().item() == pytest.approx(exact.item(), rel=1e-4)
    expected = (x[kept].float() / (1 - quantised_drop_rate(0.1))).bfloat16()
    if device.type == "cpu":
        assert torch.equal(y[kept], expected)
    else:  # a CUDA kernel may multiply by the reciprocal: at most one bf16 rounding apart
        torch.testing.assert_close(y[kept], expected, rtol=2**-7, atol=0)
