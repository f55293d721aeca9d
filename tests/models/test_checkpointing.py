"""Activation checkpointing per block: same loss and gradients, fewer stored activations."""

import pytest
import torch

from odet.models import Seq2Seq
from tests.models.test_seq2seq import small_config, sources

METHODS = [
    ("euler", "euler", "fixed"),
    ("rk2", "rk2", "gated"),
    ("rk4", "euler", "learned"),
    ("ab3", "ab2", "fixed"),
    ("dlcl", "dlcl", "fixed"),
    ("pc", "pc", "ema"),
    ("implicit_euler", "euler", "fixed"),
]


def _loss_and_grads(model: Seq2Seq, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)  # the same dropout masks for both runs
    src = sources()
    tgt = torch.randint(4, 40, (3, 6), generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    loss = model(src, tgt).log_softmax(-1).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(("enc", "dec", "coef"), METHODS)
def test_checkpointed_blocks_give_the_same_loss_and_gradients_with_dropout(enc, dec, coef):
    torch.manual_seed(0)
    cfg = small_config(
        encoder_method=enc,
        decoder_method=dec,
        coefficients=coef,
        encoder_layers=3,
        decoder_layers=3,
        dropout=0.2,
    )
    model = Seq2Seq(cfg).double().train()
    loss, grads = _loss_and_grads(model)
    model.set_activation_checkpointing(True)
    assert model.encoder.checkpoint_blocks and model.decoder.checkpoint_blocks
    loss_ckpt, grads_ckpt = _loss_and_grads(model)
    torch.testing.assert_close(loss_ckpt, loss, rtol=0, atol=1e-12)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-9, atol=1e-12, msg=name)


def _saved_bytes(model: Seq2Seq) -> int:
    """Bytes of tensors autograd keeps for the backward pass of one training forward."""
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    src = sources(batch=4, length=16)
    tgt = torch.randint(4, 40, (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(src, tgt).sum()
    return total


def test_checkpointing_stores_an_rk4_encoder_in_about_euler_memory():
    def model(method: str, checkpointing: bool) -> Seq2Seq:
        torch.manual_seed(0)
        m = Seq2Seq(small_config(encoder_method=method, encoder_layers=4, decoder_layers=1))
        m.set_activation_checkpointing(checkpointing)
        return m.train()

    euler = _saved_bytes(model("euler", False))
    rk4 = _saved_bytes(model("rk4", False))
    rk4_ckpt = _saved_bytes(model("rk4", True))
    # The hooks do not see the block inputs a checkpoint keeps: add them, (B, S, D) float32 each.
    kept_inputs = 5 * 4 * 16 * 32 * 4
    assert rk4 > 2.0 * euler  # four layer evaluations per block store ~four times the activations
    assert rk4_ckpt + kept_inputs < euler


def test_no_grad_and_cached_decoding_are_not_checkpointed():
    torch.manual_seed(0)
    model = Seq2Seq(small_config(encoder_method="rk2", decoder_method="rk2")).eval()
    src = sources()
    reference = model.generate(src, beam_size=2, max_len=6)
    model.set_activation_checkpointing(True)
    assert model.generate(src, beam_size=2, max_len=6) == reference
