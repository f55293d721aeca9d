"""Language-model data: one text → a token stream → seeded random windows and an exact pass.

A character vocabulary is the distinct characters of the training text (nanoGPT's
``shakespeare_char``); it has no unknown token, so text with other characters is an error that
names them. The text is split by characters before encoding — the first ``1 − valid_fraction``
for training, the rest for validation — so every tokenizer sees the same split.

Training batches are ``batch_size`` windows of ``block_size + 1`` consecutive tokens at random
offsets. Batch ``k`` depends only on ``(seed, k)``, so a run resumed at update ``k`` draws exactly
the batches it would have drawn. The exact evaluation pass covers the stream with windows that
overlap by one token, so every token after the first is predicted exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from odet.data.checks import check_int, check_real, token_ids
from odet.data.text import NUL_REASON, DataError, PathLike, read_binary


def read_text(path: PathLike) -> str:
    """The whole of a UTF-8 text file, plain or gzip (detected from its bytes, as by every
    reader); a missing, non-UTF-8 or empty file is a ``DataError``."""
    raw = read_binary(path, "text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    if (nul := raw.find(b"\0")) >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise DataError(f"{path}: not UTF-8 text (line {line} holds {NUL_REASON})")
    if not text.strip():
        raise DataError(f"{path}: the text is empty (or blank)")
    return text


def split_text(text: str, valid_fraction: float = 0.1) -> tuple[str, str]:
    """``(train, valid)``: the first ``1 − valid_fraction`` of the characters, then the rest."""
    if not 0.0 < check_real(valid_fraction, "valid_fraction") < 1.0:
        raise DataError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
    cut = int(len(text) * (1.0 - valid_fraction))
    return text[:cut], text[cut:]


@dataclass(frozen=True)
class CharVocabulary:
    """Characters ↔ ids: id ``i`` is ``chars[i]`` (sorted, distinct)."""

    chars: str

    def __post_init__(self) -> None:
        if not self.chars:
            raise DataError("a character vocabulary needs at least one character")
        if len(set(self.chars)) != len(self.chars) or "".join(sorted(self.chars)) != self.chars:
            raise DataError("CharVocabulary.chars must be sorted and distinct")

    @classmethod
    def from_text(cls, text: str) -> CharVocabulary:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; characters outside the vocabulary are a ``DataError`` naming them."""
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - index.keys())
        if unknown:
            shown = ", ".join(repr(c) for c in unknown[:10])
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            raise DataError(
                f"{len(unknown)} character(s) outside the model's {self.size}-character "
                f"vocabulary: {shown}{more}"
            )
        return [index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``; an id outside ``[0, size)`` or not an integer raises."""
        values = token_ids(ids, "ids").tolist()
        outside = [i for i in values if not 0 <= i < self.size]
        if outside:
            raise ValueError(f"id {outside[0]} is outside the {self.size}-character vocabulary")
        return "".join(self.chars[i] for i in values)

    def save(self, path: PathLike) -> None:
        Path(path).write_text(json.dumps({"type": "char", "chars": self.chars}), encoding="utf-8")

    @classmethod
    def load(cls, path: PathLike) -> CharVocabulary:
        """The vocabulary ``save`` wrote; anything else in the file is a ``DataError``."""
        try:
            data = json.loads(read_binary(path, "vocabulary").decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise DataError(f"{path}: not a character vocabulary (not UTF-8 JSON)") from None
        if not isinstance(data, dict) or data.get("type") != "char":
            raise DataError(f"{path}: not a character vocabulary")
        if not isinstance(data.get("chars"), str):
            raise DataError(f"{path}: a character vocabulary needs 'chars', a string")
        try:
            return cls(data["chars"])
        except DataError as err:
            raise DataError(f"{path}: {err}") from None


@dataclass(frozen=True)
class LMBatch:
    """Inputs ``x (B, T)`` and next-token targets ``y (B, T)``."""

    x: Tensor
    y: Tensor

    @property
    def num_tokens(self) -> int:
        return self.y.numel()


def _check_stream(stream: Tensor) -> None:
    """A token stream is a 1-D tensor of integer ids (a float one would be truncated)."""
    if not isinstance(stream, Tensor):
        raise TypeError(f"stream must be a torch.Tensor, got {type(stream).__name__}")
    if stream.dtype.is_floating_point or stream.dtype.is_complex or stream.dtype == torch.bool:
        raise TypeError(f"stream must hold integer token ids, got {stream.dtype}")
    if stream.dim() != 1:
        raise ValueError(f"stream must be 1-D, got shape {tuple(stream.shape)}")


class WindowSampler:
    """Seeded random windows of a token stream; batch ``k`` is a function of ``(seed, k)``."""

    def __init__(self, stream: Tensor, block_size: int, batch_size: int, seed: int):
        _check_stream(stream)
        check_int(block_size, "block_size", 1)
        check_int(batch_size, "batch_size", 1)
        check_int(seed, "seed", 0)
        if stream.numel() < block_size + 1:
            raise DataError(
                f"the token stream has {stream.numel()} tokens, fewer than block_size + 1 = "
                f"{block_size + 1}; use a smaller block_size or more text"
            )
        self.stream = stream.long()
        self.block_size = block_size
        self.batch_size = batch_size
        self.seed = seed

    def batch(self, k: int) -> LMBatch:
        """The ``k``-th training batch (``k`` ≥ 0)."""
        check_int(k, "k", 0)
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + k) % 2**64)
        starts = torch.randint(
            self.stream.numel() - self.block_size, (self.batch_size,), generator=generator
        )
        offsets = torch.arange(self.block_size + 1)
        windows = self.stream[starts.unsqueeze(1) + offsets]  # (B, T + 1)
        return LMBatch(windows[:, :-1], windows[:, 1:])


def evaluation_batches(stream: Tensor, block_size: int, batch_size: int) -> Iterator[LMBatch]:
    """Every token after the first predicted exactly once: windows ``[i·T, (i+1)·T]`` of
    ``T + 1`` tokens, ``batch_size`` at a time; the last, shorter window in a batch of its own."""
    _check_stream(stream)
    check_int(block_size, "block_size", 1)
    check_int(batch_size, "batch_size", 1)
    stream = stream.long()
    targets = stream.numel() - 1
    if targets < 1:
        raise DataError("an evaluation stream needs at least two tokens")
    full = targets // block_size
    offsets = torch.arange(block_size + 1)
    for first in range(0, full, batch_size):
        starts = torch.arange(first, min(first + batch_size, full)) * block_size
        windows = stream[starts.unsqueeze(1) + offsets]
        yield LMBatch(windows[:, :-1], windows[:, 1:])
    if targets % block_size:
        tail = stream[full * block_size :].unsqueeze(0)
        yield LMBatch(tail[:, :-1], tail[:, 1:])
