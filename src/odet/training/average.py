"""Checkpoint averaging: the mean of the weights of the last N checkpoints of a run."""

from __future__ import annotations

from pathlib import Path

from odet.data import TokenizerPair
from odet.inference.checkpoint import usable_index
from odet.models import CheckpointError, Seq2Seq
from odet.training.checkpoint import INDEX_NAME, verify_checkpoint


def check_average_out(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not an empty directory (a checkpoint, a run, any
    file or folder of the user's): averaging never overwrites."""
    if not out.exists():
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
    entries = sorted(usable_index(root)["checkpoints"], key=lambda e: e["step"])
    if len(entries) < last:
        raise CheckpointError(
            f"{run} keeps {len(entries)} checkpoint(s), fewer than --last {last}; raise "
            "train.keep_last when training"
        )
    paths = [root / e["name"] for e in entries[-last:]]
    for path in paths:
        if not path.is_dir():
            raise CheckpointError(f"{root / INDEX_NAME} lists {path.name}, which is missing")
        verify_checkpoint(path)
    return paths


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
