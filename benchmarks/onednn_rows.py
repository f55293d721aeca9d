"""Does oneDNN's fp32 decoding pay at every batch and beam size? The question behind
``generation.gemm: auto``.

oneDNN's packed GEMMs beat PyTorch's default (MKL) on the many-row products of batched beam
search, and a per-linear microbenchmark shows a fixed cost per call that could lose on one-row
products. This times whole decodes: the same random-weight odet model (``benchmarks.systems``
sizes) decoding ``--batches`` sources with each search of ``--beams``, with PyTorch's GEMMs and
with its oneDNN copy (:func:`odet.nn.onednn.onednn_copy`), in interleaved rounds; the table gives
median sentences/s and the median same-round speed-up, and the share of output tokens that the
two agree on (fp32 sums in another order may flip a near-tie of random weights).

Run: ``python -m benchmarks.onednn_rows [--sizes d128 d256 d512] [--batches 1 4 8 64] [--beams 1 5]
[--threads 1] [--rounds 5] [--out benchmarks/runs/onednn_rows.md]``.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.measure import round_robin, same_round_ratio
from benchmarks.outputs import check_markdown_out, command_line, write_markdown
from benchmarks.systems import SIZES as SYSTEM_SIZES
from benchmarks.systems import BenchSize, gen_sources, odet_model
from odet.inference import inference_model
from odet.nn.onednn import onednn_supported

SIZES: dict[str, BenchSize] = {
    "d128": BenchSize("d128", 10_000, 128, 4, 512, 4, 4, 128, 16, 16, 64, 20),
    **SYSTEM_SIZES,
}
"""The benchmark sizes and a d128 4+4 one (the tiny Transformer of Wu et al. 2021)."""


def measure(
    size_name: str, batch: int, beam: int, rounds: int
) -> tuple[float, float, float, float]:
    """PyTorch sent/s, oneDNN sent/s, median same-round speed-up, share of equal tokens."""
    size = SIZES[size_name]
    torch.manual_seed(0)
    models = {"torch": odet_model(size).eval()}
    models["onednn"] = inference_model(models["torch"], "fp32", "onednn")
    src = gen_sources(size)[:batch]
    n = size.gen_tokens
    outputs: dict[str, list[list[int]]] = {}

    def task(name: str):
        def run() -> None:
            outputs[name] = models[name].generate(src, beam_size=beam, max_len=n, min_len=n)

        return run

    with torch.no_grad():
        timings = round_robin({name: task(name) for name in models}, rounds)
    pairs = [(a, b) for x, y in zip(outputs["torch"], outputs["onednn"]) for a, b in zip(x, y)]
    agree = sum(a == b for a, b in pairs) / max(len(pairs), 1)
    speed = {name: batch / t.median for name, t in timings.items()}
    ratio = same_round_ratio(timings["torch"], timings["onednn"])
    return speed["torch"], speed["onednn"], ratio, agree


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["d128", "d256", "d512"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8, 64])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs/onednn_rows.md"))
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    for name in ("batches", "beams"):
        if any(not 1 <= v <= 64 for v in getattr(args, name)):
            parser.error(f"--{name} must be between 1 and 64")
    if not 1 <= args.threads <= 1024 or args.rounds < 1:
        parser.error("--threads must be between 1 and 1024 and --rounds at least 1")
    if (reason := onednn_supported(torch.device("cpu"))) is not None:
        parser.error(reason)
    torch.set_num_threads(args.threads)
    lines = [
        "# fp32 decoding: PyTorch's GEMMs (MKL) against oneDNN's, by batch and beam size",
        "",
        f"{command_line('benchmarks.onednn_rows', argv)}, {args.threads} thread(s), "
        f"{args.rounds} rounds after one warm-up; random weights, each source decoded to "
        "exactly the size's forced length.",
        "",
        "| size | search | sources | torch sent/s | onednn sent/s | onednn × torch (same round) "
        "| equal tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, beam, batch in itertools.product(args.sizes, args.beams, args.batches):
        mkl, dnn, ratio, agree = measure(size, batch, beam, args.rounds)
        search = "greedy" if beam == 1 else f"beam {beam}"
        row = (
            f"| {size} | {search} | {batch} | {mkl:.1f} | {dnn:.1f} | {ratio:.2f}× | {agree:.1%} |"
        )
        lines.append(row)
        print(row, flush=True)
    write_markdown(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
