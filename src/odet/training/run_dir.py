"""The run directory around the checkpoints: its guard, ``train.log`` and ``summary.json``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from odet.data import DataError


@dataclass(frozen=True)
class TrainResult:
    """What a finished (or budget-stopped) run produced."""

    output_dir: Path
    steps: int
    epochs: int
    elapsed_seconds: float
    best_metric: float | None
    best_checkpoint: Path | None
    last_checkpoint: Path
    valid: dict[str, float]
    test: dict[str, float]


def check_output_dir(out: Path) -> None:
    """Refuse an ``output_dir`` that exists but is not (the start of) an odet run directory."""
    if not out.exists():
        return
    if not out.is_dir():
        raise DataError(f"output_dir {out} exists and is not a directory")
    is_run = (out / "config.yaml").is_file() or (out / "checkpoints").is_dir()
    if any(out.iterdir()) and not is_run:
        raise DataError(
            f"output_dir {out} exists, is not empty and is not an odet run directory; "
            "choose another output_dir (nothing was overwritten)"
        )


def attach_log_file(path: Path) -> logging.Handler:
    """Send the ``odet`` loggers' INFO records to ``path`` too; returns the handler."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("odet").addHandler(handler)
    logging.getLogger("odet").setLevel(logging.INFO)
    return handler


def detach_log_file(handler: logging.Handler) -> None:
    logging.getLogger("odet").removeHandler(handler)
    handler.close()


def write_summary(
    result: TrainResult,
    *,
    parameters: int,
    world_size: int,
    parallel: str,
    digests: list[str],
) -> Path:
    """``summary.json`` in the run directory: the result, the model size, and for replicated
    (DDP) ranks the parameter digest they agreed on (``None`` under FSDP: ranks hold shards)."""
    best = result.best_checkpoint
    summary = {
        "steps": result.steps,
        "epochs": result.epochs,
        "elapsed_seconds": round(result.elapsed_seconds, 1),
        "best_metric": result.best_metric,
        "best_checkpoint": str(best) if best else None,
        "last_checkpoint": str(result.last_checkpoint),
        "parameters": parameters,
        "world_size": world_size,
        "parallel": parallel,
        "parameters_identical_across_ranks": len(set(digests)) == 1 if digests else None,
        "parameter_digest": digests[0] if digests else None,
        "test": result.test,
    }
    path = result.output_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
