"""Where odet's decoding time goes: ``torch.profiler`` over one batched beam search.

For each size and dtype: one untimed warm-up ``generate``, the median wall time of a few
unprofiled calls, then one call under the profiler with named scopes around the phases of the
loop (encoder, memory projection, decoder step, log-softmax, search strategy, EOS/length masks,
KV-cache reorder) and around the decoder's modules (blocks, self-/cross-attention, FFN, layer
norms, output projection). The scopes are added from outside (method wrappers and module hooks,
removed afterwards); ``src/odet`` is not changed. A scope's *self* time is the time spent in it
outside any aten op and any inner scope: Python overhead (and the profiler's own).

Run: ``python -m benchmarks.profile_decode [--sizes d256 d512] [--dtypes fp32 bf16] [--beam 5]
[--threads 1] [--out benchmarks/runs/profile_decode.md]``.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from benchmarks.outputs import check_markdown_out
from benchmarks.systems import SIZES, BenchSize, gen_sources, odet_model
from odet.generation import loop as generation_loop
from odet.generation import strategies
from odet.inference import inference_model
from odet.models import Seq2Seq
from odet.models.seq2seq import Seq2SeqDecoder
from odet.nn.attention import CrossAttention, SelfAttention
from odet.nn.feedforward import FeedForward
from odet.runtime import keep_freed_memory

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp32-onednn": torch.float32, "int8": None}
"""What each ``--dtypes`` name decodes with: a model dtype, or (``int8``, ``fp32-onednn``) the
inference copy of ``odet generate --precision int8`` / ``--gemm onednn``."""
PREFIX = "odet:"
MATMUL_OPS = frozenset(
    {
        "aten::addmm",
        "aten::mm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::_int_mm",
        "mkldnn::_linear_pointwise",
    }
)
"""The matrix-product ops (their self time; ``linear``/``matmul`` self time is their dispatch)."""

# Phases of the loop: (owner, attribute, scope name).
_METHOD_SCOPES: tuple[tuple[Any, str, str], ...] = (
    (Seq2Seq, "encode", "encode"),
    (Seq2Seq, "init_state", "init_state (memory K/V)"),
    (Seq2Seq, "decode", "decode (model step)"),
    (Seq2SeqDecoder, "step", "decoder.step"),
    (Seq2SeqDecoder, "reorder", "reorder (KV caches)"),
    (strategies.BeamSearch, "select", "search.select"),
    (strategies.Greedy, "select", "search.select"),
    (generation_loop, "_mask_", "loop._mask (EOS/length)"),
)
LOOP_SCOPES = ("generate", "search.select", "loop._mask (EOS/length)", "reorder (KV caches)")
"""Scopes of the loop outside the model (``generate``: the loop's own code)."""
_MODULE_SCOPES: tuple[tuple[type[nn.Module], str], ...] = (
    (SelfAttention, "self-attention"),
    (CrossAttention, "cross-attention"),
    (FeedForward, "ffn"),
    (nn.LayerNorm, "layer norm"),
)


def _wrap(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with record_function(PREFIX + name):
            return fn(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def scopes(model: nn.Module) -> Iterator[None]:
    """Named profiler scopes around the loop's phases and the decoder's modules."""
    saved = [(owner, attr, owner.__dict__[attr]) for owner, attr, _ in _METHOD_SCOPES]
    handles = []
    try:
        for owner, attr, name in _METHOD_SCOPES:
            setattr(owner, attr, _wrap(owner.__dict__[attr], name))
        hooked: list[tuple[nn.Module, str]] = [
            (m, name)
            for m in model.decoder.modules()
            for cls, name in _MODULE_SCOPES
            if isinstance(m, cls)
        ]
        hooked += [(block, "decoder block") for block in model.decoder.blocks]
        hooked += [(model.output_projection, "output projection")]
        for module, name in hooked:
            handles += scope_hooks(module, PREFIX + name)
        yield
    finally:
        for handle in handles:
            handle.remove()
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


def scope_hooks(module: nn.Module, label: str) -> list[Any]:
    """Hooks that put every forward call of ``module`` in a profiler scope named ``label``."""
    stack: list[record_function] = []

    def pre(_module: nn.Module, _args: Any) -> None:
        rf = record_function(label)
        rf.__enter__()
        stack.append(rf)

    def post(_module: nn.Module, _args: Any, _out: Any) -> None:
        stack.pop().__exit__(None, None, None)

    return [
        module.register_forward_pre_hook(pre),
        module.register_forward_hook(post),
    ]


@dataclass
class Profile:
    """One size × dtype: wall times, op and scope tables, counts."""

    size: str
    dtype: str
    beam: int
    threads: int
    sources: int
    steps: int
    wall_s: float
    profiled_wall_s: float
    ops: list[dict[str, Any]] = field(default_factory=list)
    scopes: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    shapes: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _is_op(name: str) -> bool:
    return name.startswith(("aten::", "mkldnn::"))


def _scope_of(event: Any) -> str:
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(PREFIX):
        parent = parent.cpu_parent
    return "generate loop" if parent is None else parent.name.removeprefix(PREFIX)


def _top_level_op(event: Any) -> bool:
    """An aten op called from Python (no aten op above it)."""
    parent = event.cpu_parent
    while parent is not None:
        if _is_op(parent.name):
            return False
        parent = parent.cpu_parent
    return True


def profile_one(
    size: BenchSize,
    dtype_name: str,
    beam: int,
    threads: int,
    repeats: int,
    record_shapes: bool = False,
) -> Profile:
    """Profile one batched beam search of ``size`` in ``dtype_name`` (``record_shapes``: also
    the non-matmul ops grouped by input shapes)."""
    torch.set_num_threads(threads)
    model = odet_model(size).eval().to(DTYPES[dtype_name] or torch.float32)
    if dtype_name == "int8":
        model = inference_model(model, "int8")
    elif dtype_name == "fp32-onednn":
        model = inference_model(model, "fp32", "onednn")
    src = gen_sources(size)
    n = size.gen_tokens

    def run() -> list[list[int]]:
        return model.generate(src, beam_size=beam, max_len=n, min_len=n)

    out = run()  # warm-up
    if {len(t) for t in out} != {n}:
        raise RuntimeError(f"expected {n} tokens per sentence, got {sorted({len(t) for t in out})}")
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        walls.append(time.perf_counter() - t0)
    activities = [ProfilerActivity.CPU]
    with scopes(model), profile(activities=activities, record_shapes=record_shapes) as prof:
        t0 = time.perf_counter()
        with record_function(PREFIX + "generate"):
            run()
        profiled = time.perf_counter() - t0
    events = [e for e in prof.events() if e.device_type.name == "CPU"]
    root = next(e for e in events if e.name == PREFIX + "generate")
    total_us = root.cpu_time_total
    steps = sum(1 for e in events if e.name == PREFIX + "decoder.step")

    op_self: dict[str, float] = defaultdict(float)
    op_calls: dict[str, int] = defaultdict(int)
    pair_self: dict[tuple[str, str], float] = defaultdict(float)
    scope_self: dict[str, float] = defaultdict(float)
    scope_total: dict[str, float] = defaultdict(float)
    scope_calls: dict[str, int] = defaultdict(int)
    top_ops: dict[str, int] = defaultdict(int)
    all_ops: dict[str, int] = defaultdict(int)
    for e in events:
        if e.name.startswith(PREFIX):
            name = e.name.removeprefix(PREFIX)
            scope_self[name] += e.self_cpu_time_total
            scope_total[name] += e.cpu_time_total
            scope_calls[name] += 1
        elif _is_op(e.name):
            scope = _scope_of(e)
            op_self[e.name] += e.self_cpu_time_total
            op_calls[e.name] += 1
            pair_self[(scope, e.name)] += e.self_cpu_time_total
            all_ops[scope] += 1
            if _top_level_op(e):
                top_ops[scope] += 1

    def share(us: float) -> float:
        return us / total_us

    ops = sorted(op_self, key=op_self.__getitem__, reverse=True)
    matmul_us = sum(v for k, v in op_self.items() if k in MATMUL_OPS)
    python_us = sum(scope_self.values())
    other_us = sum(v for k, v in op_self.items() if k not in MATMUL_OPS)
    step_scopes = {
        "decoder.step",
        "decode (model step)",
        "decoder block",
        "self-attention",
        "cross-attention",
        "ffn",
        "layer norm",
        "output projection",
    }
    summary = {
        "total_ms": total_us / 1e3,
        "matmul_share": share(matmul_us),
        "other_ops_share": share(other_us),
        "python_share": share(python_us),
        "unattributed_share": 1 - share(matmul_us + other_us + python_us),
        "aten_calls_per_step_from_python": sum(top_ops[s] for s in step_scopes) / steps,
        "aten_calls_per_step_all": sum(all_ops[s] for s in step_scopes) / steps,
        "aten_calls_per_step_loop": sum(top_ops[s] for s in LOOP_SCOPES) / steps,
        "profiler_overhead": profiled / statistics.median(walls),
    }
    return Profile(
        size=size.name,
        dtype=dtype_name,
        beam=beam,
        threads=threads,
        sources=size.gen_batch,
        steps=steps,
        wall_s=statistics.median(walls),
        profiled_wall_s=profiled,
        ops=[
            {
                "op": k,
                "calls_per_step": op_calls[k] / steps,
                "self_ms": op_self[k] / 1e3,
                "share": share(op_self[k]),
                "matmul": k in MATMUL_OPS,
            }
            for k in ops
        ],
        scopes=[
            {
                "scope": k,
                "calls": scope_calls[k],
                "total_ms": scope_total[k] / 1e3,
                "self_ms": scope_self[k] / 1e3,
                "total_share": share(scope_total[k]),
                "self_share": share(scope_self[k]),
                "aten_calls_from_python": top_ops.get(k, 0),
            }
            for k in sorted(scope_total, key=scope_total.__getitem__, reverse=True)
        ],
        pairs=[
            {"scope": s, "op": o, "self_ms": v / 1e3, "share": share(v)}
            for (s, o), v in sorted(pair_self.items(), key=lambda kv: kv[1], reverse=True)
            if o not in MATMUL_OPS
        ],
        shapes=[
            {
                "op": a.key,
                "shapes": str(a.input_shapes),
                "calls_per_step": a.count / steps,
                "self_ms": a.self_cpu_time_total / 1e3,
                "share": share(a.self_cpu_time_total),
            }
            for a in sorted(
                prof.key_averages(group_by_input_shape=True),
                key=lambda a: a.self_cpu_time_total,
                reverse=True,
            )
            if _is_op(a.key) and a.key not in MATMUL_OPS
        ]
        if record_shapes
        else [],
        summary=summary,
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def render(p: Profile, top: int) -> list[str]:
    """Markdown section of one profile."""
    s = p.summary
    size = SIZES[p.size]
    lines = [
        f"## {p.size} ({size.encoder_layers}+{size.decoder_layers} layers), {p.dtype}, beam "
        f"{p.beam}, {p.threads} thread(s)",
        "",
        f"{p.sources} sources × {size.src_len} tokens, exactly {size.gen_tokens} new tokens "
        f"({p.steps} decoder steps). Unprofiled wall time {p.wall_s:.3f} s "
        f"({p.sources / p.wall_s:.1f} sentences/s); profiled {p.profiled_wall_s:.3f} s "
        f"({s['profiler_overhead']:.2f}× — the profiler's own cost inflates the Python shares).",
        "",
        "| share of the profiled `generate` | |",
        "|---|---|",
        f"| matmul ops (`{'`, `'.join(sorted(o.removeprefix('aten::') for o in MATMUL_OPS))}`) "
        f"| {_pct(s['matmul_share'])} |",
        f"| other aten ops | {_pct(s['other_ops_share'])} |",
        f"| Python outside any op (self time of the scopes) | {_pct(s['python_share'])} |",
        f"| aten calls per decoder step issued from Python (all, incl. nested) | "
        f"{s['aten_calls_per_step_from_python']:.0f} ({s['aten_calls_per_step_all']:.0f}) |",
        f"| aten calls per step in the loop outside the model (search, masks, reorder) | "
        f"{s['aten_calls_per_step_loop']:.0f} |",
        "",
        f"Top {top} ops by self CPU time:",
        "",
        "| op | calls/step | self ms | share | matmul |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{o['op']}` | {o['calls_per_step']:.1f} | {o['self_ms']:.1f} | {_pct(o['share'])} | "
        f"{'yes' if o['matmul'] else ''} |"
        for o in p.ops[:top]
    ]
    lines += [
        "",
        "Scopes (total = inside, self = Python outside ops and inner scopes):",
        "",
        "| scope | calls | total ms | total share | self ms | self share | aten calls from "
        "Python |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c['scope']} | {c['calls']} | {c['total_ms']:.1f} | {_pct(c['total_share'])} | "
        f"{c['self_ms']:.1f} | {_pct(c['self_share'])} | {c['aten_calls_from_python']} |"
        for c in p.scopes
    ]
    lines += [
        "",
        f"Largest non-matmul costs by (innermost scope, op), top {top}:",
        "",
        "| scope | op | self ms | share |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c['scope']} | `{c['op']}` | {c['self_ms']:.1f} | {_pct(c['share'])} |"
        for c in p.pairs[:top]
    ]
    if p.shapes:
        lines += [
            "",
            f"Largest non-matmul ops by input shapes, top {top}:",
            "",
            "| op | input shapes | calls/step | self ms | share |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{c['op']}` | `{c['shapes']}` | {c['calls_per_step']:.1f} | {c['self_ms']:.1f} | "
            f"{_pct(c['share'])} |"
            for c in p.shapes[:top]
        ]
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_decode", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["d256", "d512"])
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["fp32", "bf16"])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="unprofiled timed calls")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument(
        "--shapes", action="store_true", help="also group the non-matmul ops by input shapes"
    )
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="run under odet's allocator setting, as odet generate does (odet.runtime)",
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs/profile_decode.md"))
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    if args.beam < 1 or args.threads < 1 or args.repeats < 1:
        parser.error("--beam, --threads and --repeats must be positive")
    if args.keep_freed_memory and not keep_freed_memory():
        parser.error("--keep-freed-memory: odet's allocator setting is not in effect here")
    profiles = []
    for size in args.sizes:
        for dtype in args.dtypes:
            print(f"[{size} {dtype}] profiling beam {args.beam}", flush=True)
            profiles.append(
                profile_one(SIZES[size], dtype, args.beam, args.threads, args.repeats, args.shapes)
            )
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = [
        "# Where odet's decoding time goes (torch.profiler)",
        "",
        f"`python -m benchmarks.profile_decode {shlex.join(argv)}`".replace(" `", "`"),
        f"— {date}, torch {torch.__version__}.",
        "",
    ]
    for p in profiles:
        lines += render(p, args.top)
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {"command": lines[2], "date": date, "profiles": [vars(p) for p in profiles]}, indent=1
        )
        + "\n"
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
