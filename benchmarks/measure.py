"""Measurement primitives: round-robin timing, same-round ratios, FLOP counts, GEMM probe, memory.

This machine is a noisy shared VM, so nothing here times one competitor after another: every
round runs each task once (A B C, A B C, …, the starting task rotating each round), and
comparisons are the median over rounds of *same-round* ratios, which cancel the slow drifts of
the machine's load.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

Task = Callable[[], object]


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one task, one value per round (``times[r]`` in round ``r``)."""

    times: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.times or min(self.times) <= 0:
            raise ValueError(f"Timing needs positive times, got {self.times}")

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def round_robin(tasks: Mapping[str, Task], rounds: int, warmup: int = 1) -> dict[str, Timing]:
    """Time every task once per round, ``rounds`` rounds after ``warmup`` untimed rounds.

    Round ``r`` starts with task ``r mod n`` so no task always runs right after the same one.
    """
    if rounds < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1 and warmup >= 0, got rounds={rounds}, warmup={warmup}")
    names = list(tasks)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            t0 = time.perf_counter()
            tasks[name]()
            elapsed = time.perf_counter() - t0
            if r >= warmup:
                times[name].append(elapsed)
    return {name: Timing(tuple(ts)) for name, ts in times.items()}


def seconds(task: Task) -> float:
    """Wall time of one call of ``task``."""
    t0 = time.perf_counter()
    task()
    return time.perf_counter() - t0


def same_round_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of ``numerator.times[r] / denominator.times[r]``."""
    if len(numerator.times) != len(denominator.times):
        raise ValueError(
            f"timings come from different runs ({len(numerator.times)} vs "
            f"{len(denominator.times)} rounds)"
        )
    return statistics.median(a / b for a, b in zip(numerator.times, denominator.times))


# ---------------------------------------------------------------------------------------- FLOPs
def _sdpa_forward_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], *_, **__):
    """``Q Kᵀ`` and ``P V``: ``2·B·H·Tq·S·(Dk + Dv)``; dense (a causal mask is not discounted)."""
    b, h, tq, dk = q
    s, dv = k[-2], v[-1]
    return 2 * b * h * tq * s * (dk + dv)


def _sdpa_backward_flops(
    grad_out: tuple[int, ...], q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], *_, **__
):
    """``dV = Pᵀ dO``, ``dP = dO Vᵀ``, ``dQ = dS K``, ``dK = dSᵀ Q``: twice the forward."""
    return 2 * _sdpa_forward_flops(q, k, v)


# torch's FlopCounterMode knows the CUDA SDPA kernels but not the CPU flash kernel (it counted
# zero attention FLOPs in torch 2.13), so the CPU ops get the standard formulas here.
_CPU_SDPA_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_forward_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward_flops,
}


def count_flops(fn: Task) -> int:
    """Matrix-multiply FLOPs (2 per multiply-add, attention included) of one call of ``fn``."""
    with FlopCounterMode(display=False, custom_mapping=_CPU_SDPA_FLOPS) as counter:
        fn()
    return int(counter.get_total_flops())


# ------------------------------------------------------------------------------------ GEMM probe
def gemm_task(m: int, k: int, n: int, dtype: torch.dtype) -> tuple[Task, int]:
    """A ``(m, k) @ (k, n)`` matmul of ``dtype`` and its FLOPs, to time beside the models.

    Use the model's own dominant GEMM shape (tokens × D × FFN) so the rate is the one the model
    could reach; repeat it so one call lasts long enough to time.
    """
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    repeats = max(1, int(2e9 // (2 * m * k * n)))

    def run() -> None:
        for _ in range(repeats):
            torch.matmul(a, b, out=out)

    return run, 2 * m * k * n * repeats


# ---------------------------------------------------------------------------------------- memory
def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


@contextmanager
def _peak_rss_window() -> Iterator[Callable[[], int]]:
    """Yields a function returning the peak RSS growth (bytes) since the window opened.

    Resets the kernel's high-water mark (``/proc/self/clear_refs`` ← 5, Linux ≥ 4.0).
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _rss_kib("VmRSS")
    yield lambda: (_rss_kib("VmHWM") - base) * 1024


def _release_free_heap() -> None:
    """Return the heap's free pages to the kernel (glibc ``malloc_trim``).

    A forked child inherits the parent's resident free heap (activations freed by earlier
    work); allocations reusing it would not raise the RSS, and the growth would be
    under-counted. No-op where glibc is not available.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(work: Callable[[], None], timeout_s: float = 600.0) -> int | None:
    """Peak resident-memory growth (bytes) while ``work()`` runs in a forked child process.

    A fresh child per measurement keeps allocations cached by earlier work (glibc's heap, other
    models) out of the figure. The child runs one thread: GNU OpenMP's pool does not survive
    ``fork``. Returns None where the measurement is impossible (no ``fork`` or ``/proc``) or the
    child fails or times out.
    """
    if sys.platform != "linux" or not os.path.exists("/proc/self/clear_refs"):
        return None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read_fd)
            torch.set_num_threads(1)
            _release_free_heap()
            with _peak_rss_window() as peak:
                work()
                result = peak()
            os.write(write_fd, str(result).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read_fd)
        return None
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read()
    return int(data) if os.waitstatus_to_exitcode(status) == 0 and data else None
