"""Decoding-step attention: ``F.scaled_dot_product_attention`` against the two-matmul path
``odet.nn.attention`` takes for one query per row on CPU, in the same rounds.

Shapes are those of beam search on Multi30k (200 sentences × beam 5 = 1,000 rows, 4 heads of
64, 20 keys), with and without a key padding mask, fp32 and bf16, one thread; the last rows give
the two-matmul path bf16 queries against fp32 keys/values, as if a bf16 model kept fp32 caches
(tried: the attention gets faster, whole beam searches did not; benchmarks/RESULTS.md). Run:
``python -m benchmarks.decode_attention [--out benchmarks/runs/decode_attention.md]``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks import measure
from benchmarks.outputs import check_markdown_out
from odet.nn.attention import _attention


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def _widened(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
    """The two-matmul path in the keys' dtype, ``q``'s dtype in and out."""
    return _attention(q.to(k.dtype), k, v, mask, dropout).to(q.dtype)


@torch.no_grad()
def _ten_calls(fn: Callable[..., Tensor], *args: Any) -> None:
    for _ in range(10):
        fn(*args, 0.0)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs/decode_attention.md"))
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    lines = [
        "# Decoding-step attention: SDPA vs two matmuls",
        "",
        f"`python -m benchmarks.decode_attention {shlex.join(argv)}`".replace(" `", "`"),
        f"({args.rows} rows × 4 heads × 1 query × {args.keys} keys × 64, one thread, median of "
        f"{args.rounds} round-robin rounds of 10 calls)",
        "",
        "| queries | keys, values (two matmuls) | key mask | SDPA (ms) | two matmuls (ms) | "
        "speed-up (same-round) |",
        "|---|---|---|---|---|---|",
    ]
    f32, bf16 = torch.float32, torch.bfloat16
    for dtype, cache_dtype in ((f32, f32), (bf16, bf16), (bf16, f32)):
        q, k, v = (
            torch.randn(args.rows, 4, t, 64, generator=g).to(dtype)
            for t in (1, args.keys, args.keys)
        )
        k_cache, v_cache = k.to(cache_dtype), v.to(cache_dtype)
        for masked in (False, True):
            mask = torch.rand(args.rows, 1, 1, args.keys, generator=g) > 0.2 if masked else None
            tasks = {
                "sdpa": partial(_ten_calls, _sdpa, q, k, v, mask),
                "matmuls": partial(_ten_calls, _widened, q, k_cache, v_cache, mask),
            }
            t = measure.round_robin(tasks, rounds=args.rounds)
            lines.append(
                f"| {_name(dtype)} | {_name(cache_dtype)} | {'yes' if masked else 'no'} | "
                f"{t['sdpa'].median * 100:.2f} | {t['matmuls'].median * 100:.2f} | "
                f"{measure.same_round_ratio(t['sdpa'], t['matmuls']):.2f}× |"
            )
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
