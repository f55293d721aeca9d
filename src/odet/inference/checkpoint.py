"""Reading training checkpoints: the index, checksum verification and finding a model directory.

The layout and the writing side are :mod:`odet.training.checkpoint`; what is here is all that
using a trained model needs, so inference never imports training. A checkpoint directory holds
a model directory (``config.json``, ``model.safetensors``), its tokenizers, the training config
``train_config.yaml`` and ``checksums.json``, the SHA-256 of every other file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from odet.models import CheckpointError
from odet.models.serialization import CONFIG_NAME as MODEL_CONFIG_NAME

INDEX_NAME = "index.json"
CHECKSUMS_NAME = "checksums.json"
CONFIG_NAME = "train_config.yaml"


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
    return data


def verify_checkpoint(path: Path) -> None:
    """Raise ``CheckpointError`` unless every file matches its recorded SHA-256."""
    sums_file = path / CHECKSUMS_NAME
    if not sums_file.is_file():
        raise CheckpointError(f"{path} is incomplete: {CHECKSUMS_NAME} is missing")
    try:
        sums = json.loads(sums_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{sums_file} is corrupt: {err}") from None
    for name, expected in sums.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path} is incomplete: {name} is missing")
        if sha256_file(file) != expected:
            raise CheckpointError(f"{file} is corrupt (SHA-256 mismatch)")


def resolve_model_dir(path: str | Path, which: str = "best") -> Path:
    """A directory with a model and tokenizer: ``path`` itself, or the ``best``/``last``
    checkpoint of a run directory (``<run>/checkpoints/index.json``) or checkpoints directory."""
    path = Path(path)
    if (path / MODEL_CONFIG_NAME).is_file():
        return path
    for root in (path / "checkpoints", path):
        if (root / INDEX_NAME).is_file():
            index = read_index(root)
            name = index.get(which) or index.get("last")
            if name and (root / name / MODEL_CONFIG_NAME).is_file():
                return root / name
    if not path.exists():
        raise CheckpointError(f"no such checkpoint or run directory: {path}")
    raise CheckpointError(
        f"{path} is not a model checkpoint (no config.json) nor a run directory with "
        "checkpoints/index.json"
    )
