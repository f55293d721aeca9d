"""fp32 decoding with oneDNN's GEMMs: a copy of a model whose linear layers call oneDNN.

On x86 CPUs PyTorch multiplies fp32 ``nn.Linear`` layers with MKL. oneDNN (bundled with every
CPU build of PyTorch, and the SGEMM backend CTranslate2 selects on AMD CPUs) is faster on the
row counts of a decoding step when its weights are packed once into its blocked layout.
:func:`onednn_copy` replaces the ``nn.Linear`` layers of attention and feed-forward modules
(and any others named) by :class:`OneDNNLinear`, which holds the packed weight and calls the
oneDNN linear kernel that ``torch.compile`` itself emits for packed CPU linears. Everything
stays fp32; the two libraries differ only in the order of their floating-point sums, so tokens
can differ from a default fp32 decode where two hypotheses tie to rounding.

Each output row depends on its own input row alone, as with MKL, so the KV cache stays exact
(cached == uncached) and a sentence's translation does not depend on its batch; the tests pin
both. The copy is for inference only: no gradients, never saved. The two ``torch.ops.mkldnn``
ops it uses are internal to PyTorch; :func:`onednn_supported` says where they are missing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TypeVar

import torch
from torch import Tensor, nn

from odet.nn.quantization import copy_with_linears, linear_layer_names

__all__ = ["OneDNNLinear", "onednn_copy", "onednn_supported"]

M = TypeVar("M", bound=nn.Module)

_ROWS_HINT = 256
"""Row count the weight layout is packed for; the packed weight serves any row count."""


class OneDNNLinear(nn.Module):
    """``y = x Wᵀ + b`` by oneDNN with ``W`` packed once; ``(..., in) -> (..., out)``, fp32."""

    def __init__(self, packed_weight: Tensor, bias: Tensor | None, in_features: int):
        super().__init__()
        self.in_features = in_features
        self.out_features = packed_weight.shape[0]
        self.register_buffer("packed_weight", packed_weight)
        self.register_buffer("bias", bias)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear) -> OneDNNLinear:
        """Pack ``linear``'s fp32 weight into oneDNN's layout (a copy; ``linear`` is untouched)."""
        weight = linear.weight.detach().contiguous()
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, _ROWS_HINT)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(packed, bias, linear.in_features)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn"


def onednn_supported(device: torch.device) -> str | None:
    """``None`` where oneDNN decoding runs, else the reason in one line."""
    if device.type != "cpu":
        return f"generation.gemm onednn runs on CPU only (the model is on {device.type})"
    if not torch.backends.mkldnn.is_available():
        return (
            "generation.gemm onednn needs a PyTorch build with oneDNN (mkldnn); this one has none"
        )
    missing = [
        op
        for op in ("_reorder_linear_weight", "_linear_pointwise")
        if not hasattr(torch.ops.mkldnn, op)
    ]
    if missing:
        return f"generation.gemm onednn: this PyTorch lacks torch.ops.mkldnn.{missing[0]}"
    return None


def onednn_copy(model: M, also: Collection[str] = ()) -> M:
    """An eval-mode copy of ``model`` whose attention and feed-forward linears, and the
    ``nn.Linear`` modules named in ``also``, are :class:`OneDNNLinear`; ``model`` itself is left
    untouched. Raises ``ValueError`` where :func:`onednn_supported` gives a reason and for
    models that are not fp32."""
    first = next(model.parameters())
    reason = onednn_supported(first.device)
    if reason is not None:
        raise ValueError(reason)
    if first.dtype != torch.float32:
        raise ValueError(f"generation.gemm onednn: the model must be fp32, got {first.dtype}")
    return copy_with_linears(model, linear_layer_names(model, also), OneDNNLinear.from_linear)
