"""The pure probes of a model: update sizes, coefficients and gate statistics."""

import pytest
import torch

from odet.models import Seq2Seq, Seq2SeqConfig
from odet.models.probes import (
    coefficient_snapshot,
    gate_statistics,
    has_learned_coefficients,
    update_sizes,
)


def _model(**overrides) -> Seq2Seq:
    options = dict(
        vocab_size=40,
        d_model=16,
        num_heads=2,
        ffn_dim=32,
        encoder_layers=3,
        decoder_layers=2,
        dropout=0.0,
    )
    options.update(overrides)
    return Seq2Seq(Seq2SeqConfig(**options)).eval()


def _batch():
    src = torch.randint(4, 40, (3, 6))
    src[2, 4:] = 0
    tgt = torch.randint(4, 40, (3, 5))
    tgt[:, 0] = 2
    return src, tgt


def test_update_sizes_equal_a_manual_pass_through_the_encoder_blocks():
    torch.manual_seed(0)
    model = _model(encoder_method="rk2")
    src, tgt = _batch()
    sizes = update_sizes(model, src, tgt)
    pad = src.eq(0)
    y = model.src_embed(src) + model.positions(src.shape[1])
    expected = []
    with torch.no_grad():
        for block in model.encoder.blocks:
            nxt = block(y, padding_mask=pad)
            ratio = (nxt - y).norm(dim=-1) / y.norm(dim=-1)
            expected.append(ratio[~pad].mean().item())
            y = nxt
    assert sizes["encoder"] == pytest.approx(expected, rel=1e-5)
    assert len(sizes["decoder"]) == 2


def test_coefficient_snapshot_reports_fixed_learned_and_gate_values(device):
    torch.manual_seed(1)
    src, tgt = (t.to(device) for t in _batch())
    fixed = coefficient_snapshot(_model(encoder_method="rk2").to(device), src, tgt)
    assert fixed["encoder"] == [[0.5, 0.5]] * 3 and fixed["decoder"] == [[1.0]] * 2
    gated = _model(encoder_method="rk2", coefficients="gated").to(device)
    snapshot = coefficient_snapshot(gated, src, tgt)
    gates = []
    block = gated.encoder.blocks[0]
    with torch.no_grad():
        y = gated.src_embed(src) + gated.positions(src.shape[1])
        k = block.stages(y, padding_mask=src.eq(0))
        gates.append(block.coefficients.gate_values(k[0], k[1])[src.ne(0)].mean().item())
    assert snapshot["encoder"][0] == pytest.approx(gates, rel=1e-5)
    assert all(0 < row[0] < 1 for row in snapshot["encoder"])


def test_coefficient_snapshot_lists_predictor_then_corrector_weights_and_dlcl_rows(device):
    torch.manual_seed(4)
    src, tgt = (t.to(device) for t in _batch())
    pc = _model(encoder_method="pc", coefficients="ema").to(device)
    for block in pc.encoder.blocks:
        with torch.no_grad():
            block.corrector_coefficients.weight.add_(torch.tensor([0.1, -0.2, 0.3], device=device))
    snapshot = coefficient_snapshot(pc, src, tgt)
    for block, row in zip(pc.encoder.blocks, snapshot["encoder"], strict=True):
        gamma = block.corrector_coefficients.weight.detach()
        expected = [*block.predictor_coefficients.weights(), *gamma]
        assert row == pytest.approx([float(w) for w in expected])
    assert snapshot["encoder"][0][2:] == pytest.approx([0.6, -0.2, 0.8])
    dlcl = _model(encoder_method="dlcl").to(device)
    with torch.no_grad():
        dlcl.encoder.weights[2][1] = 0.9
    snapshot = coefficient_snapshot(dlcl, src, tgt)
    assert snapshot["encoder"] == [[1.0]] * 3 and "decoder_layers" not in snapshot
    expected = [[1.0], [0.5, 0.5], [1 / 3, 0.9, 1 / 3], [0.25] * 4]
    for got, want in zip(snapshot["encoder_layers"], expected, strict=True):
        assert got == pytest.approx(want)


@pytest.mark.parametrize(
    ("overrides", "learned"),
    [
        ({}, False),
        ({"encoder_method": "rk4"}, False),
        ({"encoder_method": "ab2"}, False),
        ({"encoder_method": "dlcl"}, True),
        ({"encoder_method": "pc", "coefficients": "ema"}, True),
        ({"encoder_method": "rk2", "coefficients": "learned"}, True),
        ({"decoder_method": "rk2", "coefficients": "gated"}, True),
    ],
)
def test_has_learned_coefficients_names_every_block_weight_training_changes(overrides, learned):
    assert has_learned_coefficients(_model(**overrides)) is learned


def _manual_gate_logits(model: Seq2Seq, src: torch.Tensor) -> list[torch.Tensor]:
    """The encoder blocks' gate logits over the real tokens, block by block."""
    pad = src.eq(0)
    logits = []
    with torch.no_grad():
        y = model.src_embed(src) + model.positions(src.shape[1])
        for block in model.encoder.blocks:
            k = block.stages(y, padding_mask=pad)
            logits.append(block.coefficients.gate(torch.cat(k, dim=-1))[..., 0][~pad].double())
            y = block(y, padding_mask=pad)
    return logits


@pytest.mark.parametrize("share_gate", [False, True])
def test_gate_statistics_equal_a_manual_pass_over_the_real_tokens(share_gate):
    torch.manual_seed(2)
    model = _model(encoder_method="rk2", coefficients="gated", share_gate=share_gate)
    src, tgt = _batch()
    stats = gate_statistics(model, src, tgt, threshold=0.2)
    assert stats["decoder"] == [None, None]
    for got, logits in zip(stats["encoder"], _manual_gate_logits(model, src), strict=True):
        g = torch.sigmoid(logits)
        assert got["mean"] == pytest.approx(g.mean().item(), rel=1e-6)
        assert got["std"] == pytest.approx(g.std(correction=0).item(), rel=1e-6)
        assert got["saturated"] == pytest.approx(((g < 0.2) | (g > 0.8)).double().mean().item())
        assert got["logit_rms"] == pytest.approx(logits.square().mean().sqrt().item(), rel=1e-6)
    if share_gate:
        assert len({round(s["mean"], 6) for s in stats["encoder"]}) == 3  # one entry per block


def test_gate_statistics_detect_saturated_and_neutral_gates():
    torch.manual_seed(3)
    src, tgt = _batch()
    model = _model(encoder_method="rk2", coefficients="gated")
    with torch.no_grad():
        for block in model.encoder.blocks:
            block.coefficients.gate.weight.zero_()
            block.coefficients.gate.bias.zero_()
    neutral = gate_statistics(model, src, tgt)["encoder"]
    assert all(s == {"mean": 0.5, "std": 0.0, "saturated": 0.0, "logit_rms": 0.0} for s in neutral)
    with torch.no_grad():
        for block in model.encoder.blocks:
            block.coefficients.gate.weight.normal_(std=100.0)
    saturated = gate_statistics(model, src, tgt)["encoder"]
    assert all(s["saturated"] > 0.9 and s["logit_rms"] > 50 for s in saturated)
    euler = gate_statistics(_model(), src, tgt)
    assert euler == {"encoder": [None, None, None], "decoder": [None, None]}
