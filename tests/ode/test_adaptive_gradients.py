"""Gradients through adaptive solves against central finite differences (float64)."""

import pytest
import torch
from torch import nn

from odet.ode import odeint_adaptive


class TinyField(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3).double()

    def forward(self, t, y):
        return torch.tanh(self.linear(y)) - 0.3 * y


def _objective(field: nn.Module, y0: torch.Tensor, backend: str, adjoint: bool) -> torch.Tensor:
    result = odeint_adaptive(
        field,
        y0,
        0.0,
        1.0,
        backend=backend,
        adjoint=adjoint,
        rtol=1e-10,
        atol=1e-10,
        max_steps=10_000,
    )
    weights = torch.linspace(0.5, 1.5, result.y.numel(), dtype=torch.float64).view_as(result.y)
    return (result.y * weights).sum()


@pytest.mark.parametrize(
    ("backend", "adjoint"),
    [("torchode", False), ("torchdiffeq", False), ("torchdiffeq", True)],
)
def test_gradients_match_central_finite_differences(backend, adjoint):
    torch.manual_seed(0)
    field = TinyField()
    y0 = torch.randn(2, 3, dtype=torch.float64)
    field.zero_grad()
    _objective(field, y0, backend, adjoint).backward()
    eps = 1e-6
    for name, param in field.named_parameters():
        analytic = param.grad.clone()
        numeric = torch.zeros_like(param)
        with torch.no_grad():
            for i in range(param.numel()):
                flat = param.view(-1)
                original = flat[i].item()
                flat[i] = original + eps
                up = _objective(field, y0, backend, False).item()
                flat[i] = original - eps
                down = _objective(field, y0, backend, False).item()
                flat[i] = original
                numeric.view(-1)[i] = (up - down) / (2 * eps)
        torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-6, msg=name)
