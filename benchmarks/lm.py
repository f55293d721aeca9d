"""Language models: odet's Euler ``CausalLM`` against Hugging Face ``GPT2LMHeadModel``.

``python -m benchmarks --lm lm-baby lm-d384`` builds both from the same sizes (vocabulary,
width, heads, FFN 4·D, layers, positions table; biases everywhere, GELU, tied output, no
dropout; random init, nothing downloaded), asserts equal parameter counts, and times in
interleaved rounds, in fp32 and in bf16:

- a training step: forward + backward + ``AdamW.step`` on a fixed batch of random windows
  (tokens/s = batch × window / step time); bf16 is autocast for both (``autocast_bf16``);
- cached sampling at batch 1 and 16: a random prompt of ``prompt_len`` tokens, then exactly
  ``new_tokens`` greedy tokens (odet: ``top_k=1``, fixed seed; HF: ``do_sample=False``; the
  lengths are checked); bf16 converts both models' weights. odet is timed eager and with
  ``generate(compile=True)``, whose compilation (the untimed first call per batch size) is
  reported apart as ``compile_s``.

Ratios are odet's speed over HF's, the median of same-round ratios. The training step is also
timed with ``train.compile``'s compiled forward and loss with ``--compiled``
(``odet-euler-compiled``, in the same rounds); its compile time is its first step less its
median step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks import measure
from benchmarks.systems import PeerUnavailableError, parameters
from odet.models import CausalLM, CausalLMConfig
from odet.nn.precision import autocast_bf16
from odet.training.compile import compile_step
from odet.training.lm import next_token_loss


@dataclass(frozen=True)
class LMSize:
    """One language-model size: the model, a training batch and the sampling workload."""

    name: str
    vocab_size: int
    d_model: int
    num_heads: int
    layers: int
    block_size: int
    """The positions table (prompt + new tokens must fit: no cache refill is timed)."""
    train_batch: int
    train_len: int
    prompt_len: int
    new_tokens: int

    def __post_init__(self) -> None:
        if self.prompt_len + self.new_tokens > self.block_size:
            raise ValueError(f"{self.name}: prompt + new tokens exceed block_size")
        if self.train_len > self.block_size:
            raise ValueError(f"{self.name}: train_len exceeds block_size")


LM_SIZES: dict[str, LMSize] = {
    "lm-toy": LMSize("lm-toy", 65, 32, 2, 2, 32, 4, 16, 8, 8),
    "lm-baby": LMSize("lm-baby", 65, 128, 4, 4, 256, 12, 64, 64, 128),
    "lm-d384": LMSize("lm-d384", 65, 384, 6, 6, 256, 8, 256, 64, 128),
}
SAMPLE_BATCHES = (1, 16)
PRECISIONS = ("fp32", "bf16")


def odet_lm(size: LMSize) -> CausalLM:
    """odet's Euler ``CausalLM`` of ``size``: the ordinary pre-norm GPT, with biases."""
    torch.manual_seed(0)
    config = CausalLMConfig(
        vocab_size=size.vocab_size,
        d_model=size.d_model,
        num_heads=size.num_heads,
        ffn_dim=4 * size.d_model,
        layers=size.layers,
        block_size=size.block_size,
        method="euler",
        bias=True,
        dropout=0.0,
    )
    return CausalLM(config)


def hf_gpt2(size: LMSize) -> nn.Module:
    """HF ``GPT2LMHeadModel`` of ``size`` (exact GELU as odet, SDPA attention, no dropout)."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as err:
        raise PeerUnavailableError(f"transformers is not installed ({err})") from err
    config = GPT2Config(
        vocab_size=size.vocab_size,
        n_positions=size.block_size,
        n_embd=size.d_model,
        n_layer=size.layers,
        n_head=size.num_heads,
        n_inner=4 * size.d_model,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


Logits = Callable[[Tensor], Tensor]
Scope = Callable[[str], AbstractContextManager[Any]]
"""A context around one named phase of a training step (a profiler scope, or nothing)."""


def _no_scope(_phase: str) -> AbstractContextManager[Any]:
    return nullcontext()


def logits_of(name: str, model: nn.Module) -> Logits:
    """``tokens (B, T) -> logits (B, T, V)`` of the system ``name`` (HF: without its cache)."""
    if name == "hf-gpt2":
        return lambda x: model(input_ids=x, use_cache=False).logits
    return model


def train_batch(size: LMSize, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """The fixed training batch ``(x, y)``: random windows, ``y`` is ``x`` shifted by one."""
    windows = torch.randint(
        0, size.vocab_size, (size.train_batch, size.train_len + 1), generator=gen
    )
    return windows[:, :-1], windows[:, 1:]


def train_task(
    model: nn.Module,
    logits: Logits,
    batch: tuple[Tensor, Tensor],
    bf16: bool,
    scope: Scope = _no_scope,
) -> Callable[[], float]:
    """One forward + backward + AdamW step on ``batch = (x, y)``; returns the loss.

    ``scope(phase)`` wraps each phase: ``zero_grad``, ``forward``, ``loss``, ``backward``,
    ``optimizer`` (``benchmarks.profile_lm_train`` names them for the profiler)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    context: Callable[[], AbstractContextManager[Any]] = autocast_bf16 if bf16 else nullcontext
    x, y = batch

    def step() -> float:
        with scope("zero_grad"):
            optimizer.zero_grad(set_to_none=True)
        with scope("forward"), context():
            out = logits(x)
        with scope("loss"):
            loss = F.cross_entropy(out.float().flatten(0, 1), y.flatten())
        with scope("backward"):
            loss.backward()
        with scope("optimizer"):
            optimizer.step()
        return float(loss.detach())

    return step


