"""A run's checkpoints as the trainer uses them: find the newest valid one, restore training
from it, write new ones. Every rank calls these; rank 0 alone writes and cleans up."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from odet.training.checkpoint import (
    Checkpoint,
    PretrainedModel,
    TrainerState,
    VocabularyFiles,
    checkpoint_name,
    latest_checkpoint,
    read_or_rebuild_index,
    remove_partial_writes,
    save_checkpoint,
)
from odet.training.distributed import DistributedContext
from odet.training.parallel import ParallelModel

logger = logging.getLogger("odet.train")


class DataPosition(Protocol):
    """Where a run is in its data (a batcher's ``state_dict``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class RunCheckpoints:
    """The ``checkpoints/`` directory of one run."""

    root: Path
    dist: DistributedContext
    tokenizers: VocabularyFiles
    config_yaml: str
    """The resolved training config, saved in every checkpoint."""
    keep_last: int

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that verifies, after rank 0 removed what interrupted writes
        left behind and rebuilt a corrupt index; ``None`` for a new run."""
        if self.dist.is_main and self.root.is_dir():
            for path in remove_partial_writes(self.root):
                logger.warning("removed %s, left by an interrupted checkpoint write", path.name)
            read_or_rebuild_index(self.root)
        self.dist.barrier()
        checkpoint = latest_checkpoint(self.root)
        self.dist.barrier()
        return checkpoint

    def restore(
        self,
        checkpoint: Checkpoint,
        *,
        parallel: ParallelModel,
        optimizer: Optimizer,
        scheduler: LRScheduler,
        batcher: DataPosition | None = None,
    ) -> TrainerState:
        """Optimizer, schedule, RNG (one process: ranks draw their own) and data position of
        ``checkpoint``; returns its counters. The weights must be loaded before wrapping."""
        parallel.load_optimizer_state(optimizer, checkpoint.optimizer)
        scheduler.load_state_dict(checkpoint.scheduler)
        if not self.dist.enabled:
            torch.set_rng_state(checkpoint.rng)
        if batcher is not None:  # None: the position follows from the step
            batcher.load_state_dict(checkpoint.state.batcher)
        logger.info(
            "resumed from %s (update %d, epoch %d)",
            checkpoint.path.name,
            checkpoint.state.step,
            checkpoint.state.epoch,
        )
        return checkpoint.state

    def save(
        self,
        state: TrainerState,
        *,
        model: PretrainedModel,
        optimizer_state: dict[str, Any],
        scheduler: LRScheduler,
        is_best: bool,
    ) -> Path:
        """Rank 0 writes the checkpoint of ``state``; every rank waits for it and gets its path.
        ``model`` holds full weights on rank 0 (``ParallelModel.evaluation_model``)."""
        path = self.root / checkpoint_name(state.step)
        if self.dist.is_main:
            path = save_checkpoint(
                self.root,
                model=model,
                tokenizers=self.tokenizers,
                config_yaml=self.config_yaml,
                optimizer_state=optimizer_state,
                scheduler=scheduler,
                state=state,
                keep_last=self.keep_last,
                is_best=is_best,
            )
        self.dist.barrier()
        return path
