"""odet.nn.state.DecoderState.reorder: the shared encoder memory moves only when a row changes
sentence, and what every row sees is what a plain gather would give."""

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


def _gathered(state: DecoderState, index: torch.Tensor) -> dict[str, torch.Tensor]:
    mem, own = state.memory_kv[0], state.self_attn[(0, 0)]
    assert state.memory_padding_mask is not None
    return {
        "memory key": mem.key[index], "memory value": mem.value[index],
        "own key": own.key[index], "own value": own.value[index],
        "mask": state.memory_padding_mask[index],
    }  # fmt: skip


def _seen(state: DecoderState) -> dict[str, torch.Tensor]:
    return _gathered(state, torch.arange(state.memory_kv[0].key.shape[0]))


def test_reorders_equal_plain_gathers_through_expansion_beam_moves_and_pruning():
    state = _state(3)
    expand = torch.arange(3).repeat_interleave(2)  # 3 sentences × 2 beams
    within = torch.tensor([1, 1, 2, 3, 5, 4])  # beams move inside their sentences
    prune = torch.tensor([0, 1, 4, 5])  # sentence 1 finished
    for index in (expand, within, prune, torch.tensor([1, 0, 2, 2])):
        expected = _gathered(state, index)
        state.reorder(index)
        for name, tensor in _seen(state).items():
            torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)


def test_moves_inside_sentences_leave_the_memory_tensors_untouched():
    state = _state(2)
    state.reorder(torch.tensor([0, 0, 1, 1]))
    memory_key, mask = state.memory_kv[0].key, state.memory_padding_mask
    state.reorder(torch.tensor([1, 0, 3, 3]))
    assert state.memory_kv[0].key is memory_key and state.memory_padding_mask is mask
    state.reorder(torch.tensor([0, 2]))
    assert state.memory_kv[0].key.shape[0] == 2 and state.memory_kv[0].key is not memory_key
