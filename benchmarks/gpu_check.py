"""GPU readiness in one command (``make gpu-check``): does odet run right on this CUDA machine?

One line per check, ``PASS``/``FAIL``/``SKIP name: detail``; the exit status is 1 when any
check fails. Under five minutes on one GPU:

- ``device``: the GPU, torch, CUDA and cuDNN versions, and whether bf16 is native;
- ``tests``: the device-parametrised tests (``pytest -m device --device cuda``), the subset
  where device bugs hide: cached == uncached decoding, the ODE numerics, the adaptive solvers,
  training steps, bf16 autocast dtypes, checkpoints saved on the GPU and loaded on the CPU;
- ``train-<family>``: one bf16 training step and Adam update of a d512 6+6 ``Seq2Seq`` per
  block family, with a finite loss and finite gradients for every parameter;
- ``decode-<family>``: one beam-5 decode of the same models in fp32, cached == uncached
  tokens (with the largest step-by-step against teacher-forced logit difference);
- ``ddp-nccl``: the two-rank DDP and FSDP test of ``tests/training/test_distributed.py`` over
  NCCL, when two GPUs are visible.

Without a CUDA device every check is a ``SKIP`` and the exit status is 0, unless an NVIDIA
GPU is there that torch cannot use (a CPU build of torch, say): that is a ``FAIL``.
``--device cpu --quick`` runs every check on the CPU at toy sizes (its test takes seconds)::

    python -m benchmarks.gpu_check                     # CUDA, full sizes
    python -m benchmarks.gpu_check --device cpu --quick
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from odet.data import Batch, ParallelDataset
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.training.config import LoopConfig, OptimConfig
from odet.training.step import (
    ForwardPrecision,
    Objective,
    apply_update,
    build_optimizer,
    train_step,
)

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTED_TEST = "tests/training/test_distributed.py"
QUICK_TESTS = ("tests/nn/test_fields.py",)
"""The device tests ``--quick`` runs: a file of two, enough to exercise the pytest check."""

Status = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Check:
    """The outcome of one check, printed as one line."""

    status: Status
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.detail}"


@dataclass(frozen=True)
class Sizes:
    """Model and batch sizes of the training and decoding checks."""

    d_model: int = 512
    num_heads: int = 8
    ffn_dim: int = 2048
    layers: int = 6
    vocab_size: int = 8000
    batch: int = 16
    max_src_len: int = 32
    decode_batch: int = 4
    decode_src_len: int = 12
    max_len: int = 20


FULL = Sizes()
QUICK = Sizes(d_model=64, num_heads=4, ffn_dim=128, layers=2, vocab_size=200, batch=4,
              max_src_len=10, decode_batch=3, decode_src_len=6, max_len=8)  # fmt: skip

FAMILIES: dict[str, dict[str, Any]] = {
    "euler": {"encoder_method": "euler", "decoder_method": "euler"},
    "rk2": {"encoder_method": "rk2", "decoder_method": "rk2"},
    "rk2-gated": {"encoder_method": "rk2", "decoder_method": "rk2", "coefficients": "gated"},
    "rk4": {"encoder_method": "rk4", "decoder_method": "rk4"},
    "ab2": {"encoder_method": "ab2", "decoder_method": "ab2"},
    "dlcl": {"encoder_method": "dlcl", "decoder_method": "dlcl"},
    "pc": {"encoder_method": "pc", "decoder_method": "pc", "coefficients": "ema"},
    "implicit_euler": {"encoder_method": "implicit_euler", "decoder_method": "implicit_euler"},
    "continuous": {"encoder_method": "continuous", "decoder_method": "euler"},
}
"""One model per block family: one-step (Euler, RK2 fixed and gated, RK4), multistep, layer
history, predictor–corrector, implicit, and the adaptive (dopri5) N-ODE encoder."""


def model_config(
    sizes: Sizes, family: str, dropout: float, tied_output: bool = True
) -> Seq2SeqConfig:
    """A ``Seq2Seq`` of ``sizes`` with ``family``'s encoder and decoder (shared vocabulary).
    ``tied_output=False`` unties the output projection: a random model with a tied one mostly
    repeats its input token, which makes a weak decoding test."""
    return Seq2SeqConfig.from_dict({
        "vocab_size": sizes.vocab_size, "d_model": sizes.d_model, "num_heads": sizes.num_heads,
        "ffn_dim": sizes.ffn_dim, "encoder_layers": sizes.layers, "decoder_layers": sizes.layers,
        "dropout": dropout, "max_positions": 128, "share_decoder_embeddings": tied_output,
        **FAMILIES[family],
    })  # fmt: skip


def random_batch(sizes: Sizes, seed: int) -> Batch:
    """A padded training batch of random pairs of varied lengths (CPU; the caller moves it)."""
    g = torch.Generator().manual_seed(seed)

    def sequence() -> list[int]:
        length = int(torch.randint(sizes.max_src_len // 2, sizes.max_src_len + 1, (), generator=g))
        return torch.randint(4, sizes.vocab_size, (length,), generator=g).tolist()

    pairs = [(sequence(), sequence()) for _ in range(sizes.batch)]
    dataset = ParallelDataset([s for s, _ in pairs], [t for _, t in pairs])
    return dataset.batch(list(range(sizes.batch)))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_memory(device: torch.device) -> str:
    if device.type != "cuda":
        return ""
    return f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"


def train_check(family: str, sizes: Sizes, device: torch.device) -> Check:
    """One bf16 training step and Adam update: finite loss, a finite fp32 gradient for every
    parameter, the update applied and the weights still fp32."""
    name = f"train-{family}"
    torch.manual_seed(0)
    model = Seq2Seq(model_config(sizes, family, dropout=0.1)).to(device).train()
    batch = random_batch(sizes, seed=0).to(device)
    precision = ForwardPrecision.from_config(LoopConfig(precision="bf16"), device)
    optim = OptimConfig(lr=1e-4, warmup_updates=0, clip_norm=1.0)
    optimizer, scheduler = build_optimizer(model.parameters(), optim, max_updates=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    step = train_step(model, batch, Objective(model.config.pad_id, 0.1), precision)
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    bad = [
        n
        for n, p in model.named_parameters()
        if p.grad is not None and (p.grad.dtype != torch.float32 or not p.grad.isfinite().all())
    ]
    result = apply_update(
        model.parameters(), optimizer, scheduler, loss=step.loss, tokens=step.tokens,
        world_size=1, clip_norm=optim.clip_norm,
    )  # fmt: skip
    _sync(device)
    seconds = time.perf_counter() - start
    not_fp32 = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
    problems = []
    if not math.isfinite(step.loss):
        problems.append(f"loss {step.loss}")
    if missing:
        problems.append(f"no gradient for {len(missing)} parameters ({missing[0]}, ...)")
    if bad:
        problems.append(f"non-finite or non-fp32 gradients in {len(bad)} ({bad[0]}, ...)")
    if not result.applied:
        problems.append("the update was skipped")
    if not_fp32:
        problems.append(f"{len(not_fp32)} weights left fp32 ({not_fp32[0]}, ...)")
    if problems:
        return Check("FAIL", name, "; ".join(problems))
    nfe = f", encoder NFE {step.nfe:.0f}" if step.nfe is not None else ""
    return Check(
        "PASS",
        name,
        f"bf16 loss {step.loss / step.tokens:.3f}/token, grad norm {result.grad_norm:.3g}, "
        f"{model.num_parameters() / 1e6:.1f}M parameters, {seconds * 1e3:.0f} ms{nfe}"
        + _peak_memory(device),
    )


def decode_check(family: str, sizes: Sizes, device: torch.device) -> Check:
    """Beam-5 decoding in fp32, with the KV cache and without: the same tokens. The detail
    gives the largest difference of step-by-step against teacher-forced logits."""
    name = f"decode-{family}"
    torch.manual_seed(1)
    model = Seq2Seq(model_config(sizes, family, 0.0, tied_output=False)).to(device).eval()
    g = torch.Generator().manual_seed(1)
    src = torch.randint(
        4, sizes.vocab_size, (sizes.decode_batch, sizes.decode_src_len), generator=g
    )
    src[-1, -2:] = model.config.pad_id  # a padded row
    tgt = torch.randint(4, sizes.vocab_size, (sizes.decode_batch, sizes.max_len), generator=g)
    tgt[:, 0] = model.config.bos_id
    src, tgt = src.to(device), tgt.to(device)
    with torch.no_grad():
        encoded = model.encode(src)
        full = model.decode(tgt, encoded)
        state = model.init_state(encoded)
        steps = torch.cat(
            [model.decode(tgt[:, t : t + 1], state=state) for t in range(tgt.shape[1])], 1
        )
    gap = (steps - full).abs().max().item()
    start = time.perf_counter()
    cached = model.generate(src, beam_size=5, max_len=sizes.max_len, use_cache=True)
    _sync(device)
    seconds = time.perf_counter() - start
    uncached = model.generate(src, beam_size=5, max_len=sizes.max_len, use_cache=False)
    if cached != uncached:
        row = next(i for i, (a, b) in enumerate(zip(cached, uncached)) if a != b)
        return Check(
            "FAIL",
            name,
            f"sentence {row}: cached {cached[row][:8]} != uncached {uncached[row][:8]} "
            f"(max |Δlogit| {gap:.2g})",
        )
    distinct = len({t for h in cached for t in h})
    return Check(
        "PASS",
        name,
        f"beam 5, {len(cached)} sentences ({distinct} distinct tokens), cached == uncached, "
        f"max |Δlogit| {gap:.2g}, cached decode {seconds * 1e3:.0f} ms",
    )


def device_check(device: torch.device) -> Check:
    """What runs where: the device, torch, CUDA and cuDNN versions."""
    versions = f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"
    if device.type == "cpu":
        return Check("PASS", "device", f"cpu (--device cpu), {versions}")
    props = torch.cuda.get_device_properties(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    bf16 = "native" if props.major >= 8 else "emulated"
    return Check(
        "PASS",
        "device",
        f"{props.name} ({device}, {props.total_memory / 2**30:.0f} GiB, "
        f"sm_{props.major}{props.minor}, bf16 {bf16}), {torch.cuda.device_count()} GPU(s) "
        f"visible; {versions}, cuDNN {cudnn}",
    )


def pytest_check(
    name: str, device: torch.device, args: list[str], timeout: float, python: str
) -> Check:
    """``pytest args --device device`` in a subprocess: PASS when it exits 0; the detail is its
    summary line (and the first failures)."""
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", str(device)]
    env = {**os.environ, "ODET_TEST_DEVICE": str(device)}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Check("FAIL", name, f"pytest {' '.join(args)} ran past {timeout:.0f} s")
    seconds = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    summary = _summary(lines) or (done.stderr.strip().splitlines() or ["no output"])[-1]
    if done.returncode == 0:
        return Check("PASS", name, f"{summary} ({seconds:.0f} s)")
    failed = [line.split(" - ")[0] for line in lines if line.startswith(("FAILED", "ERROR"))]
    shown = "; ".join(failed[:3]) + (f"; +{len(failed) - 3} more" if len(failed) > 3 else "")
    return Check("FAIL", name, f"{summary}" + (f": {shown}" if shown else ""))


def _summary(lines: list[str]) -> str:
    """pytest's final ``N passed, M skipped in Xs`` line, without the time."""
    for line in reversed(lines):
        if re.search(r"\b(passed|failed|error|errors|skipped|deselected|no tests ran)\b", line):
            return re.sub(r"\s+in [\d.]+s.*$", "", line.strip("= "))
    return ""


