"""Checkpoint averaging: the mean of the weights of the last N checkpoints of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from odet.config import parse_yaml
from odet.data import TokenizerPair
from odet.inference.checkpoint import usable_index
from odet.io import check_not_odet_owned
from odet.models import CheckpointError, Seq2Seq
from odet.training.checkpoint import CONFIG_NAME, INDEX_NAME, verify_checkpoint


def check_average_out(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not an empty directory (a checkpoint, a run, any
    file or folder of the user's), or lies in a checkpoint or a run's ``checkpoints/`` or
    ``tokenizer/``: averaging never overwrites."""
    check_not_odet_owned(out, "--out")
    if not out.exists():
        for parent in out.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"--out {out} cannot be created: {parent} is a file")
        return
    if not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory; choose a new directory")
    if any(out.iterdir()):
        raise ValueError(
            f"--out {out} exists and is not empty; choose a new directory (nothing was written)"
        )


def checkpoints_to_average(run: Path, last: int) -> list[Path]:
    """The ``last`` newest checkpoints of ``run``, each verified (a corrupt index is replaced
    by the checkpoints that verify, logged; a corrupt or missing checkpoint is an error)."""
    root = run / "checkpoints" if (run / "checkpoints").is_dir() else run
    if not (root / INDEX_NAME).is_file() and not any(root.glob("step_*")):
        raise CheckpointError(f"{run} is not a training run (no checkpoints/{INDEX_NAME})")
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    index = usable_index(root)
    entries = sorted(index["checkpoints"], key=lambda e: e["step"])
    if len(entries) < last:
        raise CheckpointError(
            f"{run} keeps {len(entries)} checkpoint(s), fewer than --last {last}; raise "
            "train.keep_last when training"
        )
    paths = [root / e["name"] for e in entries[-last:]]
    _refuse_a_gap(root, index, [p.name for p in paths])
    for path in paths:
        if not path.is_dir():
            raise CheckpointError(f"{root / INDEX_NAME} lists {path.name}, which is missing")
        verify_checkpoint(path)
    return paths


def _refuse_a_gap(root: Path, index: dict[str, Any], names: list[str]) -> None:
    """Refuse ``names`` when they reach past the run's ``train.keep_last`` newest checkpoints
    to the best one, kept apart from them: the checkpoints between were deleted, so these
    are not the last ``len(names)`` the run saved."""
    best, newest = index.get("best"), root / names[-1] / CONFIG_NAME
    try:
        config: Any = parse_yaml(newest.read_text(encoding="utf-8"))
        keep_last = int(config["train"]["keep_last"])
    except (OSError, yaml.YAMLError, TypeError, KeyError, ValueError):
        return
    window = [e["name"] for e in index["checkpoints"]][-keep_last:]
    if best in names and best not in window and len(names) > keep_last:
        raise CheckpointError(
            f"--last {len(names)} reaches past the {keep_last} newest checkpoints the run keeps "
            f"(train.keep_last) to its best one, {best}, which is older than the checkpoints "
            f"deleted after it; use --last {keep_last} or less"
        )


def average_checkpoints(run: str | Path, last: int, out: str | Path) -> Path:
    """Average the model weights of the ``last`` newest checkpoints of ``run`` into ``out``
    (a model directory with the tokenizer, usable by ``odet generate``)."""
    paths = checkpoints_to_average(Path(run), last)
    check_average_out(Path(out))
    out = Path(out)
    model = Seq2Seq.from_pretrained(paths[0])
    total = {k: v.detach().clone().double() for k, v in model.state_dict().items()}
    for path in paths[1:]:
        other = Seq2Seq.from_pretrained(path)
        if other.config != model.config:
            raise CheckpointError(f"{path} has a different model config than {paths[0]}")
        for key, value in other.state_dict().items():
            total[key] += value.double()
    model.load_state_dict(
        {k: (v / len(paths)).to(model.state_dict()[k].dtype) for k, v in total.items()}
    )
    model.save_pretrained(out)
    TokenizerPair.load(paths[-1]).save(out)
    return out


__all__ = ["average_checkpoints"]