def compiled_train_task(
    model: nn.Module, batch: tuple[Tensor, Tensor], bf16: bool
) -> Callable[[], float]:
    """``train_task`` with the forward pass and the loss compiled together, as odet's
    ``train.compile`` does (``next_token_loss`` through ``compile_step``)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    context: Callable[[], AbstractContextManager[Any]] = autocast_bf16 if bf16 else nullcontext
    loss_fn = compile_step(next_token_loss)
    x, y = batch

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with context():
            loss = loss_fn(model, x, y) / y.numel()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def sample_task(name: str, model: nn.Module, prompt: Tensor, n: int) -> Callable[[], Tensor]:
    """Cached greedy generation of exactly ``n`` tokens after ``prompt (B, T0)``."""
    if name == "hf-gpt2":

        def run() -> Tensor:
            with torch.no_grad():
                return model.generate(  # type: ignore[operator]
                    input_ids=prompt,
                    attention_mask=torch.ones_like(prompt),
                    do_sample=False,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    use_cache=True,
                    pad_token_id=0,
                )

        return run

    options = {"compile": True} if name.endswith("-compiled") else {}

    def run_odet() -> Tensor:
        with torch.no_grad():
            return model.generate(prompt, n, top_k=1, seed=0, **options)  # type: ignore[operator]

    return run_odet


def run_lm(
    size: LMSize,
    precision: str,
    rounds: int,
    compiled_sampling: bool = True,
    compiled_training: bool = False,
) -> dict[str, Any]:
    """Training and sampling tokens/s of both systems in one precision, and odet / HF
    (``compiled_sampling``: odet's sampling also with ``generate(compile=True)``;
    ``compiled_training``: also odet's compiled training step)."""
    models = {"odet-euler": odet_lm(size), "hf-gpt2": hf_gpt2(size)}
    counts = {name: parameters(m) for name, m in models.items()}
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"{size.name}: parameter counts differ: {counts}")
    gen = torch.Generator().manual_seed(0)
    batch = train_batch(size, gen)
    bf16 = precision == "bf16"
    tasks: dict[str, Callable[[], object]] = {}
    for name, model in models.items():
        tasks[f"train:{name}"] = train_task(model.train(), logits_of(name, model), batch, bf16)
    samplers = {name: odet_lm(size) if name == "odet-euler" else hf_gpt2(size) for name in models}
    prompts = {
        b: torch.randint(0, size.vocab_size, (b, size.prompt_len), generator=gen)
        for b in SAMPLE_BATCHES
    }
    compile_s: dict[int, float] = {}
    for name, model in samplers.items():
        model.eval().to(torch.bfloat16 if bf16 else torch.float32)
        variants = (
            [name, f"{name}-compiled"] if compiled_sampling and name == "odet-euler" else [name]
        )
        for b, prompt in prompts.items():
            for variant in variants:
                task = sample_task(variant, model, prompt, size.new_tokens)
                start = time.perf_counter()
                shape = tuple(task().shape)
                if variant.endswith("-compiled"):
                    compile_s[b] = time.perf_counter() - start
                if shape != (b, size.prompt_len + size.new_tokens):
                    raise RuntimeError(
                        f"{variant} sampled {shape}: the workloads would not be equal"
                    )
                tasks[f"sample{b}:{variant}"] = task
    train_compile_s = 0.0
    if compiled_training:
        task = compiled_train_task(odet_lm(size).train(), batch, bf16)
        train_compile_s = measure.seconds(task)  # the first step compiles
        tasks["train:odet-euler-compiled"] = task
    timings = measure.round_robin(tasks, rounds=rounds, warmup=1)
    work = {"train": size.train_batch * size.train_len}
    work.update({f"sample{b}": b * size.new_tokens for b in SAMPLE_BATCHES})
    result: dict[str, Any] = {"precision": precision, "parameters": counts["odet-euler"]}
    for kind, tokens in work.items():
        odet, hf = timings[f"{kind}:odet-euler"], timings[f"{kind}:hf-gpt2"]
        result[kind] = {
            "odet_tokens_per_s": tokens / odet.median,
            "hf_tokens_per_s": tokens / hf.median,
            "odet_vs_hf": measure.same_round_ratio(hf, odet),
        }
        timed = timings.get(f"{kind}:odet-euler-compiled")
        if timed is not None and kind != "train":
            result[kind].update(
                odet_compiled_tokens_per_s=tokens / timed.median,
                odet_compiled_vs_hf=measure.same_round_ratio(hf, timed),
                compile_s=compile_s[int(kind.removeprefix("sample"))],
            )
    if not compiled_training:
        return result
    eager, fast = timings["train:odet-euler"], timings["train:odet-euler-compiled"]
    result["train"].update(
        {
            "odet_compiled_tokens_per_s": work["train"] / fast.median,
            "odet_compiled_vs_hf": measure.same_round_ratio(timings["train:hf-gpt2"], fast),
            "odet_compiled_vs_odet": measure.same_round_ratio(eager, fast),
            "compile_s": train_compile_s - fast.median,
        }
    )
    return result


