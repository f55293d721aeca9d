"""Reading training checkpoints: the index, checksum verification and finding a model directory.

The layout and the writing side are :mod:`odet.training.checkpoint`; what is here is all that
using a trained model needs, so inference never imports training. A checkpoint directory holds
a model directory (``config.json``, ``model.safetensors``), its tokenizers, the training config
``train_config.yaml`` and ``checksums.json``, the SHA-256 of every other file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from odet.models import CheckpointError
from odet.models.serialization import CONFIG_NAME as MODEL_CONFIG_NAME
from odet.models.serialization import read_model_config

logger = logging.getLogger(__name__)

INDEX_NAME = "index.json"
CHECKSUMS_NAME = "checksums.json"
CONFIG_NAME = "train_config.yaml"
STATE_NAME = "trainer_state.json"
CHECKPOINT_PATTERN = re.compile(r"step_\d+")
"""The directory name of a checkpoint (``checkpoint_name``)."""


def checkpoint_name(step: int) -> str:
    return f"step_{step:07d}"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's content, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_index(root: Path) -> dict[str, Any]:
    """The checkpoint index of ``root`` (empty when there is none yet)."""
    index = root / INDEX_NAME
    if not index.is_file():
        return {"checkpoints": [], "last": None, "best": None}
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{index} is corrupt: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("checkpoints"), list):
        raise CheckpointError(f"{index} is not a checkpoint index")
    problem = _index_problem(data)
    if problem:
        raise CheckpointError(f"{index} is not a checkpoint index: {problem}")
    return data


def _is_name(value: object) -> bool:
    return isinstance(value, str) and CHECKPOINT_PATTERN.fullmatch(value) is not None


def _index_problem(data: dict[str, Any]) -> str:
    """What makes ``data`` unusable as an index (entries and names of the right shape), or
    ``""``."""
    for entry in data["checkpoints"]:
        if not isinstance(entry, dict) or not _is_name(entry.get("name")):
            return f"entry {entry!r} names no step_* checkpoint"
        if not isinstance(entry.get("step"), int):
            return f"entry {entry['name']} has no integer step"
    for key in ("last", "best"):
        if data.get(key) is not None and not _is_name(data[key]):
            return f"{key} is {data[key]!r}, not a step_* checkpoint name"
    return ""


def scan_checkpoints(root: Path) -> dict[str, Any]:
    """The index the ``step_*`` checkpoints of ``root`` that verify make (nothing is written):
    ``best`` is the newest one's ``best_step`` when that checkpoint is among them. The ones
    left out are logged."""
    entries, best_steps = [], []
    for path in sorted(p for p in root.glob("step_*") if p.is_dir() and _is_name(p.name)):
        try:
            verify_checkpoint(path)
            state = json.loads((path / STATE_NAME).read_text(encoding="utf-8"))
            entry = {"name": path.name, "step": int(state["step"]), "epoch": state.get("epoch", 0)}
        except (CheckpointError, OSError, ValueError, TypeError, KeyError) as err:
            logger.warning("leaving checkpoint %s out of the index: %s", path.name, err)
            continue
        entries.append(entry)
        best_steps.append(state.get("best_step"))
    names = {e["name"] for e in entries}
    best = checkpoint_name(best_steps[-1]) if best_steps and best_steps[-1] is not None else None
    return {
        "checkpoints": entries,
        "last": entries[-1]["name"] if entries else None,
        "best": best if best in names else None,
    }


def usable_index(root: Path) -> dict[str, Any]:
    """The index of ``root``; a corrupt one is reported and replaced, in memory only, by
    ``scan_checkpoints`` (reading a run never writes to it)."""
    try:
        return read_index(root)
    except CheckpointError as err:
        index = scan_checkpoints(root)
        logger.warning(
            "%s; using the %d checkpoint(s) that verify instead (last %s, best %s)",
            err,
            len(index["checkpoints"]),
            index["last"],
            index["best"],
        )
        return index


def _is_file_name(name: str) -> bool:
    """Whether ``name`` names a file inside a checkpoint directory (no path, not ``..``)."""
    return bool(name) and name not in (".", "..") and not set(name) & {"/", "\\", "\0"}


def verify_checkpoint(path: Path) -> None:
    """Raise ``CheckpointError`` unless every file matches its recorded SHA-256."""
    sums_file = path / CHECKSUMS_NAME
    if not sums_file.is_file():
        raise CheckpointError(f"{path} is incomplete: {CHECKSUMS_NAME} is missing")
    try:
        sums = json.loads(sums_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{sums_file} is corrupt: {err}") from None
    if not isinstance(sums, dict) or not all(
        isinstance(n, str) and _is_file_name(n) and isinstance(v, str) for n, v in sums.items()
    ):
        raise CheckpointError(f"{sums_file} is corrupt: not a table of file name: SHA-256")
    for name, expected in sums.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path} is incomplete: {name} is missing")
        if sha256_file(file) != expected:
            raise CheckpointError(f"{file} is corrupt (SHA-256 mismatch)")


def is_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is itself a model directory (a checkpoint), not a run holding several."""
    return (Path(path) / MODEL_CONFIG_NAME).is_file()


def resolve_model_dir(
    path: str | Path, which: str = "best", *, model_type: str | None = None
) -> Path:
    """A directory with a model and tokenizer: ``path`` itself, or the ``best``/``last``
    checkpoint of a run directory (``<run>/checkpoints/index.json``) or checkpoints directory,
    verified (``run_checkpoint``); with ``model_type`` (``seq2seq``, ``causal_lm``), a model of
    another type is refused here, before anything is said about the checkpoint chosen."""
    path = Path(path)
    if is_model_dir(path):
        if model_type is not None:
            read_model_config(path, model_type=model_type)
        return path
    for root in (path / "checkpoints", path):
        if (root / INDEX_NAME).is_file() or any(root.glob("step_*")):
            return run_checkpoint(root, which, model_type=model_type)
    if not path.exists():
        raise CheckpointError(f"no such checkpoint or run directory: {path}")
    raise CheckpointError(
        f"{path} is not a model checkpoint (no config.json) nor a run directory with "
        "checkpoints/index.json"
    )


def run_checkpoint(root: Path, which: str = "best", *, model_type: str | None = None) -> Path:
    """The ``which`` (``best``, else ``last``) checkpoint of the checkpoints directory ``root``
    (a corrupt index is replaced by ``usable_index``), after its checksums verify (and, given
    ``model_type``, its type): never another checkpoint in its place."""
    index = usable_index(root)
    name = index.get(which) or index.get("last")
    if name is None:
        raise CheckpointError(f"{root} holds no checkpoint that verifies")
    role = which if index.get(which) else "last"
    checkpoint = root / name
    if not checkpoint.is_dir():
        raise CheckpointError(
            f"{root / INDEX_NAME} names {name} as the {role} checkpoint, but it is missing; "
            "give a checkpoint directory instead"
        )
    try:
        verify_checkpoint(checkpoint)
    except CheckpointError as err:
        raise CheckpointError(
            f"the {role} checkpoint of the run does not verify: {err}; give another "
            "checkpoint directory"
        ) from None
    if model_type is not None:
        read_model_config(checkpoint, model_type=model_type)
    if role != which:
        logger.warning(
            "%s has no %s checkpoint (the run never validated); using the last one, %s",
            root,
            which,
            name,
        )
    return checkpoint
