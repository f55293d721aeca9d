from __future__ import annotations

import gzip
import io
import math
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

from odet.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, TokenizerPair

CORPUS = [
    "the cat sat on the mat",
    "a dog runs in the park",
    "the dog and the cat play together",
    "two men are walking down the street",
    "a woman is reading a book in the park",
    "children play football on the green grass",
] * 20


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(CORPUS, vocab_size=60, user_defined_symbols=["#Person1#"])


@pytest.fixture(scope="module")
def multi30k_lines(shared_data: Path) -> list[str]:
    with gzip.open(shared_data / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as handle:
        return [next(handle).strip() for _ in range(2000)]


def test_special_ids_are_the_fixed_constants(tokenizer: Tokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    pieces = [tokenizer.id_to_piece(i) for i in range(4)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]


def test_vocab_size_is_the_requested_size(tokenizer: Tokenizer) -> None:
    assert tokenizer.vocab_size == 60


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_training_is_deterministic_for_same_input_and_seed(
    multi30k_lines: list[str], model_type: str
) -> None:
    first = Tokenizer.train(multi30k_lines, 500, model_type=model_type, seed=3)
    second = Tokenizer.train(multi30k_lines, 500, model_type=model_type, seed=3)
    assert first.to_bytes() == second.to_bytes()
    assert first.vocab_size == 500


def test_sampled_training_depends_on_seed_and_is_reproducible(multi30k_lines: list[str]) -> None:
    def train(seed: int) -> bytes:
        return Tokenizer.train(multi30k_lines, 300, seed=seed, input_sentence_size=500).to_bytes()

    assert train(1) == train(1)
    assert train(1) != train(2)


def test_decode_inverts_encode_on_training_text(multi30k_lines: list[str]) -> None:
    tokenizer = Tokenizer.train(multi30k_lines, 500)
    for line in multi30k_lines[:200]:
        assert tokenizer.decode(tokenizer.encode(line)) == line


def test_decode_stops_at_eos_and_skips_pad_and_bos(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("the cat sat on the mat")
    framed = [BOS_ID, *ids, EOS_ID, *tokenizer.encode("a dog"), PAD_ID, PAD_ID]
    assert tokenizer.decode(framed) == "the cat sat on the mat"
    assert tokenizer.decode([BOS_ID, *ids[:2], PAD_ID, *ids[2:]]) == "the cat sat on the mat"
    assert tokenizer.decode(torch.tensor(framed)) == "the cat sat on the mat"
    assert tokenizer.decode(np.array(framed)) == "the cat sat on the mat"
    assert tokenizer.decode([EOS_ID, *ids]) == ""


def test_decode_batch_decodes_each_row_of_a_padded_tensor(tokenizer: Tokenizer) -> None:
    rows = [[*tokenizer.encode("a dog"), EOS_ID], [*tokenizer.encode("the cat sat"), EOS_ID]]
    width = max(map(len, rows))
    padded = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])
    assert tokenizer.decode_batch(padded) == ["a dog", "the cat sat"]


def test_decode_rejects_ids_outside_the_vocabulary(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="token id 60 is outside the vocabulary"):
        tokenizer.decode([5, 60])


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([5.7, 6.2], TypeError, "integer token ids, got float64"),
        (torch.tensor([4.9, 5.2]), TypeError, "integer token ids, got float32"),
        (np.array([True, False]), TypeError, "integer token ids, got bool"),
        (["5"], TypeError, "integer token ids"),
        ("56", TypeError, "not str"),
        (torch.tensor([[4, 5], [6, 7]]), ValueError, r"one-dimensional, got shape \(2, 2\)"),
    ],
)
def test_decode_refuses_ids_that_are_not_integers_instead_of_truncating_them(
    tokenizer: Tokenizer, ids: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        tokenizer.decode(ids)  # type: ignore[arg-type]


def test_encode_batch_of_one_string_is_refused_not_encoded_per_character(
    tokenizer: Tokenizer,
) -> None:
    with pytest.raises(TypeError, match="not one string"):
        tokenizer.encode_batch("the cat")


def test_id_to_piece_takes_an_int(tokenizer: Tokenizer) -> None:
    with pytest.raises(TypeError, match=r"token_id must be an int, got 5\.5"):
        tokenizer.id_to_piece(5.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", " ", "  \t  "])
def test_empty_and_whitespace_text_encodes_to_nothing(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.encode(text) == []
    assert tokenizer.encode_batch([text, "a dog"])[0] == []


def test_unknown_characters_map_to_unk(tokenizer: Tokenizer) -> None:
    assert UNK_ID in tokenizer.encode("the cat ☃")


def test_encode_batch_equals_encode_per_text(tokenizer: Tokenizer) -> None:
    texts = ["the cat", "", "children play on the mat"]
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(text) for text in texts]


def test_user_defined_symbol_is_one_piece(tokenizer: Tokenizer) -> None:
    assert tokenizer.pieces("#Person1# the cat")[0] == "▁"
    assert "#Person1#" in tokenizer.pieces("#Person1# the cat")


def test_bytes_round_trip_restores_identical_tokenizer(tokenizer: Tokenizer) -> None:
    restored = Tokenizer.from_bytes(tokenizer.to_bytes())
    assert restored.to_bytes() == tokenizer.to_bytes()
    assert restored.encode("two men play") == tokenizer.encode("two men play")


def test_save_load_round_trip_leaves_no_temporary_file(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    tokenizer.save(tmp_path / "sub" / "tok.model")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["tok.model"]
    assert Tokenizer.load(tmp_path / "sub" / "tok.model").to_bytes() == tokenizer.to_bytes()


def test_training_writes_no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Tokenizer.train(CORPUS, vocab_size=40)
    assert list(tmp_path.iterdir()) == []


def test_from_bytes_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a SentencePiece model proto"):
        Tokenizer.from_bytes(b"definitely not a model")


def test_model_with_other_special_ids_is_rejected() -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=40, minloglevel=2
    )
    with pytest.raises(ValueError, match=r"special ids \(pad, unk, bos, eos\) = \(-1, 0, 1, 2\)"):
        Tokenizer.from_bytes(model.getvalue())


def test_vocabulary_larger_than_corpus_allows_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"vocab_size=5000 is more than these texts support"):
        Tokenizer.train(["a b c"], vocab_size=5000)


def test_training_on_only_blank_texts_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"no text to train on: 3 text\(s\), all empty or blank"):
        Tokenizer.train(["", "   ", "\t"], vocab_size=50)


