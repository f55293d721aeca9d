import pytest
import torch
from torch import nn

from odet.blocks import ImplicitEulerBlock, ODEBlock
from tests.blocks.fields import ZeroField


def _contraction(d: int = 5, seed: int = 0) -> nn.Linear:
    """``F(z) = A z`` with spectral norm ½, so the fixed-point iteration converges."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    layer = nn.Linear(d, d, bias=False).double()
    with torch.no_grad():
        layer.weight.copy_(0.5 * a / torch.linalg.matrix_norm(a, ord=2))
    return layer


@pytest.mark.parametrize("iterations", [0, 1, 2, 3])
def test_linear_field_gives_the_truncated_neumann_series(iterations):
    F = _contraction()
    a = F.weight.detach()
    y = torch.randn(3, 5, dtype=torch.float64)
    expected = sum(y @ torch.linalg.matrix_power(a, m).T for m in range(iterations + 2))
    out = ImplicitEulerBlock(F, iterations)(y)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)


def test_many_iterations_solve_the_implicit_euler_equation():
    F = _contraction(seed=1)
    a = F.weight.detach()
    y = torch.randn(3, 5, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(5, dtype=torch.float64) - a, y.T).T  # (I − A) y' = y
    torch.testing.assert_close(ImplicitEulerBlock(F, 60)(y), exact, atol=1e-12, rtol=1e-12)
    h = 0.3
    exact_h = torch.linalg.solve(torch.eye(5, dtype=torch.float64) - h * a, y.T).T
    torch.testing.assert_close(ImplicitEulerBlock(F, 40, h=h)(y), exact_h, atol=1e-12, rtol=1e-12)


def test_zero_iterations_is_explicit_euler_and_zero_field_is_identity():
    torch.manual_seed(0)
    F = nn.Linear(6, 6)
    y = torch.randn(2, 3, 6)
    torch.testing.assert_close(ImplicitEulerBlock(F, 0)(y), ODEBlock(F, "euler")(y))
    torch.testing.assert_close(ImplicitEulerBlock(ZeroField(), 3)(y), y, atol=0, rtol=0)
    block = ImplicitEulerBlock(F)
    assert block.num_stages == 3
    assert sum(p.numel() for p in block.parameters()) == sum(p.numel() for p in F.parameters())


def test_each_iteration_is_a_stage_with_its_own_cache():
    seen = []

    class Recorder(nn.Module):
        def forward(self, z, cache=None):
            seen.append((cache, z.flatten().tolist()))
            return z + 1

    out = ImplicitEulerBlock(Recorder(), 2)(torch.zeros(1, 1, 1), cache=["s0", "s1", "s2"])
    # z_0 = 0 + (0 + 1) = 1, z_1 = 0 + (1 + 1) = 2, z_2 = 0 + (2 + 1) = 3
    assert seen == [("s0", [0.0]), ("s1", [1.0]), ("s2", [2.0])]
    assert out.item() == 3.0
    with pytest.raises(ValueError, match="expected 3 stage caches, got 1"):
        ImplicitEulerBlock(Recorder(), 2)(torch.zeros(1, 1, 1), cache=["s0"])


def test_negative_iterations_are_rejected():
    with pytest.raises(ValueError, match="iterations must be a non-negative int, got -1"):
        ImplicitEulerBlock(ZeroField(), -1)
