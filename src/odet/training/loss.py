"""Label-smoothed cross-entropy over target tokens, summed (normalised by the caller)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(
    logits: Tensor, target: Tensor, *, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, int]:
    """``(loss_sum, nll_sum, num_tokens)`` for ``logits (B, T, V)`` and ``target (B, T)``.

    The smoothed loss is ``(1 − ε)·NLL + ε·mean_v(−log p_v)`` per non-pad token (PyTorch's
    ``label_smoothing``); sums, not means, so gradient accumulation can normalise by the total
    number of target tokens of an update.
    """
    loss, nll = loss_sums(logits, target, smoothing=smoothing, pad_id=pad_id)
    return loss, nll, int(target.ne(pad_id).sum())


def loss_sums(
    logits: Tensor, target: Tensor, *, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor]:
    """``(loss_sum, nll_sum)`` of :func:`label_smoothed_loss` without the token count, which
    reads a value (a graph break under ``torch.compile``)."""
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_target = target.reshape(-1)
    loss = F.cross_entropy(
        flat_logits, flat_target, ignore_index=pad_id, label_smoothing=smoothing, reduction="sum"
    )
    nll = F.cross_entropy(flat_logits.detach(), flat_target, ignore_index=pad_id, reduction="sum")
    return loss, nll
