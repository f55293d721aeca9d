"""From the files a ``DataConfig`` names to token ids: reading splits, training the tokenizer,
encoding, truncating and length-filtering. Nothing here knows about models or optimizers."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odet.data import (
    DataError,
    LengthFilter,
    ParallelDataset,
    TextPairs,
    TokenBudgetBatcher,
    Tokenizer,
    TokenizerPair,
    read_jsonl_pairs,
    read_parallel_text,
)
from odet.training.config import DataConfig, LoopConfig
from odet.training.distributed import DistributedContext

logger = logging.getLogger("odet.train")


def read_split(data: DataConfig, files: tuple[str, ...]) -> TextPairs:
    """Read one split (text pair or JSON Lines) and log how many lines were skipped, per
    reason (every count of the ``ReadReport`` but ``lines`` and ``kept``)."""
    if data.format == "text":
        pairs = read_parallel_text(data.path(files[0]), data.path(files[1]))
    else:
        pairs = read_jsonl_pairs(data.path(files[0]), data.source_field, data.target_field)
    report = pairs.report
    reasons = {k: v for k, v in report.as_dict().items() if k not in ("lines", "kept") and v}
    skipped = ", ".join(f"{k} {v}" for k, v in reasons.items())
    logger.info(
        "read %s: %d pairs%s",
        files[0],
        len(pairs),
        f"; skipped {report.skipped} of {report.lines} lines ({skipped})" if reasons else "",
    )
    return pairs


def read_checked_split(data: DataConfig, split: str) -> TextPairs:
    """``read_split`` of ``data.<split>``, refused with a ``DataError`` when no pair is left."""
    files = getattr(data, split)
    pairs = read_split(data, files)
    if len(pairs) == 0:
        report = pairs.report
        why = (
            "the files are empty"
            if report.lines == 0
            else f"{report.skipped} of {report.lines} line(s) skipped: {report.reasons()}"
        )
        raise DataError(f"data.{split} {list(files)} has no pairs left ({why}); check the files")
    return pairs


def check_data_files(data: DataConfig) -> None:
    """Read every split ``data`` names (train, valid, test): each must exist, be aligned and
    keep a pair (``read_checked_split``), so a run can be refused before anything starts."""
    for split in ("train", "valid", "test"):
        if getattr(data, split):
            read_checked_split(data, split)


def read_valid_split(data: DataConfig) -> TextPairs | None:
    """The validation pairs, cut to ``data.valid_limit`` when set; ``None`` without a split."""
    if not data.valid:
        return None
    pairs = read_checked_split(data, "valid")
    return pairs.head(data.valid_limit) if data.valid_limit else pairs


def fit_to_positions(dataset: ParallelDataset, max_positions: int, split: str) -> ParallelDataset:
    """Every side cut to the model's position table (``max_positions`` - 1 tokens, as EOS or
    BOS takes one); logs how many pairs were cut."""
    limit = max_positions - 1
    over = (dataset.source_lengths > limit) | (dataset.target_lengths > limit)
    if not over.any():
        return dataset
    logger.info(
        "%s: truncated %d of %d pairs to the model's %d positions for the loss",
        split,
        int(over.sum()),
        len(dataset),
        max_positions,
    )
    return ParallelDataset(
        [dataset[i][0][:limit] for i in range(len(dataset))],
        [dataset[i][1][:limit] for i in range(len(dataset))],
    )


def train_tokenizers(data: DataConfig, pairs: TextPairs) -> TokenizerPair:
    """SentencePiece on the training text: one joint model, or one per side."""
    options: dict[str, Any] = dict(
        vocab_size=data.vocab_size,
        model_type=data.tokenizer_type,
        user_defined_symbols=data.user_defined_symbols,
        input_sentence_size=data.tokenizer_sentences,
    )
    if data.joint_vocab:
        return TokenizerPair.joint(Tokenizer.train([*pairs.source, *pairs.target], **options))
    return TokenizerPair(
        Tokenizer.train(pairs.source, **options), Tokenizer.train(pairs.target, **options)
    )


def has_tokenizer(directory: Path) -> bool:
    """Whether ``directory`` holds a saved tokenizer (joint, or the source side of a pair)."""
    joint, source = directory / "tokenizer.model", directory / "tokenizer.src.model"
    return joint.is_file() or source.is_file()


def prepare_tokenizer(data: DataConfig, pairs: TextPairs, directory: Path) -> None:
    """Train and save the tokenizer in ``directory`` unless one is there (a resumed run)."""
    if has_tokenizer(directory):
        return
    started = time.perf_counter()
    train_tokenizers(data, pairs).save(directory)
    logger.info("trained the tokenizer in %.1fs", time.perf_counter() - started)


def make_batcher(
    dataset: ParallelDataset, train: LoopConfig, *, seed: int, num_shards: int, shard_index: int
) -> TokenBudgetBatcher:
    """The resumable training batcher: ``train.max_tokens`` per batch, shuffled per epoch
    with ``seed``, this rank's shard of every epoch."""
    return TokenBudgetBatcher(
        dataset.source_sizes,
        dataset.target_sizes,
        train.max_tokens,
        max_sentences=train.max_sentences or None,
        seed=seed,
        num_shards=num_shards,
        shard_index=shard_index,
    )


