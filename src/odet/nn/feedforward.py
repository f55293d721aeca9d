"""Position-wise feed-forward network."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

from odet.nn.dropout import Dropout

Activation = Literal["relu", "gelu"]
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """``Linear(D, ffn) → activation → dropout → Linear(ffn, D)``: ``(B, T, D) -> (B, T, D)``."""

    def __init__(
        self,
        d_model: int,
        ffn_dim: int,
        *,
        activation: Activation = "relu",
        activation_dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}"
            )
        self.fc1 = nn.Linear(d_model, ffn_dim, bias=bias)
        self.fc2 = nn.Linear(ffn_dim, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]
        self.dropout = Dropout(activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.dropout(self.activation(self.fc1(x))))
