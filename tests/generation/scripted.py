"""Scripted test doubles of :class:`odet.generation.IncrementalDecoder`.

A *script* maps a generated prefix (a tuple of tokens, without BOS) to the next-token
probabilities; tokens it does not list have probability 0 and unscripted prefixes end with EOS
(probability 1). Each source sentence has its own script. The cached double keeps the prefixes
it has seen as its state and fails if the loop hands it a prefix that does not extend them, so a
wrong ``reorder`` cannot go unnoticed; both fail when the loop's ``rows_per_source`` promise
(consecutive rows of one source) is false.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

PAD, UNK, BOS, EOS = 0, 1, 2, 3
A, B, C, D = 4, 5, 6, 7
VOCAB = 8

Distribution = Mapping[int, float]
Script = Mapping[tuple[int, ...], Distribution] | Callable[[tuple[int, ...]], Distribution]


def log_distribution(probs: Distribution, vocab_size: int = VOCAB) -> Tensor:
    """``(V,)`` float64 log-probabilities; unlisted tokens get probability 0."""
    if not math.isclose(sum(probs.values()), 1.0, abs_tol=1e-12):
        raise ValueError(f"probabilities must sum to 1, got {dict(probs)}")
    out = torch.zeros(vocab_size, dtype=torch.float64)
    for token, p in probs.items():
        out[token] = p
    return out.log()


def _lookup(script: Script, generated: tuple[int, ...]) -> Distribution:
    if callable(script):
        return script(generated)
    return script.get(generated, {EOS: 1.0})


class UncachedScriptedDecoder:
    """Recomputes every row from its whole prefix; its only state is each row's source sentence
    (what a real uncached model keeps of the encoder memory)."""

    def __init__(self, scripts: Sequence[Script], bos_id: int = BOS, vocab_size: int = VOCAB):
        self.scripts = list(scripts)
        self.bos_id = bos_id
        self.vocab_size = vocab_size
        self.sources = list(range(len(self.scripts)))
        self.reorders: list[list[int]] = []
        self.rows_per_source: list[int] = []
        self.rows_per_step: list[int] = []

    def step(self, prefix: Tensor) -> Tensor:
        assert prefix.dtype == torch.long and prefix.dim() == 2
        rows = prefix.tolist()
        assert len(rows) == len(self.sources), (len(rows), len(self.sources))
        assert all(row[0] == self.bos_id for row in rows)
        self.rows_per_step.append(len(rows))
        return torch.stack(
            [
                log_distribution(_lookup(self.scripts[src], tuple(row[1:])), self.vocab_size)
                for src, row in zip(self.sources, rows, strict=True)
            ]
        )

    def reorder(self, index: Tensor, rows_per_source: int = 1) -> None:
        """Follow ``index``; check the loop's promise that blocks of ``rows_per_source``
        consecutive rows decode one source sentence."""
        assert index.dtype == torch.long and index.dim() == 1
        idx = index.tolist()
        assert all(0 <= i < len(self.sources) for i in idx), idx
        self.sources = [self.sources[i] for i in idx]
        assert len(idx) % rows_per_source == 0, (len(idx), rows_per_source)
        blocks = [
            self.sources[b : b + rows_per_source] for b in range(0, len(idx), rows_per_source)
        ]
        assert all(len(set(block)) == 1 for block in blocks), (self.sources, rows_per_source)
        self.reorders.append(idx)
        self.rows_per_source.append(rows_per_source)


class ScriptedDecoder(UncachedScriptedDecoder):
    """A cached decoder: it remembers each row's prefix and only trusts ``prefix[:, -1]`` after
    checking that the rest matches what it saw, reordered as told."""

    def __init__(self, scripts: Sequence[Script], bos_id: int = BOS, vocab_size: int = VOCAB):
        super().__init__(scripts, bos_id, vocab_size)
        self.seen: list[list[int]] | None = None

    def step(self, prefix: Tensor) -> Tensor:
        rows = prefix.tolist()
        if self.seen is None:
            assert all(row == [self.bos_id] for row in rows), rows
        else:
            assert [row[:-1] for row in rows] == self.seen, (rows, self.seen)
        self.seen = rows
        return super().step(prefix)

    def reorder(self, index: Tensor, rows_per_source: int = 1) -> None:
        super().reorder(index, rows_per_source)
        if self.seen is not None:
            self.seen = [self.seen[i] for i in index.tolist()]
