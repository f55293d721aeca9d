"""``python -m benchmarks``: odet against its peers, in one process, round-robin.

For each size: training tokens/s (forward + backward + Adam), peak memory and MFU of every
training system; encoder-only cost ratios of every block method; generation sentences/s (greedy
and beam) at forced lengths. Results go to JSON and, for full runs, to ``benchmarks/RESULTS.md``.
``--lm SIZE …`` instead times odet's Euler language model against HF GPT-2
(:mod:`benchmarks.lm`), written to ``benchmarks/lm_results.json`` and printed as Markdown rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks import measure, report
from benchmarks import systems as system_registry
from benchmarks.lm import LM_SIZES, PRECISIONS, lm_table, run_lm_benchmarks
from benchmarks.systems import (
    ENCODERS,
    GEN_SYSTEMS,
    SIZES,
    TRAIN_SYSTEMS,
    BenchSize,
    ChildProcessGenerate,
    Generate,
    PeerUnavailableError,
    TrainSystem,
    encoder_task,
    gen_sources,
    iter_names,
    make_batch,
    parameters,
)
from odet.config import MAX_THREADS
from odet.nn import has_native_bf16
from odet.runtime import keep_freed_memory

REFERENCE = ("hf-marian", "torch-transformer")
"""Ratios are taken against the first of these that ran."""
BASELINE = "odet-euler"
GEN_PEERS = ("hf-marian", "ct2-marian", "ct2-marian-int8", "odet-euler")
"""Generation systems every other one is compared with, same round."""
RK_PAIRS = (("odet-rk2", BASELINE), ("odet-rk2-gated", BASELINE), ("odet-rk4", BASELINE))
MEMORY_PAIRS = (("odet-rk4", BASELINE), ("odet-rk4-ckpt", BASELINE))
"""Peak training memory ratios; RK4 with activation checkpointing should stay near Euler."""
BF16_SYSTEMS = frozenset(
    {
        "odet-euler-bf16",
        "odet-euler-bf16-fused-sdpa",
        "odet-euler-bf16-scores",
        "odet-euler-bf16-weights",
        "odet-euler-bf16-compiled-step",
    }
)


def _mfu_reference(name: str) -> str:
    """The GEMM probe a system's MFU is measured against; an emulated bf16 probe is marked, since
    a bf16 step can then beat its probe's rate (the probe's shape emulates worse)."""
    if name not in BF16_SYSTEMS:
        return "fp32 GEMM"
    return "bf16 GEMM" if has_native_bf16(torch.device("cpu")) else "bf16 GEMM (emulated)"


def _train_entry(
    name: str,
    system: TrainSystem,
    size: BenchSize,
    timing: measure.Timing,
    flops: int,
    gemm: dict[str, measure.Timing],
    gemm_flops: int,
    memory: int | None,
) -> dict[str, Any]:
    rate = gemm["bf16" if name in BF16_SYSTEMS else "fp32"]
    mfu = [(flops / t) / (gemm_flops / g) for t, g in zip(timing.times, rate.times, strict=True)]
    return {
        "step_s": timing.median,
        "step_s_rounds": list(timing.times),
        "tokens_per_s": size.train_tokens / timing.median,
        "params": parameters(system.model),
        "train_flops_per_step": flops,
        "train_flops_per_token": flops / size.train_tokens,
        "gflops_per_s": flops / timing.median / 1e9,
        "mfu": sorted(mfu)[len(mfu) // 2],
        "mfu_against": _mfu_reference(name),
        "peak_memory_mib": None if memory is None else memory / 2**20,
    }


def run_training(
    size: BenchSize, names: Sequence[str], rounds: int, with_memory: bool
) -> dict[str, Any]:
    """Round-robin the training systems, the encoder-only method tasks and the GEMM probes."""
    batch = make_batch(size)
    systems: dict[str, TrainSystem] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            systems[name] = TRAIN_SYSTEMS[name](size)
        except PeerUnavailableError as err:
            skipped[name] = str(err)

    # The first step apart: for a compiled system it holds the compilation.
    first_step = {name: measure.seconds(lambda s=s: s.step(batch)) for name, s in systems.items()}
    flops = {
        name: measure.count_flops(lambda s=s: s.loss(batch, eager=True).backward())
        for name, s in systems.items()
    }
    memory: dict[str, int | None] = {}
    for name in systems:
        memory[name] = (
            measure.peak_memory(lambda n=name: _two_steps(n, size, batch)) if with_memory else None
        )

    encoders = {m: encoder_task(size, m) for m in ENCODERS}
    encoder_flops = {m: measure.count_flops(lambda f=f: f(batch)) for m, f in encoders.items()}
    tokens = size.batch_size * size.tgt_len
    gemm_tasks = {
        key: measure.gemm_task(tokens, size.d_model, size.ffn_dim, dtype)
        for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    tasks: dict[str, Callable[[], object]] = {
        **{f"train:{n}": (lambda s=s: s.step(batch)) for n, s in systems.items()},
        **{f"encoder:{m}": (lambda f=f: f(batch)) for m, f in encoders.items()},
        **{f"gemm:{k}": fn for k, (fn, _) in gemm_tasks.items()},
    }
    timings = measure.round_robin(tasks, rounds=rounds, warmup=1)
    gemm = {k: timings[f"gemm:{k}"] for k in gemm_tasks}
    gemm_flops = gemm_tasks["fp32"][1]

    train = {
        name: _train_entry(
            name, s, size, timings[f"train:{name}"], flops[name], gemm, gemm_flops, memory[name]
        )
        for name, s in systems.items()
    }
    for name, s in systems.items():
        train[name]["loss"] = float(s.loss(batch).detach())
        train[name]["first_step_s"] = first_step[name]
        if name.endswith("compiled-step"):
            train[name]["compile_s"] = first_step[name] - train[name]["step_s"]
    reference = next((r for r in REFERENCE if r in systems), None)
    for name in train:
        if reference is not None:
            train[name][f"speed_vs_{reference}"] = measure.same_round_ratio(
                timings[f"train:{reference}"], timings[f"train:{name}"]
            )
    rk = {
        f"{a}/{b}": {
            "time_ratio": measure.same_round_ratio(timings[f"train:{a}"], timings[f"train:{b}"]),
            "flop_ratio": flops[a] / flops[b],
        }
        for a, b in RK_PAIRS
        if a in systems and b in systems
    }
    base, *others = ENCODERS
    for m in others:
        rk[f"encoder {m}/{base}"] = {
            "time_ratio": measure.same_round_ratio(
                timings[f"encoder:{m}"], timings[f"encoder:{base}"]
            ),
            "flop_ratio": encoder_flops[m] / encoder_flops[base],
        }
    memory_ratios = {
        f"{a}/{b}": memory[a] / memory[b]
        for a, b in MEMORY_PAIRS
        if memory.get(a) and memory.get(b)
    }
    return {
        "reference": reference,
        "skipped": skipped,
        "memory_ratios": memory_ratios,
        "gemm_gflops": {k: gemm_flops / t.median / 1e9 for k, t in gemm.items()},
        "gemm_shape": [tokens, size.d_model, size.ffn_dim],
        "train": train,
        "rk": rk,
    }


def _two_steps(name: str, size: BenchSize, batch: Any) -> None:
    system = TRAIN_SYSTEMS[name](size)
    for _ in range(2):
        system.step(batch)


def run_generation(
    size: BenchSize, names: Sequence[str], beams: Sequence[int], rounds: int
) -> dict[str, Any]:
    """Sentences/s of every generation system at each beam size, forced to equal lengths; the
    first (untimed) call's seconds, which include compilation; matmul FLOPs of odet's eager
    systems (a compiled system does its eager twin's work)."""
    src = gen_sources(size)
    systems: dict[str, Generate] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            systems[name] = GEN_SYSTEMS[name](size)
        except PeerUnavailableError as err:
            skipped[name] = str(err)
    results: dict[str, Any] = {"skipped": skipped}
    for beam in beams:
        first_call: dict[str, float] = {}
        flops: dict[str, int] = {}
        for name, gen in list(systems.items()):
            start = time.perf_counter()
            try:
                lengths = {len(tokens) for tokens in gen(src, beam)}
            except Exception as err:  # e.g. a compiled variant torch cannot compile
                skipped[name] = f"failed at beam {beam}: {type(err).__name__}: {err}"[:300]
                del systems[name]
                continue
            first_call[name] = time.perf_counter() - start
            if _flops_visible(name):
                flops[name] = measure.count_flops(lambda g=gen, b=beam: g(src, b))
            if lengths != {size.gen_tokens}:
                raise RuntimeError(
                    f"{name} beam {beam} generated lengths {sorted(lengths)}, expected exactly "
                    f"{size.gen_tokens}: the workloads would not be equal"
                )
        timings = measure.round_robin(
            {name: (lambda g=g, b=beam: g(src, b)) for name, g in systems.items()},
            rounds=rounds,
            warmup=0,
        )
        key = "greedy" if beam == 1 else f"beam{beam}"
        results[key] = {
            name: {
                "seconds": t.median,
                "sentences_per_s": size.gen_batch / t.median,
                "times": list(t.times),
                "first_call_seconds": first_call[name],
                **({"flops": flops[name]} if name in flops else {}),
                **{
                    f"speed_vs_{peer}": measure.same_round_ratio(timings[peer], t)
                    for peer in GEN_PEERS
                    if peer in timings
                },
            }
            for name, t in timings.items()
        }
    for gen in systems.values():
        if isinstance(gen, ChildProcessGenerate):
            gen.close()
    return results


def environment(argv: Sequence[str]) -> dict[str, Any]:
    """Machine, library versions, date and the exact command of this run."""
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    for package in ("transformers", "ctranslate2"):
        try:
            versions[package] = importlib.import_module(package).__version__
        except ImportError:
            versions[package] = None
    return {
        "cpu": _cpu_model(),
        "logical_cpus": torch.multiprocessing.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks " + shlex.join(argv),
    }


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    flags = next((line for line in out.splitlines() if line.startswith("Flags:")), "")
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f" {f}" in flags]
    model = next(
        (line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line),
        "unknown",
    )
    return f"{model} ({', '.join(isa) or 'no AVX-512'})"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="toy size, 3 rounds (< 1 minute)")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), help="default: d256 d512")
    parser.add_argument("--rounds", type=int, help="timed rounds (default 5, --quick 3)")
    parser.add_argument("--train", nargs="+", metavar="SYSTEM", help=f"{list(TRAIN_SYSTEMS)}")
    parser.add_argument("--generate", nargs="+", metavar="SYSTEM", help=f"{list(GEN_SYSTEMS)}")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads, and CTranslate2's intra_threads (default: torch's own choice)",
    )
    parser.add_argument(
        "--lm", nargs="+", choices=list(LM_SIZES), help="language models vs HF GPT-2 only"
    )
    parser.add_argument(
        "--compiled", action="store_true", help="--lm: also time the compiled training step"
    )
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="--lm: time odet's sampling eager only (no generate(compile=True) variant)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip peak-memory children")
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="run every system under the allocator setting that `odet` commands use "
        "(odet.runtime.keep_freed_memory); default: glibc's own",
    )
    parser.add_argument("--no-training", action="store_true")
    parser.add_argument("--no-generation", action="store_true")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="add these sizes to the existing --out file; a part skipped with --no-training or "
        "--no-generation keeps its earlier results",
    )
    parser.add_argument("--out", type=Path, help="JSON results (default benchmarks/results.json)")
    parser.add_argument("--markdown", type=Path, help="default benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if any(b < 1 for b in args.beams):
        parser.error(f"--beams must be positive, got {args.beams}")
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        parser.error(f"--threads must lie in [1, {MAX_THREADS}], got {args.threads}")
    try:
        list(iter_names(TRAIN_SYSTEMS, args.train))
        list(iter_names(GEN_SYSTEMS, args.generate))
    except ValueError as err:
        parser.error(str(err))
    here = Path(__file__).resolve().parent
    args.sizes = args.sizes or (["toy"] if args.quick else ["d256", "d512"])
    args.rounds = args.rounds or (3 if args.quick else 5)
    if args.lm:
        args.out = args.out or (None if args.quick else here / "lm_results.json")
    elif not args.quick:
        args.out = args.out or here / "results.json"
        args.markdown = args.markdown or here / "RESULTS.md"
    if (problem := output_problem(args.out, args.markdown)) is not None:
        parser.error(problem)
    return args


def output_problem(out: Path | None, markdown: Path | None) -> str | None:
    """Why ``--out`` or ``--markdown`` would spoil a file the benchmarks did not write (checked
    before anything is timed), else ``None``: ``--out`` is a ``.json`` file that is new or
    holds benchmark results; ``--markdown`` a ``.md`` file, new or Markdown, whose generated
    block is replaced (appended when it has none, the rest kept)."""
    if out is not None:
        if out.suffix != ".json":
            return f"--out {out} must name a .json file"
        if out.exists():
            try:
                data = json.loads(out.read_bytes())
            except (OSError, ValueError):
                data = None
            if not (isinstance(data, dict) and isinstance(data.get("sizes"), dict)):
                return f"--out {out} exists and holds no benchmark results; name a new file"
    if markdown is not None:
        if markdown.suffix != ".md":
            return f"--markdown {markdown} must name a Markdown (.md) file"
        if markdown.exists() and not markdown.is_file():
            return f"--markdown {markdown} is not a file"
    return None


def main_lm(args: argparse.Namespace, argv: Sequence[str], allocator: str) -> int:
    """``--lm``: the language-model benchmark, its JSON and its Markdown rows."""
    results = {"environment": {**environment(argv), "allocator": allocator}, "sizes": {}}
    results["sizes"] = run_lm_benchmarks(
        args.lm,
        args.precisions,
        args.rounds,
        compiled_sampling=not args.no_compile,
        compiled_training=args.compiled,
    )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    print(lm_table(results["sizes"]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    allocator = "glibc default"
    if args.keep_freed_memory:
        if not keep_freed_memory():
            print("--keep-freed-memory: not available on this system", file=sys.stderr)
            return 2
        allocator = "odet.runtime.keep_freed_memory"
        system_registry.KEEP_FREED_MEMORY_IN_CHILDREN = True
    if args.lm:
        return main_lm(args, argv, allocator)
    train_names = list(iter_names(TRAIN_SYSTEMS, args.train))
    gen_names = list(iter_names(GEN_SYSTEMS, args.generate))
    results: dict[str, Any] = {"environment": environment(argv), "sizes": {}}
    results["environment"]["allocator"] = allocator
    if args.merge and args.out is not None and args.out.exists():
        results["sizes"] = json.loads(args.out.read_text())["sizes"]
    for size_name in args.sizes:
        size = SIZES[size_name]
        command = results["environment"]["command"]
        entry: dict[str, Any] = {"size": vars(size), "rounds": args.rounds, "commands": [command]}
        old = results["sizes"].get(size_name, {})
        for part in ("training", "generation"):  # --merge keeps a part this run skips
            if getattr(args, f"no_{part}") and part in old:
                entry[part] = old[part]
                entry["commands"] = [*report.commands(old), *entry["commands"]]
        if not args.no_training:
            print(f"[{size_name}] training: {', '.join(train_names)}", flush=True)
            entry["training"] = run_training(size, train_names, args.rounds, not args.no_memory)
            print(report.summary(size_name, entry), flush=True)
        if not args.no_generation:
            print(f"[{size_name}] generation: {', '.join(gen_names)}", flush=True)
            entry["generation"] = run_generation(size, gen_names, args.beams, args.rounds)
        entry["commands"] = list(dict.fromkeys(entry["commands"]))
        results["sizes"][size_name] = entry
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    if args.markdown is not None:
        existing = args.markdown.read_text() if args.markdown.exists() else ""
        args.markdown.write_text(report.update_markdown(existing, results))
        print(f"wrote {args.markdown}")
    return 0


def _flops_visible(name: str) -> bool:
    """Whether torch's FLOP counter sees all of system ``name``'s GEMMs: odet's eager systems on
    PyTorch's matmuls. A compiled system does the same work as its eager twin; oneDNN's packed
    linears and the int8 linears are ops the counter does not know, so counting them would
    report the attention matmuls alone."""
    return name.startswith("odet-") and not any(
        tag in name for tag in ("compiled", "onednn", "int8", "recipe")
    )
