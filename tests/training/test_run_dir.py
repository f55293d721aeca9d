"""The run directory: recognised by odet's marker, resumed only with the config it was
trained with (but for the keys ``is_resume_safe`` allows)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from odet import __version__
from odet.cli import main
from odet.training import TrainConfig, train
from odet.training.run_dir import (
    MARKER_NAME,
    check_output_dir,
    config_changes,
    has_saved_updates,
    is_resume_safe,
)
from tests.training.conftest import tiny_config, write_config


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(directory.rglob("*"))
    }


@pytest.fixture(scope="module")
def trained(copy_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    train(TrainConfig.from_dict(tiny_config(copy_data, run, train={"max_updates": 2})))
    return run


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _rerun(copy_data: Path, run: Path, tmp_path: Path, **sections) -> int:
    config = tiny_config(copy_data, run, **sections)
    return main(["train", str(write_config(tmp_path / "rerun.yaml", config)), "--no-progress"])


def test_a_new_run_gets_the_marker(trained: Path) -> None:
    marker = json.loads((trained / MARKER_NAME).read_text())
    assert marker["odet_version"] == __version__ and marker["created"]


def test_a_users_folder_with_a_config_yaml_is_refused_before_anything_is_written(
    copy_data: Path, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("my: notes\n")
    (folder / "thesis.tex").write_text("precious")
    before = _snapshot(folder)
    assert _rerun(copy_data, folder, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an odet run directory" in err[0] and MARKER_NAME in err[0]
    assert _snapshot(folder) == before


def test_a_change_of_model_data_or_seed_on_resume_is_refused_naming_the_keys(
    copy_data: Path, run: Path, tmp_path: Path, capsys
) -> None:
    before = _snapshot(run)
    code = _rerun(
        copy_data,
        run,
        tmp_path,
        model={"d_model": 64},
        seed=4,
        train={"max_updates": 2, "max_tokens": 500},
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("odet: error: ")
    for key in ("model.d_model (32 -> 64)", "seed (3 -> 4)", "train.max_tokens (600 -> 500)"):
        assert key in err[0]
    assert "train.max_updates" not in err[0].split("cannot change on resume:")[1].split(";")[0]
    assert _snapshot(run) == before


def test_safe_changes_resume_are_logged_and_saved(
    copy_data: Path, run: Path, tmp_path: Path
) -> None:
    assert _rerun(copy_data, run, tmp_path, train={"max_updates": 3, "log_every": 2}) == 0
    log = (run / "train.log").read_text()
    assert "train.max_updates changed from 2 to 3" in log
    assert "train.log_every changed from 1 to 2" in log
    assert "resumed from step_0000002" in log
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["max_updates"] == 3 and saved["train"]["log_every"] == 2


def test_a_start_that_fails_before_training_leaves_nothing(
    copy_data: Path, tmp_path: Path, capsys
) -> None:
    """A start that failed on its data (here: a vocabulary its text cannot support) left a
    marked run folder behind, which then refused the corrected config as 'a run trained with a
    different config'; what the start created, parents included, is now removed."""
    run = tmp_path / "new" / "parent" / "run"
    too_big = tiny_config(copy_data, run, train={"max_updates": 2})
    too_big["data"]["vocab_size"] = 5000
    assert main(["train", str(write_config(tmp_path / "big.yaml", too_big))]) == 2
    assert "vocab_size=5000 is more than these texts support" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    run.mkdir(parents=True)  # a folder the user made for the run: emptied, kept
    assert main(["train", str(write_config(tmp_path / "big.yaml", too_big))]) == 2
    assert run.is_dir() and not any(run.iterdir())
    assert _rerun(copy_data, run, tmp_path, train={"max_updates": 2}) == 0
    assert has_saved_updates(run)


def test_a_run_that_saved_no_update_restarts_with_any_config(
    copy_data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    assert _rerun(copy_data, run, tmp_path, train={"max_updates": 2}) == 0
    shutil.rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    (run / "summary.json").unlink()
    data = {"vocab_size": 50}
    assert _rerun(copy_data, run, tmp_path, data=data, train={"max_updates": 2}) == 0
    log = (run / "train.log").read_text()
    assert "no update had been saved: started afresh with the new config (data.vocab_size" in log
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["vocab_size"] == 50
    assert has_saved_updates(run)


def test_a_restart_before_any_update_keeps_the_tokenizer_unless_the_data_changed(
    copy_data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    config = tiny_config(copy_data, run, train={"max_updates": 2})
    train(TrainConfig.from_dict(config))
    shutil.rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    (run / "summary.json").unlink()
    tokenizer = (run / "tokenizer" / "tokenizer.model").stat().st_mtime_ns
    assert _rerun(copy_data, run, tmp_path, model={"d_model": 64}, train={"max_updates": 1}) == 0
    assert (run / "tokenizer" / "tokenizer.model").stat().st_mtime_ns == tokenizer
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in records) == 1  # the old run's records are gone


def test_model_keys_spelled_out_at_their_defaults_are_no_change(
    copy_data: Path, run: Path, tmp_path: Path
) -> None:
    """``model.encoder_method (None -> 'euler')`` refused a resume of the same model: the
    model section, a mapping, was compared as written, not resolved."""
    model = {"encoder_method": "euler", "positions": "sinusoidal", "continuous": {"rtol": 1e-3}}
    assert _rerun(copy_data, run, tmp_path, model=model, train={"max_updates": 3}) == 0
    assert "resumed from step_0000002" in (run / "train.log").read_text()


def test_config_changes_name_a_model_default_by_its_value() -> None:
    saved = tiny_config(Path("/data"), Path("/run"))
    current = tiny_config(Path("/data"), Path("/run"), model={"continuous": {"max_steps": 2}})
    assert config_changes(saved, current) == {"model.continuous.max_steps": (1000, 2)}


def test_a_run_written_before_the_marker_resumes_and_gets_it(
    copy_data: Path, run: Path, tmp_path: Path
) -> None:
    (run / MARKER_NAME).unlink()
    assert _rerun(copy_data, run, tmp_path, train={"max_updates": 3}) == 0
    assert (run / MARKER_NAME).is_file()
    assert "resumed from step_0000002" in (run / "train.log").read_text()


def test_the_legacy_layout_without_checkpoints_counts_as_a_run(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"seed": 1}))
    assert check_output_dir(tmp_path, {"seed": 1}) == {}


def test_the_resume_rule() -> None:
    safe = ["train.max_updates", "train.max_epochs", "train.max_minutes", "train.threads"]
    safe += ["train.keep_last", "train.patience", "generation.beam_size", "output_dir"]
    safe += ["train.max_bad_updates", "model.continuous.on_failure", "model.continuous.max_steps"]
    unsafe = ["model.d_model", "data.vocab_size", "data.train", "seed", "optim.lr"]
    unsafe += ["model.continuous.rtol", "model.continuous.fixed_steps"]
    unsafe += ["train.max_tokens", "train.update_freq", "train.max_sentences", "train.precision"]
    assert all(is_resume_safe(k) for k in safe)
    assert not any(is_resume_safe(k) for k in unsafe)
