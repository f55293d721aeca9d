import math

import pytest
import torch
from torch import nn

from odet.blocks import PredictorCorrectorBlock
from odet.ode import ButcherTableau, rk_step
from tests.blocks.fields import TanhField, ZeroField

# Heun predictor + trapezoidal corrector as one explicit RK method; the tableau's constructor
# verifies the order-2 conditions.
PC_HEUN_TRAPEZOID = ButcherTableau(
    a=((), (1,), (1 / 2, 1 / 2)), b=(1 / 2, 0, 1 / 2), c=(0, 1, 1), order=2, name="pc"
)


def test_fixed_block_equals_hand_formula_and_its_rk_tableau():
    torch.manual_seed(0)
    F = TanhField()
    y = torch.randn(2, 4, 6)
    k1 = F(y)
    k2 = F(y + k1)
    prediction = y + (k1 + k2) / 2
    expected = y + (k1 + F(prediction)) / 2
    block = PredictorCorrectorBlock(F)
    torch.testing.assert_close(block(y), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(block(y), rk_step(F, y, PC_HEUN_TRAPEZOID), atol=1e-6, rtol=1e-6)
    assert block.num_stages == 3
    assert sum(p.numel() for p in block.parameters()) == sum(p.numel() for p in F.parameters())


@pytest.mark.parametrize("scheme", ["learned", "ema"])
def test_trainable_coefficients_start_as_the_fixed_block(scheme):
    torch.manual_seed(1)
    F = TanhField()
    y = torch.randn(2, 4, 6)
    block = PredictorCorrectorBlock(F, "rk2", scheme)
    torch.testing.assert_close(block(y), PredictorCorrectorBlock(F)(y), atol=1e-6, rtol=1e-6)
    block(y).pow(2).sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, (scheme, name)
    own = {n for n, _ in block.named_parameters() if not n.startswith("field.")}
    assert own == (
        {"predictor_coefficients.alpha_logit", "corrector_coefficients.weight"}
        if scheme == "ema"
        else {"predictor_coefficients.weight", "corrector_coefficients.weight"}
    )


def test_converges_at_second_order_on_a_linear_ode():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(4, 4, generator=g, dtype=torch.float64)
    a = (m - m.T) / 2 - 0.2 * torch.eye(4, dtype=torch.float64)
    y0 = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64)
    exact = torch.linalg.matrix_exp(a) @ y0
    log_h, log_err = [], []
    for n in (16, 32, 64, 128):
        block = PredictorCorrectorBlock(lambda y: a @ y, h=1.0 / n)  # type: ignore[arg-type]
        y = y0
        for _ in range(n):
            y = block(y)
        log_h.append(math.log(1.0 / n))
        log_err.append(math.log((y - exact).norm().item()))
    slope = (log_err[-1] - log_err[0]) / (log_h[-1] - log_h[0])
    assert slope == pytest.approx(2.0, abs=0.3)


@pytest.mark.parametrize("scheme", ["fixed", "learned", "ema"])
def test_zero_field_gives_identity(scheme):
    y = torch.randn(2, 3, 6)
    torch.testing.assert_close(PredictorCorrectorBlock(ZeroField(), "rk4", scheme)(y), y)


def test_each_stage_gets_its_own_cache_and_the_corrector_sees_the_prediction():
    seen = []

    class Recorder(nn.Module):
        def forward(self, z, cache=None):
            seen.append((cache, z.clone()))
            return torch.ones_like(z)

    y = torch.zeros(1, 1, 2)
    out = PredictorCorrectorBlock(Recorder())(y, cache=["k1", "k2", "corrector"])
    assert [c for c, _ in seen] == ["k1", "k2", "corrector"]
    assert [z.flatten().tolist() for _, z in seen] == [[0, 0], [1, 1], [1, 1]]
    torch.testing.assert_close(out, torch.ones(1, 1, 2))
    with pytest.raises(ValueError, match="expected 3 stage caches, got 2"):
        PredictorCorrectorBlock(Recorder())(y, cache=["a", "b"])


def test_gated_and_unknown_schemes_are_rejected():
    with pytest.raises(
        ValueError, match=r"must be one of \['fixed', 'learned', 'ema'\], got 'gated'"
    ):
        PredictorCorrectorBlock(TanhField(), "rk2", "gated")  # type: ignore[arg-type]
