"""The label-smoothed loss sums against ``F.cross_entropy``, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from odet.training.loss import label_smoothed_loss, loss_sums

PAD = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_sums_equal_cross_entropy_bit_for_bit_with_one_log_softmax(
    dtype: torch.dtype, smoothing: float
) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(4, 9, 53, generator=gen)).to(dtype)
    target = torch.randint(1, 53, (4, 9), generator=gen)
    target[:, -3:] = PAD
    target[1] = PAD  # a sentence of padding only

    ref_x = logits.clone().requires_grad_()
    flat = ref_x.reshape(-1, 53).float()
    ref_loss = F.cross_entropy(
        flat, target.reshape(-1), ignore_index=PAD, label_smoothing=smoothing, reduction="sum"
    )
    ref_nll = F.cross_entropy(flat.detach(), target.reshape(-1), ignore_index=PAD, reduction="sum")
    ref_loss.backward()

    x = logits.clone().requires_grad_()
    loss, nll = loss_sums(x, target, smoothing=smoothing, pad_id=PAD)
    loss.backward()
    assert torch.equal(loss.detach(), ref_loss.detach()) and torch.equal(nll, ref_nll)
    assert not nll.requires_grad
    assert torch.equal(x.grad, ref_x.grad)
    assert bool((x.grad[target == PAD] == 0).all())


def test_label_smoothed_loss_counts_the_non_pad_tokens() -> None:
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[1, 2, PAD], [3, PAD, PAD]])
    _, _, ntok = label_smoothed_loss(logits, target, smoothing=0.1, pad_id=PAD)
    assert ntok == 3
