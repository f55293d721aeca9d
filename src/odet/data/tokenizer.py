"""SentencePiece subword tokenizers with odet's fixed special ids.

Every tokenizer odet trains or loads has ``<pad>=0, <unk>=1, <s>=2, </s>=3``: embeddings,
losses, batching and search rely on these constants instead of asking a tokenizer. Models are
trained in memory (no temporary files) and serialize to the SentencePiece model proto, so a
checkpoint can embed its tokenizer as bytes.
"""

from __future__ import annotations

import io
import os
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import sentencepiece as spm
import torch

from odet.data.checks import check_int, check_real, token_ids
from odet.io import write_bytes_atomic

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")

ModelType = Literal["bpe", "unigram"]
Normalization = Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"]

TokenIds = Sequence[int] | np.ndarray | torch.Tensor


class Tokenizer:
    """A SentencePiece model whose special ids are ``PAD_ID, UNK_ID, BOS_ID, EOS_ID``.

    ``encode`` returns subword ids *without* BOS/EOS; batching adds them (a source sequence is
    ``ids + [EOS]``, the decoder input ``[BOS] + ids``, the decoder target ``ids + [EOS]``).
    """

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"SentencePiece model has special ids (pad, unk, bos, eos) = {found}; odet "
                f"requires {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)} (train it with Tokenizer.train)"
            )
        self._sp = processor

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        model_type: ModelType = "bpe",
        character_coverage: float = 1.0,
        seed: int = 0,
        user_defined_symbols: Sequence[str] = (),
        byte_fallback: bool = False,
        normalization: Normalization = "nmt_nfkc",
        input_sentence_size: int = 0,
        max_sentence_length: int = 16384,
        num_threads: int = 1,
    ) -> Tokenizer:
        """Train a tokenizer in memory on ``texts`` (empty and whitespace-only texts are skipped).

        ``input_sentence_size > 0`` trains on a random sample of that many sentences, drawn
        with ``seed``. Training is deterministic for a fixed input, seed and ``num_threads``;
        unigram training with several threads is faster but its piece scores are not
        bit-reproducible, hence the default of one thread. ``character_coverage`` below 1.0 maps
        rare characters to ``<unk>`` (0.9995 is SentencePiece's advice for large alphabets).
        The ``nmt_nfkc`` normalization folds newlines and runs of whitespace into one space;
        make markers such as DialogSum's ``#Person1#`` single pieces with
        ``user_defined_symbols``.
        """
        if model_type not in get_args(ModelType):
            raise ValueError(f"model_type={model_type!r}; expected one of {get_args(ModelType)}")
        if normalization not in get_args(Normalization):
            raise ValueError(
                f"normalization={normalization!r}; expected one of {get_args(Normalization)}"
            )
        symbols = _check_symbols(user_defined_symbols)
        check_int(vocab_size, "vocab_size", None, _INT32_MAX)
        if vocab_size <= len(SPECIAL_PIECES) + len(symbols):
            raise ValueError(
                f"vocab_size={vocab_size} must exceed the {len(SPECIAL_PIECES)} special pieces "
                f"plus {len(symbols)} user-defined symbols"
            )
        if not 0.0 < check_real(character_coverage, "character_coverage") <= 1.0:
            raise ValueError(f"character_coverage={character_coverage} must be in (0, 1]")
        clashes = sorted(set(symbols) & set(SPECIAL_PIECES))
        if clashes:
            raise ValueError(f"user_defined_symbols {clashes} clash with the special pieces")
        check_int(seed, "seed", 0, 2**32 - 1)
        check_int(input_sentence_size, "input_sentence_size", 0, _INT32_MAX)
        check_int(max_sentence_length, "max_sentence_length", 10, 2**30)
        check_int(num_threads, "num_threads", 1, 1024)
        if isinstance(texts, str | bytes):
            raise TypeError("texts must be an iterable of strings, not one string")

        counts = _TextCounts(max_sentence_length)
        sentences: Iterable[str] = counts.usable(texts)
        if input_sentence_size > 0:
            sentences = _reservoir_sample(sentences, input_sentence_size, seed)
        model = io.BytesIO()
        spm.set_random_generator_seed(seed)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                user_defined_symbols=symbols,
                byte_fallback=byte_fallback,
                normalization_rule_name=normalization,
                max_sentence_length=max_sentence_length,
                num_threads=num_threads,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                pad_piece=SPECIAL_PIECES[PAD_ID],
                unk_piece=SPECIAL_PIECES[UNK_ID],
                bos_piece=SPECIAL_PIECES[BOS_ID],
                eos_piece=SPECIAL_PIECES[EOS_ID],
                minloglevel=2,
            )
        except RuntimeError as error:
            # SentencePiece reports bad settings (e.g. a vocabulary larger than the corpus
            # supports, or no input at all) as RuntimeError; they are caller errors.
            if counts.bad is not None:
                raise counts.bad from None
            raise ValueError(counts.explain(error, vocab_size)) from error
        return cls.from_bytes(model.getvalue())

    @classmethod
    def from_bytes(cls, model_proto: bytes) -> Tokenizer:
        """Load a serialized SentencePiece model proto (as returned by ``to_bytes``)."""
        return cls(_processor(model_proto, "not a SentencePiece model proto"))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load a ``.model`` file written by ``save`` (or by SentencePiece with odet's ids).

        A file that is not a model, or a model whose special ids are not odet's, is a
        ``ValueError`` naming ``path``.
        """
        processor = _processor(
            Path(path).read_bytes(), f"tokenizer {path} is not a SentencePiece model"
        )
        try:
            return cls(processor)
        except ValueError as err:
            raise ValueError(f"tokenizer {path}: {err}") from None

    def to_bytes(self) -> bytes:
        """The serialized model proto; ``Tokenizer.from_bytes`` restores an identical tokenizer."""
        return self._sp.serialized_model_proto()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model proto to ``path`` atomically (temporary file, then rename)."""
        write_bytes_atomic(Path(path), self.to_bytes())

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special pieces included (ids are ``0 .. vocab_size - 1``)."""
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text`` without BOS/EOS; empty or whitespace-only text gives ``[]``."""
        return self._sp.encode(text, out_type=int)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts in one call (SentencePiece runs it multi-threaded)."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a sequence of texts, not one string (encode it)")
        return self._sp.encode(list(texts), out_type=int)

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of ``text`` (for inspection)."""
        return self._sp.encode(text, out_type=str)

    def decode(self, ids: TokenIds) -> str:
        """Detokenize ``ids``: stops at the first EOS and skips PAD and BOS.

        Raises ``TypeError`` for ids that are not integers (floats are not truncated) and
        ``ValueError`` for ids outside the vocabulary or not one-dimensional.
        """
        values = token_ids(ids, "ids").tolist()
        kept: list[int] = []
        size = self.vocab_size
        for value in values:
            if value == EOS_ID:
                break
            if value in (PAD_ID, BOS_ID):
                continue
            if not 0 <= value < size:
                raise ValueError(f"token id {value} is outside the vocabulary [0, {size})")
            kept.append(int(value))
        return self._sp.decode(kept)

    def decode_batch(self, batch: Sequence[TokenIds] | torch.Tensor) -> list[str]:
        """``decode`` for each row of a ``(B, T)`` tensor or each list of ids."""
        return [self.decode(ids) for ids in batch]

    def id_to_piece(self, token_id: int) -> str:
        """The piece string of ``token_id``."""
        check_int(token_id, "token_id", 0)
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(
                f"token id {token_id} is outside the vocabulary [0, {self.vocab_size})"
            )
        return self._sp.id_to_piece(token_id)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


_INT32_MAX = 2**31 - 1
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")


def _check_symbols(symbols: Sequence[str]) -> list[str]:
    """``user_defined_symbols`` as a list; each must be a distinct, non-empty string."""
    if isinstance(symbols, str | bytes):
        raise TypeError(f"user_defined_symbols must be a list of strings, not {symbols!r}")
    listed = list(symbols)
    for symbol in listed:
        if not isinstance(symbol, str) or not symbol:
            raise ValueError(f"user_defined_symbols holds {symbol!r}: each must be a non-empty str")
    repeated = sorted({symbol for symbol in listed if listed.count(symbol) > 1})
    if repeated:
        raise ValueError(f"user_defined_symbols lists {repeated} more than once")
    return listed


class _TextCounts:
    """Counts what training was given, so that a failure says why no text was usable."""

    def __init__(self, max_sentence_length: int) -> None:
        self.max_sentence_length = max_sentence_length
        self.texts = self.blank = self.too_long = 0
        self.bad: TypeError | None = None
        """The error of a text that is not a string (SentencePiece turns it into a
        RuntimeError when it raises inside its training loop)."""

    def usable(self, texts: Iterable[str]) -> Iterator[str]:
        """The non-blank ``texts`` (``TypeError`` at the first that is not a string)."""
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                self.bad = TypeError(f"texts[{index}] must be a string, got {type(text).__name__}")
                raise self.bad
            self.texts += 1
            if not text or text.isspace():
                self.blank += 1
                continue
            self.too_long += len(text.encode("utf-8")) > self.max_sentence_length
            yield text

    def explain(self, error: RuntimeError, vocab_size: int) -> str:
        """Why SentencePiece failed, in terms of the arguments."""
        if self.texts == self.blank:
            return f"no text to train on: {self.texts} text(s), all empty or blank"
        if self.texts == self.blank + self.too_long:
            return (
                f"no text to train on: every non-blank text is longer than "
                f"max_sentence_length={self.max_sentence_length} bytes"
            )
        if found := _TOO_HIGH.search(str(error)):
            return (
                f"vocab_size={vocab_size} is more than these texts support: at most "
                f"{found.group(2)} (train on more text or ask for fewer pieces)"
            )
        return f"SentencePiece training failed: {error}"


def _processor(model_proto: bytes, what: str) -> spm.SentencePieceProcessor:
    """A processor loaded from ``model_proto``; ``TypeError`` unless it is bytes, ``ValueError``
    (``what`` first) when it is not a model."""
    if not isinstance(model_proto, bytes):
        raise TypeError(f"a model proto is bytes, got {type(model_proto).__name__}")
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_proto)
    except (RuntimeError, OSError):
        raise ValueError(f"{what} (corrupt or truncated)") from None
    return processor


def _reservoir_sample(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform sample of ``size`` items in one pass (Algorithm R), in input order.

    Hand-written because SentencePiece's own ``input_sentence_size`` sampler ignores
    ``set_random_generator_seed`` for in-memory input (0.2.x), so the seed had no effect.
    """
    rng = random.Random(seed)
    reservoir: list[tuple[int, str]] = []
    for index, item in enumerate(items):
        if index < size:
            reservoir.append((index, item))
        else:
            slot = rng.randrange(index + 1)
            if slot < size:
                reservoir[slot] = (index, item)
    return [item for _, item in sorted(reservoir)]


