"""The adaptive (continuous, N-ODE) encoder against the Euler encoder: issue #25's benchmark row.

Both systems are odet ``Seq2Seq`` models of one size with random weights (``systems.odet_config``:
shared embeddings, dropout 0.1), differing only in the encoder: ``euler`` (one layer per block)
or ``continuous`` (one time-conditioned layer per block, integrated by torchode's adaptive
solver with the config's tolerances). Per system the script reports

- the time of one training step (forward + backward + Adam) on a batch of random sentences of
  random lengths (padded), in interleaved rounds (``measure.round_robin``);
- the time per decoded sentence (beam search, every hypothesis forced to ``gen_tokens``
  tokens), in the same rounds;
- the encoder's NFE per sentence (summed over the blocks) on the training batch in training
  mode (dropout on, as in a step; and, for the continuous encoder, the same weights with
  dropout 0) and on the decoded sources in evaluation mode: mean, min, max (the Euler encoder
  makes one evaluation per block);
- for the continuous encoder, the share of the encoder's forward time spent outside the field's
  evaluations (solver bookkeeping, step-size control, host syncs): forward hooks time every call
  of each block's field and the whole encoder, in separate untimed passes (training forward
  with autograd, and the no-grad encode of decoding). The backward pass is not split.

Random weights: the NFE is that of an untrained field, not of a trained model.

    python -m benchmarks.adaptive_encoder --size d256 --rounds 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from benchmarks.measure import round_robin, same_round_ratio
from benchmarks.systems import BOS, PAD, Batch, BenchSize, TrainSystem, odet_config, parameters
from odet.models import Seq2Seq
from odet.models.config import ContinuousEncoderConfig


@dataclass(frozen=True)
class Size:
    """Model widths and workloads: training batches of about ``train_tgt_tokens`` target tokens
    in sentences of ``min_len``..``max_len`` tokens (source and target lengths drawn apart)."""

    name: str
    vocab_size: int
    d_model: int
    num_heads: int
    ffn_dim: int
    encoder_layers: int
    decoder_layers: int
    train_tgt_tokens: int
    min_len: int
    max_len: int
    gen_batch: int
    gen_tokens: int
    beam: int


SIZES = {
    "toy": Size("toy", 200, 32, 2, 64, 1, 1, 64, 4, 6, 4, 3, 2),
    "d256": Size("d256", 8000, 256, 4, 1024, 3, 3, 2000, 12, 16, 32, 16, 5),
}
SYSTEMS = ("euler", "continuous")


def random_sentences(n: int, size: Size, gen: torch.Generator) -> Tensor:
    """``n`` right-padded rows of random non-special tokens, lengths uniform in the size's range."""
    lengths = torch.randint(size.min_len, size.max_len + 1, (n,), generator=gen)
    tokens = torch.randint(4, size.vocab_size, (n, int(lengths.max())), generator=gen)
    keep = torch.arange(tokens.shape[1]) < lengths[:, None]
    return tokens.masked_fill(~keep, PAD)


def make_batch(size: Size, seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    n = max(1, round(size.train_tgt_tokens / ((size.min_len + size.max_len) / 2)))
    src = random_sentences(n, size, gen)
    tgt = random_sentences(n, size, gen)
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], BOS), tgt[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt.eq(PAD), PAD)
    return Batch(src, tgt_in, tgt)


def build_model(size: Size, system: str) -> Seq2Seq:
    base = odet_config(_bench_size(size), encoder_method=system)
    config = replace(base, continuous=ContinuousEncoderConfig(on_failure="flag"))
    torch.manual_seed(0)
    return Seq2Seq(config)


def _bench_size(size: Size) -> BenchSize:
    return BenchSize(
        size.name,
        size.vocab_size,
        size.d_model,
        size.num_heads,
        size.ffn_dim,
        size.encoder_layers,
        size.decoder_layers,
        1,
        size.max_len,
        size.max_len,
        size.gen_batch,
        size.gen_tokens,
    )


def encoder_nfe(model: Seq2Seq, src: Tensor, *, train: bool = False) -> list[int]:
    """Encoder evaluations per sentence of ``src`` (the blocks' count for a discrete encoder),
    in training mode (dropout on, as in a training step) or evaluation mode."""
    model.train(train)
    with torch.no_grad():
        stats = model.encode(src).stats
    model.train()
    if stats is None:
        return [model.config.encoder_layers] * src.shape[0]
    return [int(v) for v in stats.nfe.tolist()]


