"""Fixtures of the bad-input suite: tiny trained runs, a tree snapshot, and an in-process runner
that captures one command's exit status and output."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from odet.data.synthetic import SyntheticTask
from tests.training.conftest import tiny_config

LM_TEXT = "the quick brown fox jumps over the lazy dog.\nto be, or not to be.\n" * 40


@dataclass(frozen=True)
class Outcome:
    """What one ``odet`` command did: its exit status and what it printed."""

    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        """The ``odet: error:`` lines of stderr."""
        return [line for line in self.err.splitlines() if line.startswith("odet: error:")]


def run_odet(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: bytes = b"") -> Outcome:
    """``odet.cli.main(argv)`` in this process (an argparse exit included), with ``stdin``."""
    from odet.cli import main

    capsys.readouterr()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdin = saved
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def assert_one_line_user_error(outcome: Outcome, pattern: str | None = None) -> str:
    """Exit status 2, exactly one stderr line (``odet: error: ...``), no traceback, no errno,
    and the message matching ``pattern``; returns the message."""
    import re

    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert outcome.code == 2, (outcome.code, outcome.err[-2000:])
    assert "Traceback" not in outcome.err, outcome.err
    errors = outcome.errors
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    message = errors[0]
    assert "[Errno" not in message and "errno" not in message.lower(), message
    if pattern is not None:
        assert re.search(pattern, message), (pattern, message)
    return message


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_dir():
        return "dir"
    if not path.is_file():  # a FIFO or socket: reading it would block
        return "special"
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class TreeSnapshot:
    """Every path under some roots with a digest of its bytes (``dir`` for a directory)."""

    roots: tuple[Path, ...]
    digests: dict[Path, str]

    @classmethod
    def take(cls, roots: Iterable[Path]) -> TreeSnapshot:
        roots = tuple(Path(r) for r in roots)
        digests = {}
        for root in roots:
            if root.exists():
                digests[root] = _digest(root)
                for path in root.rglob("*"):
                    digests[path] = _digest(path)
        return cls(roots, digests)

    def changes(self) -> tuple[set[Path], set[Path], set[Path]]:
        """(added, changed, removed) paths since the snapshot."""
        now = TreeSnapshot.take(self.roots).digests
        added = set(now) - set(self.digests)
        removed = set(self.digests) - set(now)
        changed = {p for p in set(now) & set(self.digests) if now[p] != self.digests[p]}
        return added, changed, removed

    def assert_only(self, allowed: Iterable[Path] = ()) -> None:
        """Nothing pre-existing changed or vanished, and new paths lie in ``allowed`` (each a
        path the command may create, with everything under it)."""
        allowed = [Path(a) for a in allowed]

        def ok(path: Path) -> bool:
            return any(path == a or a in path.parents for a in allowed)

        added, changed, removed = self.changes()
        # a directory gains entries when an allowed output is created in it
        changed = {p for p in changed if not (p.is_dir() and self.digests[p] == "dir")}
        assert not changed, f"changed: {sorted(map(str, changed))}"
        assert not removed, f"removed: {sorted(map(str, removed))}"
        stray = sorted(str(p) for p in added if not ok(p))
        assert not stray, f"created outside the command's outputs: {stray}"


@pytest.fixture(scope="session")
def cli_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic copy task: train/valid/test .src/.tgt."""
    directory = tmp_path_factory.mktemp("cli-data")
    SyntheticTask("copy", vocab_words=30, min_length=2, max_length=5, seed=0).write(
        directory, {"train": 300, "valid": 20, "test": 20}
    )
    return directory


def cli_config(data_dir: Path, out: Path, **sections) -> dict:
    """A tiny training config over ``data_dir`` into ``out`` (a few updates)."""
    config = tiny_config(data_dir, out, **sections)
    config["train"].setdefault("max_updates", 4)
    return config


@pytest.fixture(scope="session")
def cli_run(cli_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny translation run with two kept checkpoints."""
    from odet.training import TrainConfig, train

    run = tmp_path_factory.mktemp("cli-run") / "run"
    config = cli_config(cli_data, run, train={"keep_last": 3, "save_every_updates": 2})
    train(TrainConfig.from_dict(config))
    return run


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny character language model run."""
    from odet.training.lm import train_lm
    from odet.training.lm_config import LMTrainConfig

    root = tmp_path_factory.mktemp("cli-lm")
    (root / "text.txt").write_text(LM_TEXT, encoding="utf-8")
    train_lm(LMTrainConfig.from_dict(lm_config(root, root / "run")), progress=False)
    return root / "run"


def lm_config(data_dir: Path, out: Path, **sections) -> dict:
    """A tiny ``task: lm`` config over ``data_dir/text.txt``."""
    config = {
        "task": "lm",
        "output_dir": str(out),
        "seed": 3,
        "data": {"data_dir": str(data_dir), "text": "text.txt", "block_size": 8},
        "model": {"d_model": 16, "num_heads": 2, "ffn_dim": 32, "layers": 1, "block_size": 8},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_updates": 1, "decay_updates": 4},
        "train": {"max_updates": 4, "eval_interval": 2, "log_every": 1, "progress": False},
    }
    config["data"].update({"batch_size": 2, "eval_iters": 1})
    for name, values in sections.items():
        if isinstance(values, dict):
            config.setdefault(name, {}).update(values)
        else:
            config[name] = values
    return config


def write_yaml(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def checkpoint_of(run: Path) -> Path:
    """The last checkpoint directory of ``run``."""
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    return run / "checkpoints" / index["last"]


def copy_checkpoint(run: Path, to: Path) -> Path:
    shutil.copytree(checkpoint_of(run), to)
    return to
