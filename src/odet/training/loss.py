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
    reads a value (a graph break under ``torch.compile``); only ``loss_sum`` has a gradient.

    One log-softmax serves both sums: the ops of ``F.cross_entropy(..., label_smoothing=ε)``
    written out, so the loss and its gradient are bit-identical to it, without a second
    vocabulary-wide log-softmax for the NLL.
    """
    flat_target = target.reshape(-1)
    log_probs = F.log_softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    nll = F.nll_loss(log_probs, flat_target, ignore_index=pad_id, reduction="sum")
    if smoothing == 0.0:
        return nll, nll.detach()
    uniform = -log_probs.sum(dim=-1)
    uniform = uniform.masked_fill(flat_target == pad_id, 0.0).sum()
    loss = (1.0 - smoothing) * nll + uniform * (smoothing / log_probs.shape[-1])
    return loss, nll.detach()
