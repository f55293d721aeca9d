"""odet.nn.state.DecoderState.reorder: what every row sees is what a plain gather would give,
while the encoder memory stays one row per sentence as long as the caller says the beams stay
grouped."""

import pytest
import torch

from odet.nn.attention import KVCache
from odet.nn.state import DecoderState


def _state(rows: int) -> DecoderState:
    g = torch.Generator().manual_seed(0)
    memory = KVCache(
        torch.randn(rows, 2, 5, 4, generator=g), torch.randn(rows, 2, 5, 4, generator=g)
    )
    own = KVCache()
    with torch.no_grad():  # as in generation: a preallocated buffer with room to spare
        own.append(torch.randn(rows, 2, 3, 4, generator=g), torch.randn(rows, 2, 3, 4, generator=g))
    assert own._key_buffer is not None and own._key_buffer.shape[2] > 3
    mask = torch.rand(rows, 5, generator=g) > 0.7
    return DecoderState({(0, 0): own}, {0: memory}, mask, length=3, stage_counts=(1,))


def _seen(state: DecoderState) -> dict[str, torch.Tensor]:
    """What each batch row reads: memory row ``i // queries_per_row``, its own cache row ``i``."""
    rows = state.self_attn[(0, 0)].key.shape[0]
    memory = torch.arange(rows) // state.memory_kv[0].queries_per_row
    mem, own = state.memory_kv[0], state.self_attn[(0, 0)]
    assert state.memory_padding_mask is not None
    return {
        "memory key": mem.key[memory], "memory value": mem.value[memory],
        "own key": own.key, "own value": own.value, "mask": state.memory_padding_mask[memory],
    }  # fmt: skip


def test_reorders_equal_plain_gathers_through_expansion_beam_moves_pruning_and_shuffles():
    state = _state(3)
    steps = [
        (torch.arange(3).repeat_interleave(2), 2, 3),  # 3 sentences × 2 beams
        (torch.tensor([1, 1, 2, 3, 5, 4]), 2, 3),  # beams move inside their sentences
        (torch.tensor([0, 1, 4, 5]), 2, 2),  # sentence 1 finished: its memory row goes
        (torch.tensor([1, 0, 3, 3]), 2, 2),
        (torch.tensor([3, 0, 2]), 1, 3),  # not grouped: one memory row per batch row
        (torch.tensor([2, 2, 0, 0]), 1, 4),  # stays per row (sentences are not in order)
    ]
    for index, share, memory_rows in steps:
        expected = {name: t[index] for name, t in _seen(state).items()}
        state.reorder(index, rows_per_source=share)
        assert state.memory_kv[0].queries_per_row == share
        assert state.memory_kv[0].key.shape[0] == memory_rows
        for name, tensor in _seen(state).items():
            torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)


def test_moves_inside_sentences_leave_the_memory_tensors_untouched():
    state = _state(2)
    state.reorder(torch.tensor([0, 0, 1, 1]), rows_per_source=2)
    memory_key, mask = state.memory_kv[0].key, state.memory_padding_mask
    state.reorder(torch.tensor([1, 0, 3, 3]), rows_per_source=2)
    assert state.memory_kv[0].key is memory_key and state.memory_padding_mask is mask
    state.reorder(torch.tensor([0, 1]), rows_per_source=2)
    assert state.memory_kv[0].key.shape[0] == 1 and state.memory_kv[0].queries_per_row == 2


def test_a_false_grouping_statement_is_rejected():
    state = _state(2)
    with pytest.raises(ValueError, match="reads different memory rows"):
        state.reorder(torch.tensor([0, 1, 1, 1]), rows_per_source=2)
    with pytest.raises(ValueError, match="divide"):
        state.reorder(torch.tensor([0, 0, 1]), rows_per_source=2)


def test_sharing_is_what_the_caller_says_not_what_the_index_looks_like():
    grouped, per_row = _state(2), _state(2)
    index = torch.tensor([0, 0, 1, 1])
    grouped.reorder(index, rows_per_source=2)
    per_row.reorder(index, rows_per_source=1)
    assert grouped.memory_kv[0].key.shape[0] == 2 and grouped.memory_kv[0].queries_per_row == 2
    assert per_row.memory_kv[0].key.shape[0] == 4 and per_row.memory_kv[0].queries_per_row == 1
    for name, tensor in _seen(grouped).items():
        torch.testing.assert_close(_seen(per_row)[name], tensor, rtol=0, atol=0, msg=name)


def test_batch_size_is_the_rows_of_the_caches_or_unknown_while_empty():
    assert _state(4).batch_size == 4
    shared = _state(2)
    shared.self_attn[(0, 0)] = KVCache()
    shared.memory_kv[0].queries_per_row = 3  # two sentences' beams of three
    assert shared.batch_size == 6
    assert DecoderState({(0, 0): KVCache()}, {}, None, stage_counts=(1,)).batch_size is None
    shared.check_batch(6)
    with pytest.raises(ValueError, match="batch size 5 but the DecoderState holds 6 rows"):
        shared.check_batch(5)
