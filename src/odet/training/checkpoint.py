"""Training checkpoints: self-contained, atomic, verified, with last-K/best bookkeeping.

Layout under ``<output_dir>/checkpoints/``::

    index.json                 {"checkpoints": [...], "last": "step_000500", "best": "step_000400"}
    step_000500/
        config.json, model.safetensors     the model (``Seq2Seq.from_pretrained`` reads these)
        tokenizer*.model                   the tokenizer(s): a checkpoint translates on its own
        train_config.yaml                  the resolved training config
        trainer_state.json                 step, epoch, data position, best metric, ...
        optimizer.pt                       optimizer + scheduler state (tensors and numbers only,
                                           loaded with ``torch.load(weights_only=True)``)
        rng.safetensors                    the torch RNG states (dropout) for exact resume: the
                                           CPU's, and the current CUDA device's once CUDA is used
        checksums.json                     SHA-256 of every file above

A checkpoint is written into a temporary directory, every file fsynced, then renamed into place;
``index.json`` is replaced atomically afterwards. Loading verifies the checksums and falls back to
the previous checkpoint when the newest one is incomplete or corrupt. The reading side that using
a trained model needs (the index, verification, ``resolve_model_dir``) is
:mod:`odet.inference.checkpoint`, re-exported here.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from odet.inference.checkpoint import (
    CHECKSUMS_NAME,
    CONFIG_NAME,
    INDEX_NAME,
    STATE_NAME,
    checkpoint_name,
    read_index,
    resolve_model_dir,
    scan_checkpoints,
    sha256_file,
    verify_checkpoint,
)
from odet.io import atomic_write, fsync_dir
from odet.models import CheckpointError

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKSUMS_NAME",
    "CONFIG_NAME",
    "INDEX_NAME",
    "OPTIMIZER_NAME",
    "RNG_NAME",
    "STATE_NAME",
    "Checkpoint",
    "TrainerState",
    "checkpoint_name",
    "latest_checkpoint",
    "load_checkpoint",
    "read_index",
    "read_or_rebuild_index",
    "rebuild_index",
    "remove_partial_writes",
    "resolve_model_dir",
    "restore_rng_states",
    "rng_states",
    "save_checkpoint",
    "verify_checkpoint",
]

OPTIMIZER_NAME = "optimizer.pt"
RNG_NAME = "rng.safetensors"


class PretrainedModel(Protocol):
    """A model a checkpoint can hold: ``Seq2Seq`` or ``CausalLM``."""

    def save_pretrained(self, path: str | Path) -> Path: ...


class VocabularyFiles(Protocol):
    """What turns text into ids, written into a checkpoint directory: a ``TokenizerPair`` or a
    language model's vocabulary."""

    def save(self, directory: str | os.PathLike[str]) -> Any: ...


@dataclass
class TrainerState:
    """Where training is: enough, with the optimizer and RNG, to resume exactly."""

    step: int = 0
    epoch: int = 0
    """The epoch of the latest update (1-based; 0 before the first)."""
    batcher: dict[str, Any] = field(default_factory=dict)
    best_metric: float | None = None
    best_step: int | None = None
    bad_epochs: int = 0
    elapsed_seconds: float = 0.0
    target_tokens: int = 0
    skipped_updates: int = 0
    bad_in_a_row: int = 0
    validated_step: int | None = None
    """The update the latest end-of-epoch (or end-of-budget) validation ran at."""


@dataclass
class Checkpoint:
    """A loaded training checkpoint."""

    path: Path
    state: TrainerState
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: torch.Tensor
    cuda_rng: torch.Tensor | None = None
    """The CUDA generator of the device that trained (dropout masks drawn on the GPU); ``None``
    for runs that never used CUDA."""