_JOINT_FILE = "tokenizer.model"
_SOURCE_FILE = "tokenizer.src.model"
_TARGET_FILE = "tokenizer.tgt.model"


@dataclass(frozen=True)
class TokenizerPair:
    """Source and target tokenizers; a joint vocabulary is the same object on both sides.

    Saved to a directory as ``tokenizer.model`` (joint) or ``tokenizer.src.model`` +
    ``tokenizer.tgt.model`` (separate).
    """

    source: Tokenizer
    target: Tokenizer

    def __post_init__(self) -> None:
        for side, value in (("source", self.source), ("target", self.target)):
            if not isinstance(value, Tokenizer):
                raise TypeError(f"TokenizerPair.{side} must be a Tokenizer, got {type(value)}")

    @classmethod
    def joint(cls, tokenizer: Tokenizer) -> TokenizerPair:
        """One shared vocabulary for source and target."""
        return cls(tokenizer, tokenizer)

    @property
    def is_joint(self) -> bool:
        """Whether source and target share one vocabulary (one object, or identical models)."""
        return self.source is self.target or self.source.to_bytes() == self.target.to_bytes()

    def save(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write the model file(s) into ``directory`` (created if missing) and remove files of
        the other layout, so the directory stays unambiguous; returns the written paths."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.is_joint:
            written = {_JOINT_FILE: self.source}
            stale = (_SOURCE_FILE, _TARGET_FILE)
        else:
            written = {_SOURCE_FILE: self.source, _TARGET_FILE: self.target}
            stale = (_JOINT_FILE,)
        for name, tokenizer in written.items():
            tokenizer.save(directory / name)
        for name in stale:
            (directory / name).unlink(missing_ok=True)
        return [directory / name for name in written]

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> TokenizerPair:
        """Load a pair saved by ``save``; exactly one of the two layouts must be present."""
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(f"tokenizer directory {directory} is not a directory")
        names = (_JOINT_FILE, _SOURCE_FILE, _TARGET_FILE)
        for name in names:
            if (directory / name).exists() and not (directory / name).is_file():
                raise ValueError(f"{directory / name} is not a regular file")
        joint = (directory / _JOINT_FILE).is_file()
        separate = [(directory / name).is_file() for name in (_SOURCE_FILE, _TARGET_FILE)]
        if joint and any(separate):
            raise ValueError(
                f"{directory} holds both {_JOINT_FILE} and {_SOURCE_FILE}/{_TARGET_FILE}; "
                "remove the stale layout"
            )
        if any(separate) and not all(separate):
            present, missing = (_SOURCE_FILE, _TARGET_FILE)[:: 1 if separate[0] else -1]
            raise FileNotFoundError(
                f"{directory} holds {present} but not {missing}: the pair is incomplete"
            )
        if joint:
            return cls.joint(Tokenizer.load(directory / _JOINT_FILE))
        if all(separate):
            return cls(
                Tokenizer.load(directory / _SOURCE_FILE), Tokenizer.load(directory / _TARGET_FILE)
            )
        raise FileNotFoundError(
            f"no tokenizer in {directory}: expected {_JOINT_FILE} or both "
            f"{_SOURCE_FILE} and {_TARGET_FILE}"
        )
