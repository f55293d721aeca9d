"""odet.nn.attention: the preallocated (no-grad) KV cache equals concatenation; the single-query
(decoding-step) attention path equals SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from odet.nn.attention import CrossAttention, KVCache, SelfAttention, _attention


def _steps(n: int, rows: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(rows, 2, 1, 4, generator=gen), torch.randn(rows, 2, 1, 5, generator=gen))
            for _ in range(n)]  # fmt: skip


def test_no_grad_appends_grow_past_capacity_and_equal_concatenation() -> None:
    steps = _steps(40)  # the buffer starts with room for 16 and must double twice
    cache = KVCache()
    with torch.no_grad():
        for k, v in steps:
            key, value = cache.append(k, v)
    torch.testing.assert_close(key, torch.cat([k for k, _ in steps], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(value, torch.cat([v for _, v in steps], dim=2), rtol=0, atol=0)
    assert cache.length == 40 and key.shape == (3, 2, 40, 4)


def test_reorder_between_appends_matches_the_concatenating_cache() -> None:
    steps = _steps(20)
    fast, slow = KVCache(), KVCache(preallocate=False)
    index = torch.tensor([2, 2, 0])
    with torch.no_grad():
        for t, (k, v) in enumerate(steps):
            for cache in (fast, slow):
                cache.append(k, v)
                if t % 3 == 1:
                    cache.reorder(index)
    torch.testing.assert_close(fast.key, slow.key, rtol=0, atol=0)
    torch.testing.assert_close(fast.value, slow.value, rtol=0, atol=0)


def test_appends_with_grad_enabled_concatenate_and_backpropagate() -> None:
    k = torch.randn(1, 1, 2, 3, requires_grad=True)
    cache = KVCache()
    cache.append(k, k)
    key, _ = cache.append(k * 2, k * 2)
    key.sum().backward()
    torch.testing.assert_close(k.grad, torch.full_like(k, 3.0))


def test_switching_to_no_grad_keeps_the_positions_filled_with_grad() -> None:
    steps = _steps(3)
    cache = KVCache()
    cache.append(*steps[0])
    with torch.no_grad():
        cache.append(*steps[1])
        key, _ = cache.append(*steps[2])
    torch.testing.assert_close(key, torch.cat([k for k, _ in steps], dim=2), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("queries", [1, 5])
def test_few_query_path_matches_sdpa_including_fully_masked_rows(dtype, masked, queries) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 3, t, 8, generator=g, dtype=dtype) for t in (queries, 6, 6))
    mask = None
    if masked:
        mask = torch.rand(4, 1, 1, 6, generator=g) > 0.3
        mask[0] = True
        mask[1] = False  # nothing to attend to: SDPA gives zeros
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    with torch.no_grad():  # the two-matmul path is for inference; training takes SDPA
        got = _attention(q, k, v, mask, dropout=0.0)
    assert torch.equal(
        _attention(q, k, v, mask, 0.0), F.scaled_dot_product_attention(q, k, v, mask)
    )
    assert got.dtype == dtype
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(got.double(), expected, atol=tol, rtol=tol)
    if masked:
        assert got[1].eq(0).all()


@pytest.mark.parametrize(
    ("mask", "got"),
    [
        (torch.zeros(1, 5, dtype=torch.bool), r"torch.bool \(1, 5\)"),  # used to broadcast
        (torch.zeros(3, 5, dtype=torch.bool), r"torch.bool \(3, 5\)"),
        (torch.zeros(2, dtype=torch.bool), r"torch.bool \(2,\)"),
        (torch.ones(2, 5), r"torch.float32 \(2, 5\)"),  # a keep-mask, the other polarity
        (torch.zeros(2, 5, dtype=torch.long), r"torch.int64 \(2, 5\)"),
    ],
)
def test_a_padding_mask_of_the_wrong_dtype_or_shape_is_named(mask, got) -> None:
    x = torch.randn(2, 5, 8)
    attention = SelfAttention(8, 2)
    expected = r"padding_mask must be a bool tensor of shape \(batch, keys\) = \(2, 5\), True at "
    with pytest.raises(ValueError, match=expected + r"padding; got " + got):
        attention(x, padding_mask=mask)
    cross = CrossAttention(8, 2)
    with pytest.raises(ValueError, match=r"memory_padding_mask must be a bool .* " + got):
        cross(x, cross.project_memory(x), memory_padding_mask=mask)


def test_cross_attention_to_the_memory_of_another_batch_is_an_error_not_a_broadcast() -> None:
    cross = CrossAttention(8, 2)
    memory = cross.project_memory(torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="x has batch size 3 but the memory has 1 rows"):
        cross(torch.randn(3, 2, 8), memory)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, length, d_model\)"):
        SelfAttention(8, 2)(torch.randn(5, 8))