def test_training_on_only_over_long_texts_says_so() -> None:
    with pytest.raises(ValueError, match="every non-blank text is longer than max_sentence_len"):
        Tokenizer.train(["x" * 20, "", "y" * 30], vocab_size=50, max_sentence_length=10)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"texts": "the cat sat"}, TypeError, "texts must be an iterable of strings, not one"),
        ({"texts": [None, "a b"]}, TypeError, r"texts\[0\] must be a string, got NoneType"),
        ({"texts": ["a", b"b"]}, TypeError, r"texts\[1\] must be a string, got bytes"),
        ({"vocab_size": 60.5}, TypeError, "vocab_size must be an int, got 60.5"),
        ({"vocab_size": "60"}, TypeError, "vocab_size must be an int, got '60'"),
        ({"vocab_size": 10**12}, ValueError, "vocab_size=1000000000000 must be <= 2147483647"),
        ({"character_coverage": math.nan}, ValueError, "character_coverage must be a number"),
        ({"seed": -1}, ValueError, r"seed=-1 must lie in \[0, 4294967295\]"),
        ({"input_sentence_size": 10.5}, TypeError, "input_sentence_size must be an int"),
        ({"max_sentence_length": 0}, ValueError, "max_sentence_length=0 must lie in"),
        ({"num_threads": 1.5}, TypeError, "num_threads must be an int"),
        ({"user_defined_symbols": "#P#"}, TypeError, "must be a list of strings, not '#P#'"),
        ({"user_defined_symbols": [""]}, ValueError, "holds '': each must be a non-empty"),
        ({"user_defined_symbols": ["#A", "#A"]}, ValueError, r"lists \['#A'\] more than once"),
    ],
)
def test_training_arguments_of_the_wrong_type_or_range_are_named(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    """Before: a string trained on its characters, None texts were dropped in silence, a
    float input_sentence_size was taken, others gave SentencePiece's internal messages."""
    options: dict[str, object] = {"texts": CORPUS, "vocab_size": 40, **kwargs}
    with pytest.raises(error, match=message):
        Tokenizer.train(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_type": "wordpiece"}, "model_type='wordpiece'; expected one of"),
        ({"normalization": "nfd"}, "normalization='nfd'; expected one of"),
        ({"vocab_size": 4}, "vocab_size=4 must exceed"),
        ({"character_coverage": 0.0}, "character_coverage=0.0"),
        ({"user_defined_symbols": ["</s>"]}, "clash with the special pieces"),
        ({"num_threads": 0}, "num_threads=0"),
    ],
)
def test_invalid_training_options_are_rejected(kwargs: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"vocab_size": 40, **kwargs}
    with pytest.raises(ValueError, match=message):
        Tokenizer.train(CORPUS, **options)  # type: ignore[arg-type]


