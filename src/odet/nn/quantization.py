"""Int8 decoding: a copy of a model whose linear layers multiply in int8.

:func:`int8_copy` replaces the ``nn.Linear`` layers of attention and feed-forward modules (and
any others named) by :class:`Int8Linear`: weights quantised once, symmetric, one scale per
output channel; inputs quantised at every call, symmetric, **one scale per row** (per token);
the product accumulated exactly in int32 (:func:`int_mm`) and rescaled to fp32. Inputs and
outputs stay fp32, and so does everything else in the model (embeddings, norms, attention
scores, gates).

PyTorch multiplies int8 matrices with oneDNN's int8 GEMM only where the CPU has AVX-512-VNNI;
elsewhere ``torch._int_mm`` is a scalar loop, tens of times slower than an fp32 GEMM. There
:func:`int_mm` computes the same integers with fp32 GEMMs instead (exact, see there), so an
int8 decode gives the same output on every CPU, at about fp32's speed rather than a fraction
of it; :func:`int8_copy` says so once in the log.

Per-row input scales make a row's output depend on that row alone. That is what keeps the KV
cache exact under int8 (a cached step and a full-prefix pass quantise each position
identically) and a sentence's translation independent of the batch it is decoded in.
``torch.ao.quantization.quantize_dynamic`` quantises each input with one scale for the whole
tensor, so its outputs change with the batch and with the cached / uncached path; it is kept
as a benchmark ablation only (``benchmarks/systems.py``).

The copy is for inference only: it has no gradients and is never saved.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Collection
from typing import TypeVar

import torch
from torch import Tensor, nn

from odet.nn import precision
from odet.nn.attention import CrossAttention, SelfAttention
from odet.nn.feedforward import FeedForward

__all__ = [
    "Int8Linear",
    "copy_with_linears",
    "has_native_int8",
    "int8_copy",
    "int8_supported",
    "int_mm",
    "linear_layer_names",
]

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=nn.Module)

_QMAX = 127
_TINY = 1e-12
"""Smallest row maximum used as a scale, so that an all-zero row quantises to zeros."""
_EXACT_FP32_TERMS = 1024
"""Inner terms per fp32 GEMM in :func:`int_mm`'s fallback: every partial sum of up to 1024
products of int8 values is an integer of magnitude at most 128² · 1024 = 2²⁴, which fp32
represents exactly, whatever order the GEMM adds in."""


def has_native_int8(device: torch.device) -> bool:
    """Whether ``torch._int_mm`` runs a real int8 GEMM on ``device``: on CPU PyTorch calls
    oneDNN's only where the CPU has AVX-512-VNNI (and oneDNN is enabled)."""
    return (
        device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and bool(torch.backends.mkldnn.enabled)
        and "avx512_vnni" in precision.cpu_flags()
    )


def int_mm(a: Tensor, b: Tensor, native: bool = True) -> Tensor:
    """``a @ b`` of int8 matrices ``(M, K) @ (K, N)``, exact: int32 from ``torch._int_mm`` where
    ``native``; else fp32 GEMMs over blocks of at most 1024 inner terms, exact (see
    ``_EXACT_FP32_TERMS``), fp32 for ``K ≤ 1024`` and int32 beyond. The fallback also takes ``a``
    as fp32 values that are integers in [−128, 127] (a quantiser's output before its cast)."""
    if native:
        return torch._int_mm(a, b)
    a = a.float()
    k = a.shape[1]
    if k <= _EXACT_FP32_TERMS:
        return a @ b.float()
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.int32, device=a.device)
    for start in range(0, k, _EXACT_FP32_TERMS):
        stop = start + _EXACT_FP32_TERMS
        acc += (a[:, start:stop] @ b[start:stop].float()).to(torch.int32)
    return acc


