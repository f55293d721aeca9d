"""Faults during training: non-finite losses, SIGKILL mid-run (also mid-checkpoint), SIGTERM."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import odet.training.step as trainer_module
from odet.cli import main
from odet.models import Seq2Seq
from odet.training import TrainConfig, train
from odet.training.checkpoint import latest_checkpoint
from tests.training.conftest import tiny_config, write_config


def _nan_on_calls(monkeypatch, calls: set[int]) -> None:
    real = trainer_module.loss_sums
    count = {"n": 0}

    def flaky(logits, target, **kwargs):
        count["n"] += 1
        loss, nll = real(logits, target, **kwargs)
        if count["n"] in calls:
            loss = loss * float("nan")
        return loss, nll

    monkeypatch.setattr(trainer_module, "loss_sums", flaky)


def test_non_finite_loss_skips_the_update_and_training_goes_on(copy_data, tmp_path, monkeypatch):
    _nan_on_calls(monkeypatch, {3})
    config = tiny_config(copy_data, tmp_path / "run", train={"max_updates": 6})
    result = train(TrainConfig.from_dict(config))
    state = latest_checkpoint(tmp_path / "run" / "checkpoints").state
    assert result.steps == 6 and state.skipped_updates == 1 and state.bad_in_a_row == 0
    model = Seq2Seq.from_pretrained(result.last_checkpoint)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_too_many_non_finite_updates_in_a_row_stop_with_a_clear_message(
    copy_data, tmp_path, monkeypatch, capsys
):
    _nan_on_calls(monkeypatch, set(range(2, 100)))
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "c.yaml", tiny_config(copy_data, run, train={"max_bad_updates": 3})
    )
    assert main(["train", str(config)]) == 1
    assert "3 updates in a row had non-finite loss or gradients" in capsys.readouterr().err


def test_the_stop_after_too_many_bad_updates_keeps_the_last_applied_one_and_resumes(
    copy_data, tmp_path, monkeypatch
):
    """The updates since the newest checkpoint were lost; now the last applied one is saved,
    read on after the skipped batches, with a fresh allowance of bad updates."""
    _nan_on_calls(monkeypatch, {3, 4, 5})
    run = tmp_path / "run"
    budget = {"max_bad_updates": 3, "max_updates": 5}
    config = write_config(tmp_path / "c.yaml", tiny_config(copy_data, run, train=budget))
    assert main(["train", str(config)]) == 1
    saved = latest_checkpoint(run / "checkpoints").state
    assert (saved.step, saved.skipped_updates, saved.bad_in_a_row) == (2, 3, 0)
    assert saved.batcher["position"] == 5
    assert "stopped by an error after update 2, saved in" in (run / "train.log").read_text()
    assert main(["train", str(config)]) == 0
    resumed = latest_checkpoint(run / "checkpoints").state
    assert (resumed.step, resumed.skipped_updates) == (5, 3)


def _adaptive(copy_data, run, **continuous) -> dict:
    model = {"encoder_method": "adaptive", "dropout": 0.0,
             "continuous": {"rtol": 1e-2, "atol": 1e-2, **continuous}}  # fmt: skip
    return tiny_config(copy_data, run, model=model,
                       train={"max_updates": 2, "save_every_updates": 1})  # fmt: skip


def test_a_failed_encoder_solve_stops_training_with_one_line_not_an_internal_error(
    copy_data, tmp_path, capsys
):
    """It was exit 70, 'internal error (a bug in odet)', with a torchode traceback."""
    config = _adaptive(copy_data, tmp_path / "run", max_steps=2)
    assert main(["train", str(write_config(tmp_path / "c.yaml", config))]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    assert "odet: error: the encoder's solve failed (max_steps) for " in err
    assert "at update 1; raise model.continuous.max_steps" in err
    assert "model.continuous.on_failure: flag" in err


def test_a_flagged_solve_failure_skips_the_update_and_both_keys_may_change_on_resume(
    copy_data, tmp_path, capsys
):
    run = tmp_path / "run"
    train(TrainConfig.from_dict(_adaptive(copy_data, run)))  # 2 good updates, checkpointed
    config = _adaptive(copy_data, run, max_steps=2, on_failure="flag")
    config["train"].update(max_updates=4, max_bad_updates=2)
    assert main(["train", str(write_config(tmp_path / "c.yaml", config))]) == 1
    err = capsys.readouterr().err
    assert "2 updates in a row were skipped, the last because the encoder solve failed for" in err
    assert "(at update 3); raise model.continuous.max_steps" in err
    log = (run / "train.log").read_text()
    assert "resumed with model.continuous.max_steps changed from 1000 to 2" in log
    assert "encoder solve failed for" in log and "at update 3: step skipped (1 in a row" in log
    assert latest_checkpoint(run / "checkpoints").state.step == 2  # nothing trained on them


def _failing_solve():
    from odet.ode import SolverError, odeint_adaptive

    try:
        odeint_adaptive(lambda t, y: -50.0 * y, torch.ones(2, 1), max_steps=2)
    except SolverError as err:
        return err
    raise AssertionError("the solve was meant to fail")


@pytest.mark.parametrize(
    "error", [_failing_solve(), MemoryError("out of memory")], ids=["solve", "memory"]
)
def test_an_error_in_a_step_saves_the_last_update_and_a_resume_ends_as_if_never_stopped(
    error, copy_data, tmp_path, monkeypatch, capsys
):
    """Updates since the newest checkpoint were lost: the run now checkpoints the last applied
    update, with the data position before the failing update's batches, so that a resume
    (dropout off: nothing random) ends with the weights of an uninterrupted run."""
    budget = {"max_updates": 4, "update_freq": 2}
    straight = train(TrainConfig.from_dict(
        tiny_config(copy_data, tmp_path / "straight", model={"dropout": 0.0}, train=budget)
    ))  # fmt: skip
    real, calls = trainer_module.loss_sums, {"n": 0}

    def fails_on_the_6th_batch(logits, target, **kwargs):  # update 3's second batch
        calls["n"] += 1
        if calls["n"] == 6:
            raise error
        return real(logits, target, **kwargs)

    monkeypatch.setattr(trainer_module, "loss_sums", fails_on_the_6th_batch)
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "c.yaml", tiny_config(copy_data, run, model={"dropout": 0.0}, train=budget)
    )
    assert main(["train", str(config)]) == (2 if isinstance(error, MemoryError) else 1)
    saved = latest_checkpoint(run / "checkpoints").state
    assert saved.step == 2 and saved.batcher["position"] == 4  # update 3's batches read again
    assert "stopped by an error after update 2, saved in" in (run / "train.log").read_text()
    monkeypatch.setattr(trainer_module, "loss_sums", real)
    assert main(["train", str(config)]) == 0
    resumed = _final_weights(run)
    for name, weight in Seq2Seq.from_pretrained(straight.last_checkpoint).state_dict().items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=0, msg=name)


def test_a_failed_validation_saves_the_trained_updates_and_the_resume_validates_them(
    copy_data, tmp_path, monkeypatch, capsys
):
    from odet.training.validate import Evaluator

    real = Evaluator.validate

    def fails(self, model, valid):
        raise _failing_solve()

    monkeypatch.setattr(Evaluator, "validate", fails)
    run = tmp_path / "run"
    config = write_config(
        tmp_path / "c.yaml", tiny_config(copy_data, run, train={"max_updates": 3})
    )
    assert main(["train", str(config)]) == 1
    assert "odet: error: adaptive solve" in capsys.readouterr().err
    assert latest_checkpoint(run / "checkpoints").state.step == 3
    monkeypatch.setattr(Evaluator, "validate", real)
    assert main(["train", str(config)]) == 0
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["event"] == "valid"] == [3]


def _command(config_path) -> list[str]:
    return [sys.executable, "-m", "odet.cli", "train", str(config_path), "--no-progress"]


def _final_weights(run):
    checkpoint = json.loads((run / "summary.json").read_text())["last_checkpoint"]
    return Seq2Seq.from_pretrained(checkpoint).state_dict()


def _newest_step(run) -> int:
    index = run / "checkpoints" / "index.json"
    try:
        return json.loads(index.read_text())["checkpoints"][-1]["step"]
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def test_sigkill_mid_run_then_resume_gives_the_same_weights(copy_data, tmp_path):
    """Kill -9 three times at random moments (a checkpoint is written after every update, so
    kills land inside writes too), restart each time, and end with the uninterrupted weights."""
    budget = {"max_updates": 30, "max_epochs": 3, "save_every_updates": 1, "keep_last": 2}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight = tiny_config(copy_data, tmp_path / "straight", train=budget)
    subprocess.run(
        _command(write_config(tmp_path / "s.yaml", straight)),
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )

    run = tmp_path / "killed"
    config = write_config(tmp_path / "k.yaml", tiny_config(copy_data, run, train=budget))
    rng = random.Random(0)
    kills, seen = 0, 0
    while kills < 3:
        process = subprocess.Popen(
            _command(config), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        while process.poll() is None and _newest_step(run) < seen + 4:
            time.sleep(0.02)
        if process.poll() is not None:
            break
        time.sleep(rng.uniform(0.0, 0.15))
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
        seen = _newest_step(run)
    assert kills == 3
    subprocess.run(_command(config), env=env, check=True, capture_output=True, timeout=300)
    assert [p.name for p in (run / "checkpoints").glob(".*")] == []
    expected, actual = _final_weights(tmp_path / "straight"), _final_weights(run)
    for name, value in expected.items():
        torch.testing.assert_close(actual[name], value, rtol=0, atol=0)


def test_a_write_cut_short_is_cleaned_up_and_the_previous_checkpoint_resumes(copy_data, tmp_path):
    config = tiny_config(
        copy_data,
        tmp_path / "run",
        train={"max_updates": 4, "save_every_updates": 2, "keep_last": 3},
    )
    train(TrainConfig.from_dict(config))
    root = tmp_path / "run" / "checkpoints"
    newest = latest_checkpoint(root)
    # What a SIGKILL inside save_checkpoint can leave: a temp directory, a temp index, and a
    # renamed checkpoint missing files (if the kill hit during an in-place overwrite).
    (root / ".step_0000006.abc").mkdir()
    (root / ".step_0000006.abc" / "model.safetensors").write_bytes(b"partial")
    (root / ".index.json.xyz.tmp").write_text("{")
    (newest.path / "checksums.json").unlink()
    resumed = tiny_config(copy_data, tmp_path / "run", train={"max_updates": 5})
    result = train(TrainConfig.from_dict(resumed))
    assert result.steps == 5
    assert [p.name for p in root.glob(".*")] == []


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(copy_data, tmp_path):
    config = write_config(
        tmp_path / "c.yaml",
        tiny_config(copy_data, tmp_path / "run", train={"max_epochs": 50, "max_tokens": 200}),
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        _command(config), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    while not (tmp_path / "run" / "metrics.jsonl").is_file() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "checkpoint saved" in err and "Traceback" not in err
    state = latest_checkpoint(tmp_path / "run" / "checkpoints").state
    assert state.step > 0


def test_a_corrupt_index_is_rebuilt_from_the_checkpoints_that_verify(copy_data, tmp_path, caplog):
    train_section = {"max_updates": 6, "save_every_updates": 2, "keep_last": 3}
    config = tiny_config(copy_data, tmp_path / "run", train=train_section)
    train(TrainConfig.from_dict(config))
    root = tmp_path / "run" / "checkpoints"
    names = [e["name"] for e in json.loads((root / "index.json").read_text())["checkpoints"]]
    assert names == ["step_0000002", "step_0000004", "step_0000006"]
    (root / "step_0000006" / "model.safetensors").write_bytes(b"bit rot")
    (root / "index.json").write_text('{"checkpoints": [{"na')
    resumed = tiny_config(copy_data, tmp_path / "run", train={**train_section, "max_updates": 8})
    with caplog.at_level("WARNING", logger="odet"):
        result = train(TrainConfig.from_dict(resumed))
    assert result.steps == 8
    assert "rebuilt it from the 2 checkpoint(s) that verify" in caplog.text
    index = json.loads((root / "index.json").read_text())
    assert [e["name"] for e in index["checkpoints"]][-1] == "step_0000008"
    assert index["last"] == "step_0000008" and (root / index["best"]).is_dir()
    assert [p.name for p in root.glob(".*")] == []


def test_rebuild_index_keeps_the_best_checkpoint_when_it_verifies(copy_data, tmp_path):
    from odet.training.checkpoint import rebuild_index

    config = tiny_config(copy_data, tmp_path / "run", train={"max_epochs": 2, "keep_last": 1})
    train(TrainConfig.from_dict(config))
    root = tmp_path / "run" / "checkpoints"
    before = json.loads((root / "index.json").read_text())
    (root / "index.json").write_text("[]")
    assert rebuild_index(root) == before == json.loads((root / "index.json").read_text())
