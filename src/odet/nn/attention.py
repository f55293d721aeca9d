"""Multi-head attention on ``F.scaled_dot_product_attention``, with an explicit key/value cache.

Self-attention projects queries, keys and values with one fused matrix; cross-attention projects
the encoder memory into keys and values once (``project_memory``) so every stage of an RK decoder
block — and every decoding step — reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from odet.nn.relative import RelativePositions, relative_attention


@dataclass
class KVCache:
    """Keys and values of the positions attended to so far, each ``(B, H, S, Dh)``.

    A self-attention cache grows by ``append`` one decoding step at a time; a cross-attention
    cache is filled once with the projected encoder memory. ``reorder`` follows beam search.

    Under ``torch.no_grad`` (generation) appends write into preallocated buffers whose length
    doubles when full, so a step copies only the new position instead of the whole cache
    (``torch.cat``); ``key``/``value`` are then views of the filled part. ``reorder`` gathers into
    buffers with room for exactly one more position (the next step's). With gradients enabled
    appends concatenate, so autograd sees ordinary out-of-place ops; ``preallocate=False``
    concatenates always. ``queries_per_row`` > 1 marks a memory cache whose row i serves batch
    rows ``i·q … i·q + q − 1`` (the beams of one sentence; ``DecoderState.reorder``).
    """

    key: Tensor | None = None
    value: Tensor | None = None
    preallocate: bool = True
    queries_per_row: int = 1
    _key_buffer: Tensor | None = field(default=None, repr=False)
    _value_buffer: Tensor | None = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[2]

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions' keys/values and return all of them."""
        if not self.preallocate or torch.is_grad_enabled() or key.requires_grad:
            self._key_buffer = self._value_buffer = None
            if self.key is None or self.value is None:
                self.key, self.value = key, value
            else:
                self.key = torch.cat([self.key, key], dim=2)
                self.value = torch.cat([self.value, value], dim=2)
            return self.key, self.value
        old, new = self.length, self.length + key.shape[2]
        if self._key_buffer is None or self._value_buffer is None:
            self._key_buffer, self._value_buffer = _buffer(key, new), _buffer(value, new)
            if self.key is not None and self.value is not None:  # filled while grad was on
                self._key_buffer[:, :, :old] = self.key
                self._value_buffer[:, :, :old] = self.value
        elif self._key_buffer.shape[2] < new:
            key_buffer, value_buffer = _buffer(key, new), _buffer(value, new)
            key_buffer[:, :, :old] = self._key_buffer[:, :, :old]
            value_buffer[:, :, :old] = self._value_buffer[:, :, :old]
            self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self._key_buffer[:, :, old:new] = key
        self._value_buffer[:, :, old:new] = value
        self.key = self._key_buffer[:, :, :new]
        self.value = self._value_buffer[:, :, :new]
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` ``(N',)`` of the batch: row i becomes old row ``index[i]``."""
        if self.key is None or self.value is None:
            return
        if self._key_buffer is not None and self._value_buffer is not None:
            n = self.length
            self._key_buffer = _gather_rows(self._key_buffer, index, n)
            self._value_buffer = _gather_rows(self._value_buffer, index, n)
            self.key = self._key_buffer[:, :, :n]
            self.value = self._value_buffer[:, :, :n]
        else:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


@dataclass
class StaticKVCache:
    """Keys and values in fixed buffers ``(B, H, capacity, Dh)``, for a compiled decoding step.

    ``append`` writes the new positions at ``position`` (a 0-dim long tensor, shared by every
    cache of a state and advanced by its owner) and returns the whole buffers, so the step's
    shapes never change with the sequence length and one compiled graph serves every step;
    ``key_mask`` hides the positions not written yet (and the future ones). The queries of one
    call are positions ``position … position + Tq − 1``.
    """

    key: Tensor
    value: Tensor
    position: Tensor

    @classmethod
    def filled(cls, cache: KVCache, capacity: int, position: Tensor) -> StaticKVCache:
        """Buffers of ``capacity`` positions holding the keys/values of ``cache`` first."""
        if cache.key is None or cache.value is None:
            raise ValueError("cannot fill a static cache from an empty KVCache")
        b, h, n, d = cache.key.shape
        key = cache.key.new_zeros(b, h, capacity, d)
        value = cache.value.new_zeros(b, h, capacity, cache.value.shape[-1])
        key[:, :, :n] = cache.key
        value[:, :, :n] = cache.value
        return cls(key, value, position)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new positions' keys/values ``(B, H, Tq, Dh)``; return the full buffers."""
        index = self.position + torch.arange(key.shape[2], device=key.device)
        self.key.index_copy_(2, index, key)
        self.value.index_copy_(2, index, value)
        return self.key, self.value

    def key_mask(self, num_queries: int) -> Tensor:
        """``(1, 1, Tq, capacity)``, True where query i (position ``position + i``) attends."""
        device = self.key.device
        q = self.position + torch.arange(num_queries, device=device)
        k = torch.arange(self.key.shape[2], device=device)
        return (k.unsqueeze(0) <= q.unsqueeze(1)).view(1, 1, num_queries, -1)


def _gather_rows(buffer: Tensor, index: Tensor, filled: int) -> Tensor:
    """A buffer whose first ``filled`` positions are rows ``index`` of ``buffer``, with room for
    one more.

    Beam search reorders before every step, so the next append fills the buffer exactly and
    ``key``/``value`` are whole contiguous tensors, which the attention matmuls read without the
    copy that a view of a larger buffer costs them in bfloat16.
    """
    _, h, _, d = buffer.shape
    out = buffer.new_empty(index.shape[0], h, filled + 1, d)
    torch.index_select(buffer[:, :, :filled], 0, index, out=out[:, :, :filled])
    return out


def _buffer(like: Tensor, needed: int) -> Tensor:
    """An empty ``(B, H, capacity, Dh)`` buffer for ``needed`` positions, with room to grow."""
    b, h, _, d = like.shape
    return like.new_empty(b, h, max(2 * needed, 16), d)


def _split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, T, H·Dh) -> (B, H, T, Dh)``."""
    b, t, _ = x.shape
    return x.view(b, t, num_heads, -1).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """``(B, H, T, Dh) -> (B, T, H·Dh)``."""
    b, _, t, _ = x.shape
    return x.transpose(1, 2).reshape(b, t, -1)


def attention_mask(
    key_padding_mask: Tensor | None,
    num_queries: int,
    num_keys: int,
    causal: bool,
    device: torch.device | None = None,
) -> Tensor | None:
    """A boolean SDPA mask (True = attend), broadcastable to ``(B, H, Tq, S)``, or None.

    ``key_padding_mask`` is ``(B, S)`` with True at padding. Causal masks are bottom-right aligned:
    query i (of the last ``num_queries`` positions) sees keys ``j ≤ S − Tq + i``, which is what
    incremental decoding with a cache of ``S − Tq`` earlier positions needs. The mask lives on
    ``key_padding_mask``'s device, or on ``device`` without one (the queries' device: a causal
    mask built on the CPU would not reach a GPU attention).
    """
    mask = None
    if causal and num_queries > 1:
        past = num_keys - num_queries
        where = key_padding_mask.device if key_padding_mask is not None else device
        q = torch.arange(num_queries, device=where).unsqueeze(1)
        k = torch.arange(num_keys, device=where).unsqueeze(0)
        mask = (k <= q + past).view(1, 1, num_queries, num_keys)
    if key_padding_mask is not None:
        keep = ~key_padding_mask.view(key_padding_mask.shape[0], 1, 1, num_keys)
        mask = keep if mask is None else mask & keep
    return mask


def check_padding_mask(mask: Tensor, batch: int, keys: int, name: str = "padding_mask") -> None:
    """Raise unless ``mask`` is odet's key padding mask for ``batch`` rows of ``keys`` keys: bool,
    ``(batch, keys)``, True at padding. A ``(1, S)`` mask would broadcast over the batch, a
    0/1 or float mask fails deep in SDPA (and a keep-mask, as Hugging Face's ``attention_mask``,
    has the opposite polarity). Shapes and dtype only: no values are read."""
    if mask.dtype != torch.bool or mask.shape != (batch, keys):
        raise ValueError(
            f"{name} must be a bool tensor of shape (batch, keys) = ({batch}, {keys}), True at "
            f"padding; got {mask.dtype} {tuple(mask.shape)} (a 0/1 mask of the tokens to keep "
            f"has the opposite polarity: pass mask == 0)"
        )


FEW_QUERIES = 16


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
    """SDPA of ``q (B, H, Tq, Dh)`` over ``k, v (B, H, S, Dh)``; ``mask`` True = attend.

    Inference with a few queries per row (a decoding step; a sentence's beams) on CPU takes two
    batched matmuls: the CPU SDPA kernels tile for long queries and are slower on
    decoding-step shapes (``benchmarks/RESULTS.md``). The softmax runs in at least fp32.
    Training always takes SDPA.
    """
    if torch.is_grad_enabled() or dropout or q.shape[2] > FEW_QUERIES or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))  # (B, H, Tq, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
    if mask is not None:  # a row with every key masked gets zeros, as from SDPA
        weights = weights.nan_to_num(0.0)
    return torch.matmul(weights.to(v.dtype), v)


class SelfAttention(nn.Module):
    """Multi-head self-attention ``(B, T, D) -> (B, T, D)`` with fused QKV projection."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        relative: RelativePositions | None = None,
    ):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.relative = relative

    def forward(
        self,
        x: Tensor,
        *,
        padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | StaticKVCache | None = None,
    ) -> Tensor:
        """``x (B, T, D)``; ``padding_mask (B, S)`` True at padded keys (S = T, or the cache's
        length plus T); with ``cache`` the keys/values of earlier positions are reused and the new
        ones appended. A ``StaticKVCache`` takes no padding mask and no relative positions."""
        if x.dim() != 3:
            raise ValueError(f"x must have shape (batch, length, d_model), got {tuple(x.shape)}")
        q, k, v = (_split_heads(t, self.num_heads) for t in self.qkv_proj(x).chunk(3, dim=-1))
        if cache is not None:
            k, v = cache.append(k, v)
        tq, s = q.shape[2], k.shape[2]
        if padding_mask is not None:
            check_padding_mask(padding_mask, q.shape[0], s)
        dropout = self.dropout if self.training else 0.0
        if isinstance(cache, StaticKVCache):
            if self.relative is not None or padding_mask is not None or not causal:
                raise ValueError(
                    "a StaticKVCache serves causal attention without relative "
                    "positions or padding only"
                )
            out = _attention(q, k, v, cache.key_mask(tq), dropout)
        elif self.relative is not None:
            mask = attention_mask(padding_mask, tq, s, causal, q.device)
            out = relative_attention(q, k, v, self.relative, mask, dropout)
        elif causal and padding_mask is None and tq == s:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            mask = attention_mask(padding_mask, tq, s, causal, q.device)
            out = _attention(q, k, v, mask, dropout)
        return self.out_proj(_merge_heads(out))


class CrossAttention(nn.Module):
    """Multi-head attention from decoder states ``(B, T, D)`` to encoder memory ``(B, S, D)``."""

    def __init__(self, d_model: int, num_heads: int, *, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def project_memory(self, memory: Tensor) -> KVCache:
        """Keys and values of the memory ``(B, S, D)``, computed once and reused.

        Without gradients (generation) they are stored contiguous, so the attention matmuls of
        every decoding step read them without copying them again.
        """
        k, v = (_split_heads(t, self.num_heads) for t in self.kv_proj(memory).chunk(2, dim=-1))
        if not torch.is_grad_enabled():
            k, v = k.contiguous(), v.contiguous()
        return KVCache(k, v)

    def forward(
        self, x: Tensor, memory_kv: KVCache, *, memory_padding_mask: Tensor | None = None
    ) -> Tensor:
        """``x (B, T, D)`` attends to the projected memory; ``memory_padding_mask (B, S)``."""
        if memory_kv.key is None or memory_kv.value is None:
            raise ValueError("memory_kv is empty: call project_memory(memory) first")
        q = _split_heads(self.q_proj(x), self.num_heads)  # (N, H, T, Dh)
        n, h, t, d = q.shape
        share = memory_kv.queries_per_row
        if share > 1:  # a sentence's beams as one row of share·T queries: (N / share, H, ·, Dh)
            q = q.view(n // share, share, h, t, d).transpose(1, 2).reshape(n // share, h, -1, d)
        if memory_kv.key.shape[0] != q.shape[0]:
            raise ValueError(
                f"x has batch size {n} but the memory has {memory_kv.key.shape[0]} rows"
                + (f" read by {share} rows each" if share > 1 else "")
                + "; project the memory of this batch's sources"
            )
        if memory_padding_mask is not None:
            check_padding_mask(
                memory_padding_mask, q.shape[0], memory_kv.length, "memory_padding_mask"
            )
        mask = attention_mask(
            memory_padding_mask, q.shape[2], memory_kv.length, causal=False, device=q.device
        )
        dropout = self.dropout if self.training else 0.0
        out = _attention(q, memory_kv.key, memory_kv.value, mask, dropout)
        if share > 1:
            out = out.view(n // share, h, share, t, d).transpose(1, 2).reshape(n, h, t, d)
        return self.out_proj(_merge_heads(out))
