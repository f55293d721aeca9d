from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from odet.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Batch,
    DataError,
    LengthFilter,
    ParallelDataset,
    TokenBudgetBatcher,
    Tokenizer,
    TokenizerPair,
    collate,
    pad_tokens,
)


def test_pad_tokens_frames_and_right_pads() -> None:
    padded = pad_tokens([[7, 8, 9], [5], []], prepend_bos=True, append_eos=True)
    assert padded.dtype == torch.long
    assert padded.tolist() == [
        [BOS_ID, 7, 8, 9, EOS_ID],
        [BOS_ID, 5, EOS_ID, PAD_ID, PAD_ID],
        [BOS_ID, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
    ]


@pytest.mark.parametrize(
    ("sequences", "error", "message"),
    [
        ([[1.5, 2.7]], TypeError, "sequence 0 must hold integer token ids, got float64"),
        ([[4], [np.nan]], TypeError, "sequence 1 must hold integer token ids"),
        (["abc"], TypeError, "sequence 0 must be a sequence of token ids, not str"),
        ([[[1, 2]]], ValueError, r"sequence 0 must be one-dimensional"),
        ([[4, -5]], ValueError, "sequence 0 holds a negative token id -5"),
    ],
)
def test_pad_tokens_refuses_ids_it_would_truncate_or_embed_wrongly(
    sequences: list, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        pad_tokens(sequences)


def test_dataset_refuses_float_ids_instead_of_truncating_them() -> None:
    with pytest.raises(TypeError, match="target example 1 must hold integer token ids"):
        ParallelDataset([[4], [5]], [[6], [7.9]])


def test_select_counts_negative_indices_from_the_end_and_refuses_floats() -> None:
    dataset = ParallelDataset([[4], [5, 6]], [[7], [8]])
    assert dataset.select([-1])[0][0].tolist() == [5, 6]
    assert dataset.batch([-1]).src.tolist() == [[5, 6, EOS_ID]]
    with pytest.raises(TypeError, match="indices must be integers, got float64"):
        dataset.select([0.7])
    with pytest.raises(IndexError, match="index 5 out of range for 2 examples"):
        dataset.select([5])
    with pytest.raises(TypeError, match="index must be an int"):
        dataset[0.5]  # type: ignore[index]


def test_collate_builds_source_decoder_input_and_target() -> None:
    batch = collate([[10, 11], [12]], [[20], [21, 22, 23]], ids=[4, 9])
    assert batch.src.tolist() == [[10, 11, EOS_ID], [12, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 20, PAD_ID, PAD_ID], [BOS_ID, 21, 22, 23]]
    assert batch.tgt_out.tolist() == [[20, EOS_ID, PAD_ID, PAD_ID], [21, 22, 23, EOS_ID]]
    assert batch.ids.tolist() == [4, 9]
    assert (batch.num_src_tokens, batch.num_tgt_tokens) == (5, 6)
    assert batch.num_src_tokens == int(batch.src.ne(PAD_ID).sum())
    assert batch.num_tgt_tokens == int(batch.tgt_out.ne(PAD_ID).sum())
    assert len(batch) == 2


def test_collate_accepts_numpy_arrays_and_defaults_ids() -> None:
    batch = collate([np.array([5, 6], dtype=np.int32)], [np.array([7], dtype=np.int32)])
    assert batch.src.tolist() == [[5, 6, EOS_ID]]
    assert batch.ids.tolist() == [0]


def test_collate_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        collate([[1], [2]], [[3]])
    with pytest.raises(ValueError, match="1 ids for 2 examples"):
        collate([[1], [2]], [[3], [4]], ids=[0])


def test_batch_to_moves_every_tensor_and_keeps_counts() -> None:
    batch = collate([[5, 6]], [[7]]).to("meta")
    tensors = (batch.src, batch.tgt_in, batch.tgt_out, batch.ids)
    assert all(tensor.device.type == "meta" for tensor in tensors)
    assert (batch.num_src_tokens, batch.num_tgt_tokens) == (3, 2)


def test_batch_validates_dtypes_and_shapes() -> None:
    good = collate([[5, 6]], [[7]])
    with pytest.raises(ValueError, match=r"Batch.src must be a 2-D torch.long tensor"):
        Batch(good.src.float(), good.tgt_in, good.tgt_out, good.ids, 3, 2)
    with pytest.raises(ValueError, match="tgt_in .* and tgt_out .* must have the same shape"):
        Batch(good.src, good.tgt_in, good.tgt_out[:, :1], good.ids, 3, 2)


def test_dataset_stores_tokens_in_one_int32_buffer_per_side() -> None:
    dataset = ParallelDataset([[5, 6, 7], [], [8]], [[9], [10, 11], [12]])
    assert len(dataset) == 3
    src, tgt = dataset[1]
    assert (src.tolist(), tgt.tolist()) == ([], [10, 11])
    assert dataset[-1][0].tolist() == [8]
    assert dataset.source_lengths.tolist() == [3, 0, 1]
    assert dataset.source_sizes.tolist() == [4, 1, 2]
    assert dataset.target_sizes.tolist() == [2, 3, 2]
    buffer = dataset[0][0].base
    assert buffer is not None and buffer.dtype == np.int32 and buffer.size == 4
    assert not buffer.flags.writeable
    with pytest.raises(IndexError, match="index 3 out of range for 3 examples"):
        dataset[3]


def test_dataset_rejects_ids_outside_int32() -> None:
    with pytest.raises(ValueError, match=r"source example 0 holds token id -1 outside"):
        ParallelDataset([[-1]], [[1]])
    with pytest.raises(ValueError, match=r"target example 2 holds token id 2147483648 outside"):
        ParallelDataset([[1], [2], [3]], [[1], [], [5, 2**31]])


def test_dataset_batch_equals_collate_of_its_examples() -> None:
    dataset = ParallelDataset([[5, 6, 7], [4], [8]], [[9], [10, 11], [12]])
    batch = dataset.batch([2, 0])
    expected = collate([[8], [5, 6, 7]], [[12], [9]], ids=[2, 0])
    for name in ("src", "tgt_in", "tgt_out", "ids"):
        assert torch.equal(getattr(batch, name), getattr(expected, name)), name


def test_dataset_filter_keeps_passing_pairs_and_reports() -> None:
    dataset = ParallelDataset([[5] * 3, [], [6] * 9, [7]], [[1] * 3, [2], [3], [4]])
    kept, report = dataset.filter(LengthFilter(max_ratio=3.0))
    assert [kept[i][0].tolist() for i in range(len(kept))] == [[5, 5, 5], [7]]
    assert (report.kept, report.source_too_short, report.ratio) == (2, 1, 1)


def test_dataset_from_texts_encodes_each_side_with_its_tokenizer() -> None:
    corpus = ["the cat sat on the mat", "a dog runs in the park"] * 10
    source_tok = Tokenizer.train(corpus, vocab_size=30)
    target_tok = Tokenizer.train(corpus, vocab_size=40)
    pair = TokenizerPair(source_tok, target_tok)
    dataset = ParallelDataset.from_texts(corpus[:2], corpus[:2][::-1], pair, chunk_size=1)
    assert dataset[0][0].tolist() == source_tok.encode(corpus[0])
    assert dataset[0][1].tolist() == target_tok.encode(corpus[1])
    assert target_tok.decode(dataset[1][1]) == corpus[0]


def test_packing_matches_hand_computed_batches() -> None:
    # sizes 3 1 2 5 2 sorted: 1(1) 2(2) 4(2) | 0(3) | 3(5); 3 rows x 2 = 6 fits, 4 x 3 = 12 not.
    batcher = TokenBudgetBatcher([3, 1, 2, 5, 2], [1, 1, 1, 1, 1], max_tokens=6, shuffle=False)
    assert batcher.epoch_batches(0) == [[1, 2, 4], [0], [3]]
    assert len(batcher) == 3


def test_padded_size_is_the_longer_side_and_ties_sort_by_source_size() -> None:
    batcher = TokenBudgetBatcher([1, 4, 2, 1], [4, 1, 4, 3], max_tokens=8, shuffle=False)
    assert batcher.epoch_batches(0) == [[3, 0], [2, 1]]


def test_max_sentences_caps_rows() -> None:
    batcher = TokenBudgetBatcher([1] * 5, [1] * 5, max_tokens=100, max_sentences=2, shuffle=False)
    assert batcher.epoch_batches(0) == [[0, 1], [2, 3], [4]]


def test_example_over_budget_is_an_error_naming_it() -> None:
    with pytest.raises(DataError, match=r"1 example\(s\) exceed max_tokens=5 .*index 2"):
        TokenBudgetBatcher([1, 2, 3], [1, 2, 6], max_tokens=5)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=80),
    max_tokens=st.integers(40, 200),
    max_sentences=st.none() | st.integers(1, 9),
    seed=st.integers(0, 3),
)
def test_every_example_once_per_epoch_within_budget(
    sizes: list[tuple[int, int]], max_tokens: int, max_sentences: int | None, seed: int
) -> None:
    src, tgt = zip(*sizes, strict=True)
    batcher = TokenBudgetBatcher(
        src, tgt, max_tokens=max_tokens, max_sentences=max_sentences, seed=seed
    )
    batches = list(batcher)
    assert sorted(itertools.chain.from_iterable(batches)) == list(range(len(sizes)))
    for batch in batches:
        assert len(batch) * max(max(src[i], tgt[i]) for i in batch) <= max_tokens
        assert max_sentences is None or len(batch) <= max_sentences


