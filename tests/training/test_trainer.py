import json
import math

import pytest
import torch

from odet.cli import main
from odet.models import Seq2Seq
from odet.training import TrainConfig, train
from odet.training.average import average_checkpoints
from odet.training.checkpoint import latest_checkpoint
from tests.training.conftest import tiny_config, write_config


def _losses(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["event"] == "train"}


def _weights(run_dir):
    model = Seq2Seq.from_pretrained(latest_checkpoint(run_dir / "checkpoints").path)
    return model.state_dict()


def test_resumed_run_reaches_the_same_losses_and_weights_as_an_uninterrupted_run(
    copy_data, tmp_path, device
):
    budget = {"max_updates": 14, "max_epochs": 3, "max_tokens": 400, "device": device.type}
    straight = tiny_config(copy_data, tmp_path / "straight", train=budget)
    train(TrainConfig.from_dict(straight))

    # Stop after 9 updates (mid-epoch), then run the same command with the full budget.
    stopped = tiny_config(copy_data, tmp_path / "resumed", train={**budget, "max_updates": 9})
    train(TrainConfig.from_dict(stopped))
    assert max(_losses(tmp_path / "resumed")) == 9
    train(TrainConfig.from_dict(tiny_config(copy_data, tmp_path / "resumed", train=budget)))

    expected, actual = _losses(tmp_path / "straight"), _losses(tmp_path / "resumed")
    assert sorted(actual) == sorted(expected) == list(range(1, 15))
    # CUDA's attention backward accumulates with atomics: equal to rounding, not to the bit
    # (other dropout masks after a resume would differ by 1e-2)
    rel, abs_ = (1e-6, 1e-7) if device.type == "cpu" else (1e-4, 1e-5)
    for step in expected:
        assert actual[step] == pytest.approx(expected[step], rel=rel, abs=abs_), step
    for name, tensor in _weights(tmp_path / "straight").items():
        torch.testing.assert_close(
            _weights(tmp_path / "resumed")[name], tensor, rtol=rel, atol=abs_
        )


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(copy_data, tmp_path, caplog):
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        train={"max_epochs": 2, "save_every_updates": 5, "keep_last": 5},
    )
    train(TrainConfig.from_dict(config))
    root = tmp_path / "run" / "checkpoints"
    newest = latest_checkpoint(root)
    weights = newest.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    fallback = latest_checkpoint(root)
    assert fallback is not None and fallback.state.step < newest.state.step
    assert "SHA-256 mismatch" in caplog.text
    (fallback.path / "optimizer.pt").write_bytes(b"truncated")
    assert latest_checkpoint(root).state.step < fallback.state.step


def test_average_of_checkpoints_is_the_mean_of_their_weights(copy_data, tmp_path):
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        train={"max_epochs": 1, "save_every_updates": 4, "keep_last": 3},
    )
    train(TrainConfig.from_dict(config))
    root = tmp_path / "run" / "checkpoints"
    names = [e["name"] for e in json.loads((root / "index.json").read_text())["checkpoints"]]
    models = [Seq2Seq.from_pretrained(root / n) for n in names[-2:]]
    out = average_checkpoints(tmp_path / "run", 2, tmp_path / "avg")
    averaged = Seq2Seq.from_pretrained(out).state_dict()
    for key, value in averaged.items():
        mean = (models[0].state_dict()[key] + models[1].state_dict()[key]) / 2
        torch.testing.assert_close(value, mean)
    assert (out / "tokenizer.model").is_file()


def test_learning_curve_metrics_and_summary_are_written(copy_data, tmp_path):
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        train={"max_epochs": 1, "valid_metric": "bleu", "best_metric": "metric"},
    )
    result = train(TrainConfig.from_dict(config))
    run = tmp_path / "run"
    assert (run / "learning_curve.png").stat().st_size > 1000
    valid = [
        json.loads(x)
        for x in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(x)["event"] == "valid"
    ]
    assert len(valid) == 1 and math.isfinite(valid[0]["loss"]) and 0 <= valid[0]["bleu"] <= 100
    events = {json.loads(x)["event"] for x in (run / "metrics.jsonl").read_text().splitlines()}
    assert "coefficients" not in events  # an Euler model has only fixed stage weights
    assert result.best_checkpoint is not None and (result.best_checkpoint / "config.json").is_file()
    assert json.loads((run / "summary.json").read_text())["steps"] == result.steps
    assert (run / "config.yaml").is_file() and (run / "train.log").is_file()