def gpu_present() -> bool:
    """An NVIDIA GPU on this machine, whether or not torch can use it."""
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def check_names() -> list[str]:
    return [
        "device",
        "tests",
        *(f"train-{f}" for f in FAMILIES),
        *(f"decode-{f}" for f in FAMILIES),
        "ddp-nccl",
    ]


def no_cuda(reason: str, status: Status = "SKIP") -> list[Check]:
    """Every check skipped for ``reason`` (the device line ``FAIL`` when ``status`` says)."""
    checks = [Check(status, "device", reason)]
    return checks + [Check("SKIP", name, "no CUDA device") for name in check_names()[1:]]


def run_checks(
    device: torch.device,
    sizes: Sizes,
    tests: list[str],
    *,
    timeout: float = 240.0,
    workers: int = 0,
    python: str = sys.executable,
    report: Callable[[Check], None] = lambda check: print(check.line(), flush=True),
) -> list[Check]:
    """Every check on ``device``, each reported as it finishes; the checks in order.
    ``workers`` > 0 runs the device tests in that many pytest-xdist processes (tiny models on a
    GPU wait on kernel launches, which processes overlap)."""
    checks: list[Check] = []

    def run(name: str, check: Callable[[], Check]) -> None:
        try:
            outcome = check()
        except Exception as err:  # a crash is this check's failure, not the script's
            outcome = Check("FAIL", name, f"{type(err).__name__}: {str(err).splitlines()[0]}")
        checks.append(outcome)
        report(outcome)

    run("device", lambda: device_check(device))
    selection = ["-m", "device", f"--ignore={DISTRIBUTED_TEST}", *tests]
    parallel = ["-n", str(workers)] if workers else ["-p", "no:xdist"]
    run("tests", lambda: pytest_check("tests", device, parallel + selection, timeout, python))
    if device.type == "cuda":  # fp32 checks compare fp32, not TF32, results
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for family in FAMILIES:
        run(f"train-{family}", lambda family=family: train_check(family, sizes, device))
    for family in FAMILIES:
        run(f"decode-{family}", lambda family=family: decode_check(family, sizes, device))
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    if gpus:
        torch.cuda.empty_cache()  # the ranks' processes get the memory the models held
    if gpus >= 2:
        args = ["-m", "device", DISTRIBUTED_TEST]
        run("ddp-nccl", lambda: pytest_check("ddp-nccl", device, args, timeout, python))
    else:
        why = (
            f"{gpus} GPU visible, two NCCL ranks need 2"
            if device.type == "cuda"
            else ("NCCL needs CUDA devices (the gloo run is tests/training/test_distributed.py)")
        )
        run("ddp-nccl", lambda: Check("SKIP", "ddp-nccl", why))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="toy sizes and two device tests")
    parser.add_argument(
        "--tests", nargs="+", help=f"test paths of the 'tests' check (default: tests; --quick: "
        f"{' '.join(QUICK_TESTS)})",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per pytest run")
    parser.add_argument(
        "--workers", type=int, help="pytest-xdist processes of the device tests (default: 4 on "
        "CUDA, none on the CPU)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sizes = QUICK if args.quick else FULL
    tests = args.tests or (list(QUICK_TESTS) if args.quick else ["tests"])
    start = time.perf_counter()
    if device.type == "cuda" and not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a CPU build")
        if gpu_present():
            reason = (
                f"an NVIDIA GPU is present but torch cannot use it ({build}); install a CUDA build"
            )
            checks = no_cuda(reason, status="FAIL")
        else:
            checks = no_cuda(f"no CUDA device ({build}); --device cpu runs the checks on the CPU")
        for check in checks:
            print(check.line(), flush=True)
    else:
        workers = args.workers if args.workers is not None else 4 * (device.type == "cuda")
        checks = run_checks(device, sizes, tests, timeout=args.timeout, workers=workers)
    failed = [c.name for c in checks if c.status == "FAIL"]
    counts = {s: sum(c.status == s for c in checks) for s in ("PASS", "FAIL", "SKIP")}
    print(
        f"gpu-check: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
        f"in {time.perf_counter() - start:.0f} s"
        + (f" (failed: {', '.join(failed)})" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