def random_sizes(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 50, n), rng.integers(1, 50, n)


def test_batch_order_is_shuffled_per_epoch_and_reproducible() -> None:
    src, tgt = random_sizes()
    first = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=5)
    again = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=5)
    other = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=6)
    epoch0, epoch1 = first.epoch_batches(0), first.epoch_batches(1)
    assert epoch0 != epoch1
    assert sorted(epoch0) == sorted(epoch1)
    assert again.epoch_batches(1) == epoch1
    assert other.epoch_batches(1) != epoch1


def test_iteration_advances_epochs_without_set_epoch() -> None:
    src, tgt = random_sizes()
    batcher = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=1)
    assert list(batcher) == batcher.epoch_batches(0)
    assert batcher.epoch == 1
    assert list(batcher) == batcher.epoch_batches(1)
    batcher.set_epoch(7)
    assert next(iter(batcher)) == batcher.epoch_batches(7)[0]


@pytest.mark.parametrize("consumed", [0, 1, 17, 38, 45])
def test_resume_from_state_continues_with_exactly_the_remaining_batches(consumed: int) -> None:
    src, tgt = random_sizes()
    batcher = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=3)
    assert len(batcher) == 38
    stream = itertools.chain.from_iterable(iter(batcher) for _ in range(3))
    seen = list(itertools.islice(stream, consumed))
    state = batcher.state_dict()
    resumed = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=3)
    resumed.load_state_dict(state)
    everything = batcher.epoch_batches(0) + batcher.epoch_batches(1) + batcher.epoch_batches(2)
    resumed_stream = itertools.chain.from_iterable(iter(resumed) for _ in range(4))
    rest = list(itertools.islice(resumed_stream, len(everything) - consumed))
    assert seen + rest == everything