def test_copy_task_reaches_95_percent_exact_match_through_the_cli(copy_data, tmp_path):
    """``odet train`` then ``odet generate``, the commands users run, on a synthetic copy task;
    bf16 decoding gives the same outputs."""
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        model={
            "d_model": 64,
            "ffn_dim": 128,
            "dropout": 0.0,
            "encoder_method": "rk2",
            "coefficients": "gated",
        },
        optim={"lr": 0.003, "label_smoothing": 0.0},
        train={"max_epochs": 40, "log_every": 50},
    )
    assert main(["train", str(write_config(tmp_path / "copy.yaml", config)), "--no-progress"]) == 0
    out = tmp_path / "test.hyp"
    args = [
        "generate",
        str(tmp_path / "run"),
        "-i",
        str(copy_data / "test.src"),
        "-o",
        str(out),
        "--beam",
        "2",
        "--no-progress",
    ]
    assert main(args) == 0
    hyps = out.read_text().splitlines()
    refs = (copy_data / "test.tgt").read_text().splitlines()
    exact = sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(refs)
    assert exact >= 0.95

    bf16_out = tmp_path / "test.bf16.hyp"
    args[args.index(str(out))] = str(bf16_out)
    assert main([*args, "--precision", "bf16"]) == 0
    bf16_hyps = bf16_out.read_text().splitlines()
    assert sum(h == r for h, r in zip(bf16_hyps, refs, strict=True)) / len(refs) >= 0.95
    assert sum(a == b for a, b in zip(bf16_hyps, hyps, strict=True)) / len(hyps) >= 0.95


def test_adaptive_encoder_trains_with_arclength_regularisation_and_logs_nfe(copy_data, tmp_path):
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        model={
            "encoder_method": "adaptive",
            "dropout": 0.0,
            "continuous": {"arclength": True, "rtol": 1e-2, "atol": 1e-2},
        },
        optim={"arclength_weight": 0.01},
        train={"max_updates": 4, "log_every": 1},
    )
    train(TrainConfig.from_dict(config))
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    nfe = [r["encoder_nfe"] for r in records if r["event"] == "train"]
    assert len(nfe) == 4 and all(n >= 6 for n in nfe)


def test_arclength_weight_without_a_continuous_encoder_is_rejected(copy_data, tmp_path):
    from odet.config import ConfigError

    with pytest.raises(ConfigError, match="arclength_weight > 0 needs model.encoder_method"):
        TrainConfig.from_dict(tiny_config(copy_data, tmp_path, optim={"arclength_weight": 0.1}))


@pytest.mark.parametrize("sdpa", ["math", "fused"])
def test_bf16_training_tracks_fp32_for_a_few_updates(copy_data, tmp_path, sdpa):
    budget = {"max_updates": 5, "log_every": 1}
    train(
        TrainConfig.from_dict(
            tiny_config(copy_data, tmp_path / "fp32", train=budget, model={"dropout": 0.0})
        )
    )
    bf16 = tiny_config(
        copy_data,
        tmp_path / "bf16",
        model={"dropout": 0.0},
        train={**budget, "precision": "bf16", "bf16_sdpa": sdpa},
    )
    train(TrainConfig.from_dict(bf16))
    fp32_losses, bf16_losses = _losses(tmp_path / "fp32"), _losses(tmp_path / "bf16")
    for step, loss in fp32_losses.items():
        assert bf16_losses[step] == pytest.approx(loss, rel=0.02), step


@pytest.mark.parametrize(
    "model",
    [
        {"encoder_method": "pc", "coefficients": "ema"},  # a 0-dim parameter (the EMA α)
        {"encoder_method": "dlcl", "decoder_method": "dlcl"},
        {"encoder_method": "ab2", "decoder_method": "implicit_euler"},
    ],
    ids=["pc-ema", "dlcl", "ab2-implicit"],
)
def test_multistep_and_predictor_corrector_runs_finish_and_write_a_summary(
    copy_data, tmp_path, model
):
    config = tiny_config(copy_data, tmp_path / "run", model=model, train={"max_updates": 2})
    result = train(TrainConfig.from_dict(config))
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == result.steps == 2


def test_a_bf16_run_trains_in_bf16_but_validates_and_decodes_in_fp32(
    copy_data, tmp_path, monkeypatch
):
    """Both arms of an fp32-vs-bf16 comparison are evaluated alike: at generation.precision."""
    seen: list[tuple[bool, bool]] = []
    encode = Seq2Seq.encode

    def recording_encode(self, src_tokens):
        seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return encode(self, src_tokens)

    monkeypatch.setattr(Seq2Seq, "encode", recording_encode)
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        train={"max_updates": 3, "precision": "bf16", "valid_metric": "bleu"},
        data={"test": ["test.src", "test.tgt"]},
    )
    train(TrainConfig.from_dict(config))
    training = {autocast for grad, autocast in seen if grad}
    evaluation = {autocast for grad, autocast in seen if not grad}
    assert training == {True} and evaluation == {False}
    assert "cpu, bf16 (evaluation in fp32)" in (tmp_path / "run" / "train.log").read_text()


def test_an_auto_evaluation_precision_is_decided_for_the_device(monkeypatch):
    """generation.precision auto evaluates in bf16 where the CPU has bf16 units, else fp32."""
    import odet.nn.precision
    from odet.training.step import ForwardPrecision

    cpu = torch.device("cpu")
    for flags, expected in (("avx512_bf16", "bf16"), ("amx_bf16", "bf16"), ("avx2", "fp32")):
        monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda f=flags: frozenset({f}))
        assert ForwardPrecision.for_evaluation("auto", cpu).precision == expected
