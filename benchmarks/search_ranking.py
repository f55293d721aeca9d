"""The beam's ranking against the textbook one, on decoding shapes.

Textbook beam step: add each row's running score to every token's log-probability, then one
``topk`` over the ``K · V`` sums of a group; greedy: ``max`` over the vocabulary. odet's
:class:`~odet.generation.BeamSearch` and :class:`~odet.generation.Greedy` rank strided
vocabulary chunks by their maxima first (``odet.generation.strategies``). Both return the same
candidates (checked here before timing). 64 sentences, beam 5, vocabularies of 8,000 / 10,000 /
32,000 tokens, fp32 log-probabilities; the two alternate, best of five blocks of 20 calls,
under ``odet``'s allocator setting. Run: ``python -m benchmarks.search_ranking [--threads 1]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from odet.generation import BeamSearch, Greedy
from odet.runtime import keep_freed_memory

SENTENCES, BEAM = 64, 5
VOCABULARIES = (8000, 10_000, 32_000)


def textbook_beam(log_probs: Tensor, scores: Tensor) -> tuple[Tensor, Tensor]:
    """``(tokens, origins)`` of the ``2 · beam`` best sums of each group, sorted."""
    G, K, V = log_probs.shape
    top = (scores.unsqueeze(-1) + log_probs).view(G, K * V).topk(2 * BEAM, dim=-1)
    return top.indices % V, top.indices // V


def textbook_greedy(log_probs: Tensor) -> Tensor:
    return log_probs[:, 0].max(dim=-1, keepdim=True).indices


def best_ms(fn: Callable[[], object], calls: int = 20, blocks: int = 5) -> float:
    best = float("inf")
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1000)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_ranking")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    gen = torch.Generator().manual_seed(0)
    beam, greedy = BeamSearch(beam_size=BEAM), Greedy()
    print(f"{args.threads} thread(s), torch {torch.__version__}; ms per call, best of 5 blocks")
    print("| search | vocabulary | textbook ms | odet ms | speed-up |")
    print("|---|---|---|---|---|")
    for vocab in VOCABULARIES:
        log_probs = torch.randn(SENTENCES, BEAM, vocab, generator=gen).log_softmax(-1)
        scores = torch.randn(SENTENCES, BEAM, generator=gen).abs().neg()
        prefixes = torch.zeros(SENTENCES, BEAM, 1, dtype=torch.long)
        first = log_probs[:, :1].contiguous()
        zeros = torch.zeros(SENTENCES, 1)
        one_row = prefixes[:, :1]
        sel = beam.select(log_probs, scores, prefixes)
        tokens, origins = textbook_beam(log_probs, scores)
        if not (torch.equal(sel.tokens, tokens) and torch.equal(sel.origins, origins)):
            raise SystemExit("the beam's candidates differ from the textbook ranking")
        if not torch.equal(greedy.select(first, zeros, one_row).tokens, textbook_greedy(first)):
            raise SystemExit("greedy's tokens differ from the arg-max")
        cases = (
            (
                "beam 5",
                partial(textbook_beam, log_probs, scores),
                partial(beam.select, log_probs, scores, prefixes),
            ),
            (
                "greedy",
                partial(textbook_greedy, first),
                partial(greedy.select, first, zeros, one_row),
            ),
        )
        for name, textbook, odet in cases:
            times = {"textbook": float("inf"), "odet": float("inf")}
            for _ in range(2):
                times["textbook"] = min(times["textbook"], best_ms(textbook))
                times["odet"] = min(times["odet"], best_ms(odet))
            print(
                f"| {name} | {vocab:,} | {times['textbook']:.2f} | {times['odet']:.2f} | "
                f"{times['textbook'] / times['odet']:.2f}× |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
