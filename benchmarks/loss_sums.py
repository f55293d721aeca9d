"""The trainer's loss sums against the two ``F.cross_entropy`` calls they replaced.

Forward + backward of the label-smoothed loss (ε = 0.1) and the NLL on ``(2048, 8000)`` logits
(the Multi30k recipe's shapes) in fp32 and bf16, the two alternating; best of three blocks of
five calls each, under ``odet``'s allocator setting. Run: ``python -m benchmarks.loss_sums
[--threads 1]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from odet.runtime import keep_freed_memory
from odet.training.loss import loss_sums

LossSums = Callable[..., tuple[Tensor, Tensor]]


def two_cross_entropies(
    logits: Tensor, target: Tensor, *, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor]:
    """What ``loss_sums`` computed before: the smoothed loss and the NLL as two calls."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    flat_target = target.reshape(-1)
    loss = F.cross_entropy(
        flat, flat_target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat.detach(), flat_target, ignore_index=pad_id, reduction="sum")
    return loss, nll


def milliseconds(fn: LossSums, logits: Tensor, target: Tensor, calls: int = 5) -> float:
    """Mean time of one forward + backward of ``fn`` over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        x = logits.clone().requires_grad_()
        loss, _ = fn(x, target, smoothing=0.1, pad_id=0)
        loss.backward()
    return (time.perf_counter() - start) / calls * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loss_sums")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(1, 8000, (2048,), generator=gen)
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.randn(2048, 8000, generator=gen).to(dtype)
        best = {"two cross_entropy calls": float("inf"), "loss_sums": float("inf")}
        for _ in range(3):
            for name, fn in (
                ("two cross_entropy calls", two_cross_entropies),
                ("loss_sums", loss_sums),
            ):
                milliseconds(fn, logits, target, calls=1)  # warm-up
                best[name] = min(best[name], milliseconds(fn, logits, target))
        row = ", ".join(f"{name} {ms:.1f} ms" for name, ms in best.items())
        print(f"{str(dtype).removeprefix('torch.')}: {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
