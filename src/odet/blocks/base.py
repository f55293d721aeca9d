"""What every stack shares: a list of blocks, each over its own field, with a stage count; the
result every encoder returns; and the one way a block evaluates its field at a stage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from odet.ode import SolveStats
from odet.ode.runge_kutta import StageFn

STAGE_CACHES = "cache"
"""The keyword that carries a block's per-stage caches (one entry per stage), and the one its
field receives at each stage (that stage's entry)."""


def stage_evaluator(
    field: nn.Module,
    num_stages: int,
    caches: Sequence[Any] | None,
    field_kwargs: Mapping[str, Any],
) -> StageFn:
    """``f(i, z)``: the field at stage ``i``, ``field(z, cache=caches[i], **field_kwargs)``.

    Without ``caches`` (no decoder state) the field gets no cache argument at all; with them,
    there must be one per stage (the decoder's (block, stage) self-attention caches).
    """
    if caches is None:
        return lambda i, z: field(z, **field_kwargs)
    if len(caches) != num_stages:
        noun = "stage cache" if num_stages == 1 else "stage caches"
        raise ValueError(f"expected {num_stages} {noun}, got {len(caches)}")
    return lambda i, z: field(z, **{STAGE_CACHES: caches[i]}, **field_kwargs)


@dataclass(frozen=True)
class StackResult:
    """What an encoder returns: the state ``y (B, T, D)`` and, for continuous encoders, the
    statistics of their ODE solves (``None`` for discrete stacks)."""

    y: Tensor
    stats: SolveStats | None = None


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
        caches = kwargs.get(STAGE_CACHES)
        if self.checkpoint_blocks and torch.is_grad_enabled() and caches is None:
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

    def integrate(self, y: Tensor, **kwargs: Any) -> StackResult:
        """``forward`` as a :class:`StackResult` (no statistics): the result every encoder
        returns, discrete or continuous (``ContinuousEncoder.integrate``)."""
        return StackResult(self(y, **kwargs))


def arguments_of(
    block: int, block_kwargs: Sequence[Mapping[str, Any]] | None, kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of block ``block``: the shared ones and its own."""
    if block_kwargs is None:
        return dict(kwargs)
    return {**kwargs, **block_kwargs[block]}
