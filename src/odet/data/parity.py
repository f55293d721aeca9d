"""The parity task: is the number of ones in a binary sequence odd?

Parity is the standard probe of a Transformer's limits with nonlocal dependencies (Hahn, 2020):
every bit flips the answer, so no fixed-size part of the input decides it. The N-ODE Transformer
paper asks whether an input-dependent depth helps with it, and whether models trained on short
sequences generalise to longer ones — hence test lengths beyond the training range.

Tokens: ``PAD_ID = 0``, bit ``b`` is token ``1 + b``; sequences are right-padded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from odet.config import check, check_seed, check_types

PAD_ID = 0
BIT_OFFSET = 1
VOCAB_SIZE = 3


@dataclass(frozen=True)
class ParityData:
    """``N`` sequences: ``tokens (N, T)`` right-padded, ``lengths (N,)``, ``labels (N,)`` in
    {0, 1} (1 = odd number of ones)."""

    tokens: Tensor
    lengths: Tensor
    labels: Tensor

    def __post_init__(self) -> None:
        n = self.tokens.shape[0]
        if self.tokens.ndim != 2 or self.lengths.shape != (n,) or self.labels.shape != (n,):
            raise ValueError(
                f"ParityData needs tokens (N, T), lengths (N,), labels (N,); got "
                f"{tuple(self.tokens.shape)}, {tuple(self.lengths.shape)}, "
                f"{tuple(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, index: Tensor) -> ParityData:
        """Rows ``index``, trimmed to their longest sequence."""
        lengths = self.lengths[index]
        width = int(lengths.max()) if len(lengths) else 0
        return ParityData(self.tokens[index, :width], lengths, self.labels[index])

    def batches(
        self, batch_size: int, *, generator: torch.Generator | None = None
    ) -> Iterator[ParityData]:
        """Consecutive batches, or shuffled ones with ``generator``; each trimmed to its
        longest sequence."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        order = (
            torch.arange(len(self))
            if generator is None
            else torch.randperm(len(self), generator=generator)
        )
        for start in range(0, len(self), batch_size):
            yield self.subset(order[start : start + batch_size])

    def by_length(self) -> Iterator[tuple[int, ParityData]]:
        """``(length, the sequences of that length)`` in increasing length: unpadded batches."""
        for length in torch.unique(self.lengths).tolist():
            yield length, self.subset(torch.nonzero(self.lengths == length).flatten())


def generate_parity(
    num_samples: int, min_length: int, max_length: int, *, seed: int | np.random.SeedSequence
) -> ParityData:
    """``num_samples`` sequences with lengths uniform in ``[min_length, max_length]`` and
    exactly balanced labels (``⌈N/2⌉`` odd, shuffled), the same for the same seed.

    Bits are i.i.d. uniform except the last, which is set to give the sample its label; the
    sequences of a given length and label are then uniformly distributed.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not 1 <= min_length <= max_length:
        raise ValueError(
            f"need 1 <= min_length <= max_length, got min_length={min_length}, "
            f"max_length={max_length}"
        )
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, size=num_samples)
    labels = rng.permutation(np.arange(num_samples) < (num_samples + 1) // 2).astype(np.int64)
    bits = rng.integers(0, 2, size=(num_samples, max_length))
    positions = np.arange(max_length)[None, :]
    bits = np.where(positions < lengths[:, None] - 1, bits, 0)  # the free bits
    last = labels ^ (bits.sum(axis=1) % 2)
    bits[np.arange(num_samples), lengths - 1] = last
    tokens = np.where(positions < lengths[:, None], bits + BIT_OFFSET, PAD_ID)
    return ParityData(
        tokens=torch.from_numpy(tokens.astype(np.int64)),
        lengths=torch.from_numpy(lengths.astype(np.int64)),
        labels=torch.from_numpy(labels),
    )


@dataclass(frozen=True)
class ParityTaskConfig:
    """Splits of the parity task: train/val on lengths ``[min_length, max_length]``; test on
    ``test_per_length`` sequences of every length in ``[min_length, test_max_length]``, so
    accuracy can be read per length, including lengths longer than trained on."""

    train_size: int = 10_000
    val_size: int = 1_000
    test_per_length: int = 200
    min_length: int = 1
    max_length: int = 20
    test_max_length: int = 40
    seed: int = 0

    def __post_init__(self) -> None:
        check_types(self)
        for key in ("train_size", "val_size", "test_per_length", "min_length"):
            value = getattr(self, key)
            check(value >= 1, f"ParityTaskConfig.{key} must be >= 1, got {value}")
        check(
            self.min_length <= self.max_length <= self.test_max_length,
            f"ParityTaskConfig needs min_length <= max_length <= test_max_length, got "
            f"{self.min_length}, {self.max_length}, {self.test_max_length}",
        )
        check_seed(self.seed, "ParityTaskConfig.seed")


@dataclass(frozen=True)
class ParitySplits:
    train: ParityData
    val: ParityData
    test: ParityData


def make_parity_splits(config: ParityTaskConfig) -> ParitySplits:
    """The three splits, each from its own child of ``SeedSequence(config.seed)``.

    Splits are drawn independently: short sequences (there are only ``2^L`` of length ``L``)
    recur across splits; lengths above ``max_length`` are never seen in training.
    """
    train_seed, val_seed, test_seed = np.random.SeedSequence(config.seed).spawn(3)
    c = config
    test_parts = [
        generate_parity(c.test_per_length, length, length, seed=seed)
        for length, seed in zip(
            range(c.min_length, c.test_max_length + 1),
            test_seed.spawn(c.test_max_length - c.min_length + 1),
            strict=True,
        )
    ]
    width = c.test_max_length
    test = ParityData(
        tokens=torch.cat(
            [
                torch.nn.functional.pad(p.tokens, (0, width - p.tokens.shape[1]), value=PAD_ID)
                for p in test_parts
            ]
        ),
        lengths=torch.cat([p.lengths for p in test_parts]),
        labels=torch.cat([p.labels for p in test_parts]),
    )
    return ParitySplits(
        train=generate_parity(c.train_size, c.min_length, c.max_length, seed=train_seed),
        val=generate_parity(c.val_size, c.min_length, c.max_length, seed=val_seed),
        test=test,
    )