def test_state_after_last_batch_resumes_into_the_next_epoch() -> None:
    src, tgt = random_sizes()
    batcher = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=3)
    iterator = iter(batcher)
    for _ in range(len(batcher)):
        next(iterator)
    state = batcher.state_dict()
    assert (state["epoch"], state["position"]) == (0, len(batcher))
    resumed = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=3)
    resumed.load_state_dict(state)
    assert list(resumed) == []
    assert list(resumed) == batcher.epoch_batches(1)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"max_tokens": 400}, "fingerprint"),
        ({"seed": 4}, "seed"),
        ({"shuffle": False}, "shuffle"),
        ({"num_shards": 2}, "num_shards"),
    ],
)
def test_state_from_a_different_batcher_is_rejected(changes: dict[str, int], key: str) -> None:
    src, tgt = random_sizes()
    options: dict[str, int] = {"max_tokens": 300, "seed": 3}
    state = TokenBudgetBatcher(src, tgt, **options).state_dict()  # type: ignore[arg-type]
    other = TokenBudgetBatcher(src, tgt, **{**options, **changes})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"batcher state does not match this batcher: {key}="):
        other.load_state_dict(state)


def test_shards_are_disjoint_equal_and_cover_all_but_the_remainder() -> None:
    src, tgt = random_sizes()
    shards = [
        TokenBudgetBatcher(src, tgt, max_tokens=300, seed=2, num_shards=3, shard_index=r)
        for r in range(3)
    ]
    assert shards[0].num_batches == 38
    for epoch in range(3):
        per_shard = [shard.epoch_batches(epoch) for shard in shards]
        assert [len(batches) for batches in per_shard] == [12, 12, 12]
        examples = [set(itertools.chain.from_iterable(batches)) for batches in per_shard]
        for a, b in itertools.combinations(examples, 2):
            assert not a & b
        covered = set().union(*examples)
        assert len(covered) < len(src)
        full = TokenBudgetBatcher(src, tgt, max_tokens=300, seed=2).epoch_batches(epoch)
        assert covered == set(itertools.chain.from_iterable(full[:36]))