class SolveClock:
    """Forward hooks timing the whole encoder and every call of each continuous block's field."""

    def __init__(self, model: Seq2Seq) -> None:
        self.encoder_s = 0.0
        self.field_s = 0.0
        self.field_calls = 0
        self._handles = []
        self._add(model.encoder, "encoder_s", count=False)
        for stack in model.encoder.stacks:
            self._add(stack.field, "field_s", count=True)

    def _add(self, module: nn.Module, attr: str, *, count: bool) -> None:
        start: list[float] = []

        def pre(*_):
            start.append(time.perf_counter())

        def post(*_):
            setattr(self, attr, getattr(self, attr) + time.perf_counter() - start.pop())
            if count:
                self.field_calls += 1

        self._handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def share_outside(self) -> float:
        return 1.0 - self.field_s / self.encoder_s


def outside_share(model: Seq2Seq, batch: Batch, sources: Tensor, repeats: int) -> dict:
    """The share of the encoder's forward time outside field evaluations, training and decoding."""
    result = {}
    for mode in ("train_forward", "decode_encode"):
        clock = SolveClock(model)
        try:
            for _ in range(repeats):
                if mode == "train_forward":
                    model.train()
                    model.encode(batch.src)
                else:
                    model.eval()
                    with torch.no_grad():
                        model.encode(sources)
        finally:
            clock.remove()
        result[mode] = {
            "share_outside_field": clock.share_outside(),
            "encoder_s_per_call": clock.encoder_s / repeats,
            "field_s_per_call": clock.field_s / repeats,
            "field_calls_per_call": clock.field_calls / repeats,
        }
    model.train()
    return result


def _stats(values: list[int]) -> dict:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def run(size: Size, rounds: int, warmup: int = 1, share_repeats: int = 3) -> dict:
    batch = make_batch(size, seed=0)
    sources = random_sentences(size.gen_batch, size, torch.Generator().manual_seed(1))
    models = {name: build_model(size, name).train() for name in SYSTEMS}
    trainers = {
        name: TrainSystem(model, lambda b, m=model: m(b.src, b.tgt_in))
        for name, model in models.items()
    }
    n = size.gen_tokens

    def decode(model: Seq2Seq):
        def task():
            model.eval()
            with torch.no_grad():
                model.generate(sources, beam_size=size.beam, max_len=n, min_len=n)
            model.train()

        return task

    tasks = {}
    for name in SYSTEMS:
        tasks[f"{name}/train"] = lambda t=trainers[name]: t.step(batch)
        tasks[f"{name}/decode"] = decode(models[name])
    timings = round_robin(tasks, rounds=rounds, warmup=warmup)

    rows = {}
    for name, model in models.items():
        train, gen = timings[f"{name}/train"], timings[f"{name}/decode"]
        rows[name] = {
            "parameters": parameters(model),
            "train_step_s": train.median,
            "train_step_s_rounds": list(train.times),
            "decode_s_per_sentence": gen.median / size.gen_batch,
            "decode_s_rounds": list(gen.times),
            "encoder_nfe_train_batch": _stats(encoder_nfe(model, batch.src, train=True)),
            "encoder_nfe_decode_sources": _stats(encoder_nfe(model, sources)),
        }
    no_dropout = Seq2Seq(replace(models["continuous"].config, dropout=0.0))
    no_dropout.load_state_dict(models["continuous"].state_dict())
    rows["continuous"]["encoder_nfe_train_batch_dropout0"] = _stats(
        encoder_nfe(no_dropout, batch.src, train=True)
    )
    rows["continuous"]["time_outside_field"] = outside_share(
        models["continuous"], batch, sources, share_repeats
    )
    ratios = {
        "train_step": same_round_ratio(timings["continuous/train"], timings["euler/train"]),
        "decode": same_round_ratio(timings["continuous/decode"], timings["euler/decode"]),
    }
    return {
        "size": asdict(size),
        "train_batch": {
            "sentences": batch.src.shape[0],
            "src_tokens": int(batch.src.ne(PAD).sum()),
            "tgt_tokens": int(batch.tgt_out.ne(PAD).sum()),
        },
        "solver": {
            k: v for k, v in asdict(models["continuous"].config.continuous).items() if k != "t0"
        },
        "rounds": rounds,
        "warmup": warmup,
        "systems": rows,
        "ratio_continuous_over_euler": ratios,
    }


