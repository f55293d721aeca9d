"""``grad_through_step_size``: whether gradients also flow through torchode's step sizes."""

import pytest
import torch

from odet.config import ConfigError
from odet.ode import SolverOptions, solve


def _solve(theta: torch.Tensor, **options):
    y0 = torch.tensor([[1.0, 0.5], [0.2, -1.0]])
    return solve(lambda t, y: -theta * y * (1 + y**2), y0, SolverOptions(rtol=1e-3, **options))


def test_detached_step_sizes_keep_the_forward_solve_and_change_only_the_gradient():
    grads, ys = [], []
    for through in (True, False):
        theta = torch.tensor(2.0, requires_grad=True)
        result = _solve(theta, grad_through_step_size=through)
        result.y.sum().backward()
        grads.append(float(theta.grad))
        ys.append(result.y.detach())
    assert torch.equal(ys[0], ys[1])
    assert grads[0] != grads[1]
    # both approximate d/dθ of the exact solution; the detached one through the stages only
    assert grads[1] == pytest.approx(grads[0], rel=0.05)


def test_default_backpropagates_through_the_step_sizes():
    assert SolverOptions().grad_through_step_size


@pytest.mark.parametrize(
    "options",
    [
        {"backend": "torchdiffeq", "grad_through_step_size": False},
        {"fixed_steps": 4, "solver": "rk4", "grad_through_step_size": False},
        {"grad_through_step_size": "no"},
    ],
)
def test_unsupported_or_mistyped_settings_are_rejected(options):
    with pytest.raises(ConfigError, match="grad_through_step_size"):
        SolverOptions(**options)
