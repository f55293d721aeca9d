"""Where a training step's time goes: odet's Euler ``CausalLM`` against HF ``GPT2LMHeadModel``.

The twin of ``benchmarks.profile_lm_sample`` for ``benchmarks.lm``'s training step (forward,
cross-entropy, backward, ``AdamW.step`` on a fixed batch of random windows, both systems at
equal parameters). For each size and precision both steps run ``--warmup`` untimed rounds and
``--repeats`` timed rounds, interleaved (``measure.round_robin``: odet / HF is the median of
same-round ratios), then ``--profile-steps`` steps of each under ``torch.profiler`` (CPU,
input shapes recorded). Named scopes mark the step's phases (zero_grad, forward, loss,
backward, optimizer) and, through forward hooks, the modules of the forward (attention, FFN,
layer norms, embeddings, output head; the rest of the forward is "between modules": residual
adds, reshapes, masks). A backward op is charged to the module whose forward op made its
autograd node (matched by sequence number), so backward has the same modules, plus "grad
accumulation" (``AccumulateGrad``). Every op's self time lands in one category; an op is
"matmul" (``addmm``, ``mm``, ``bmm``, SDPA and its backward, ``linear``/``matmul`` dispatch) or
"other ops"; a scope's self time (outside any op: Python, hooks, the profiler's own cost) is
"Python"; in backward, the autograd engine's own events and the backward scope's self time
(the engine's scheduling between nodes) are "autograd engine". The categories sum to the
profiled step's CPU time. The profiler's first step is discarded (its one-off costs), and of
the others the fastest is analysed: on a loaded machine the slower ones are those another
process preempted. An op that calls itself (autocast's ``addmm`` around the ``addmm`` it
casts for) is counted once: calls and FLOPs are the inner op's, the wrapper keeps its self
time. ``src/odet`` is not changed.

Run: ``python -m benchmarks.profile_lm_train [--sizes lm-baby lm-d384] [--precisions fp32]
[--threads 1] [--repeats 3] [--out benchmarks/runs/lm_train_profile.md]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shlex
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile, schedule

from benchmarks import measure
from benchmarks.lm import LM_SIZES, LMSize, hf_gpt2, logits_of, odet_lm, train_batch, train_task
from benchmarks.outputs import check_markdown_out
from benchmarks.profile_decode import MATMUL_OPS, scope_hooks
from benchmarks.profile_lm_sample import PREFIX, scopes

SYSTEMS = {"odet": "odet-euler", "hf": "hf-gpt2"}
"""Profiled systems: their ``benchmarks.lm`` names."""
PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")
SDPA_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
TRAIN_MATMUL_OPS = MATMUL_OPS | {SDPA_BACKWARD}
"""Matrix-product ops of a training step: the forward's, and SDPA's fused backward (the
other backward products are ``mm`` and ``bmm``)."""
KINDS = ("matmul", "other ops", "Python", "autograd engine")
_NODE = "autograd::engine::evaluate_function: "


class PhaseScopes:
    """``lm.train_task``'s phase scopes: profiler scopes while ``active``, nothing otherwise
    (the timed steps run without them)."""

    def __init__(self) -> None:
        self.active = False

    def __call__(self, phase: str) -> AbstractContextManager[Any]:
        return record_function(PREFIX + phase) if self.active else nullcontext()


@contextlib.contextmanager
def module_scopes(system: str, model: nn.Module) -> Iterator[None]:
    """``profile_lm_sample.scopes`` (attention, FFN, layer norms, output head) and the
    embeddings (token and position tables)."""
    handles: list[Any] = []
    try:
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                handles += scope_hooks(module, PREFIX + "embeddings")
        with scopes(system, model):
            yield
    finally:
        for handle in handles:
            handle.remove()


def _flops(name: str, shapes: list[list[int]]) -> int:
    """Multiply-add FLOPs (×2) of one matrix-product op from its input shapes (0: dispatch)."""
    if name in ("aten::mm", "aten::bmm"):
        a, b = shapes[0], shapes[1]
    elif name in ("aten::addmm", "aten::baddbmm"):
        a, b = shapes[1], shapes[2]
    elif name == "aten::_scaled_dot_product_flash_attention_for_cpu":
        return measure._sdpa_forward_flops(*map(tuple, shapes[:3]))
    elif name == SDPA_BACKWARD:
        return 2 * measure._sdpa_forward_flops(*map(tuple, shapes[1:4]))
    else:
        return 0
    batch = a[0] if len(a) == 3 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


@dataclass(frozen=True)
class _Where:
    """Where an event sits: its step, phase, module scope and autograd node."""

    root: int | None = None
    phase: str = "step"
    module: str | None = None
    node: Any = None
    in_op: bool = False


def _locate(events: list[Any]) -> dict[int, _Where]:
    """Each event's place, from its ancestors' scopes (keyed by ``id(event)``)."""
    memo: dict[int, _Where] = {}

    def where(e: Any) -> _Where:
        key = id(e)
        if key not in memo:
            parent = e.cpu_parent
            w = where(parent) if parent is not None else _Where()
            name = e.name
            if name == PREFIX + "step":
                w = replace(w, root=key)
            elif name.startswith(PREFIX) and name.removeprefix(PREFIX) in PHASES:
                w = replace(w, phase=name.removeprefix(PREFIX))
            elif name.startswith(PREFIX):
                w = replace(w, module=name.removeprefix(PREFIX))
            elif name.startswith(_NODE):
                w = replace(w, node=e)
            elif name.startswith("aten::"):
                w = replace(w, in_op=True)
            memo[key] = w
        return memo[key]

    for e in events:
        where(e)
    return memo


@dataclass
class TrainProfile:
    """One system × size × precision: step times, the step's CPU time by category, top ops,
    matrix products."""

    system: str
    size: str
    precision: str
    tokens_per_step: int
    parameter_tensors: int
    """AdamW (CPU default: a Python loop of single-tensor ops) runs once per tensor."""
    wall_s: float
    """Median unprofiled step."""
    tokens_per_s: float
    profiled_steps: int
    """Steps profiled (after the discarded first); the fastest is analysed."""
    step_ms: float
    """CPU time of the fastest profiled step (its scope's total); the analysis is of it."""
    ms_per_step: dict[str, float] = field(default_factory=dict)
    """Self CPU milliseconds per step by "phase: module: kind"; they sum to ``step_ms``."""
    summary: dict[str, Any] = field(default_factory=dict)
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    gemms: list[dict[str, Any]] = field(default_factory=list)
    """Per (phase, op, FLOPs): calls and milliseconds per step."""


def _kind(e: Any, w: _Where) -> str:
    if e.name.startswith("aten::"):
        return "matmul" if e.name in TRAIN_MATMUL_OPS else "other ops"
    # in backward: the engine's events and the backward scope's own time (its scheduling)
    return "autograd engine" if w.phase == "backward" else "Python"


def analyse(
    events: list[Any],
) -> tuple[float, dict[str, float], dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The fastest profiled step: its CPU time, by category, the summary, top ops and GEMMs
    (on a loaded machine the slower steps are the ones another process preempted)."""
    places = _locate(events)
    roots = sorted((e for e in events if e.name == PREFIX + "step"), key=lambda e: e.cpu_time_total)
    fastest = id(roots[0])
    inside = [e for e in events if places[id(e)].root == fastest]
    made_by: dict[int, str] = {}  # forward op's sequence number -> the module that ran it
    for e in inside:
        w = places[id(e)]
        if e.name.startswith("aten::") and e.sequence_nr >= 0 and w.phase in ("forward", "loss"):
            made_by.setdefault(e.sequence_nr, w.module or "between modules")
            if w.phase == "loss":
                made_by[e.sequence_nr] = "loss"
    cost: dict[str, float] = defaultdict(float)
    by_kind: dict[tuple[str, str], float] = defaultdict(float)
    ops: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: Counter[str] = Counter()
    top_level: Counter[str] = Counter()
    gemms: dict[tuple[str, str, int], list[float]] = defaultdict(lambda: [0, 0.0])
    nodes = 0
    for e in inside:
        w = places[id(e)]
        kind, us = _kind(e, w), e.self_cpu_time_total
        if w.phase == "forward":
            label = f"forward: {w.module or 'between modules'}: {kind}"
        elif w.phase == "backward":
            if w.node is None:
                module = "engine"
            elif "AccumulateGrad" in w.node.name:
                module = "grad accumulation"
            else:
                module = made_by.get(w.node.sequence_nr, "unmatched")
            label = f"backward: {module}: {kind}"
        else:
            label = f"{w.phase}: {kind}"
        cost[label] += us
        by_kind[(w.phase, kind)] += us
        nodes += e.name.startswith(_NODE)
        if e.name.startswith("aten::"):
            ops[e.name][w.phase] += us
            parent = e.cpu_parent
            if parent is None or not places[id(parent)].in_op:
                top_level[w.phase] += 1
            if any(c.name == e.name for c in e.cpu_children):
                continue  # a dispatch wrapper (autocast's addmm): its self time, not a call
            calls[e.name] += 1
            flops = _flops(e.name, e.input_shapes) if kind == "matmul" else 0
            if flops:
                g = gemms[(w.phase, e.name, flops)]
                g[0] += 1
                g[1] += us
    total = sum(e.cpu_time_total for e in inside if e.name == PREFIX + "step")
    step_ms = total / 1e3
    ms = {k: v / 1e3 for k, v in sorted(cost.items(), key=lambda kv: -kv[1])}

    def share(phase: str | None = None, kind: str | None = None) -> float:
        picked = (
            v
            for (p, k), v in by_kind.items()
            if (phase is None or p == phase) and (kind is None or k == kind)
        )
        return sum(picked) / total

    phases = ("step", *PHASES)
    gemm_rows = [
        {
            "phase": phase,
            "op": op,
            "gflop": flops / 1e9,
            "calls_per_step": g[0],
            "ms_per_step": g[1] / 1e3,
        }
        for (phase, op, flops), g in sorted(gemms.items())
    ]

    def gflop(phase: str) -> float:
        return sum(r["gflop"] * r["calls_per_step"] for r in gemm_rows if r["phase"] == phase)

    def gemm_ms(phase: str) -> float:
        return sum(r["ms_per_step"] for r in gemm_rows if r["phase"] == phase)

    summary: dict[str, Any] = {
        "profiled_steps_ms": [e.cpu_time_total / 1e3 for e in events if e.name == PREFIX + "step"],
        "phase_share": {p: share(phase=p) for p in phases},
        "kind_share": {k: share(kind=k) for k in KINDS},
        "matmul_share": {p: share(p, "matmul") for p in ("forward", "backward")},
        "matmul_of_phase": {
            p: share(p, "matmul") / share(phase=p) if share(phase=p) else 0.0
            for p in ("forward", "backward")
        },
        "python_share": share(kind="Python"),
        "aten_calls_per_step": {p: top_level[p] for p in phases},
        "autograd_nodes_per_step": nodes,
        "gemm_gflop_per_step": {p: gflop(p) for p in ("forward", "loss", "backward")},
        "gemm_gflop_per_s": {
            p: gflop(p) / gemm_ms(p) * 1e3 if gemm_ms(p) else 0.0 for p in ("forward", "backward")
        },
    }
    summary["aten_calls_per_step"]["total"] = sum(top_level.values())
    top = sorted(ops.items(), key=lambda kv: -sum(kv[1].values()))[:15]
    top_ops = [
        {
            "op": name,
            "calls_per_step": calls[name],
            "ms_per_step": sum(by_phase.values()) / 1e3,
            "share": sum(by_phase.values()) / total,
            "ms_by_phase": {p: v / 1e3 for p, v in by_phase.items()},
        }
        for name, by_phase in top
    ]
    return step_ms, ms, summary, top_ops, gemm_rows


def profile_size(
    size: LMSize,
    precision: str = "fp32",
    repeats: int = 3,
    warmup: int = 2,
    profile_steps: int = 3,
    systems: Sequence[str] = ("odet", "hf"),
) -> dict[str, Any]:
    """Time and profile the training step of every system at ``size``; odet / HF speed."""
    models = {s: (hf_gpt2(size) if s == "hf" else odet_lm(size)).train() for s in systems}
    batch = train_batch(size, torch.Generator().manual_seed(0))
    phase_scopes = PhaseScopes()
    steps = {
        s: train_task(m, logits_of(SYSTEMS[s], m), batch, precision == "bf16", phase_scopes)
        for s, m in models.items()
    }
    timings = measure.round_robin(steps, rounds=repeats, warmup=warmup)
    tokens = size.train_batch * size.train_len
    profiles = []
    for s, model in models.items():
        phase_scopes.active = True
        first_discarded = schedule(wait=0, warmup=1, active=profile_steps)
        with (
            module_scopes(s, model),
            profile(
                activities=[ProfilerActivity.CPU], record_shapes=True, schedule=first_discarded
            ) as prof,
        ):
            for i in range(1 + profile_steps):
                with record_function(PREFIX + "step"):
                    steps[s]()
                if i < profile_steps:  # after the last one the cycle would end, and be cleared
                    prof.step()
        phase_scopes.active = False
        events = [e for e in prof.events() if e.device_type.name == "CPU"]
        step_ms, ms, summary, top_ops, gemms = analyse(events)
        profiles.append(
            TrainProfile(
                system=s,
                size=size.name,
                precision=precision,
                tokens_per_step=tokens,
                parameter_tensors=len(list(model.parameters())),
                wall_s=timings[s].median,
                tokens_per_s=tokens / timings[s].median,
                profiled_steps=profile_steps,
                step_ms=step_ms,
                ms_per_step=ms,
                summary=summary,
                top_ops=top_ops,
                gemms=gemms,
            )
        )
    result: dict[str, Any] = {
        "size": size.name,
        "precision": precision,
        "repeats": repeats,
        "profiles": [asdict(p) for p in profiles],
    }
    if "odet" in timings and "hf" in timings:
        result["odet_vs_hf"] = measure.same_round_ratio(timings["hf"], timings["odet"])
    return result


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _side_by_side(title: str, rows: dict[str, list[float]], totals: list[float]) -> list[str]:
    """A table of ms/step and share per system, and odet's ms less HF's (two systems)."""
    header = "| " + title + " | " + " | ".join(["ms", "share"] * len(totals)) + " |"
    if len(totals) == 2:
        header += " odet − HF ms |"
    lines = [header, "|---|" + "---|" * (2 * len(totals) + (len(totals) == 2))]
    for name, values in rows.items():
        cells = [f"{v:.2f} | {_pct(v / t)}" for v, t in zip(values, totals, strict=True)]
        diff = [f"{values[0] - values[1]:+.2f}"] if len(values) == 2 else []
        lines.append(f"| {name} | " + " | ".join(cells + diff) + " |")
    return lines


def _gemm_set(p: dict[str, Any]) -> set[tuple[str, str, float, float]]:
    return {(g["phase"], g["op"], g["gflop"], g["calls_per_step"]) for g in p["gemms"]}


def budget(odet: dict[str, Any], hf: dict[str, Any], target: float = 1.3) -> list[str]:
    """What ``target`` × HF's speed leaves odet's step, if it keeps HF's GEMMs at HF's speed."""
    same = _gemm_set(odet) == _gemm_set(hf)
    allowed = hf["step_ms"] / target
    gemm_ms = hf["summary"]["kind_share"]["matmul"] * hf["step_ms"]
    odet_rest = (1 - odet["summary"]["kind_share"]["matmul"]) * odet["step_ms"]
    hf_rest = hf["step_ms"] - gemm_ms
    text = (
        f"**Budget for {target}× HF:** same matrix products (op, FLOPs, calls per phase): "
        f"**{'yes' if same else 'no'}**. {target}× HF means a step of at most {allowed:.1f} ms "
        f"(profiled CPU time); HF's matrix products alone take {gemm_ms:.1f} ms, so with the "
        f"same products at HF's speed "
    )
    if allowed <= gemm_ms:
        text += (
            f"odet would be over budget by {100 * (gemm_ms / allowed - 1):.0f} % with everything "
            f"else free: the ceiling is {hf['step_ms'] / gemm_ms:.2f}× HF. Out of reach without "
            "fewer FLOPs or faster GEMMs."
        )
    else:
        rest = allowed - gemm_ms
        text += (
            f"{rest:.1f} ms would be left for everything else (odet spends {odet_rest:.1f} ms "
            f"there, HF {hf_rest:.1f} ms): a {odet_rest / rest:.1f}× cut of odet's non-matmul "
            f"time; the ceiling, with nothing but HF's matrix products, is "
            f"{hf['step_ms'] / gemm_ms:.2f}× HF."
        )
    return [text]


def render(result: dict[str, Any]) -> list[str]:
    """One Markdown section: the systems side by side for one size and precision."""
    ps = result["profiles"]
    p0 = ps[0]
    names = " | ".join(p["system"] for p in ps)
    head = "| | " + names + " |"
    rule = "|---|" + "---|" * len(ps)

    def row(label: str, cells: Sequence[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    def triple(key: str, fmt: str) -> list[str]:
        def cell(x: float) -> str:
            return _pct(x) if fmt == "%" else format(x, fmt)

        return [" / ".join(cell(p["summary"][key][k]) for k in ("forward", "backward")) for p in ps]

    lines = [
        f"## {p0['size']}, {p0['precision']} ({p0['tokens_per_step']} tokens per step)",
        "",
        head,
        rule,
        row("unprofiled step, ms (median)", [f"{1e3 * p['wall_s']:.1f}" for p in ps]),
        row("tokens/s", [f"{p['tokens_per_s']:,.0f}" for p in ps]),
        row(
            "profiled step CPU time, ms: fastest (each, in order)",
            [
                f"{p['step_ms']:.1f} ("
                + ", ".join(f"{t:.0f}" for t in p["summary"]["profiled_steps_ms"])
                + ")"
                for p in ps
            ],
        ),
        row("parameter tensors (AdamW's loop)", [str(p["parameter_tensors"]) for p in ps]),
        row(
            "aten calls / step: fwd / loss / bwd / optimizer / total",
            [
                " / ".join(
                    f"{p['summary']['aten_calls_per_step'][k]:.0f}"
                    for k in ("forward", "loss", "backward", "optimizer", "total")
                )
                for p in ps
            ],
        ),
        row(
            "autograd nodes / step", [f"{p['summary']['autograd_nodes_per_step']:.0f}" for p in ps]
        ),
        row("matmul share of step: fwd / bwd", triple("matmul_share", "%")),
        row("matmul share of its phase: fwd / bwd", triple("matmul_of_phase", "%")),
        row("GEMM GFLOP / step: fwd / bwd", triple("gemm_gflop_per_step", ".3f")),
        row("GEMM GFLOP/s: fwd / bwd", triple("gemm_gflop_per_s", ".1f")),
        row("Python self time, share", [_pct(p["summary"]["python_share"]) for p in ps]),
    ]
    if "odet_vs_hf" in result:
        lines.append(
            row("**odet / HF speed** (same-round ratio)", [f"**{result['odet_vs_hf']:.2f}×**", ""])
        )
    if len(ps) == 2:
        lines += ["", *budget(ps[0], ps[1])]
    totals = [p["step_ms"] for p in ps]
    phases = ("forward", "loss", "backward", "optimizer", "zero_grad", "step")
    lines += ["", f'Phases (systems: {names}; "step": the step\'s own Python):', ""]
    lines += _side_by_side(
        "phase",
        {ph: [p["summary"]["phase_share"][ph] * p["step_ms"] for p in ps] for ph in phases},
        totals,
    )
    lines += ["", "Kinds of time (matmul: the GEMMs and SDPA; Python: scopes' self time):", ""]
    lines += _side_by_side(
        "kind",
        {k: [p["summary"]["kind_share"][k] * p["step_ms"] for p in ps] for k in KINDS},
        totals,
    )
    keys = list(dict.fromkeys(k for p in ps for k in p["ms_per_step"]))
    keys.sort(key=lambda k: -max(p["ms_per_step"].get(k, 0.0) for p in ps))
    lines += ["", "Categories, odet vs HF (phase: module: kind; ms per step):", ""]
    lines += _side_by_side(
        "category", {k: [p["ms_per_step"].get(k, 0.0) for p in ps] for k in keys}, totals
    )
    lines += ["", "Matrix products by phase (same work in both?):", ""]
    lines += [
        "| phase | op | GFLOP per call | "
        + " | ".join(f"{s} calls / ms" for s in names.split(" | "))
        + " |",
        "|---|---|---|" + "---|" * len(ps),
    ]
    gemm_keys = sorted({(g["phase"], g["op"], g["gflop"]) for p in ps for g in p["gemms"]})
    for key in gemm_keys:
        cells = []
        for p in ps:
            g = next((g for g in p["gemms"] if (g["phase"], g["op"], g["gflop"]) == key), None)
            cells.append(
                "–" if g is None else f"{g['calls_per_step']:.0f} / {g['ms_per_step']:.2f}"
            )
        lines.append(f"| {key[0]} | `{key[1]}` | {key[2]:.4f} | " + " | ".join(cells) + " |")
    for p in ps:
        lines += [
            "",
            f"Top ops by self CPU time, {p['system']}:",
            "",
            "| op | calls/step | ms/step | share | fwd / bwd / optimizer ms |",
            "|---|---|---|---|---|",
        ]
        for o in p["top_ops"]:
            split = " / ".join(
                f"{o['ms_by_phase'].get(ph, 0.0):.2f}"
                for ph in ("forward", "backward", "optimizer")
            )
            lines.append(
                f"| `{o['op']}` | {o['calls_per_step']:.0f} | {o['ms_per_step']:.2f} | "
                f"{_pct(o['share'])} | {split} |"
            )
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_lm_train", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--sizes", nargs="+", choices=list(LM_SIZES), default=["lm-baby", "lm-d384"]
    )
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (unprofiled)")
    parser.add_argument(
        "--profile-steps", type=int, default=3, help="profiled steps; the fastest is analysed"
    )
    parser.add_argument("--out", default="benchmarks/runs/lm_train_profile.md")
    args = parser.parse_args(argv)
    check_markdown_out(parser, args.out)
    torch.set_num_threads(args.threads)
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    lines = [
        "# Where a training step's time goes: odet CausalLM vs HF GPT-2 (torch.profiler)",
        "",
        f"`python -m benchmarks.profile_lm_train {shlex.join(argv)}` — {date}, torch "
        f"{torch.__version__}, {args.threads} thread(s).",
        "",
    ]
    results = []
    for name in args.sizes:
        for precision in args.precisions:
            print(f"[{name} {precision}] profiling the training step", flush=True)
            result = profile_size(
                LM_SIZES[name], precision, args.repeats, args.warmup, args.profile_steps
            )
            results.append(result)
            lines += render(result)
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    with open(args.out.removesuffix(".md") + ".json", "w") as f:
        json.dump({"command": lines[2], "results": results}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
