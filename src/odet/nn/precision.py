"""Mixed precision for CPU (and CUDA) training: bfloat16 autocast with fp32 weights.

``autocast_bf16()`` runs matrix multiplies in bfloat16 while the weights, the optimizer state
and the reductions autocast keeps in fp32 (softmax, layer norm, losses) stay fp32: the usual
"fp32 master weights" recipe without a second copy of the model. No loss scaling is needed:
bfloat16 has fp32's exponent range.

On CPU it can also restrict ``scaled_dot_product_attention`` to the math backend
(``math_sdpa=True``, the default): on some CPUs the fused (flash) kernel's bf16 backward is
slower than the math path's two batched matmuls, on others faster (``math_sdpa=False``);
which, measured where: ``benchmarks/RESULTS.md``.

Typical use in a training step::

    with precision_context("bf16"):
        loss = loss_fn(model(src, tgt_in), tgt_out)
    loss.backward()
    optimizer.step()
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Literal, get_args

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
TrainPrecision = Literal["fp32", "bf16", "auto"]
"""A training precision: ``auto`` is bf16 where the device multiplies bf16 natively, else fp32."""

logger = logging.getLogger(__name__)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty where there is no ``/proc/cpuinfo``)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def has_native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 matrices with instructions made for it: a CUDA GPU of
    compute capability 8.0 or newer (bf16 tensor cores), or a CPU with AMX-BF16 or
    AVX-512-BF16 (bf16 dot products, which oneDNN's bf16 GEMMs use). Without them bf16 matmuls
    are emulated through fp32 and autocast only adds casts."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    return device.type == "cpu" and bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def resolve_precision(precision: TrainPrecision, device: torch.device) -> Precision:
    """``precision`` with ``auto`` decided for ``device`` (see :func:`has_native_bf16`). An
    explicit ``bf16`` on a device that only emulates it is kept, with a warning (once per
    device type and process): it runs, at a fraction of fp32's speed."""
    if precision == "auto":
        return "bf16" if has_native_bf16(device) else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; choose one of {get_args(TrainPrecision)}"
        )
    if precision == "bf16" and not has_native_bf16(device):
        _warn_emulated_bf16(device.type)
    return precision


@functools.cache
def _warn_emulated_bf16(device_type: str) -> None:
    units = (
        "this GPU has no bf16 tensor cores (compute capability below 8.0)"
        if device_type == "cuda"
        else "this CPU has neither AVX-512-BF16 nor AMX-BF16 instructions"
    )
    logger.warning(
        "bf16 is emulated here: %s, so bf16 matrix multiplies run many times slower than "
        "fp32 ones; precision auto picks fp32 on this %s",
        units,
        "GPU" if device_type == "cuda" else "CPU",
    )


@contextmanager
def autocast_bf16(device_type: str = "cpu", math_sdpa: bool = True) -> Iterator[None]:
    """Forward passes inside run their matmuls in bfloat16 (weights stay fp32).

    Wrap the forward pass and the loss, not ``backward()``/``optimizer.step()``: autograd
    replays the casts by itself. ``math_sdpa`` forces SDPA's math backend on CPU (see above).
    """
    with torch.autocast(device_type, dtype=torch.bfloat16):
        if device_type == "cpu" and math_sdpa:
            with sdpa_kernel(SDPBackend.MATH):
                yield
        else:
            yield


def precision_context(
    precision: Precision, device_type: str = "cpu"
) -> AbstractContextManager[None]:
    """The context for forward passes at ``precision``: ``"fp32"`` (no-op) or ``"bf16"``."""
    if precision == "fp32":
        return nullcontext()
    if precision == "bf16":
        return autocast_bf16(device_type)
    raise ValueError(f"unknown precision {precision!r}; choose one of {PRECISIONS}")