def save_checkpoint(
    root: Path,
    *,
    model: PretrainedModel,
    tokenizers: VocabularyFiles,
    config_yaml: str,
    optimizer_state: dict[str, Any],
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: TrainerState,
    keep_last: int,
    is_best: bool,
) -> Path:
    """Write checkpoint ``step_<N>`` atomically, update the index and prune old ones."""
    root.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(state.step)
    final = root / name
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    try:
        model.save_pretrained(tmp)
        tokenizers.save(tmp)
        (tmp / CONFIG_NAME).write_text(config_yaml, encoding="utf-8")
        (tmp / STATE_NAME).write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
        torch.save(
            {"optimizer": optimizer_state, "scheduler": scheduler.state_dict()},
            tmp / OPTIMIZER_NAME,
        )
        save_file(rng_states(), str(tmp / RNG_NAME))
        checksums = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / CHECKSUMS_NAME).write_text(json.dumps(checksums, indent=2) + "\n")
        for path in tmp.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o755)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

    index = read_or_rebuild_index(root)
    entries = [e for e in index["checkpoints"] if e["name"] != name and (root / e["name"]).is_dir()]
    entries.append({"name": name, "step": state.step, "epoch": state.epoch})
    best = name if is_best else index.get("best")
    if best is not None and not (root / best).is_dir():
        best = None
    keep = {e["name"] for e in entries[-keep_last:]} | ({best} if best else set())
    for entry in entries:
        if entry["name"] not in keep:
            shutil.rmtree(root / entry["name"], ignore_errors=True)
    entries = [e for e in entries if e["name"] in keep]
    new_index = {"checkpoints": entries, "last": name, "best": best}
    atomic_write(root / INDEX_NAME, lambda p: p.write_text(json.dumps(new_index, indent=2) + "\n"))
    return final


def load_checkpoint(path: Path) -> Checkpoint:
    """Read the training state of one verified checkpoint directory."""
    verify_checkpoint(path)
    try:
        state = TrainerState(**json.loads((path / STATE_NAME).read_text(encoding="utf-8")))
        blob = torch.load(path / OPTIMIZER_NAME, weights_only=True, map_location="cpu")
        rng = load_file(str(path / RNG_NAME))
    except (
        OSError,
        ValueError,
        TypeError,
        KeyError,
        RuntimeError,
        pickle.UnpicklingError,
        SafetensorError,
    ) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{path} cannot be read: {reason}") from None
    if "torch" not in rng:
        raise CheckpointError(f"{path} cannot be read: {RNG_NAME} holds no 'torch' state")
    return Checkpoint(
        path, state, blob["optimizer"], blob["scheduler"], rng["torch"], rng.get("cuda")
    )


def rng_states() -> dict[str, torch.Tensor]:
    """The generators dropout draws from: the CPU's (``"torch"``) and, once CUDA has been
    initialised, the current CUDA device's (``"cuda"``): a GPU run's masks come from the latter."""
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def restore_rng_states(checkpoint: Checkpoint) -> None:
    """Set the generators :func:`rng_states` saved; a CUDA state is restored where CUDA is
    available (a GPU checkpoint resumed on a CPU-only machine restores the CPU's alone)."""
    torch.set_rng_state(checkpoint.rng)
    if checkpoint.cuda_rng is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(checkpoint.cuda_rng)


def remove_partial_writes(root: Path) -> list[Path]:
    """Delete temporary files/directories left by a process killed while saving."""
    removed = []
    for path in root.glob(".*"):
        if path.name.startswith((".step_", f".{INDEX_NAME}.")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def rebuild_index(root: Path) -> dict[str, Any]:
    """Write a new ``index.json`` (atomically) from the ``step_*`` checkpoints that verify
    (``scan_checkpoints``)."""
    index = scan_checkpoints(root)
    atomic_write(root / INDEX_NAME, lambda p: p.write_text(json.dumps(index, indent=2) + "\n"))
    return index


def read_or_rebuild_index(root: Path) -> dict[str, Any]:
    """The index of ``root``; a corrupt one is reported and rebuilt by ``rebuild_index``."""
    try:
        return read_index(root)
    except CheckpointError as err:
        index = rebuild_index(root)
        logger.warning(
            "%s; rebuilt it from the %d checkpoint(s) that verify", err, len(index["checkpoints"])
        )
        return index


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest checkpoint that verifies, newest first; corrupt ones are reported and skipped."""
    if not root.is_dir():
        return None
    try:
        names = [e["name"] for e in read_index(root)["checkpoints"]]
    except CheckpointError as err:
        logger.warning("%s; scanning the directory instead", err)
        names = []
    on_disk = sorted(p.name for p in root.glob("step_*") if p.is_dir())
    candidates = sorted(set(names) | set(on_disk), reverse=True)
    for name in candidates:
        try:
            return load_checkpoint(root / name)
        except CheckpointError as err:
            logger.warning("skipping checkpoint %s: %s", name, err)
    return None