class Int8Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` in int8 (per-output-channel scales) and ``x`` quantised per
    row at each call; ``(..., in) -> (..., out)`` in the dtype of the input (fp32)."""

    def __init__(
        self, weight_t: Tensor, weight_scale: Tensor, bias: Tensor | None, native: bool = True
    ):
        super().__init__()
        self.in_features, self.out_features = weight_t.shape
        self.native = native
        """Multiply with ``torch._int_mm``; else with :func:`int_mm`'s exact fp32 fallback."""
        self.register_buffer("weight_t", weight_t)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", bias)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear, native: bool = True) -> Int8Linear:
        """Quantise ``linear``'s weight: ``W ≈ scale · q``, ``q`` in [−127, 127]; the scales and
        bias keep the weight's dtype (fp32, or fp64 for exactness tests)."""
        weight = linear.weight.detach()
        scale = weight.abs().amax(dim=1).clamp_min(_TINY) / _QMAX
        q = torch.round(weight / scale[:, None]).clamp_(-_QMAX, _QMAX).to(torch.int8)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(q.t().contiguous(), scale, bias, native)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features)
        peak = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_())
        scale = peak.clamp_min_(_TINY).div_(_QMAX)
        q = (rows * scale.reciprocal()).round_()  # few full-size temporaries
        if self.native:
            acc = int_mm(q.to(torch.int8), self.weight_t)
        else:
            acc = int_mm(q, self.weight_t, native=False)
        if acc.dtype != torch.int32:  # the fp32 fallback's exact integers
            y = acc.to(x.dtype).mul_(scale)
        elif x.dtype == torch.float32:
            # Rescale in the int32 buffer: one full-size output less. Converting first and then
            # scaling gives the same values as a mixed int32 × fp32 product, whose kernel is
            # several times slower than the two passes.
            y = acc.view(torch.float32).copy_(acc).mul_(scale)
        else:
            y = acc.mul(scale)
        y.mul_(self.weight_scale)
        if self.bias is not None:
            y.add_(self.bias)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        products = "" if self.native else ", products in fp32"
        return f"in_features={self.in_features}, out_features={self.out_features}, int8{products}"


def linear_layer_names(model: nn.Module, also: Collection[str] = ()) -> list[str]:
    """The ``nn.Linear`` layers an inference copy replaces (:func:`int8_copy`,
    :func:`odet.nn.onednn.onednn_copy`): those of every attention and feed-forward module, and
    the modules named in ``also`` (each must be an ``nn.Linear``)."""
    modules = dict(model.named_modules())
    names = [
        f"{parent}.{child}" if parent else child
        for parent, module in modules.items()
        if isinstance(module, (SelfAttention, CrossAttention, FeedForward))
        for child, layer in module.named_children()
        if isinstance(layer, nn.Linear)
    ]
    for name in also:
        if not isinstance(modules.get(name), nn.Linear):
            raise ValueError(f"{name!r} is not an nn.Linear of the model")
        if name not in names:
            names.append(name)
    return names


def int8_supported(device: torch.device) -> str | None:
    """``None`` where int8 decoding runs, else the reason in one line."""
    if device.type != "cpu":
        return f"generation.precision int8 runs on CPU only (the model is on {device.type})"
    return None


def int8_copy(model: M, also: Collection[str] = ()) -> M:
    """An eval-mode copy of ``model`` with :func:`linear_layer_names` as :class:`Int8Linear`;
    ``model`` itself is left untouched (tied weights stay fp32 where they are not replaced).
    Raises ``ValueError`` off CPU and for models that are not fp32 (or fp64)."""
    first = next(model.parameters())
    reason = int8_supported(first.device)
    if reason is not None:
        raise ValueError(reason)
    if first.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"int8: the model must be fp32 (or fp64), got {first.dtype}")
    native = has_native_int8(first.device)
    if not native:
        _warn_emulated_int8()
    return copy_with_linears(
        model,
        linear_layer_names(model, also),
        functools.partial(Int8Linear.from_linear, native=native),
    )


@functools.cache
def _warn_emulated_int8() -> None:
    logger.warning(
        "int8 is emulated here: PyTorch has an int8 GEMM only on CPUs with AVX-512-VNNI, so "
        "int8 decoding computes its int8 products exactly with fp32 GEMMs: the output such a "
        "CPU gives, no faster than fp32 decoding"
    )


def copy_with_linears(
    model: M, names: Collection[str], make: Callable[[nn.Linear], nn.Module]
) -> M:
    """An eval-mode, gradient-free copy of ``model`` with each ``nn.Linear`` in ``names``
    replaced by ``make(linear)``; ``model`` itself is left untouched."""
    replaced = copy.deepcopy(model).eval().requires_grad_(False)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = replaced.get_submodule(parent_name)
        setattr(parent, child, make(getattr(parent, child)))
    return replaced
