"""``torchrun --nproc_per_node=2`` against one process with the same global batch: gloo on the
CPU, NCCL with ``--device cuda`` on a machine with two GPUs (``make gpu-check``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from odet.models import Seq2Seq
from odet.training import TrainConfig, train
from odet.training.checkpoint import latest_checkpoint
from tests.training.conftest import tiny_config, write_config


def _train_losses(run) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["event"] == "train"}


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_ranks_match_one_process_with_the_same_global_batch(
    copy_data, tmp_path, parallel, device
):
    # Two ranks each take every other batch of the epoch's order, so one DDP update covers the
    # same two batches that a single process accumulates with update_freq=2. Dropout is off so
    # the random streams do not differ.
    if device.type == "cuda" and torch.cuda.device_count() < 2:
        pytest.skip(f"two NCCL ranks need two GPUs; {torch.cuda.device_count()} visible")
    budget = {"max_updates": 6, "max_tokens": 400, "device": device.type}
    common = dict(model={"dropout": 0.0}, train=budget)
    single = tiny_config(copy_data, tmp_path / "single", **common)
    single["train"]["update_freq"] = 2
    train(TrainConfig.from_dict(single))

    ranked = tiny_config(copy_data, tmp_path / "ddp", **common)
    ranked["train"]["parallel"] = parallel
    config = write_config(tmp_path / "ddp.yaml", ranked)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "odet.cli",
        "train",
        str(config),
        "--no-progress",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    expected, actual = _train_losses(tmp_path / "single"), _train_losses(tmp_path / "ddp")
    assert sorted(actual) == sorted(expected) == [1, 2, 3, 4, 5, 6]
    for step, loss in expected.items():
        assert abs(actual[step] - loss) <= 1e-5 * max(1.0, abs(loss)), (step, actual, expected)
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["parallel"] == parallel
    if parallel == "ddp":
        assert summary["parameters_identical_across_ranks"]
    ddp_model = Seq2Seq.from_pretrained(summary["last_checkpoint"]).state_dict()
    single_summary = json.loads((tmp_path / "single" / "summary.json").read_text())
    for name, value in (
        Seq2Seq.from_pretrained(single_summary["last_checkpoint"]).state_dict().items()
    ):
        keep = ~_key_bias(name, value)
        torch.testing.assert_close(ddp_model[name][keep], value[keep], rtol=1e-4, atol=2e-5)


def _key_bias(name: str, value: torch.Tensor) -> torch.Tensor:
    """The elements of ``value`` that are a key projection's bias. Attention's softmax ignores a
    score shift shared by every key, so their exact gradient is zero: what they receive is
    rounding noise, which Adam scales up to steps of the order of the learning rate, so their
    values depend on the order of a reduction and are not comparable across ranks."""
    mask = torch.zeros_like(value, dtype=torch.bool)
    n = value.numel()
    if name.endswith(".qkv_proj.bias"):
        mask[n // 3 : 2 * n // 3] = True
    elif name.endswith(".kv_proj.bias"):
        mask[: n // 2] = True
    return mask


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_every_rank_saves_the_last_applied_update_when_too_many_bad_updates_stop_training(
    copy_data, tmp_path, parallel
):
    """All ranks reach the stop together (its counts are all-reduced), so they checkpoint the
    last applied update together (FSDP gathers the shards) before the one-line error."""
    blowup = {"lr": 1e30, "warmup_updates": 0, "clip_norm": 0.0}  # update 1 applied, then NaN
    budget = {"max_bad_updates": 2, "max_tokens": 400, "parallel": parallel}
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "c.yaml", tiny_config(copy_data, run, optim=blowup, train=budget)
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "odet.cli", "train", str(config)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "2 updates in a row had non-finite loss or gradients (at update 2)" in done.stderr
    saved = latest_checkpoint(run / "checkpoints")
    assert (saved.state.step, saved.state.skipped_updates, saved.state.bad_in_a_row) == (1, 2, 0)
    assert all(torch.isfinite(p).all() for p in Seq2Seq.from_pretrained(saved.path).parameters())