def test_one_ranks_state_resumes_every_rank() -> None:
    src, tgt = random_sizes()
    rank0 = TokenBudgetBatcher(src, tgt, max_tokens=300, num_shards=2, shard_index=0)
    rank1 = TokenBudgetBatcher(src, tgt, max_tokens=300, num_shards=2, shard_index=1)
    list(itertools.islice(iter(rank0), 5))
    rank1.load_state_dict(rank0.state_dict())
    assert list(rank1) == rank1.epoch_batches(0)[5:]


def test_more_shards_than_batches_is_an_error() -> None:
    with pytest.raises(DataError, match=r"1 batch\(es\) cannot be split over num_shards=2"):
        TokenBudgetBatcher([1, 1], [1, 1], max_tokens=10, num_shards=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"max_sentences": 0}, "max_sentences=0"),
        ({"num_shards": 2, "shard_index": 2}, "shard_index=2"),
    ],
)
def test_batcher_rejects_invalid_options(kwargs: dict[str, int], message: str) -> None:
    options = {"max_tokens": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        TokenBudgetBatcher([1, 2, 3], [1, 2, 3], **options)  # type: ignore[arg-type]


def test_multi30k_batches_respect_the_budget_on_real_tensors(shared_data: Path) -> None:
    root = shared_data / "multi30k"
    with gzip.open(root / "train.en.gz", "rt") as en, gzip.open(root / "train.de.gz", "rt") as de:
        source = [next(en).strip() for _ in range(2000)]
        target = [next(de).strip() for _ in range(2000)]
    tokenizer = Tokenizer.train(source + target, vocab_size=500)
    dataset = ParallelDataset.from_texts(source, target, TokenizerPair.joint(tokenizer))
    batcher = TokenBudgetBatcher(dataset.source_sizes, dataset.target_sizes, max_tokens=1024)
    seen = 0
    for indices in batcher:
        batch = dataset.batch(indices)
        assert batch.src.numel() <= 1024 and batch.tgt_in.numel() <= 1024
        seen += len(batch)
    assert seen == 2000
    assert tokenizer.decode(dataset.batch([0]).tgt_out[0]) == target[0]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_tokens": float("nan")}, TypeError, "max_tokens must be an int, got nan"),
        ({"max_tokens": float("inf")}, TypeError, "max_tokens must be an int, got inf"),
        ({"max_tokens": 5.5}, TypeError, "max_tokens must be an int, got 5.5"),
        ({"max_sentences": 1.5}, TypeError, "max_sentences must be an int"),
        ({"seed": -1}, ValueError, "seed=-1 must be >= 0"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"num_shards": 2.0}, TypeError, "num_shards must be an int"),
        ({"shuffle": "no"}, TypeError, "shuffle must be a bool"),
    ],
)
def test_batcher_refuses_nan_and_non_integer_options(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    """A NaN budget compared False everywhere: every example went into one batch."""
    options = {"max_tokens": 10, **kwargs}
    with pytest.raises(error, match=message):
        TokenBudgetBatcher([2, 3], [2, 3], **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sizes", "error", "message"),
    [
        ([2.9, 3.9], TypeError, "sizes must be integers, got float64"),
        ([-2, 3], ValueError, "sizes must be >= 0, got -2"),
    ],
)
def test_batcher_refuses_sizes_that_are_not_counts(
    sizes: list[float], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        TokenBudgetBatcher(sizes, [2, 3], max_tokens=3)


def test_epochs_are_non_negative_ints() -> None:
    batcher = TokenBudgetBatcher([2, 3], [2, 3], max_tokens=10)
    with pytest.raises(TypeError, match="epoch must be an int"):
        batcher.epoch_batches(0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch=-1 must be >= 0"):
        batcher.epoch_batches(-1)
