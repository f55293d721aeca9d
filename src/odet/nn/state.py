"""Explicit, typed incremental-decoding state."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from odet.nn.attention import KVCache


@dataclass
class DecoderState:
    """Everything an incremental decoder carries between steps.

    ``self_attn`` is keyed by ``(block, stage)``: the stages of an RK decoder block evaluate the
    same self-attention on different inputs, and each stage's keys/values are exact and cacheable
    because attention is causal. ``memory_kv`` is keyed by block: the projected encoder memory,
    computed once and shared by the block's stages and by every step. ``length`` counts the target
    positions already decoded (the position offset of the next token).

    Beam search keeps the memory at one row per sentence: the memory caches and
    ``memory_padding_mask`` hold one row per source and ``memory_kv[l].queries_per_row`` says how
    many consecutive batch rows read it; cross-attention then attends all of a sentence's beams
    at once. The caller of :meth:`reorder` says how the new rows group by source.
    """

    self_attn: dict[tuple[int, int], KVCache]
    memory_kv: dict[int, KVCache]
    memory_padding_mask: Tensor | None
    length: int = 0
    stage_counts: tuple[int, ...] = field(default=())

    @property
    def batch_size(self) -> int | None:
        """The rows this state decodes, or None while it holds nothing that fixes them (a fresh
        language-model state: its first call may have any batch)."""
        for cache in self.self_attn.values():
            if cache.key is not None:
                return cache.key.shape[0]
        for cache in self.memory_kv.values():
            if cache.key is not None:
                return cache.key.shape[0] * cache.queries_per_row
        if self.memory_padding_mask is not None:
            return self.memory_padding_mask.shape[0]
        return None

    def check_batch(self, batch: int) -> None:
        """Raise ``ValueError`` unless new tokens of ``batch`` rows continue this state's rows:
        another batch size would broadcast against the cached rows, or fail deep in torch."""
        rows = self.batch_size
        if rows is not None and rows != batch:
            raise ValueError(
                f"the tokens have batch size {batch} but the DecoderState holds {rows} rows; "
                "continue a state with the rows it was started with (or reorder it first)"
            )

    def block_caches(self, block: int) -> list[KVCache]:
        """The per-stage self-attention caches of ``block``, in stage order."""
        return [self.self_attn[(block, i)] for i in range(self.stage_counts[block])]

    def reorder(self, index: Tensor, *, rows_per_source: int) -> None:
        """Keep/duplicate batch rows: new row ``i`` becomes old row ``index[i]`` (``(N',)``).

        ``rows_per_source`` is the caller's statement that the new rows come in consecutive
        blocks of that many rows reading the same encoder memory row (a sentence's beams): the
        memory is then kept at one row per block, gathered only when blocks are dropped or
        moved. ``1`` gathers the memory to one row per batch row. A false statement is an error.
        """
        if rows_per_source < 1 or index.numel() % rows_per_source:
            raise ValueError(
                f"rows_per_source must be >= 1 and divide the {index.numel()} new rows, got "
                f"{rows_per_source}"
            )
        for cache in self.self_attn.values():
            cache.reorder(index)
        caches = list(self.memory_kv.values())
        shared = caches[0].queries_per_row if caches else 1
        blocks = (index // shared).view(-1, rows_per_source)  # (N' / k, k) memory row per row
        if rows_per_source > 1 and not bool((blocks == blocks[:, :1]).all()):
            raise ValueError(
                f"rows_per_source={rows_per_source}, but a block of new rows reads different "
                "memory rows"
            )
        source = blocks[:, 0]  # (N' / k,) the memory row each block reads
        unchanged = source.numel() == _memory_rows(self) and torch.equal(
            source, torch.arange(source.numel(), device=source.device)
        )
        for cache in caches:
            if not unchanged:
                cache.reorder(source)
            cache.queries_per_row = rows_per_source
        if self.memory_padding_mask is not None and not unchanged:
            self.memory_padding_mask = self.memory_padding_mask.index_select(0, source)


def _memory_rows(state: DecoderState) -> int:
    for cache in state.memory_kv.values():
        if cache.key is not None:
            return cache.key.shape[0]
    if state.memory_padding_mask is not None:
        return state.memory_padding_mask.shape[0]
    return 0
