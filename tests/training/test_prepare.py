"""Data preparation: splits read, tokenizer trained once, sources truncated, lengths filtered."""

from __future__ import annotations

import json
import logging

import pytest

from odet.data import DataError, ParallelDataset, TokenizerPair
from odet.training.config import DataConfig, LoopConfig
from odet.training.distributed import DistributedContext
from odet.training.prepare import (
    apply_length_filter,
    encode_split,
    has_tokenizer,
    make_batcher,
    prepare_data,
    prepare_tokenizer,
    read_split,
    read_valid_split,
    train_tokenizers,
    truncate_sources,
)

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "then",
    "it",
    "ran",
    "far",
    "away",
    "from",
    "home",
    "today",
]


def _write_text(directory, name, lines):
    (directory / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture
def corpus(tmp_path):
    sources = [" ".join(WORDS[i % 7 : i % 7 + 2 + i % 5]) for i in range(40)]
    targets = [s.upper() for s in sources]
    sources[5] = ""  # an empty side: the reader skips the pair
    _write_text(tmp_path, "train.src", sources)
    _write_text(tmp_path, "train.tgt", targets)
    _write_text(tmp_path, "valid.src", sources[:10])
    _write_text(tmp_path, "valid.tgt", targets[:10])
    return tmp_path


def _data(directory, **overrides) -> DataConfig:
    options = dict(
        data_dir=str(directory),
        train=("train.src", "train.tgt"),
        valid=("valid.src", "valid.tgt"),
        vocab_size=40,
    )
    options.update(overrides)
    return DataConfig(**options)


def test_read_split_reads_text_pairs_skipping_empty_sides_and_logs_the_count(corpus, caplog):
    with caplog.at_level(logging.INFO, logger="odet.train"):
        pairs = read_split(_data(corpus), ("train.src", "train.tgt"))
    assert len(pairs) == 39 and 6 not in pairs.line_numbers
    assert pairs.target[0] == pairs.source[0].upper()
    assert "read train.src: 39 pairs; skipped 1 of 40 lines (empty 1)" in caplog.text


def test_skipped_lines_are_logged_per_reason_in_train_log(corpus, tmp_path):
    from odet.training import TrainConfig, train

    with open(corpus / "train.src", "ab") as handle:
        handle.write(b"caf\xe9 latin-1\n\n")
    with open(corpus / "train.tgt", "a", encoding="utf-8") as handle:
        handle.write("CAFE\nEMPTY SOURCE\n")
    config = {
        "output_dir": str(tmp_path / "run"),
        "data": {"data_dir": str(corpus), "train": ["train.src", "train.tgt"], "vocab_size": 40},
        "model": {"d_model": 16, "num_heads": 2, "ffn_dim": 16, "encoder_layers": 1},
        "train": {"max_updates": 1, "max_tokens": 200, "progress": False},
        "optim": {"warmup_updates": 1},
    }
    config["model"]["decoder_layers"] = 1
    config["train"].update(valid_metric="none", best_metric="loss")
    train(TrainConfig.from_dict(config))
    log = (tmp_path / "run" / "train.log").read_text()
    assert "read train.src: 39 pairs; skipped 3 of 42 lines (empty 2, invalid_utf8 1)" in log


def test_read_split_reads_json_lines_fields(tmp_path):
    records = [{"src": f"a{i}", "tgt": f"b{i}"} for i in range(3)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    data = DataConfig(
        data_dir=str(tmp_path),
        format="jsonl",
        train=("train.jsonl",),
        source_field="src",
        target_field="tgt",
    )
    pairs = read_split(data, data.train)
    assert pairs.source == ("a0", "a1", "a2") and pairs.target == ("b0", "b1", "b2")


def test_read_valid_split_applies_the_limit_and_is_none_without_a_split(corpus):
    assert len(read_valid_split(_data(corpus))) == 9  # line 6 is empty
    assert len(read_valid_split(_data(corpus, valid_limit=4))) == 4
    assert read_valid_split(_data(corpus, valid=())) is None


def test_truncate_sources_cuts_sources_only():
    dataset = ParallelDataset([[5, 6, 7, 8], [9]], [[10, 11, 12], [13]])
    cut = truncate_sources(dataset, 2)
    assert [cut[i][0].tolist() for i in range(2)] == [[5, 6], [9]]
    assert [cut[i][1].tolist() for i in range(2)] == [[10, 11, 12], [13]]


def test_length_filter_drops_long_pairs_and_refuses_to_drop_them_all(corpus):
    dataset = ParallelDataset([[5] * 3, [5] * 9, [5] * 2], [[6] * 3, [6] * 2, [6] * 8])
    kept = apply_length_filter(_data(corpus, max_source_tokens=5, max_target_tokens=5), dataset)
    assert [[side.tolist() for side in kept[i]] for i in range(len(kept))] == [[[5] * 3, [6] * 3]]
    with pytest.raises(DataError, match="dropped every training pair"):
        apply_length_filter(_data(corpus, max_source_tokens=1), dataset)


def test_encode_split_equals_the_tokenizer_ids_and_filters_only_when_asked(corpus):
    data = _data(corpus, max_source_tokens=4, truncate_source=0)
    pairs = read_split(data, data.train)
    tokenizers = train_tokenizers(data, pairs)
    encoded = encode_split(data, pairs, tokenizers, filter_lengths=False)
    reference = ParallelDataset.from_texts(pairs.source, pairs.target, tokenizers)
    assert len(encoded) == len(pairs)
    for i in range(len(pairs)):
        assert [side.tolist() for side in encoded[i]] == [side.tolist() for side in reference[i]]
    filtered = encode_split(data, pairs, tokenizers, filter_lengths=True)
    assert 0 < len(filtered) < len(pairs)


def test_tokenizers_are_joint_or_one_per_side(corpus):
    pairs = read_split(_data(corpus), ("train.src", "train.tgt"))
    assert train_tokenizers(_data(corpus), pairs).is_joint
    assert not train_tokenizers(_data(corpus, joint_vocab=False), pairs).is_joint


def test_prepare_tokenizer_trains_once_and_keeps_a_saved_one(corpus, tmp_path):
    data = _data(corpus)
    pairs = read_split(data, data.train)
    directory = tmp_path / "tok"
    assert not has_tokenizer(directory)
    prepare_tokenizer(data, pairs, directory)
    assert has_tokenizer(directory)
    saved = {p.name: p.read_bytes() for p in directory.iterdir()}
    prepare_tokenizer(_data(corpus, vocab_size=30), pairs, directory)  # a resumed run
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == saved


def test_prepare_data_gives_the_encoded_splits_of_a_single_process(corpus, tmp_path):
    data = _data(corpus)
    prepared = prepare_data(data, tmp_path / "tok", DistributedContext())
    tokenizers = TokenizerPair.load(tmp_path / "tok")
    assert prepared.tokenizers.source.vocab_size == tokenizers.source.vocab_size
    assert len(prepared.train) == 39
    assert prepared.valid is not None and len(prepared.valid.dataset) == 9
    assert prepared.valid.pairs.source == read_valid_split(data).source


def test_make_batcher_shards_the_epoch_between_ranks():
    dataset = ParallelDataset([[5] * (1 + i % 4) for i in range(40)], [[6, 7]] * 40)
    train = LoopConfig(max_tokens=16)
    whole = make_batcher(dataset, train, seed=1, num_shards=1, shard_index=0)
    halves = [make_batcher(dataset, train, seed=1, num_shards=2, shard_index=i) for i in (0, 1)]
    assert whole.num_batches == halves[0].num_batches
    assert len(halves[0]) == len(halves[1]) == whole.num_batches // 2
    first, second = (list(h) for h in halves)
    assert not {tuple(b) for b in first} & {tuple(b) for b in second}


def test_a_missing_test_file_is_an_error_before_the_tokenizer_is_trained(corpus, tmp_path):
    data = _data(corpus, test=("test.src", "test.tgt"))
    with pytest.raises(DataError, match="test.src"):
        prepare_data(data, tmp_path / "tok", DistributedContext())
    assert not has_tokenizer(tmp_path / "tok")


def test_a_misaligned_test_split_is_an_error_before_training(corpus, tmp_path):
    _write_text(corpus, "test.src", ["a b", "c d"])
    _write_text(corpus, "test.tgt", ["A B"])
    with pytest.raises(DataError, match="test.tgt"):
        prepare_data(
            _data(corpus, test=("test.src", "test.tgt")), tmp_path / "t", DistributedContext()
        )


def test_a_validation_split_with_nothing_left_after_skipping_is_an_error(corpus, tmp_path):
    _write_text(corpus, "empty.src", ["", ""])
    _write_text(corpus, "empty.tgt", ["A", "B"])
    data = _data(corpus, valid=("empty.src", "empty.tgt"))
    with pytest.raises(DataError, match=r"data.valid \['empty.src', 'empty.tgt'\] has no pairs"):
        prepare_data(data, tmp_path / "tok", DistributedContext())


def test_pairs_longer_than_the_position_table_are_filtered_or_cut_with_counts(
    corpus, tmp_path, caplog
):
    full = prepare_data(_data(corpus), tmp_path / "tok", DistributedContext())
    valid = full.valid.dataset
    positions = max(int(valid.source_lengths.max()), int(valid.target_lengths.max()))
    with caplog.at_level(logging.INFO, logger="odet.train"):
        fitted = prepare_data(
            _data(corpus), tmp_path / "tok", DistributedContext(), max_positions=positions
        )
    limit = positions - 1
    assert max(fitted.train.source_lengths.max(), fitted.train.target_lengths.max()) <= limit
    assert 0 < len(fitted.train) < len(full.train)
    cut = fitted.valid.dataset
    assert len(cut) == len(valid)
    assert max(cut.source_lengths.max(), cut.target_lengths.max()) <= limit
    assert f"to the model's {positions} positions" in caplog.text
    assert f"'kept': {len(fitted.train)}" in caplog.text
