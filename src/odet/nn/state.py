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

    Beam search keeps the memory at one row per sentence: while every sentence's rows are
    consecutive and equally many (its beams), the memory caches and ``memory_padding_mask`` hold
    one row per sentence and ``memory_kv[l].queries_per_row`` says how many batch rows share it;
    cross-attention then attends all of a sentence's beams at once. Any other reorder gathers the
    memory to one row per batch row.
    """

    self_attn: dict[tuple[int, int], KVCache]
    memory_kv: dict[int, KVCache]
    memory_padding_mask: Tensor | None
    length: int = 0
    stage_counts: tuple[int, ...] = field(default=())

    def block_caches(self, block: int) -> list[KVCache]:
        """The per-stage self-attention caches of ``block``, in stage order."""
        return [self.self_attn[(block, i)] for i in range(self.stage_counts[block])]

    def reorder(self, index: Tensor) -> None:
        """Keep/duplicate batch rows for beam search: row i becomes old row ``index[i]``."""
        for cache in self.self_attn.values():
            cache.reorder(index)
        caches = list(self.memory_kv.values())
        group = caches[0].queries_per_row if caches else 1
        source = index // group  # the memory row each new row reads
        runs, counts = torch.unique_consecutive(source, return_counts=True)
        share = int(counts[0]) if len(counts) else 1
        if bool((counts == share).all()) and bool((runs[1:] > runs[:-1]).all()):
            # grouped: one memory row per sentence, finished sentences' rows dropped (if any)
            gather = None if len(runs) == _memory_rows(self) else runs
        else:
            gather, share = source, 1
        for cache in caches:
            if gather is not None:
                cache.reorder(gather)
            cache.queries_per_row = share
        if self.memory_padding_mask is not None and gather is not None:
            self.memory_padding_mask = self.memory_padding_mask.index_select(0, gather)


def _memory_rows(state: DecoderState) -> int:
    for cache in state.memory_kv.values():
        if cache.key is not None:
            return cache.key.shape[0]
    if state.memory_padding_mask is not None:
        return state.memory_padding_mask.shape[0]
    return 0
