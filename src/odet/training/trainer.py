"""``odet train``: from raw parallel text to a checkpointed, validated model.

The run directory holds everything: the resolved config, the tokenizer, ``metrics.jsonl``,
``learning_curve.png``, ``train.log`` and ``checkpoints/``. Starting the same command again
resumes exactly from the newest valid checkpoint (model, optimizer, schedule, RNG and the
position in the data), so a stopped run continues as if it had never stopped.

The trainer only orders the pieces: data from :mod:`~odet.training.prepare`, a batch by
:func:`~odet.training.step.train_step`, an update by :func:`~odet.training.step.apply_update`,
data parallelism by :mod:`~odet.training.parallel`, evaluation by
:mod:`~odet.training.validate`, checkpoints by :mod:`~odet.training.checkpoint`.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from odet.models import Seq2Seq
from odet.ode import SolverError
from odet.training.checkpoint import Checkpoint, TrainerState, checkpoint_name
from odet.training.compile import check_compilable, compile_counts
from odet.training.config import TrainConfig
from odet.training.distributed import init_distributed, shutdown_distributed
from odet.training.metrics import MetricsLog, ThroughputWindow, train_record
from odet.training.parallel import ParallelModel, parallelize, pick_device
from odet.training.prepare import make_batcher, prepare_data, read_split
from odet.training.resume import (
    RunCheckpoints,
    checkpoint_before_error,
    close_finished_epoch,
    completed_run,
    reopen_finished_run,
    spent_budget,
)
from odet.training.run_dir import (
    TrainResult,
    open_run_dir,
    result_from_summary,
    write_summary,
)
from odet.training.signals import StopSignals, TrainingInterruptedError
from odet.training.step import (
    Accumulation,
    ForwardPrecision,
    Objective,
    apply_update,
    build_optimizer,
    record_skipped_update,
    solve_failure,
    train_step,
)
from odet.training.validate import Evaluator, report_validation, track_best

__all__ = ["TrainResult", "Trainer", "TrainingInterruptedError", "train"]

logger = logging.getLogger("odet.train")


class Trainer:
    """One training run (see ``train``); under ``torchrun`` one rank of a data-parallel job.

    Every rank reads the data and takes its own shard of each epoch's batches; rank 0 alone
    writes (config, tokenizer, metrics, checkpoints, plots) and validates. Decisions that must
    agree across ranks (stopping, the best checkpoint) are reduced or broadcast.
    """

    def __init__(self, config: TrainConfig, *, progress: bool | None = None):
        self.config = config
        self.dist = init_distributed(config.train.device)
        self.device = pick_device(config.train.device, self.dist)
        self.precision = ForwardPrecision.from_config(config.train, self.device)
        if config.train.compile:
            check_compilable(self.device)
        self.out = Path(config.output_dir)
        wanted = config.train.progress if progress is None else progress
        self.progress = wanted and self.dist.is_main
        self.ckpt_root = self.out / "checkpoints"
        self.metrics = MetricsLog(self.out / "metrics.jsonl")
        self._parallel: ParallelModel | None = None
        self._run_dir = open_run_dir(self.out, config) if self.dist.is_main else None
        if not self.dist.is_main:
            logging.getLogger("odet").setLevel(logging.WARNING)
        self.dist.barrier()

    @property
    def parallel(self) -> ParallelModel:
        """The model and its data-parallel wrapping (set by ``setup``)."""
        if self._parallel is None:
            raise RuntimeError("Trainer.setup() has not run")
        return self._parallel

    def close(self, *, failed_start: bool = False) -> None:
        if self._run_dir is not None:
            self._run_dir.close(failed_start=failed_start)
        if self._parallel is not None:
            self._parallel.release()
        shutdown_distributed(self.dist)

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        c = self.config
        if c.train.threads:
            torch.set_num_threads(c.train.threads)
        torch.manual_seed(c.seed)  # the same initial weights on every rank
        limit = c.model_config(max(64, c.data.vocab_size)).max_positions
        data = prepare_data(
            c.data, self.out / "tokenizer", self.dist, progress=self.progress, max_positions=limit
        )
        self.tokenizers, self.train_set, self.valid = data.tokenizers, data.train, data.valid
        self.batcher = make_batcher(
            self.train_set,
            c.train,
            seed=c.seed,
            num_shards=self.dist.world_size,
            shard_index=self.dist.rank,
        )
        evaluation = ForwardPrecision.for_evaluation(c.generation.precision, self.device)
        self.evaluator = Evaluator(c, self.tokenizers, self.device, evaluation, self.progress)
        self.checkpoints = RunCheckpoints(
            self.ckpt_root, self.dist, self.tokenizers, c.to_yaml(), c.train.keep_last
        )
        tgt_vocab = None if self.tokenizers.is_joint else self.tokenizers.target.vocab_size
        self.model = Seq2Seq(c.model_config(self.tokenizers.source.vocab_size, tgt_vocab))
        self.model.to(self.device)
        self.model.set_activation_checkpointing(c.train.activation_checkpointing)
        self.objective = Objective.from_config(c.optim, self.model.config.pad_id, c.train.compile)
        if self.dist.enabled:
            torch.manual_seed(c.seed + self.dist.rank)  # but each rank its own dropout masks
        self.state = TrainerState()
        self._saved_step = 0
        """The update of the newest checkpoint (0: none yet)."""
        logger.info(
            "model: %s encoder, %s decoder, %d parameters; %d training pairs in %d batches per "
            "epoch%s; device %s",
            self.model.config.encoder_method,
            self.model.config.decoder_method,
            self.model.num_parameters(),
            len(self.train_set),
            self.batcher.num_batches,
            f" over {self.dist.world_size} ranks ({c.train.parallel})" if self.dist.enabled else "",
            f"{self.device}, {self.precision.precision} "
            f"(evaluation in {self.evaluator.precision.precision})",
        )
        checkpoint = self.checkpoints.latest()
        if checkpoint is not None:  # weights first: sharding distributes what is loaded
            self.model.load_state_dict(Seq2Seq.from_pretrained(checkpoint.path).state_dict())
        self._parallel = parallelize(self.model, self.dist, c.train.parallel)
        self.optimizer, self.scheduler = build_optimizer(
            self.model.parameters(), c.optim, c.train.max_updates
        )
        self._resume(checkpoint)

    def _resume(self, checkpoint: Checkpoint | None) -> None:
        """Optimizer, schedule, RNG, counters and data position of ``checkpoint`` (the weights
        were loaded before the model was wrapped); drops metrics logged after it."""
        if checkpoint is not None:
            self.state = self.checkpoints.restore(
                checkpoint,
                parallel=self.parallel,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                batcher=self.batcher,
                metrics=self.metrics,
            )
            self._saved_step = self.state.step
        if self.dist.is_main:
            reopen_finished_run(self.out, self.metrics, self.state.step)

    # ------------------------------------------------------------------ loop
    def run(self) -> TrainResult:
        c = self.config.train
        started = time.perf_counter() - self.state.elapsed_seconds
        stop_reason = spent_budget(self.state, c)
        with StopSignals() as signals:
            at_epoch_start = self.state.step and self.batcher.state_dict()["position"] == 0
            if self.state.validated_step != self.state.step and (stop_reason or at_epoch_start):
                stop_reason = self._end_of_epoch(started, signals) or stop_reason
            while not stop_reason and self.batcher.epoch < c.max_epochs:
                stop_reason = self._train_epoch(started, signals)
                close_finished_epoch(self.batcher)
                epoch_completed = self.batcher.state_dict()["position"] == 0
                # Validate at every epoch end, and also when a budget stops training mid-epoch,
                # so the final model competes for "best".
                if stop_reason in ("max_updates", "max_minutes") or (
                    epoch_completed and not stop_reason
                ):
                    stop_reason = self._end_of_epoch(started, signals) or stop_reason
            if stop_reason == "signal":
                if self.state.validated_step != self.state.step:  # else saved when validated
                    self._save(started, is_best=False)
                raise TrainingInterruptedError(
                    f"stopped by a signal at update {self.state.step}; checkpoint saved in "
                    f"{self.ckpt_root}; run the same command to resume"
                )
        logger.info(
            "training stopped (%s) after %d updates, %.0fs%s",
            stop_reason or "max_epochs",
            self.state.step,
            self.state.elapsed_seconds,
            f"; torch.compile: {compile_counts()}" if c.compile else "",
        )
        return self._finish(self.ckpt_root / checkpoint_name(self.state.step))

    def _train_epoch(self, started: float, signals: StopSignals) -> str:
        """Train to the end of the epoch, or until a stop reason, which is returned."""
        update_freq = self.config.train.update_freq
        self.parallel.module.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        accumulated, window = Accumulation(), ThroughputWindow()
        bar = tqdm(total=len(self.batcher) // update_freq, desc=f"epoch {self.batcher.epoch + 1}",
                   initial=self.batcher.state_dict()["position"] // update_freq, unit="upd",
                   disable=not self.progress, dynamic_ncols=True, leave=False)  # fmt: skip
        with bar:
            for indices in self.batcher:
                batch = self.train_set.batch(indices).to(self.device)
                last_of_epoch = self.batcher.state_dict()["position"] >= len(self.batcher)
                updating = accumulated.batches + 1 >= update_freq or last_of_epoch
                with self.parallel.gradient_sync(updating):
                    try:
                        step = train_step(
                            self.parallel.module, batch, self.objective, self.precision
                        )
                    except Exception as err:  # e.g. a failed solve, out of memory
                        self._rescue(started, rewind=accumulated.batches + 1)
                        if isinstance(err, SolverError):
                            raise solve_failure(err, self.state.step + 1) from err
                        raise
                accumulated.add(step)
                window.add_nfe(step.nfe)
                if updating:
                    stop_reason = self._update(accumulated, window, params, started, signals, bar)
                    accumulated = Accumulation()
                    if stop_reason:
                        return stop_reason
        return ""

    def _update(
        self,
        accumulated: Accumulation,
        window: ThroughputWindow,
        params: list[torch.nn.Parameter],
        started: float,
        signals: StopSignals,
        bar: tqdm,
    ) -> str:
        """One update from the accumulated gradients of every rank; a stop reason or ``""``."""
        c = self.config.train
        over_time = bool(c.max_minutes) and (time.perf_counter() - started >= 60 * c.max_minutes)
        flags = [float(signals.received is not None), float(over_time)]
        sums = [accumulated.tokens, accumulated.loss, accumulated.nll, accumulated.failed_solves]
        tokens, loss, nll, failed, stop_flag, time_flag = self.dist.all_reduce_sum(sums + flags)
        result = apply_update(
            params,
            self.optimizer,
            self.scheduler,
            loss=loss,
            tokens=tokens,
            world_size=self.dist.world_size,
            clip_norm=self.config.optim.clip_norm,
        )
        if not result.applied:
            save = partial(self._rescue, started, every_rank=True)  # all ranks stop here
            record_skipped_update(self.state, result, max_in_a_row=c.max_bad_updates,
                                  failed_solves=int(failed), before_stop=save)  # fmt: skip
            return ""
        self.state.bad_in_a_row = 0
        self.state.step += 1
        self.state.epoch = self.batcher.epoch + 1
        self.state.target_tokens += int(tokens)
        window.tokens += int(tokens)
        self.state.elapsed_seconds = time.perf_counter() - started
        bar.update(1)
        if self.state.step % c.log_every == 0 or self.state.step == 1:
            self._log_train(window, bar, loss / max(tokens, 1.0), nll / max(tokens, 1.0))
        if c.save_every_updates and self.state.step % c.save_every_updates == 0:
            self._save(started, is_best=False)
        if stop_flag:
            return "signal"
        if c.max_updates and self.state.step >= c.max_updates:
            return "max_updates"
        return "max_minutes" if time_flag else ""

    def _log_train(self, window: ThroughputWindow, bar: tqdm, loss: float, nll: float) -> None:
        """A ``train`` record (rank 0) and the progress bar's numbers; restarts ``window``."""
        s, lr = self.state, self.scheduler.get_last_lr()[0]
        record = train_record(window, step=s.step, epoch=s.epoch, loss=loss, nll=nll, lr=lr,
                              elapsed=s.elapsed_seconds)  # fmt: skip
        speed = record["target_tokens_per_s"]
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:.0f}")
        if self.dist.is_main:
            self.metrics.write("train", **record)

    # ------------------------------------------------------------------ evaluation
    def _end_of_epoch(self, started: float, signals: StopSignals) -> str:
        """Validate (rank 0), track the best checkpoint, save; ``"early_stopping"``,
        ``"signal"`` (one came during validation) or ``""``."""
        validated, self.state.validated_step = self.state.validated_step, self.state.step
        model = self.parallel.evaluation_model(self.device)
        try:
            metrics = self.evaluator.validate(model, self.valid) if self.dist.is_main else {}
        except Exception:
            self.state.validated_step = validated  # a resumed run validates again
            self._rescue(started)
            raise
        metrics = self.dist.broadcast_object(metrics)  # type: ignore[assignment]
        is_best = bool(metrics) and track_best(self.state, metrics, self.config.train)
        if metrics and self.dist.is_main:
            curve = self.out / "learning_curve.png"
            report_validation(
                self.metrics,
                self.state,
                metrics,
                model,
                self.valid,
                curve=curve,
                progress=self.progress,
            )
        self._save(started, is_best=is_best, model=model)
        patience = self.config.train.patience
        if patience and self.state.bad_epochs >= patience:
            return "early_stopping"
        signalled = self.dist.all_reduce_sum([float(signals.received is not None)])[0]
        return "signal" if signalled else ""

    def _rescue(self, started: float, *, rewind: int = 0, every_rank: bool = False) -> None:
        """``checkpoint_before_error``, the data position ``rewind`` batches back (read again);
        one process only (others would wait in a collective this one left) unless ``every_rank``
        stops at the same point."""
        if every_rank or not self.dist.enabled:
            save = partial(self._save, started, is_best=False, rewind=rewind)
            checkpoint_before_error(self.state, self._saved_step, save)

    def _save(
        self, started: float, *, is_best: bool, model: Seq2Seq | None = None, rewind: int = 0
    ) -> Path:
        """A checkpoint of the current state (with FSDP every rank takes part in gathering the
        weights and optimizer state first), the data position moved back by ``rewind``
        batches; its path on every rank."""
        self.state.elapsed_seconds = time.perf_counter() - started
        self.state.batcher = dict(self.batcher.state_dict())
        self.state.batcher["position"] = int(self.state.batcher["position"]) - rewind
        self._saved_step = self.state.step
        model = model if model is not None else self.parallel.evaluation_model(self.device)
        return self.checkpoints.save(
            self.state,
            model=model,
            optimizer_state=self.parallel.optimizer_state(self.optimizer),
            scheduler=self.scheduler,
            is_best=is_best,
        )

    def _finish(self, last: Path) -> TrainResult:
        """Check the ranks agree, then (rank 0) decode the test set and summarise."""
        digests = self.parallel.replica_digests()
        model = self.parallel.evaluation_model(self.device)
        best = self.checkpoints.best()
        test: dict[str, float] = {}
        if self.dist.is_main and self.config.data.test:
            if best is not None:
                model = Seq2Seq.from_pretrained(best).to(self.device)
            pairs = read_split(self.config.data, self.config.data.test)
            test = self.evaluator.test(model, pairs, self.out / "test.hyp")
            self.metrics.write("test", step=self.state.step, **test)
            logger.info("test: %s", test)
        s = self.state
        result = TrainResult(
            self.out, s.step, s.epoch, s.elapsed_seconds, s.best_metric, best, last, {}, test
        )
        if self.dist.is_main:
            write_summary(
                result,
                parameters=model.num_parameters(),
                world_size=self.dist.world_size,
                parallel=self.config.train.parallel if self.dist.enabled else "none",
                digests=digests,
            )
        return result


def train(config: TrainConfig, *, progress: bool | None = None) -> TrainResult:
    """Train (or resume) the run described by ``config``; returns its result."""
    trainer = Trainer(config, progress=progress)
    started = False
    try:
        summary = completed_run(trainer.out, config.train)  # before any data is read
        if summary is not None:
            return result_from_summary(trainer.out, summary)
        trainer.setup()
        started = True
        result = trainer.run()
        trainer.dist.barrier()  # ranks leave together: rank 0 may still be decoding the test set
        return result
    finally:
        trainer.close(failed_start=not started)