def run_lm_benchmarks(
    names: Sequence[str],
    precisions: Sequence[str],
    rounds: int,
    compiled_sampling: bool = True,
    compiled_training: bool = False,
) -> dict[str, Any]:
    """Every (size, precision) pair; the results keyed by size name."""
    out: dict[str, Any] = {}
    for name in names:
        size = LM_SIZES[name]
        print(f"[{name}] language models: {', '.join(precisions)}", flush=True)
        out[name] = {
            "size": asdict(size),
            "rounds": rounds,
            "results": [
                run_lm(size, p, rounds, compiled_sampling, compiled_training) for p in precisions
            ],
        }
    return out


def lm_table(results: dict[str, Any]) -> str:
    """The Markdown rows: tokens/s of both systems and odet's ratio, per size and precision;
    odet's sampling eager and with ``generate(compile=True)``."""
    lines = [
        "| size | precision | params | train odet / HF tok/s | train ratio | sample b1 odet / "
        "compiled / HF tok/s | b1 ratio eager / compiled | sample b16 odet / compiled / HF tok/s "
        "| b16 ratio eager / compiled |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in results.items():
        for r in entry["results"]:
            t = r["train"]
            cells = [
                f"{t['odet_tokens_per_s']:,.0f} / {t['hf_tokens_per_s']:,.0f} | "
                f"**{t['odet_vs_hf']:.2f}×**"
            ]
            for k in ("sample1", "sample16"):
                s = r[k]
                compiled = s.get("odet_compiled_tokens_per_s")
                middle = "–" if compiled is None else f"{compiled:,.0f}"
                ratio = s.get("odet_compiled_vs_hf")
                cells.append(
                    f"{s['odet_tokens_per_s']:,.0f} / {middle} / {s['hf_tokens_per_s']:,.0f} | "
                    f"**{s['odet_vs_hf']:.2f}×** / "
                    + ("–" if ratio is None else f"**{ratio:.2f}×**")
                )
            lines.append(
                f"| {name} | {r['precision']} | {r['parameters']:,} | " + " | ".join(cells) + " |"
            )
    compiled = [
        f"| {name} | {r['precision']} | {t['odet_compiled_tokens_per_s']:,.0f} | "
        f"{t['odet_compiled_vs_odet']:.2f}× | {t['odet_compiled_vs_hf']:.2f}× | "
        f"{t['compile_s']:.0f} |"
        for name, entry in results.items()
        for r in entry["results"]
        if "odet_compiled_vs_odet" in (t := r["train"])
    ]
    if compiled:
        lines += [
            "",
            "| size | precision | train compiled odet tok/s | vs eager odet | vs HF | compile s |",
            "|---|---|---|---|---|---|",
            *compiled,
        ]
    return "\n".join(lines)
