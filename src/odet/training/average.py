"""Checkpoint averaging: the mean of the weights of the last N checkpoints of a run."""

from __future__ import annotations

from pathlib import Path

from odet.data import TokenizerPair
from odet.models import CheckpointError, Seq2Seq
from odet.training.checkpoint import INDEX_NAME, read_index


def check_average_out(out: Path) -> None:
    """Refuse an ``--out`` that exists and is not an empty directory (a checkpoint, a run, any
    file or folder of the user's): averaging never overwrites."""
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


def average_checkpoints(run: str | Path, last: int, out: str | Path) -> Path:
    """Average the model weights of the ``last`` newest checkpoints of ``run`` into ``out``
    (a model directory with the tokenizer, usable by ``odet generate``)."""
    run = Path(run)
    root = run / "checkpoints" if (run / "checkpoints" / INDEX_NAME).is_file() else run
    if not (root / INDEX_NAME).is_file():
        raise CheckpointError(f"{run} is not a training run (no checkpoints/{INDEX_NAME})")
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    entries = sorted(read_index(root)["checkpoints"], key=lambda e: e["step"])
    if len(entries) < last:
        raise CheckpointError(
            f"{run} keeps {len(entries)} checkpoint(s), fewer than --last {last}; raise "
            "train.keep_last when training"
        )
    paths = [root / e["name"] for e in entries[-last:]]
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
