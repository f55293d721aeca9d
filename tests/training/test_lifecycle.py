"""A run's life across reruns: epoch numbers, finished runs, continued runs, signals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from odet.cli import main
from odet.training import TrainConfig, TrainingInterruptedError, train
from odet.training.checkpoint import CHECKSUMS_NAME, STATE_NAME, latest_checkpoint, sha256_file
from odet.training.lm import train_lm
from odet.training.lm_config import LMTrainConfig
from odet.training.validate import Evaluator
from tests.training.conftest import tiny_config, write_config
from tests.training.test_lm import _config as lm_config

TEST = {"test": ["test.src", "test.tgt"]}


def _records(run: Path, event: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _tree(run: Path) -> dict[str, str]:
    """SHA-256 of every file of a run but the log, which a rerun appends to."""
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != "train.log"
    }


@pytest.fixture(scope="module")
def epoch_length(copy_data, tmp_path_factory) -> int:
    """Updates per epoch of the tiny config."""
    out = tmp_path_factory.mktemp("epoch-length") / "run"
    return train(TrainConfig.from_dict(tiny_config(copy_data, out))).steps


def test_a_run_stopped_at_an_epoch_end_reports_that_epoch_and_continues_from_it(
    copy_data, tmp_path, epoch_length
):
    run = tmp_path / "run"
    budget = {"max_updates": epoch_length, "max_epochs": 3}
    result = train(TrainConfig.from_dict(tiny_config(copy_data, run, train=budget, data=TEST)))
    assert result.epochs == 1
    assert json.loads((run / "summary.json").read_text())["epochs"] == 1
    assert [(r["step"], r["epoch"]) for r in _records(run, "valid")] == [(epoch_length, 1)]
    assert {r["epoch"] for r in _records(run, "train")} == {1}
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert [e["epoch"] for e in index["checkpoints"]] == [1]
    assert "epoch 1: loss" in (run / "train.log").read_text()

    longer = {**budget, "max_updates": epoch_length + 6}
    result = train(TrainConfig.from_dict(tiny_config(copy_data, run, train=longer, data=TEST)))
    assert result.steps == epoch_length + 6 and result.epochs == 2
    valid = [(r["step"], r["epoch"]) for r in _records(run, "valid")]
    assert valid == [(epoch_length, 1), (epoch_length + 6, 2)]  # epoch 1 validated once
    assert [r["step"] for r in _records(run, "test")] == [epoch_length + 6]
    assert {r["epoch"] for r in _records(run, "train") if r["step"] > epoch_length} == {2}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == epoch_length + 6 and summary["epochs"] == 2
    assert "learning rate decays" not in (run / "train.log").read_text()  # inverse_sqrt


@pytest.mark.parametrize("budget", [{"max_epochs": 1}, {"max_updates": 20, "max_epochs": 3}])
def test_rerunning_a_finished_run_changes_nothing_and_says_so_in_one_line(
    copy_data, tmp_path, capsys, budget
):
    run = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", tiny_config(copy_data, run, train=budget, data=TEST))
    assert main(["train", str(config), "--no-progress"]) == 0
    before = _tree(run)
    capsys.readouterr()
    assert main(["train", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "already complete" in out[0], out
    assert _tree(run) == before
    assert len(_records(run, "test")) == 1
    assert "is a finished run" in (run / "train.log").read_text()


def test_a_signal_during_validation_stops_after_the_checkpoint_of_that_validation(
    copy_data, tmp_path, monkeypatch
):
    validate = Evaluator.validate

    def interrupted(self, model, valid):
        os.kill(os.getpid(), signal.SIGINT)
        return validate(self, model, valid)

    monkeypatch.setattr(Evaluator, "validate", interrupted)
    config = tiny_config(copy_data, tmp_path / "run", train={"max_epochs": 2})
    with pytest.raises(TrainingInterruptedError):
        train(TrainConfig.from_dict(config))
    step = latest_checkpoint(tmp_path / "run" / "checkpoints").state.step
    assert [r["step"] for r in _records(tmp_path / "run", "valid")] == [step]
    assert max(r["step"] for r in _records(tmp_path / "run", "train")) == step

    monkeypatch.setattr(Evaluator, "validate", validate)
    result = train(TrainConfig.from_dict(config))
    assert [r["step"] for r in _records(tmp_path / "run", "valid")] == [step, result.steps]
    assert result.steps == 2 * step and result.epochs == 2


def test_a_signal_at_the_last_update_of_an_epoch_validates_that_epoch_on_resume(
    copy_data, tmp_path, monkeypatch, epoch_length
):
    import odet.training.trainer as trainer_module

    train_step, calls = trainer_module.train_step, []

    def step(*args, **kwargs):
        calls.append(1)
        if len(calls) == epoch_length:  # the epoch's last batch: the update sees the signal
            os.kill(os.getpid(), signal.SIGINT)
        return train_step(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "train_step", step)
    config = tiny_config(copy_data, tmp_path / "run", train={"max_epochs": 1})
    with pytest.raises(TrainingInterruptedError):
        train(TrainConfig.from_dict(config))
    assert _records(tmp_path / "run", "valid") == []
    monkeypatch.setattr(trainer_module, "train_step", train_step)
    result = train(TrainConfig.from_dict(config))
    assert result.steps == epoch_length and result.best_checkpoint is not None
    assert [r["step"] for r in _records(tmp_path / "run", "valid")] == [epoch_length]


def test_a_checkpoint_from_before_validated_step_is_not_validated_again(
    copy_data, tmp_path, epoch_length
):
    run = tmp_path / "run"
    train(TrainConfig.from_dict(tiny_config(copy_data, run)))
    checkpoint = latest_checkpoint(run / "checkpoints").path
    state = json.loads((checkpoint / STATE_NAME).read_text())
    del state["validated_step"]  # as older odet versions wrote it
    (checkpoint / STATE_NAME).write_text(json.dumps(state))
    sums = json.loads((checkpoint / CHECKSUMS_NAME).read_text())
    sums[STATE_NAME] = sha256_file(checkpoint / STATE_NAME)
    (checkpoint / CHECKSUMS_NAME).write_text(json.dumps(sums))
    train(TrainConfig.from_dict(tiny_config(copy_data, run, train={"max_epochs": 2})))
    assert [r["step"] for r in _records(run, "valid")] == [epoch_length, 2 * epoch_length]


def test_a_finished_language_model_run_is_left_alone_and_a_larger_budget_continues_it(
    tmp_path, capsys
):
    data = lm_config(tmp_path, train={"max_updates": 20, "eval_interval": 10})
    data["optim"]["decay_updates"] = 40
    run = tmp_path / "run"
    first = train_lm(LMTrainConfig.from_dict(data), progress=False)
    before = _tree(run)
    again = train_lm(LMTrainConfig.from_dict(data), progress=False)
    assert again.already_complete and again.steps == 20
    assert again.valid_loss == first.valid_loss and _tree(run) == before

    data["train"]["max_updates"] = 30
    longer = train_lm(LMTrainConfig.from_dict(data), progress=False)
    assert longer.steps == 30 and not longer.already_complete
    exact = [r["step"] for r in _records(run, "valid") if r.get("exact")]
    assert exact == [30]
    assert [r["step"] for r in _records(run, "train")] == list(range(1, 31))
    assert json.loads((run / "summary.json").read_text())["steps"] == 30
    config = tmp_path / "lm.yaml"
    config.write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert main(["train", str(config), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"{run} is already complete (30 updates; see its summary.json); nothing to do"
    ]


def test_an_interrupted_test_decoding_is_redone_by_a_rerun_without_training_or_validating(
    copy_data, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    config = TrainConfig.from_dict(tiny_config(copy_data, run, data=TEST))
    test = Evaluator.test

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Evaluator, "test", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(config)
    assert not (run / "summary.json").exists()
    checkpoints = _tree(run / "checkpoints")
    monkeypatch.setattr(Evaluator, "test", test)
    result = train(config)
    assert result.test and not result.already_complete
    assert len(_records(run, "valid")) == 1 and len(_records(run, "test")) == 1
    assert _tree(run / "checkpoints") == checkpoints  # nothing saved again
    assert json.loads((run / "summary.json").read_text())["test"] == result.test


def test_raising_max_updates_under_a_decaying_schedule_warns_that_the_rate_jumps(tmp_path, caplog):
    data = lm_config(tmp_path, train={"max_updates": 20, "eval_interval": 0})
    data["optim"]["decay_updates"] = 0  # the cosine ends at train.max_updates
    train_lm(LMTrainConfig.from_dict(data), progress=False)
    data["train"]["max_updates"] = 30
    with caplog.at_level("WARNING", logger="odet"):
        train_lm(LMTrainConfig.from_dict(data), progress=False)
    assert "follows the curve of 30 updates instead of 20, so it jumps there" in caplog.text


def test_a_best_checkpoint_that_no_longer_verifies_is_not_used_for_the_test_set(
    copy_data, tmp_path, monkeypatch, caplog
):
    import odet.training.trainer as trainer_module

    track_best, test = trainer_module.track_best, Evaluator.test
    calls: list[int] = []

    def first_epoch_best(state, metrics, loop):
        calls.append(1)
        if len(calls) == 1:
            return track_best(state, metrics, loop)
        state.bad_epochs += 1
        return False

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module, "track_best", first_epoch_best)
    monkeypatch.setattr(Evaluator, "test", interrupted)
    run = tmp_path / "run"
    config = TrainConfig.from_dict(
        tiny_config(copy_data, run, train={"max_epochs": 2, "keep_last": 1}, data=TEST)
    )
    with pytest.raises(KeyboardInterrupt):
        train(config)
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert index["best"] != index["last"]
    weights = run / "checkpoints" / index["best"] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01
    weights.write_bytes(bytes(data))

    monkeypatch.setattr(Evaluator, "test", test)
    with caplog.at_level("WARNING", logger="odet"):
        result = train(config)
    assert "the best checkpoint does not verify" in caplog.text
    assert result.best_checkpoint is None and result.test
    assert json.loads((run / "summary.json").read_text())["best_checkpoint"] is None
