"""Relative position representations (Shaw et al., 2018) as an additive attention-score bias.

For query position i and key position j the distance ``j − i`` is clipped to ``[−k, k]`` and
indexes learned vectors ``a^K, a^V ∈ R^{2k+1 × Dh}`` shared by the heads of one layer::

    e_ij = q_i · (k_j + a^K_{clip(j−i)}) / √Dh          z_i = Σ_j α_ij (v_j + a^V_{clip(j−i)})

The key term is ``q_i · a^K`` gathered from one ``(Tq, 2k+1)`` matmul per head — an additive
bias that ``scaled_dot_product_attention`` takes as its float mask — so the keys-only form (the
ODE Transformer's default) keeps the fused attention kernel. The value term scatters the
attention weights into the ``2k+1`` distance buckets and multiplies once by ``a^V``. Queries are
the last ``Tq`` of ``S`` positions (bottom-right aligned, like the causal mask), so a decoding
step with ``S − 1`` cached keys sees exactly the distances of teacher forcing.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PositionScheme = Literal["sinusoidal", "relative", "both"]
"""How a model sees positions: absolute sinusoids added to the embeddings, relative
representations in every self-attention, or both (the ODE Transformer's released models)."""


class RelativePositions(nn.Module):
    """Learned relative key (and optionally value) embeddings ``(2k+1, Dh)`` of one layer."""

    def __init__(self, head_dim: int, max_distance: int = 8, *, values: bool = False):
        super().__init__()
        if max_distance < 1:
            raise ValueError(f"max_distance must be >= 1, got {max_distance}")
        self.max_distance = max_distance
        self.keys = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        self.values = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim)) if values else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.keys)
        if self.values is not None:
            nn.init.xavier_uniform_(self.values)

    def index(self, num_queries: int, num_keys: int, device: torch.device | None = None) -> Tensor:
        """``(Tq, S)`` bucket of every (query, key) pair: ``clip(j − i, −k, k) + k``, where query
        ``i`` sits at position ``S − Tq + i``."""
        queries = torch.arange(num_keys - num_queries, num_keys, device=device).unsqueeze(1)
        keys = torch.arange(num_keys, device=device).unsqueeze(0)
        k = self.max_distance
        return (keys - queries).clamp(-k, k) + k

    def key_bias(self, q: Tensor, index: Tensor) -> Tensor:
        """``q (B, H, Tq, Dh)`` → the scaled score term ``q_i · a^K_ij / √Dh`` ``(B, H, Tq, S)``."""
        scores = torch.matmul(q, self.keys.to(q.dtype).t()) * q.shape[-1] ** -0.5  # (B,H,Tq,2k+1)
        return scores.gather(-1, index.expand(*q.shape[:2], *index.shape))

    def value_term(self, weights: Tensor, index: Tensor) -> Tensor:
        """Attention ``weights (B, H, Tq, S)`` → ``Σ_j α_ij a^V_ij`` ``(B, H, Tq, Dh)``."""
        if self.values is None:
            raise ValueError("these relative positions have no value embeddings (values=False)")
        buckets = weights.new_zeros(*weights.shape[:-1], self.keys.shape[0])
        buckets.scatter_add_(-1, index.expand_as(weights), weights)  # (B, H, Tq, 2k+1)
        return torch.matmul(buckets, self.values.to(weights.dtype))

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, values={self.values is not None}"


def relative_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    relative: RelativePositions,
    mask: Tensor | None,
    dropout: float = 0.0,
) -> Tensor:
    """Attention of ``q (B, H, Tq, Dh)`` over ``k, v (B, H, S, Dh)`` with relative positions;
    ``mask`` (boolean, True = attend, broadcastable to ``(B, H, Tq, S)``) as in ``attention``."""
    index = relative.index(q.shape[2], k.shape[2], q.device)
    bias = relative.key_bias(q, index)
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf"))
    if relative.values is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + bias
    weights = scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
    weights = weights.nan_to_num(0.0).to(v.dtype)  # rows with every key masked give zeros
    if dropout:
        weights = F.dropout(weights, dropout)
    return torch.matmul(weights, v) + relative.value_term(weights, index)
