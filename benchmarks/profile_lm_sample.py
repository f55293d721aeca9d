"""Where cached sampling time goes: odet's Euler ``CausalLM`` against HF ``GPT2LMHeadModel``.

For each size and batch, both systems generate the benchmark's workload (``benchmarks.lm``: a
random prompt, then exactly ``new_tokens`` greedy tokens) once unprofiled (warm-up), a few times
timed, then once under ``torch.profiler``. Forward hooks put named scopes around the modules
(attention, FFN, layer norms, output head) and around the sampling code, so every aten op is
charged to a category; a category's Python time is its scopes' self time (time in them outside
any aten op), and "loop Python" is what the generation loop spends outside every scope and op.
``odet-compiled`` (``generate(compile=True)``) gets no module scopes (they would break its
graph): its ops are charged to "compiled step" and torch.compile's own events (guard checks,
the wrapper that calls the kernels) to its runtime. ``src/odet`` is not changed.

Run: ``python -m benchmarks.profile_lm_sample [--sizes lm-baby lm-d384] [--batches 1 16]
[--systems odet odet-compiled hf] [--threads 1] [--out benchmarks/runs/lm_sample_profile.md]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shlex
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from benchmarks.lm import LM_SIZES, LMSize, hf_gpt2, odet_lm, sample_task
from benchmarks.outputs import check_markdown_out
from benchmarks.profile_decode import MATMUL_OPS, scope_hooks
from odet.nn.attention import SelfAttention
from odet.nn.feedforward import FeedForward

PREFIX = "lm:"
SYSTEMS = {"odet": "odet-euler", "odet-compiled": "odet-euler-compiled", "hf": "hf-gpt2"}
"""Profiled systems: their ``benchmarks.lm`` names."""
ATTENTION_KERNELS = frozenset(
    {
        "aten::bmm",
        "aten::baddbmm",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
    }
)
SAMPLING_OPS = frozenset(
    {"aten::topk", "aten::sort", "aten::multinomial", "aten::argmax", "aten::cumsum"}
)


def _module_scopes(system: str) -> list[tuple[type[nn.Module], str]]:
    """(module class, scope) pairs of one system; the output head is added by name."""
    if system != "hf":
        return [(SelfAttention, "attention"), (FeedForward, "ffn"), (nn.LayerNorm, "layer norm")]
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP, GPT2Attention

    return [(GPT2Attention, "attention"), (GPT2MLP, "ffn"), (nn.LayerNorm, "layer norm")]


@contextlib.contextmanager
def scopes(system: str, model: nn.Module) -> Iterator[None]:
    """Named profiler scopes around the modules of ``model`` (removed afterwards)."""
    handles: list[Any] = []
    try:
        for module in model.modules():
            for cls, name in _module_scopes(system):
                if isinstance(module, cls):
                    handles += scope_hooks(module, PREFIX + name)
        head = model.lm_head if system == "hf" else model.head  # type: ignore[union-attr]
        handles += scope_hooks(head, PREFIX + "output head")  # type: ignore[arg-type]
        yield
    finally:
        for handle in handles:
            handle.remove()


COMPILED = "Torch-Compiled Region"


def _scope_of(event: Any) -> str:
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith((PREFIX, COMPILED)):
        parent = parent.cpu_parent
    if parent is None or parent.name == PREFIX + "generate":
        return "loop"
    if parent.name.startswith(COMPILED):
        return "compiled step"
    return parent.name.removeprefix(PREFIX)


def _has_op_parent(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def _category(scope: str, op: str) -> str:
    if op in ATTENTION_KERNELS and scope in ("attention", "compiled step"):
        return f"{scope}: score/value matmuls (bmm, SDPA)"
    if op in MATMUL_OPS:
        return "output head matmul" if scope == "output head" else f"{scope}: projections (addmm)"
    if scope == "loop":
        return "sampling ops" if op in SAMPLING_OPS or "softmax" in op else "loop ops"
    return f"{scope}: other ops"


@dataclass
class Profile:
    """One system × size × batch: wall times and the per-token costs by category."""

    system: str
    size: str
    batch: int
    new_tokens: int
    wall_s: float
    first_call_s: float
    """The warm-up call (with ``torch.compile``: the compilation)."""
    profiled_s: float
    ms_per_token_step: dict[str, float] = field(default_factory=dict)
    """Milliseconds per generated position (one step of the whole batch), by category."""
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    aten_calls_per_step: float = 0.0


def profile_one(system: str, size: LMSize, batch: int, repeats: int) -> Profile:
    """Profile ``system``'s cached sampling of ``size`` at ``batch`` rows."""
    model = (hf_gpt2(size) if system == "hf" else odet_lm(size)).eval()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, size.vocab_size, (batch, size.prompt_len), generator=gen)
    run = sample_task(SYSTEMS[system], model, prompt, size.new_tokens)
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        walls.append(time.perf_counter() - t0)
    hooks = contextlib.nullcontext() if system == "odet-compiled" else scopes(system, model)
    with hooks, profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        with record_function(PREFIX + "generate"):
            run()
        profiled = time.perf_counter() - t0
    events = [e for e in prof.events() if e.device_type.name == "CPU"]
    root = next(e for e in events if e.name == PREFIX + "generate")
    cost: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    top_level = 0
    for e in events:
        if e.name.startswith(PREFIX):
            scope = e.name.removeprefix(PREFIX)
            label = "loop Python" if scope == "generate" else f"{scope}: Python"
            cost[label] += e.self_cpu_time_total
        elif e.name.startswith("aten::"):
            cost[_category(_scope_of(e), e.name)] += e.self_cpu_time_total
            ops[e.name] += e.self_cpu_time_total
            calls[e.name] += 1
            top_level += not _has_op_parent(e)
        else:  # torch.compile's runtime: guard checks, the compiled graph's wrapper
            cost["compiled step: runtime (guards, wrapper)"] += e.self_cpu_time_total
    steps = size.new_tokens
    per_step = {k: v / 1e3 / steps for k, v in sorted(cost.items(), key=lambda kv: -kv[1])}
    per_step["total (profiled)"] = root.cpu_time_total / 1e3 / steps
    return Profile(
        system=system,
        size=size.name,
        batch=batch,
        new_tokens=steps,
        wall_s=statistics.median(walls),
        first_call_s=first,
        profiled_s=profiled,
        ms_per_token_step=per_step,
        top_ops=[
            {"op": k, "calls_per_step": calls[k] / steps, "ms_per_step": v / 1e3 / steps}
            for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:12]
        ],
        aten_calls_per_step=top_level / steps,
    )


