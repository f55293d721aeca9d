import json

import pytest
import torch

from odet.analysis.blocks import coefficient_snapshot, update_sizes
from odet.cli import main
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.training import TrainConfig, train
from tests.training.conftest import copy_data, tiny_config  # noqa: F401


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


def test_coefficient_snapshot_reports_fixed_learned_and_gate_values():
    torch.manual_seed(1)
    src, tgt = _batch()
    fixed = coefficient_snapshot(_model(encoder_method="rk2"), src, tgt)
    assert fixed["encoder"] == [[0.5, 0.5]] * 3 and fixed["decoder"] == [[1.0]] * 2
    gated = _model(encoder_method="rk2", coefficients="gated")
    snapshot = coefficient_snapshot(gated, src, tgt)
    gates = []
    block = gated.encoder.blocks[0]
    with torch.no_grad():
        y = gated.src_embed(src) + gated.positions(src.shape[1])
        k = block.stages(y, padding_mask=src.eq(0))
        gates.append(block.coefficients.gate_values(k[0], k[1]).mean().item())
    assert snapshot["encoder"][0] == pytest.approx(gates, rel=1e-5)
    assert all(0 < row[0] < 1 for row in snapshot["encoder"])


def test_analyze_command_writes_plots_and_json(copy_data, tmp_path):  # noqa: F811
    runs = []
    for name, model in [
        ("euler", {}),
        ("gated", {"encoder_method": "rk2", "coefficients": "gated"}),
    ]:
        run = tmp_path / name
        train(
            TrainConfig.from_dict(tiny_config(copy_data, run, model=model, train={"max_epochs": 2}))
        )
        runs.append(str(run))
    assert main(["analyze", *runs, "--out", str(tmp_path / "analysis"), "--sentences", "16"]) == 0
    report = json.loads((tmp_path / "analysis" / "analysis.json").read_text())
    assert report["gated"]["coefficient_history"][-1]["step"] > 0
    assert len(report["euler"]["update_sizes"]["encoder"]) == 1
    for png in ("update_sizes.png", "coefficients.png"):
        assert (tmp_path / "analysis" / png).stat().st_size > 1000
