"""Language-model data: vocabulary, split, resumable windows, the exact evaluation pass."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from odet.data.lm import (
    CharVocabulary,
    WindowSampler,
    evaluation_batches,
    read_text,
    split_text,
)
from odet.data.text import DataError

SHAKESPEARE = Path(__file__).resolve().parents[3] / "shared" / "data" / "tinyshakespeare"


def test_tiny_shakespeare_gives_nanogpts_vocabulary_and_split():
    path = SHAKESPEARE / "input.txt"
    if not path.is_file():
        pytest.skip("shared data not present")
    text = read_text(path)
    vocab = CharVocabulary.from_text(text)
    train, valid = split_text(text)
    assert vocab.size == 65 and len(text) == 1_115_394
    assert (len(train), len(valid)) == (1_003_854, 111_540)  # nanoGPT's prepare.py split
    assert vocab.decode(vocab.encode(valid[:200])) == valid[:200]


def test_encoding_unknown_characters_names_them():
    vocab = CharVocabulary.from_text("abc ")
    with pytest.raises(DataError, match=r"2 character\(s\) outside the model's 4-character "
                       r"vocabulary: 'Z', 'é'"):  # fmt: skip
        vocab.encode("a Zé")


def test_vocabulary_round_trips_through_a_file(tmp_path):
    vocab = CharVocabulary.from_text("hello, world\n")
    vocab.save(tmp_path / "vocab.json")
    assert CharVocabulary.load(tmp_path / "vocab.json") == vocab


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the text is empty"),
        (b" \n\t", "the text is empty"),
        (b"ab\xffcd", "not valid UTF-8"),
        ("ab\ncd".encode("utf-16-le"), r"not UTF-8 text \(line 1 holds a NUL byte"),
        ("ab\ncd".encode("utf-16"), "is UTF-16 text"),
    ],
)
def test_unusable_text_files_are_data_errors(tmp_path, content, message):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_text(path)
    with pytest.raises(DataError, match="not a file"):
        read_text(tmp_path)


def test_decoding_an_id_outside_the_vocabulary_raises_instead_of_wrapping():
    vocab = CharVocabulary("ab")
    for ids in ([-1], [2]):
        with pytest.raises(ValueError, match=f"id {ids[0]} is outside the 2-character"):
            vocab.decode(ids)
    with pytest.raises(TypeError, match="integer token ids"):
        vocab.decode([0.0])


def test_a_float_stream_is_refused_instead_of_truncated_to_zeros():
    with pytest.raises(TypeError, match="stream must hold integer token ids, got torch.float32"):
        WindowSampler(torch.rand(20), 2, 2, 0)
    with pytest.raises(TypeError, match="integer token ids"):
        next(evaluation_batches(torch.rand(20), 2, 2))
    with pytest.raises(ValueError, match="stream must be 1-D"):
        next(evaluation_batches(torch.arange(20).view(4, 5), 2, 2))


@pytest.mark.parametrize(
    ("block_size", "batch_size", "error", "message"),
    [
        (0, 2, ValueError, "block_size=0 must be >= 1"),
        (2, 0, ValueError, "batch_size=0 must be >= 1"),
        (2.5, 2, TypeError, "block_size must be an int, got 2.5"),
    ],
)
def test_evaluation_batches_refuse_sizes_below_one_or_not_integers(
    block_size, batch_size, error, message
):
    with pytest.raises(error, match=message):
        next(evaluation_batches(torch.arange(20), block_size, batch_size))


def test_window_sampler_refuses_bad_sizes_seeds_and_batch_numbers():
    stream = torch.arange(20)
    with pytest.raises(TypeError, match="block_size must be an int, got 2.5"):
        WindowSampler(stream, 2.5, 2, 0)
    with pytest.raises(ValueError, match="seed=-5 must be >= 0"):
        WindowSampler(stream, 2, 2, -5)
    with pytest.raises(ValueError, match="k=-1 must be >= 0"):
        WindowSampler(stream, 2, 2, 0).batch(-1)
    big = WindowSampler(stream, 2, 2, 2**62)  # overflowed torch's seed before
    assert torch.equal(big.batch(3).x, big.batch(3).x)


def test_valid_fraction_must_be_a_number():
    with pytest.raises(TypeError, match="valid_fraction must be a number, got '0.5'"):
        split_text("abc", "0.5")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"type": "char"}', "needs 'chars', a string"),
        (b'{"type": "char", "chars": 5}', "needs 'chars', a string"),
        (b'{"type": "char", "chars": "ba"}', "must be sorted and distinct"),
        (b"not json", r"not a character vocabulary \(not UTF-8 JSON\)"),
        (b"\xff\xfe", "is UTF-16 text"),
    ],
)
def test_a_malformed_vocabulary_file_is_a_data_error_naming_it(tmp_path, content, message):
    """A missing 'chars' was a KeyError, bad JSON a JSONDecodeError without the file name."""
    path = tmp_path / "vocab.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"vocab\.json.*{message}"):
        CharVocabulary.load(path)
    with pytest.raises(DataError, match="not found"):
        CharVocabulary.load(tmp_path / "none.json")


def test_a_gzip_text_file_reads_as_its_text(tmp_path):
    path = tmp_path / "input.txt.gz"
    path.write_bytes(gzip.compress(b"to be, or not to be\n"))
    assert read_text(path) == "to be, or not to be\n"


def test_batch_k_depends_only_on_seed_and_k():
    stream = torch.arange(1000) % 97
    a = WindowSampler(stream, block_size=8, batch_size=4, seed=3)
    b = WindowSampler(stream, block_size=8, batch_size=4, seed=3)
    assert torch.equal(a.batch(5).x, b.batch(5).x)  # a resumed run draws the same batch 5
    assert not torch.equal(a.batch(5).x, a.batch(6).x)
    batch = a.batch(0)
    assert torch.equal(batch.y[:, :-1], batch.x[:, 1:])  # targets are the next tokens
    starts = batch.x[:, 0]
    assert torch.equal(batch.x, (starts.unsqueeze(1) + torch.arange(8)) % 97)


def test_a_stream_shorter_than_a_window_is_rejected():
    with pytest.raises(DataError, match="fewer than block_size \\+ 1 = 65"):
        WindowSampler(torch.arange(64), block_size=64, batch_size=2, seed=0)


@pytest.mark.parametrize("length", [2, 17, 33, 100])
def test_the_evaluation_pass_predicts_every_token_once(length):
    stream = torch.arange(length)
    targets, inputs = [], []
    for batch in evaluation_batches(stream, block_size=8, batch_size=3):
        targets += batch.y.flatten().tolist()
        inputs += batch.x.flatten().tolist()
        assert torch.equal(batch.y, batch.x + 1)
    assert sorted(targets) == list(range(1, length))
