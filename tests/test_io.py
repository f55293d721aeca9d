"""odet.io: the one atomic write — a target is old or new content, never partial, and durable
(the file and its directory are fsynced before the write returns)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from odet.data import Tokenizer
from odet.io import OutputPathError, atomic_write, check_output_dir, write_bytes_atomic
from odet.models import Seq2Seq, Seq2SeqConfig


def test_atomic_write_replaces_content_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.bin"
    write_bytes_atomic(target, b"old")
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["file.bin"]


def test_failed_atomic_write_keeps_previous_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file.bin"
    target.write_bytes(b"old")

    def broken_replace(source: object, destination: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("odet.io.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        fsync(fd)

    def record_replace(source: object, destination: object) -> None:
        events.append("rename")
        replace(source, destination)  # type: ignore[arg-type]

    monkeypatch.setattr("odet.io.os.fsync", record_fsync)
    monkeypatch.setattr("odet.io.os.replace", record_replace)
    atomic_write(tmp_path / "a.txt", lambda tmp: tmp.write_text("x"))
    assert events == ["fsync file", "rename", "fsync dir"]
    assert (tmp_path / "a.txt").read_text() == "x"
    assert oct((tmp_path / "a.txt").stat().st_mode & 0o777) == oct(0o644)


def test_a_failing_writer_leaves_no_file(tmp_path: Path) -> None:
    def broken(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        atomic_write(tmp_path / "a.txt", broken)
    assert list(tmp_path.iterdir()) == []


def test_models_and_tokenizers_write_through_the_one_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    real = atomic_write

    def spy(path: object, write: object) -> None:
        written.append(Path(str(path)).name)
        real(path, write)  # type: ignore[arg-type]

    monkeypatch.setattr("odet.io.atomic_write", spy)
    monkeypatch.setattr("odet.models.serialization.atomic_write", spy)
    config = Seq2SeqConfig(vocab_size=20, d_model=8, num_heads=2, ffn_dim=16, encoder_layers=1,
                           decoder_layers=1)  # fmt: skip
    Seq2Seq(config).save_pretrained(tmp_path / "model")
    Tokenizer.train(["the cat sat on the mat", "a dog runs"] * 10, vocab_size=20).save(
        tmp_path / "tok.model"
    )
    assert written == ["model.safetensors", "config.json", "tok.model"]


@pytest.mark.parametrize(
    ("inside", "owner"),
    [
        ("checkpoints/step_0000009", r"checkpoints/ of the training run"),
        ("checkpoints/step_0000003/out", r"the model checkpoint"),
        ("tokenizer/out", r"tokenizer/ of the training run"),
    ],
)
def test_an_output_directory_inside_a_run_s_checkpoints_or_tokenizer_is_refused(
    tmp_path: Path, inside: str, owner: str
) -> None:
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "step_0000003"
    checkpoint.mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / ".odet-run").write_text("{}")
    (checkpoint / "checksums.json").write_text("{}")
    with pytest.raises(OutputPathError, match=rf"--out .* would write into {owner}"):
        check_output_dir(run / inside, "--out")
    assert not (run / inside).exists()
    assert check_output_dir(run / "analysis", "--out") == run / "analysis"


def test_an_output_directory_is_reused_only_by_the_command_that_wrote_it(tmp_path: Path) -> None:
    """Both ``experiment`` and ``parity`` write ``results.md`` and ``config.yaml``: one's output
    directory taken by the other was overwritten."""
    from odet.io import claim_output_dir

    out = claim_output_dir(tmp_path / "exp", "experiment")
    (out / "results.md").write_text("mine\n")
    assert check_output_dir(out, "--out", command="experiment") == out
    assert check_output_dir(out, "--out") == out  # no command given: any odet output
    with pytest.raises(OutputPathError, match="holds the output of odet experiment, not of odet"):
        check_output_dir(out, "--out", command="parity")
