"""Synthetic transduction tasks: parallel text that odet generates itself, for tests and demos.

Sources are sequences of words drawn from a small vocabulary; the target is a deterministic
function of the source, so a model's exact-match accuracy measures how well it learned it:

- ``copy``: the source itself;
- ``reverse``: the words in reverse order;
- ``sort``: the words sorted alphabetically;
- ``translate``: every word mapped through a fixed random dictionary, then the pairs of adjacent
  words swapped — a toy "translation" with local reordering.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odet.config import check, check_seed, check_types

_SYLLABLES = ("ka", "lo", "mi", "ne", "po", "ru", "sa", "ti", "vu", "ze", "ba", "do")


def _words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(words)


def _swap_pairs(words: list[str]) -> list[str]:
    out = list(words)
    for i in range(0, len(out) - 1, 2):
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


@dataclass(frozen=True)
class SyntheticTask:
    """A seeded generator of one task (see the module docstring)."""

    name: str = "reverse"
    vocab_words: int = 24
    min_length: int = 3
    max_length: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        check_types(self)
        check(
            self.name in TASKS,
            f"unknown synthetic task {self.name!r}; choose one of {sorted(TASKS)}",
        )
        check(self.vocab_words >= 2, "vocab_words must be >= 2")
        check(1 <= self.min_length <= self.max_length, "need 1 <= min_length <= max_length")
        check_seed(self.seed, "seed")

    def pairs(self, count: int, split_seed: int) -> list[tuple[str, str]]:
        words = _words(self.vocab_words, self.seed)
        targets = _words(2 * self.vocab_words, self.seed + 1)[: self.vocab_words]
        mapping = dict(zip(words, random.Random(self.seed + 2).sample(targets, len(targets))))
        rng = random.Random(f"{self.seed}-{split_seed}")
        out = []
        for _ in range(count):
            source = [
                rng.choice(words) for _ in range(rng.randint(self.min_length, self.max_length))
            ]
            out.append((" ".join(source), " ".join(TASKS[self.name](source, mapping))))
        return out

    def write(
        self, directory: str | Path, sizes: dict[str, int] | None = None
    ) -> dict[str, tuple[Path, Path]]:
        """Write ``<split>.src`` / ``<split>.tgt`` for each split (default train/valid/test)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        sizes = sizes or {"train": 4000, "valid": 200, "test": 200}
        files = {}
        for index, (split, count) in enumerate(sizes.items()):
            pairs = self.pairs(count, split_seed=index)
            src, tgt = directory / f"{split}.src", directory / f"{split}.tgt"
            src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
            tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
            files[split] = (src, tgt)
        return files


TASKS: dict[str, Callable[[list[str], dict[str, str]], list[str]]] = {
    "copy": lambda words, mapping: list(words),
    "reverse": lambda words, mapping: words[::-1],
    "sort": lambda words, mapping: sorted(words),
    "translate": lambda words, mapping: _swap_pairs([mapping[w] for w in words]),
}