def markdown(result: dict, command: str, machine: str) -> str:
    size, rows = result["size"], result["systems"]
    solver = result["solver"]
    lines = [
        f"# Adaptive encoder vs Euler encoder ({size['name']}, {dt.date.today()})",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}  ",
        f"Model: d{size['d_model']}, {size['encoder_layers']}+{size['decoder_layers']} blocks, "
        f"FFN {size['ffn_dim']}, vocabulary {size['vocab_size']}, random weights. Training batch: "
        f"{result['train_batch']['sentences']} sentences, {result['train_batch']['tgt_tokens']} "
        f"target tokens (lengths {size['min_len']}-{size['max_len']}). Decoding: "
        f"{size['gen_batch']} sources, beam {size['beam']}, {size['gen_tokens']} tokens forced. "
        f"Continuous encoder: {solver['solver']} ({solver['backend']}), rtol {solver['rtol']}, "
        f"atol {solver['atol']}, one time-conditioned layer per block. "
        f"{result['rounds']} interleaved rounds after {result['warmup']} warm-up; medians.",
        "",
        "| encoder | params | train step (s) | decode (ms/sentence) | NFE/sentence training "
        "(dropout on; mean [min, max]) | NFE/sentence decoding (eval) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, row in rows.items():
        nt, nd = row["encoder_nfe_train_batch"], row["encoder_nfe_decode_sources"]
        lines.append(
            f"| {name} | {row['parameters']:,} | {row['train_step_s']:.3f} | "
            f"{1e3 * row['decode_s_per_sentence']:.1f} | {nt['mean']:.1f} [{nt['min']}, "
            f"{nt['max']}] | {nd['mean']:.1f} [{nd['min']}, {nd['max']}] |"
        )
    ratios = result["ratio_continuous_over_euler"]
    nfe0 = rows["continuous"]["encoder_nfe_train_batch_dropout0"]
    lines += [
        "",
        f"Continuous encoder on the training batch in training mode with dropout 0 (same "
        f"weights): NFE/sentence {nfe0['mean']:.1f} [{nfe0['min']}, {nfe0['max']}].",
        "",
        f"Continuous / Euler, median of same-round ratios: training step "
        f"{ratios['train_step']:.2f}x, decoding {ratios['decode']:.2f}x.",
        "",
        "Continuous encoder, forward time outside the field's evaluations (solver overhead):",
        "",
        "| pass | encoder forward (s) | field evaluations (s) | field calls | share outside |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode, share in rows["continuous"]["time_outside_field"].items():
        lines.append(
            f"| {mode} | {share['encoder_s_per_call']:.3f} | {share['field_s_per_call']:.3f} | "
            f"{share['field_calls_per_call']:.0f} | {100 * share['share_outside_field']:.1f}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adaptive_encoder")
    parser.add_argument("--size", choices=sorted(SIZES), default="d256")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--train-tokens", type=int, default=None, help="target tokens per batch")
    parser.add_argument("--gen-batch", type=int, default=None, help="sources decoded per round")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs"))
    parser.add_argument("--name", default=None, help="file stem (default adaptive_encoder_DATE)")
    parser.add_argument("--machine", default=None, help="machine note for the report")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    machine = args.machine or (
        f"{platform.processor() or platform.machine()}, {args.threads} thread(s), "
        f"torch {torch.__version__}"
    )
    command = shlex.join(
        ["python", "-m", "benchmarks.adaptive_encoder", *(sys.argv[1:] if argv is None else argv)]
    )
    size = SIZES[args.size]
    if args.train_tokens:
        size = replace(size, train_tgt_tokens=args.train_tokens)
    if args.gen_batch:
        size = replace(size, gen_batch=args.gen_batch)
    result = run(size, args.rounds, args.warmup)
    result.update(command=command.strip(), machine=machine, date=str(dt.date.today()))
    stem = args.name or f"adaptive_encoder_{dt.date.today()}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result, result["command"], machine)
    (args.out / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
