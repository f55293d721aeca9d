"""Int8 decoding: a copy of a model whose linear layers multiply in int8.

:func:`int8_copy` replaces the ``nn.Linear`` layers of attention and feed-forward modules (and
any others named) by :class:`Int8Linear`: weights quantised once, symmetric, one scale per
output channel; inputs quantised at every call, symmetric, **one scale per row** (per token);
the product accumulated exactly in int32 by ``torch._int_mm`` and rescaled to fp32. Inputs and
outputs stay fp32, and so does everything else in the model (embeddings, norms, attention
scores, gates).

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
from collections.abc import Callable, Collection
from typing import TypeVar

import torch
from torch import Tensor, nn

from odet.nn.attention import CrossAttention, SelfAttention
from odet.nn.feedforward import FeedForward

__all__ = [
    "Int8Linear",
    "copy_with_linears",
    "int8_copy",
    "int8_supported",
    "linear_layer_names",
]

M = TypeVar("M", bound=nn.Module)

_QMAX = 127
_TINY = 1e-12
"""Smallest row maximum used as a scale, so that an all-zero row quantises to zeros."""


class Int8Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` in int8 (per-output-channel scales) and ``x`` quantised per
    row at each call; ``(..., in) -> (..., out)`` in the dtype of the input (fp32)."""

    def __init__(self, weight_t: Tensor, weight_scale: Tensor, bias: Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight_t.shape
        self.register_buffer("weight_t", weight_t)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", bias)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """Quantise ``linear``'s weight: ``W ≈ scale · q``, ``q`` in [−127, 127]; the scales and
        bias keep the weight's dtype (fp32, or fp64 for exactness tests)."""
        weight = linear.weight.detach()
        scale = weight.abs().amax(dim=1).clamp_min(_TINY) / _QMAX
        q = torch.round(weight / scale[:, None]).clamp_(-_QMAX, _QMAX).to(torch.int8)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(q.t().contiguous(), scale, bias)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, self.in_features)
        peak = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_())
        scale = peak.clamp_min_(_TINY).div_(_QMAX)
        q = (rows * scale.reciprocal()).round_().to(torch.int8)  # few full-size temporaries
        acc = torch._int_mm(q, self.weight_t)
        if x.dtype == torch.float32:
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
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


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
    return copy_with_linears(model, linear_layer_names(model, also), Int8Linear.from_linear)


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