def render(group: Sequence[Profile]) -> list[str]:
    """One Markdown section: the systems side by side for one size and batch."""
    first = group[0]
    names = [p.system for p in group]
    lines = [
        f"## {first.size}, batch {first.batch}, fp32",
        "",
        "| per generated position | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(group),
        "| unprofiled wall ms | "
        + " | ".join(f"{1e3 * p.wall_s / p.new_tokens:.2f}" for p in group)
        + " |",
        "| first call s (compile) | " + " | ".join(f"{p.first_call_s:.1f}" for p in group) + " |",
        "| aten calls from Python | "
        + " | ".join(f"{p.aten_calls_per_step:.0f}" for p in group)
        + " |",
    ]
    keys = list(dict.fromkeys(k for p in group for k in p.ms_per_token_step))
    keys.remove("total (profiled)")
    keys.append("total (profiled)")
    for k in keys:
        cells = " | ".join(f"{p.ms_per_token_step.get(k, 0.0):.3f}" for p in group)
        lines.append(f"| {k}, ms | {cells} |")
    for p in group:
        lines += ["", f"Top ops, {p.system}:", "", "| op | calls/step | ms/step |", "|---|---|---|"]
        lines += [
            f"| `{o['op']}` | {o['calls_per_step']:.1f} | {o['ms_per_step']:.3f} |"
            for o in p.top_ops
        ]
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_lm_sample", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--sizes", nargs="+", choices=list(LM_SIZES), default=["lm-baby", "lm-d384"]
    )
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=["odet", "hf"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="unprofiled timed calls")
    parser.add_argument("--out", default="benchmarks/runs/lm_sample_profile.md")
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    torch.set_num_threads(args.threads)
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = [
        "# Where cached sampling time goes: odet CausalLM vs HF GPT-2 (torch.profiler)",
        "",
        f"`python -m benchmarks.profile_lm_sample {shlex.join(argv)}` — {date}, torch "
        f"{torch.__version__}, {args.threads} thread(s).",
        "",
    ]
    profiles = []
    for name in args.sizes:
        for batch in args.batches:
            print(f"[{name} b{batch}] profiling", flush=True)
            group = [profile_one(s, LM_SIZES[name], batch, args.repeats) for s in args.systems]
            profiles += group
            lines += render(group)
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    with open(args.out.removesuffix(".md") + ".json", "w") as f:
        json.dump({"command": lines[2], "profiles": [asdict(p) for p in profiles]}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
