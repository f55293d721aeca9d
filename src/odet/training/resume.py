"""A run's checkpoints as the trainer uses them: find the newest valid one, restore training
from it, write new ones. Every rank calls these; rank 0 alone writes and cleans up."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from odet.models import CheckpointError
from odet.training.checkpoint import (
    Checkpoint,
    PretrainedModel,
    TrainerState,
    VocabularyFiles,
    checkpoint_name,
    latest_checkpoint,
    read_or_rebuild_index,
    remove_partial_writes,
    restore_rng_states,
    save_checkpoint,
    verify_checkpoint,
)
from odet.training.config import LoopConfig
from odet.training.distributed import DistributedContext
from odet.training.lm_config import LMLoopConfig
from odet.training.metrics import MetricsLog
from odet.training.parallel import ParallelModel
from odet.training.run_dir import SUMMARY_NAME, read_summary

logger = logging.getLogger("odet.train")


class EpochBatches(Protocol):
    """Where a run is in its data: a batcher that walks epochs (``TokenBudgetBatcher``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    @property
    def epoch(self) -> int: ...

    def __len__(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def set_epoch(self, epoch: int) -> None: ...


def spent_budget(state: TrainerState, train: LoopConfig | LMLoopConfig) -> str:
    """Why a run at ``state`` has nothing left to train under ``train``, or ``""``:
    ``max_updates``, ``max_minutes``, ``early_stopping`` or ``max_epochs``."""
    if train.max_updates and state.step >= train.max_updates:
        return "max_updates"
    if train.max_minutes and state.elapsed_seconds >= 60 * train.max_minutes:
        return "max_minutes"
    if not isinstance(train, LoopConfig):
        return ""
    if train.patience and state.bad_epochs >= train.patience:
        return "early_stopping"
    return "max_epochs" if int(state.batcher.get("epoch", 0)) >= train.max_epochs else ""


def checkpoint_before_error(state: TrainerState, saved_step: int, save: Callable[[], Path]) -> None:
    """Before an error ends training, ``save()`` the last applied update unless it is the
    newest checkpoint (``saved_step``) or there is none, so that the same command resumes
    there instead of losing the updates since."""
    if state.step in (0, saved_step):
        return
    path = save()
    logger.warning(
        "stopped by an error after update %d, saved in %s: the same command resumes there",
        state.step,
        path,
    )


def close_finished_epoch(batcher: EpochBatches) -> None:
    """Move a batcher that handed out the last batch of its epoch to the next epoch's start,
    so a run stopped at an epoch's end is saved (and resumed) as having finished it."""
    if len(batcher) and batcher.state_dict()["position"] >= len(batcher):
        batcher.set_epoch(batcher.epoch + 1)


def completed_run(out: Path, train: LoopConfig | LMLoopConfig) -> dict[str, Any] | None:
    """The ``summary.json`` of ``out`` when the run there is finished under ``train``: the
    summary names the newest checkpoint that verifies, at whose state ``train`` leaves nothing
    to do (``spent_budget``); ``None`` otherwise, e.g. after raising ``train.max_updates``."""
    summary = read_summary(out)
    if summary is None:
        return None
    checkpoint = latest_checkpoint(out / "checkpoints")
    if (
        checkpoint is None
        or Path(str(summary.get("last_checkpoint"))).name != checkpoint.path.name
        or summary.get("steps") != checkpoint.state.step
    ):
        return None
    reason = spent_budget(checkpoint.state, train)
    if reason:
        logger.info(
            "%s is a finished run (%d updates, stopped by %s); nothing to do: raise the budget "
            "in train.* to train on",
            out,
            checkpoint.state.step,
            reason,
        )
    return summary if reason else None


def reopen_finished_run(out: Path, metrics: MetricsLog, step: int) -> None:
    """Drop the metrics logged after ``step`` and, of a run that had finished and now trains on
    (a larger budget), the final records and ``summary.json``: the new end writes them again."""
    metrics.truncate_after(step)
    summary = out / SUMMARY_NAME
    if summary.is_file():
        summary.unlink()
        logger.info(
            "continuing the finished run from update %d: %s and the final records are written "
            "again when it ends",
            step,
            SUMMARY_NAME,
        )


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

    def best(self) -> Path | None:
        """The best checkpoint of the index when it verifies (rank 0 checks, every rank gets
        the answer); one that does not is reported and ``None`` returned, so the final model
        is used instead of a damaged one."""
        name = None
        if self.dist.is_main:
            name = read_or_rebuild_index(self.root).get("best")
            try:
                if name is not None:
                    verify_checkpoint(self.root / name)
            except CheckpointError as err:
                logger.warning(
                    "the best checkpoint does not verify (%s); using the final model", err
                )
                name = None
        name = self.dist.broadcast_object(name)
        return self.root / str(name) if name is not None else None

    def restore(
        self,
        checkpoint: Checkpoint,
        *,
        parallel: ParallelModel,
        optimizer: Optimizer,
        scheduler: LRScheduler,
        batcher: EpochBatches | None = None,
        metrics: MetricsLog | None = None,
    ) -> TrainerState:
        """Optimizer, schedule, RNG (one process: ranks draw their own) and data position of
        ``checkpoint``; returns its counters. The weights must be loaded before wrapping.

        A checkpoint written before ``TrainerState.validated_step`` was recorded counts as
        validated when ``metrics`` holds a ``valid`` record at its step."""
        parallel.load_optimizer_state(optimizer, checkpoint.optimizer)
        scheduler.load_state_dict(checkpoint.scheduler)
        if not self.dist.enabled:
            restore_rng_states(checkpoint)
        state = checkpoint.state
        if batcher is not None:  # None: the position follows from the step
            batcher.load_state_dict(state.batcher)
            close_finished_epoch(batcher)  # checkpoints written before it was applied
            state.batcher = dict(batcher.state_dict())
        if state.validated_step is None and metrics is not None:
            records = metrics.read() if self.dist.is_main else []
            found = any(r.get("event") == "valid" and r.get("step") == state.step for r in records)
            state.validated_step = state.step if self.dist.broadcast_object(found) else None
        logger.info(
            "resumed from %s (update %d, epoch %d)",
            checkpoint.path.name,
            checkpoint.state.step,
            checkpoint.state.epoch,
        )
        return state

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
