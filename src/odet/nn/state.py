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
    positions already decoded (the position offset of the next token). ``memory_rows`` is the
    source row each batch row's memory came from (None: row i from row i).
    """

    self_attn: dict[tuple[int, int], KVCache]
    memory_kv: dict[int, KVCache]
    memory_padding_mask: Tensor | None
    length: int = 0
    stage_counts: tuple[int, ...] = field(default=())
    memory_rows: Tensor | None = None

    def block_caches(self, block: int) -> list[KVCache]:
        """The per-stage self-attention caches of ``block``, in stage order."""
        return [self.self_attn[(block, i)] for i in range(self.stage_counts[block])]

    def reorder(self, index: Tensor) -> None:
        """Keep/duplicate batch rows for beam search: row i becomes old row ``index[i]``."""
        for cache in self.self_attn.values():
            cache.reorder(index)
        rows = self.memory_rows
        if rows is None:
            rows = torch.arange(_batch_size(self), device=index.device)
        new_rows = rows.index_select(0, index)
        self.memory_rows = new_rows
        if torch.equal(new_rows, rows):
            return  # every row keeps its sentence: beams moved within sentences, memory is shared
        for cache in self.memory_kv.values():
            cache.reorder(index)
        if self.memory_padding_mask is not None:
            self.memory_padding_mask = self.memory_padding_mask.index_select(0, index)


def _batch_size(state: DecoderState) -> int:
    for cache in (*state.memory_kv.values(), *state.self_attn.values()):
        if cache.key is not None:
            return cache.key.shape[0]
    if state.memory_padding_mask is not None:
        return state.memory_padding_mask.shape[0]
    raise ValueError("cannot reorder an empty DecoderState")
