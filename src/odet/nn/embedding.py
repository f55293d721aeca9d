"""Token embeddings and sinusoidal positions."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TokenEmbedding(nn.Embedding):
    """``nn.Embedding`` scaled by ``√D`` (Vaswani et al.), initialised ``N(0, D^-1/2)``, with a
    zero padding row — the usual recipe when the matrix is shared with the output projection."""

    def __init__(self, num_embeddings: int, d_model: int, padding_idx: int, scale: bool = True):
        super().__init__(num_embeddings, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model) if scale else 1.0
        nn.init.normal_(self.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.weight[padding_idx].zero_()

    def forward(self, tokens: Tensor) -> Tensor:
        """``(B, T)`` ids → ``(B, T, D)``."""
        return super().forward(tokens) * self.scale


def sinusoidal_table(num_positions: int, d_model: int) -> Tensor:
    """``(P, D)``: sines in the first half of the features, cosines in the second."""
    half = d_model // 2
    freq = torch.exp(
        -math.log(10000.0) * torch.arange(half, dtype=torch.float64) / max(half - 1, 1)
    )
    angles = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([angles.sin(), angles.cos()], dim=1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1, dtype=torch.float64)], dim=1)
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal position encodings for positions ``0 … max_positions − 1``."""

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.max_positions = max_positions
        self.register_buffer("table", sinusoidal_table(max_positions, d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Encodings of positions ``offset … offset + length − 1``: ``(length, D)``."""
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds the model's max_positions="
                f"{self.max_positions}; truncate the input or build the model with larger "
                "max_positions"
            )
        return self.table[offset : offset + length]