def test_joint_pair_saves_one_file_and_loads_as_joint(tokenizer: Tokenizer, tmp_path: Path) -> None:
    paths = TokenizerPair.joint(tokenizer).save(tmp_path)
    assert [p.name for p in paths] == ["tokenizer.model"]
    loaded = TokenizerPair.load(tmp_path)
    assert loaded.source is loaded.target
    assert loaded.source.to_bytes() == tokenizer.to_bytes()


def test_separate_pair_saves_two_files_and_keeps_sides(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    other = Tokenizer.train(CORPUS, vocab_size=40)
    TokenizerPair(tokenizer, other).save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "tokenizer.src.model",
        "tokenizer.tgt.model",
    ]
    loaded = TokenizerPair.load(tmp_path)
    assert not loaded.is_joint
    assert (loaded.source.vocab_size, loaded.target.vocab_size) == (60, 40)


def test_saving_one_layout_removes_the_other(tokenizer: Tokenizer, tmp_path: Path) -> None:
    TokenizerPair(tokenizer, Tokenizer.train(CORPUS, vocab_size=40)).save(tmp_path)
    TokenizerPair.joint(tokenizer).save(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.model"]
    assert TokenizerPair.load(tmp_path).is_joint


def test_pair_load_rejects_ambiguous_and_empty_directories(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="no tokenizer in"):
        TokenizerPair.load(tmp_path)
    TokenizerPair.joint(tokenizer).save(tmp_path)
    tokenizer.save(tmp_path / "tokenizer.src.model")
    with pytest.raises(ValueError, match="holds both"):
        TokenizerPair.load(tmp_path)


def test_a_model_with_other_special_ids_is_named_as_such_by_load(tmp_path: Path) -> None:
    """It was reported as "not a SentencePiece model (corrupt or truncated)"."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=40, minloglevel=2
    )
    (tmp_path / "other.model").write_bytes(model.getvalue())
    with pytest.raises(ValueError, match=r"other\.model: SentencePiece model has special ids"):
        Tokenizer.load(tmp_path / "other.model")
    with pytest.raises(TypeError, match="a model proto is bytes, got str"):
        Tokenizer.from_bytes("not bytes")  # type: ignore[arg-type]


def test_pair_load_names_what_is_wrong_with_the_directory(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    tokenizer.save(tmp_path / "half" / "tokenizer.src.model")
    with pytest.raises(FileNotFoundError, match="holds tokenizer.src.model but not tokenizer.tgt"):
        TokenizerPair.load(tmp_path / "half")
    (tmp_path / "dir" / "tokenizer.model").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"tokenizer\.model is not a regular file"):
        TokenizerPair.load(tmp_path / "dir")
    tokenizer.save(tmp_path / "afile")
    with pytest.raises(NotADirectoryError, match="afile is not a directory"):
        TokenizerPair.load(tmp_path / "afile")


def test_pair_rejects_non_tokenizer_sides(tokenizer: Tokenizer) -> None:
    with pytest.raises(TypeError, match=r"TokenizerPair.target must be a Tokenizer"):
        TokenizerPair(tokenizer, "spm.model")  # type: ignore[arg-type]
