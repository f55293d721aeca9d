"""The issue-#26 decoding changes, each timed against the code it replaced, in one process.

Every variant runs the same batched search on the same model; a variant is the current code with
some changes reverted (the replaced functions are kept here and patched in for its rounds).
Variants take turns within each round, so they see the same machine load; the table gives the
median sentences/s and the median of the same-round ratios to ``before`` (all changes reverted).
Each variant's n-best tokens must equal ``before``'s and its scores agree to ``SCORE_TOLERANCE``
(fp32 matmuls on contiguous memory keys take another kernel, which rounds differently); the
largest score difference is reported.

Run: ``python -m benchmarks.decode_changes [--sizes d256] [--dtypes fp32 bf16] [--beams 1 5]
[--threads 1] [--rounds 7] [--out benchmarks/runs/decode_changes.md]``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.outputs import check_markdown_out, command_line, write_markdown
from benchmarks.systems import SIZES, gen_sources, odet_model
from odet.generation import loop as generation_loop
from odet.generation import make_strategy
from odet.models.seq2seq import Seq2SeqDecoder
from odet.nn import attention
from odet.nn.attention import CrossAttention, KVCache, _split_heads

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SCORE_TOLERANCE = 1e-5


def _old_project_memory(self: CrossAttention, memory: Tensor) -> KVCache:
    k, v = (_split_heads(t, self.num_heads) for t in self.kv_proj(memory).chunk(2, dim=-1))
    return KVCache(k, v)


def _old_gather_rows(buffer: Tensor, index: Tensor, filled: int) -> Tensor:
    out = buffer.new_empty(index.shape[0], *buffer.shape[1:])
    torch.index_select(buffer[:, :, :filled], 0, index, out=out[:, :, :filled])
    return out


def _old_step(self: Seq2SeqDecoder, prefix: Tensor) -> Tensor:
    if self.state is None:
        logits = self.model.decode(prefix, self.encoder_out)[:, -1]
    else:
        logits = self.model.decode(prefix[:, -1:], state=self.state)[:, -1]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1)


def _old_mask(log_probs: Tensor, banned: list[int], force: int | None) -> Tensor:
    if force is not None:
        forced = torch.full_like(log_probs, -math.inf)
        forced[:, force] = log_probs[:, force]
        return forced
    out = log_probs.clone()
    out[:, banned] = -math.inf
    return out


CHANGES: dict[str, tuple[Any, str, Callable[..., Any]]] = {
    "memory K/V contiguous once": (CrossAttention, "project_memory", _old_project_memory),
    "log_softmax upcasts bf16 itself": (Seq2SeqDecoder, "step", _old_step),
    "mask in place (no clone)": (generation_loop, "_mask_", _old_mask),
    "reordered KV cache sized to fill": (attention, "_gather_rows", _old_gather_rows),
}
"""Each change: the attribute it replaced and the replaced code."""


@contextlib.contextmanager
def reverted(names: Sequence[str]) -> Iterator[None]:
    """The changes ``names`` undone for the duration of the block."""
    saved = []
    for name in names:
        owner, attr, old = CHANGES[name]
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, old)
    try:
        yield
    finally:
        for owner, attr, new in reversed(saved):
            setattr(owner, attr, new)


def variants() -> dict[str, list[str]]:
    """``before`` (all reverted), then the changes added one at a time, cumulatively."""
    names = list(CHANGES)
    out = {"before": names}
    for i, name in enumerate(names):
        out[f"+ {name}"] = names[i + 1 :]
    return out


def measure(
    size_name: str, dtype: str, beam: int, rounds: int
) -> list[tuple[str, float, float, float]]:
    """Per variant: median sentences/s, median same-round speed-up over ``before``, largest
    score difference to ``before``."""
    size = SIZES[size_name]
    model = odet_model(size).eval().to(DTYPES[dtype])
    src = gen_sources(size)
    n = size.gen_tokens
    strategy = make_strategy("beam", beam_size=beam)

    def run() -> list[list[tuple[list[int], float]]]:
        nbest = model.search(src, strategy, max_len=n, min_len=n)
        return [[(h.tokens, h.score) for h in hyps] for hyps in nbest]

    specs = variants()
    reference: list[list[tuple[list[int], float]]] = []
    diffs: dict[str, float] = {}
    for name, undo in specs.items():  # warm-up and exactness check
        with reverted(undo):
            out = run()
        reference = reference or out
        if [[t for t, _ in h] for h in out] != [[t for t, _ in h] for h in reference]:
            raise RuntimeError(f"{size_name} {dtype} beam {beam}: {name!r} changed the n-best")
        pairs = [(a[1], b[1]) for x, y in zip(out, reference) for a, b in zip(x, y)]
        diffs[name] = max(abs(a - b) for a, b in pairs)
        if diffs[name] > SCORE_TOLERANCE:
            raise RuntimeError(f"{size_name} {dtype} beam {beam}: {name!r} changed the scores")
    speeds: dict[str, list[float]] = {name: [] for name in specs}
    for _ in range(rounds):
        for name, undo in specs.items():
            with reverted(undo):
                t0 = time.perf_counter()
                run()
                speeds[name].append(src.shape[0] / (time.perf_counter() - t0))
    base = speeds["before"]
    return [
        (
            name,
            statistics.median(s),
            statistics.median(a / b for a, b in zip(s, base, strict=True)),
            diffs[name],
        )
        for name, s in speeds.items()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["d256"])
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs/decode_changes.md"))
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    torch.set_num_threads(args.threads)
    lines = [
        "# Decoding changes of issue #26, each against the code it replaced",
        "",
        f"{command_line('benchmarks.decode_changes', argv)}, {args.threads} thread(s), "
        f"{args.rounds} rounds; n-best tokens identical in every variant (score column: the"
        " largest |score − before's|).",
        "",
        "| size | dtype | search | variant (cumulative) | sent/s | × before (same round) | score |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in args.sizes:
        for dtype in args.dtypes:
            for beam in args.beams:
                search = "greedy" if beam == 1 else f"beam {beam}"
                for name, speed, ratio, diff in measure(size, dtype, beam, args.rounds):
                    lines.append(
                        f"| {size} | {dtype} | {search} | {name} | {speed:.1f} | {ratio:.3f}× "
                        f"| {diff:.1e} |"
                    )
                    print(lines[-1], flush=True)
    write_markdown(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