def truncate_sources(dataset: ParallelDataset, limit: int) -> ParallelDataset:
    """Every source cut to its first ``limit`` tokens (targets unchanged); logs how many were."""
    logger.info(
        "truncated %d of %d sources to %d tokens",
        int((dataset.source_lengths > limit).sum()),
        len(dataset),
        limit,
    )
    return ParallelDataset(
        [dataset[i][0][:limit] for i in range(len(dataset))],
        [dataset[i][1] for i in range(len(dataset))],
    )


def apply_length_filter(
    data: DataConfig, dataset: ParallelDataset, max_positions: int = 0
) -> ParallelDataset:
    """The pairs within ``data.max_source_tokens`` / ``max_target_tokens`` / ``max_ratio``
    and, with ``max_positions``, the model's position table (tokens + EOS or BOS).

    Raises ``DataError`` when no pair is left, since training could not start.
    """
    limit = max_positions - 1 if max_positions else None
    length_filter = LengthFilter(
        max_source_tokens=min(data.max_source_tokens, limit or data.max_source_tokens),
        max_target_tokens=min(data.max_target_tokens, limit or data.max_target_tokens),
        max_ratio=data.max_ratio or None,
    )
    kept, report = dataset.filter(length_filter)
    logger.info("length filter: %s", report.as_dict())
    if len(kept) == 0:
        raise DataError("the length filter dropped every training pair; check data.max_*")
    return kept


@dataclass(frozen=True)
class ValidationSet:
    """The validation pairs as text (for metrics) and as token ids (for the loss)."""

    pairs: TextPairs
    dataset: ParallelDataset


@dataclass(frozen=True)
class PreparedData:
    """Everything a run trains and validates on, as token ids."""

    tokenizers: TokenizerPair
    train: ParallelDataset
    """The length-filtered training pairs."""
    valid: ValidationSet | None
    """The validation split on rank 0 (``None`` on other ranks and without ``data.valid``)."""


def prepare_data(
    data: DataConfig,
    tokenizer_dir: Path,
    dist: DistributedContext,
    *,
    progress: bool = False,
    max_positions: int = 0,
) -> PreparedData:
    """Read and encode the splits; rank 0 trains the tokenizer into ``tokenizer_dir`` on a
    run's first start, and every rank loads it from there. Rank 0 checks the validation and
    test files (exist, aligned, not empty) before training; with ``max_positions`` training
    pairs longer than the model's position table are filtered and validation pairs cut."""
    train_pairs = read_checked_split(data, "train")
    if dist.is_main:
        if data.test:
            read_checked_split(data, "test")
        prepare_tokenizer(data, train_pairs, tokenizer_dir)
    dist.barrier()
    tokenizers = TokenizerPair.load(tokenizer_dir)
    train = encode_split(
        data,
        train_pairs,
        tokenizers,
        filter_lengths=True,
        progress=progress,
        max_positions=max_positions,
    )
    valid = None
    valid_pairs = read_valid_split(data) if dist.is_main else None
    if valid_pairs is not None:
        dataset = encode_split(data, valid_pairs, tokenizers, filter_lengths=False)
        if max_positions:
            dataset = fit_to_positions(dataset, max_positions, "data.valid")
        valid = ValidationSet(valid_pairs, dataset)
    return PreparedData(tokenizers, train, valid)


def encode_split(
    data: DataConfig,
    pairs: TextPairs,
    tokenizers: TokenizerPair,
    *,
    filter_lengths: bool,
    progress: bool = False,
    max_positions: int = 0,
) -> ParallelDataset:
    """Token ids for a split; training data is length-filtered (``apply_length_filter``, the
    report is logged)."""
    dataset = ParallelDataset.from_texts(pairs.source, pairs.target, tokenizers, progress=progress)
    if data.truncate_source:
        dataset = truncate_sources(dataset, data.truncate_source)
    if filter_lengths:
        dataset = apply_length_filter(data, dataset, max_positions)
    return dataset
