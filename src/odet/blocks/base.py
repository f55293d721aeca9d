"""What every stack shares: a list of blocks, each over its own field, with a stage count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


class Stack(nn.Module):
    """An integrator over a depth of layers: ``forward(y (B, T, D)) -> (B, T, D)``.

    ``blocks[l]`` owns layer ``l`` as ``blocks[l].field`` and evaluates it ``num_stages`` times
    per forward; each evaluation is a *stage* with its own decoder self-attention cache, so a
    decoder's state holds ``stage_counts[l]`` caches for block ``l``. Keyword arguments of
    ``forward`` reach every block, ``block_kwargs[l]`` only block ``l`` (its caches, its
    projected encoder memory).
    """

    blocks: nn.ModuleList
    checkpoint_blocks: bool = False
    """Activation checkpointing per block: a training forward keeps only each block's input
    and recomputes its stages in the backward pass, so an ``s``-stage RK stack stores about as
    many activations as an Euler stack, for one extra forward of compute. Incremental decoding
    (blocks with caches) and no-grad forwards are never checkpointed."""

    def run_block(self, block: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """``block(*args, **kwargs)``, checkpointed when ``checkpoint_blocks`` applies."""
        if self.checkpoint_blocks and torch.is_grad_enabled() and kwargs.get("cache") is None:
            return checkpoint(block, *args, use_reentrant=False, **kwargs)
        return block(*args, **kwargs)

    @property
    def stage_counts(self) -> tuple[int, ...]:
        """Layer evaluations per block: the (block, stage) self-attention caches it needs."""
        return tuple(block.num_stages for block in self.blocks)

    def forward(
        self,
        y: Tensor,
        *,
        block_kwargs: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Tensor:
        raise NotImplementedError


def arguments_of(
    block: int, block_kwargs: Sequence[Mapping[str, Any]] | None, kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of block ``block``: the shared ones and its own."""
    if block_kwargs is None:
        return dict(kwargs)
    return {**kwargs, **block_kwargs[block]}
