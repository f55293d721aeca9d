"""fp32 / bf16 / int8 decoding of one trained Multi30k model, in one process.

Every variant decodes the same test set with the run's own search settings (its
``config.yaml`` ``generation`` section: beam 5 for the recipe), once per round, the variants in
a rotating order (interleaved rounds, the first round untimed). It writes one hypothesis file
per variant, and ``results.csv`` / ``results.md`` with lower-cased 13a-tokenized BLEU (as
``odet evaluate --tokenized`` and the experiment reports score it), the share of lines
identical to fp32, and sentences/s (median over rounds) with the median same-round ratio to
fp32::

    python -m benchmarks.int8_multi30k RUN_DIR/avg5 --config RUN_DIR/config.yaml \\
        --src test.en.gz --ref test.de.gz --out results/multi30k/int8 --rounds 3
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.systems import quantize_dynamic_copy
from odet.config import from_dict, load_yaml
from odet.evaluation import tokenize_13a_lower, tokenized_bleu
from odet.evaluation.files import read_all_lines
from odet.generation import GenerationConfig
from odet.inference import Translator, inference_model, load_model_and_tokenizers
from odet.models import Seq2Seq
from odet.nn.quantization import int8_copy

VARIANTS: dict[str, Callable[[Seq2Seq], Seq2Seq]] = {
    "fp32": lambda m: m,
    "bf16": lambda m: inference_model(m, "bf16"),
    "int8": lambda m: inference_model(m, "int8"),
    "int8-no-output": lambda m: int8_copy(m),
    "int8-qdyn": lambda m: quantize_dynamic_copy(m),
    "int8-qdyn-no-output": lambda m: quantize_dynamic_copy(m, ()),
    "fp32-onednn": lambda m: inference_model(m, "fp32", "onednn"),
}
"""``int8`` is ``--precision int8``; the int8 ones after it are its ablations (output projection
in fp32; PyTorch's ``quantize_dynamic``, one activation scale per tensor); ``fp32-onednn`` is
``--gemm onednn``."""


def bleu(hyps: list[str], refs: list[str]) -> float:
    """Lower-cased 13a-tokenized corpus BLEU (``odet evaluate --tokenized``)."""
    return tokenized_bleu(
        [tokenize_13a_lower(h) for h in hyps], [tokenize_13a_lower(r) for r in refs]
    ).score


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model directory (e.g. a run's avg5)")
    parser.add_argument("--config", required=True, help="the run's config.yaml (generation)")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after one untimed)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, help="the first N sentences only")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_yaml(args.config)
    config = from_dict(GenerationConfig, data["generation"], where="generation")
    config = replace(config, precision="fp32", gemm="torch")  # the variants are built here
    model, tokenizers = load_model_and_tokenizers(args.model)
    model.eval()
    translators = {
        name: Translator(VARIANTS[name](model), tokenizers, config) for name in args.variants
    }
    sources, refs = read_all_lines(args.src), read_all_lines(args.ref)
    if args.limit:
        sources, refs = sources[: args.limit], refs[: args.limit]
    hyps: dict[str, list[str]] = {}
    seconds: dict[str, list[float]] = {name: [] for name in translators}
    names = list(translators)
    for r in range(args.rounds + 1):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            start = time.perf_counter()
            out = translators[name].translate(sources)
            elapsed = time.perf_counter() - start
            if r == 0:
                hyps[name] = out
            else:
                if out != hyps[name]:
                    raise RuntimeError(f"{name}: round {r} decoded differently from round 0")
                seconds[name].append(elapsed)
            print(f"round {r} {name}: {elapsed:.1f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        (args.out / f"{name}.hyp").write_text("\n".join(hyps[name]) + "\n", encoding="utf-8")
        same = sum(a == b for a, b in zip(hyps[name], hyps[names[0]], strict=True))
        ratios = [f / t for f, t in zip(seconds[names[0]], seconds[name], strict=True)]
        rows.append(
            {
                "variant": name,
                "bleu_tok": round(bleu(hyps[name], refs), 2),
                "identical_to_fp32": same,
                "sentences": len(sources),
                "sent_per_s": round(len(sources) / statistics.median(seconds[name]), 2),
                "speed_vs_fp32": round(statistics.median(ratios), 3),
                "rounds": args.rounds,
                "threads": args.threads,
            }
        )
    with (args.out / "results.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "| variant | tok BLEU | identical to fp32 | sent/s | × fp32 (same rounds) |",
        "|---|---|---|---|---|",
        *(
            f"| {r['variant']} | {r['bleu_tok']:.2f} | {r['identical_to_fp32']} / "
            f"{r['sentences']} | {r['sent_per_s']:.1f} | {r['speed_vs_fp32']:.2f} |"
            for r in rows
        ),
    ]
    (args.out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
