"""``odet generate`` and ``odet average`` on a run whose checkpoint files were damaged: the
trainer's rule (a corrupt index is replaced by the checkpoints that verify, logged) or one
line, never a traceback and never another checkpoint in silence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from odet.cli import main
from odet.data import TokenizerPair
from odet.models import Seq2Seq
from odet.training import TrainConfig, train
from tests.training.conftest import tiny_config

SAVES = {"max_epochs": 1, "save_every_updates": 10, "keep_last": 3}


@pytest.fixture(scope="module")
def trained(copy_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained") / "run"
    train(TrainConfig.from_dict(tiny_config(copy_data, out, train=SAVES)))
    return out


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _index(run: Path) -> dict:
    return json.loads((run / "checkpoints" / "index.json").read_text())


def _generate(run: Path, tmp_path: Path, *extra: str) -> tuple[int, str]:
    source = tmp_path / "input.txt"
    source.write_text("w3 w7 w1\nw12 w4\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    out.unlink(missing_ok=True)
    argv = ["generate", str(run), "-i", str(source), "-o", str(out), "--no-progress", *extra]
    code = main(argv)
    return code, out.read_text(encoding="utf-8") if out.is_file() else ""


def _flip_a_weight(checkpoint: Path) -> None:
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x01  # inside the tensor data: the file still parses
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "index",
    ['{"checkpoints": [{"na', '{"checkpoints": [], "last": "step_0000034", "best": 5}'],
    ids=["truncated", "best-not-a-name"],
)
def test_generate_with_a_corrupt_index_uses_the_checkpoints_that_verify_and_says_so(
    run, tmp_path, caplog, index
):
    code, expected = _generate(run, tmp_path)
    assert code == 0 and expected
    (run / "checkpoints" / "index.json").write_text(index)
    caplog.clear()
    code, output = _generate(run, tmp_path)
    assert code == 0 and output == expected
    warnings = [r.getMessage() for r in caplog.records if "index.json" in r.getMessage()]
    assert len(warnings) == 1 and "using the 3 checkpoint(s) that verify instead" in warnings[0]
    assert "best step_0000034" in warnings[0]


def test_generate_refuses_a_best_checkpoint_that_does_not_verify_in_one_line(run, tmp_path, capsys):
    best = run / "checkpoints" / _index(run)["best"]
    _flip_a_weight(best)
    code, output = _generate(run, tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and output == ""
    assert len(err) == 1 and "best checkpoint of the run does not verify" in err[0], err
    assert "model.safetensors is corrupt" in err[0]


def test_generate_names_a_listed_checkpoint_that_is_missing(run, tmp_path, capsys):
    shutil.rmtree(run / "checkpoints" / _index(run)["best"])
    code, _ = _generate(run, tmp_path, "--checkpoint", "best")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "as the best checkpoint, but it is missing" in err, err


def _mean_of(paths: list[Path]) -> dict[str, torch.Tensor]:
    models = [Seq2Seq.from_pretrained(p).state_dict() for p in paths]
    return {k: sum(m[k] for m in models) / len(models) for k in models[0]}


@pytest.mark.parametrize(
    "index", ['{"checkpoints": [{"na', '{"checkpoints": [{"name": "step_0000020"}]}']
)
def test_average_with_a_corrupt_index_averages_the_newest_checkpoints_that_verify(
    run, tmp_path, caplog, index
):
    root = run / "checkpoints"
    names = [e["name"] for e in _index(run)["checkpoints"]]
    (root / "index.json").write_text(index)
    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "avg")]) == 0
    assert "that verify instead" in caplog.text
    averaged = Seq2Seq.from_pretrained(tmp_path / "avg").state_dict()
    for key, value in _mean_of([root / n for n in names[-2:]]).items():
        torch.testing.assert_close(averaged[key], value)


def test_average_refuses_a_corrupt_checkpoint_in_one_line_and_writes_nothing(run, tmp_path, capsys):
    _flip_a_weight(run / "checkpoints" / _index(run)["checkpoints"][-2]["name"])
    out = tmp_path / "avg"
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.safetensors is corrupt" in err[0], err
    assert not out.exists()


def test_training_rebuilds_an_index_whose_entries_name_no_checkpoint(copy_data, run, caplog):
    (run / "checkpoints" / "index.json").write_text('{"checkpoints": [{"step": 3}]}')
    config = tiny_config(copy_data, run, train={**SAVES, "max_epochs": 2})
    assert train(TrainConfig.from_dict(config)).epochs == 2
    assert "names no step_* checkpoint; rebuilt it from the 3 checkpoint(s)" in caplog.text
    assert _index(run)["last"] == _index(run)["checkpoints"][-1]["name"]


def test_decoding_logs_the_sources_cut_to_the_position_table_by_their_line_numbers(
    copy_data, tmp_path, caplog, capsys
):
    run = tmp_path / "short"
    sections = {
        "model": {"max_positions": 6},
        "train": {"max_updates": 3, "valid_metric": "bleu"},
        "data": {"test": ["test.src", "test.tgt"]},
    }
    with caplog.at_level("INFO", logger="odet"):
        train(TrainConfig.from_dict(tiny_config(copy_data, run, **sections)))
    tokenizer = TokenizerPair.load(run / "tokenizer").source
    logged = caplog.text
    for split in ("valid", "test"):
        lines = (copy_data / f"{split}.src").read_text(encoding="utf-8").splitlines()
        over = [i + 1 for i, s in enumerate(lines) if len(tokenizer.encode(s)) + 1 > 6]
        assert over, split
        note = f"{len(over)} over-long line(s) truncated to the model's 6 positions"
        assert f"data.{split} (decoding): {note} (lines {over[:5]}" in logged

    source = tmp_path / "input.txt"
    source.write_text(f"\n{lines[over[0] - 1]}\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["generate", str(run), "-i", str(source), "-o", str(tmp_path / "o.txt")]) == 0
    err = capsys.readouterr().err
    assert "1 over-long line(s) truncated to the model's 6 positions (lines [2])" in err


def test_average_refuses_to_reach_past_the_kept_checkpoints_to_an_older_best(
    copy_data, tmp_path, monkeypatch, capsys
):
    import odet.training.trainer as trainer_module

    track_best, calls = trainer_module.track_best, []

    def first_epoch_best(state, metrics, loop):
        calls.append(1)
        return track_best(state, metrics, loop) if len(calls) == 1 else False

    monkeypatch.setattr(trainer_module, "track_best", first_epoch_best)
    run = tmp_path / "run"
    sections = {"max_epochs": 2, "save_every_updates": 10, "keep_last": 2}
    train(TrainConfig.from_dict(tiny_config(copy_data, run, train=sections)))
    index = _index(run)
    names = [e["name"] for e in index["checkpoints"]]
    assert len(names) == 3 and index["best"] == names[0]
    assert main(["average", str(run), "--last", "3", "--out", str(tmp_path / "a3")]) == 2
    err = capsys.readouterr().err
    assert f"to its best one, {names[0]}" in err and "use --last 2 or less" in err
    assert not (tmp_path / "a3").exists()
    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "a2")]) == 0
