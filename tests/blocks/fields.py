"""Small fields for block tests: a smooth nonlinear one and the zero field."""

import torch
from torch import nn


class TanhField(nn.Module):
    """F(z) = W2 tanh(W1 z)."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 12), nn.Tanh(), nn.Linear(12, d))

    def forward(self, z):
        return self.net(z)


class ZeroField(nn.Module):
    """F(z) = 0, accepting (and ignoring) any keyword arguments."""

    def forward(self, z, **_):
        return torch.zeros_like(z)
