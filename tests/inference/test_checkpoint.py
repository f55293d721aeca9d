"""odet.inference.checkpoint: reading what training writes — the index, checksum verification,
and finding the model directory of a run — without importing odet.training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odet.inference.checkpoint import read_index, resolve_model_dir, sha256_file, verify_checkpoint
from odet.models import CheckpointError


def _checkpoint(root: Path, name: str, files: dict[str, bytes]) -> Path:
    path = root / name
    path.mkdir(parents=True)
    for file, data in files.items():
        (path / file).write_bytes(data)
    sums = {file: sha256_file(path / file) for file in files}
    (path / "checksums.json").write_text(json.dumps(sums))
    return path


def _run(tmp_path: Path) -> Path:
    root = tmp_path / "run" / "checkpoints"
    for name in ("step_0000100", "step_0000200"):
        _checkpoint(root, name, {"config.json": b"{}", "model.safetensors": name.encode()})
    index = {"checkpoints": [], "last": "step_0000200", "best": "step_0000100"}
    (root / "index.json").write_text(json.dumps(index))
    return tmp_path / "run"


def test_sha256_file_is_the_standard_digest(tmp_path: Path):
    (tmp_path / "f").write_bytes(b"abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert sha256_file(tmp_path / "f") == expected


def test_verify_accepts_an_intact_checkpoint_and_names_a_corrupt_or_missing_file(tmp_path: Path):
    path = _checkpoint(tmp_path, "step_1", {"a.bin": b"aaa", "b.bin": b"bbb"})
    verify_checkpoint(path)
    (path / "a.bin").write_bytes(b"aab")
    with pytest.raises(CheckpointError, match=r"a\.bin is corrupt"):
        verify_checkpoint(path)
    (path / "a.bin").unlink()
    with pytest.raises(CheckpointError, match="incomplete: a.bin is missing"):
        verify_checkpoint(path)
    (path / "checksums.json").unlink()
    with pytest.raises(CheckpointError, match="checksums.json is missing"):
        verify_checkpoint(path)


def test_read_index_is_empty_without_one_and_rejects_a_corrupt_one(tmp_path: Path):
    assert read_index(tmp_path) == {"checkpoints": [], "last": None, "best": None}
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text("[]")
    with pytest.raises(CheckpointError, match="not a checkpoint index"):
        read_index(tmp_path)


def test_resolve_model_dir_finds_best_and_last_of_a_run_or_its_checkpoints(tmp_path: Path):
    run = _run(tmp_path)
    checkpoints = run / "checkpoints"
    assert resolve_model_dir(run) == checkpoints / "step_0000100"
    assert resolve_model_dir(run, "last") == checkpoints / "step_0000200"
    assert resolve_model_dir(checkpoints, "last") == checkpoints / "step_0000200"
    assert resolve_model_dir(checkpoints / "step_0000200") == checkpoints / "step_0000200"


def test_resolve_model_dir_falls_back_to_last_without_a_best_and_says_so(tmp_path: Path, caplog):
    run = _run(tmp_path)
    index = {"checkpoints": [], "last": "step_0000200", "best": None}
    (run / "checkpoints" / "index.json").write_text(json.dumps(index))
    assert resolve_model_dir(run) == run / "checkpoints" / "step_0000200"
    assert "no best checkpoint (the run never validated); using the last one" in caplog.text
    caplog.clear()
    resolve_model_dir(run, "last")
    assert caplog.text == ""


def test_resolve_model_dir_explains_what_it_expected(tmp_path: Path):
    with pytest.raises(CheckpointError, match="no such checkpoint or run directory"):
        resolve_model_dir(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="not a model checkpoint"):
        resolve_model_dir(tmp_path)


def test_training_checkpoint_reexports_the_reading_side():
    from odet import training
    from odet.inference import checkpoint
    from odet.training import checkpoint as training_checkpoint

    assert training.resolve_model_dir is checkpoint.resolve_model_dir
    assert training.verify_checkpoint is checkpoint.verify_checkpoint
    assert training_checkpoint.read_index is checkpoint.read_index
    assert training_checkpoint.INDEX_NAME == checkpoint.INDEX_NAME


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        ({"checkpoints": [{"step": 3}]}, r"entry \{'step': 3\} names no step_"),
        ({"checkpoints": [{"name": "step_1"}]}, "entry step_1 has no integer step"),
        ({"checkpoints": [], "best": "../elsewhere"}, "best is '../elsewhere'"),
        ({"checkpoints": [], "last": 7}, "last is 7"),
    ],
)
def test_read_index_rejects_entries_and_names_of_the_wrong_shape(tmp_path: Path, index, problem):
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="not a checkpoint index: " + problem):
        read_index(tmp_path)


def test_a_corrupt_index_is_read_as_the_checkpoints_that_verify_without_rewriting_it(
    tmp_path: Path,
):
    root = tmp_path / "run" / "checkpoints"
    for step, best in ((100, 100), (200, 100), (300, 100)):
        state = json.dumps({"step": step, "epoch": 1, "best_step": best}).encode()
        files = {"config.json": b"{}", "trainer_state.json": state, "model.safetensors": b"w"}
        _checkpoint(root, f"step_{step:07d}", files)
    (root / "step_0000300" / "model.safetensors").write_bytes(b"rot")
    (root / "index.json").write_text('{"checkpoints": [')
    assert resolve_model_dir(tmp_path / "run") == root / "step_0000100"  # the newest's best
    assert resolve_model_dir(tmp_path / "run", "last") == root / "step_0000200"
    assert (root / "index.json").read_text() == '{"checkpoints": ['
    (root / "step_0000100" / "model.safetensors").write_bytes(b"rot")
    (root / "index.json").write_text(
        json.dumps({"checkpoints": [], "last": "step_0000200", "best": "step_0000100"})
    )
    with pytest.raises(CheckpointError, match="best checkpoint of the run does not verify"):
        resolve_model_dir(tmp_path / "run")


def test_a_model_of_another_type_is_refused_before_the_fallback_is_announced(
    tmp_path: Path, caplog
) -> None:
    """``odet generate`` on a language-model run that never validated warned 'using the last
    one' and then refused the model: two lines for one mistake."""
    from odet.models.serialization import FORMAT_VERSION

    header = {"format_version": FORMAT_VERSION, "model_type": "causal_lm", "config": {}}
    root = tmp_path / "run" / "checkpoints"
    files = {"config.json": json.dumps(header).encode(), "model.safetensors": b"w"}
    _checkpoint(root, "step_0000002", files)
    index = {"checkpoints": [], "last": "step_0000002", "best": None}
    (root / "index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="holds a 'causal_lm' model, not 'seq2seq'"):
        resolve_model_dir(root.parent, model_type="seq2seq")
    with pytest.raises(CheckpointError, match="holds a 'causal_lm' model, not 'seq2seq'"):
        resolve_model_dir(root / "step_0000002", model_type="seq2seq")
    assert caplog.text == ""
    assert resolve_model_dir(root.parent, model_type="causal_lm") == root / "step_0000002"
    assert "using the last one" in caplog.text
