"""``odet train``: from raw parallel text to a checkpointed, validated model.

The run directory holds everything: the resolved config, the tokenizer, ``metrics.jsonl``,
``learning_curve.png``, ``train.log`` and ``checkpoints/``. Starting the same command again
resumes exactly from the newest valid checkpoint (model, optimizer, schedule, RNG and the
position in the data), so a stopped run continues as if it had never stopped.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from odet.analysis.blocks import coefficient_snapshot, has_learned_coefficients
from odet.data import (
    DataError,
    LengthFilter,
    ParallelDataset,
    TextPairs,
    TokenBudgetBatcher,
    Tokenizer,
    TokenizerPair,
    read_jsonl_pairs,
    read_parallel_text,
)
from odet.evaluation.files import read_all_lines
from odet.evaluation.scoring import score_text
from odet.generation import GenerationConfig
from odet.inference import Translator
from odet.models import Seq2Seq
from odet.nn.precision import autocast_bf16
from odet.training.checkpoint import (
    Checkpoint,
    TrainerState,
    checkpoint_name,
    latest_checkpoint,
    read_index,
    remove_partial_writes,
    save_checkpoint,
)
from odet.training.config import DataConfig, TrainConfig
from odet.training.distributed import init_distributed, shutdown_distributed
from odet.training.loss import label_smoothed_loss
from odet.training.metrics import MetricsLog, plot_learning_curve
from odet.training.schedule import make_schedule

logger = logging.getLogger("odet.train")

_FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Gather sharded (FSDP) weights/optimizer state into ordinary full tensors on the CPU."""


class TrainingInterruptedError(RuntimeError):
    """Training stopped on SIGINT/SIGTERM after saving a checkpoint."""


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


def read_split(data: DataConfig, files: tuple[str, ...]) -> TextPairs:
    """Read one split (text pair or JSON Lines) and log what was skipped."""
    if data.format == "text":
        pairs = read_parallel_text(data.path(files[0]), data.path(files[1]))
    else:
        pairs = read_jsonl_pairs(data.path(files[0]), data.source_field, data.target_field)
    report = pairs.report.as_dict()
    skipped = {k: v for k, v in report.items() if k.startswith("skipped") and v}
    logger.info("read %s: %d pairs%s", files[0], len(pairs), f", {skipped}" if skipped else "")
    return pairs


def train_tokenizers(data: DataConfig, pairs: TextPairs) -> TokenizerPair:
    """SentencePiece on the training text: one joint model, or one per side."""
    options: dict[str, Any] = dict(
        vocab_size=data.vocab_size,
        model_type=data.tokenizer_type,
        user_defined_symbols=data.user_defined_symbols,
        input_sentence_size=data.tokenizer_sentences,
    )
    if data.joint_vocab:
        return TokenizerPair.joint(Tokenizer.train([*pairs.source, *pairs.target], **options))
    return TokenizerPair(
        Tokenizer.train(pairs.source, **options), Tokenizer.train(pairs.target, **options)
    )


def encode_split(
    data: DataConfig,
    pairs: TextPairs,
    tokenizers: TokenizerPair,
    *,
    filter_lengths: bool,
    progress: bool = False,
) -> ParallelDataset:
    """Token ids for a split; training data is length-filtered (the report is logged)."""
    dataset = ParallelDataset.from_texts(pairs.source, pairs.target, tokenizers, progress=progress)
    if data.truncate_source:
        limit = data.truncate_source
        logger.info(
            "truncated %d of %d sources to %d tokens",
            int((dataset.source_lengths > limit).sum()),
            len(dataset),
            limit,
        )
        dataset = ParallelDataset(
            [dataset[i][0][:limit] for i in range(len(dataset))],
            [dataset[i][1] for i in range(len(dataset))],
        )
    if filter_lengths:
        length_filter = LengthFilter(
            max_source_tokens=data.max_source_tokens,
            max_target_tokens=data.max_target_tokens,
            max_ratio=data.max_ratio or None,
        )
        dataset, report = dataset.filter(length_filter)
        logger.info("length filter: %s", report.as_dict())
        if len(dataset) == 0:
            raise DataError("the length filter dropped every training pair; check data.max_*")
    return dataset


def autocast(precision: str, device: torch.device, math_sdpa: bool = True) -> Any:
    """The forward-pass context for ``train.precision`` (see ``odet.nn.precision``)."""
    if precision == "bf16":
        return autocast_bf16(device.type, math_sdpa=math_sdpa)
    return contextlib.nullcontext()


class _StopSignals:
    """Turns SIGINT/SIGTERM into a flag checked between updates (main thread only)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        with contextlib.suppress(ValueError):  # not in the main thread: no handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second signal: give up at once
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _parameter_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the state dict's bytes, to check that data-parallel ranks agree."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(
            tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()


class Trainer:
    """One training run (see ``train``); under ``torchrun`` one rank of a data-parallel job.

    Every rank reads the data and takes its own shard of each epoch's batches; rank 0 alone
    writes (config, tokenizer, metrics, checkpoints, plots) and validates. Decisions that must
    agree across ranks (stopping, the best checkpoint) are reduced or broadcast.
    """

    def __init__(self, config: TrainConfig, *, progress: bool | None = None):
        self.config = config
        self.dist = init_distributed()
        self.device = self._pick_device()
        self.out = Path(config.output_dir)
        self.progress = (config.train.progress if progress is None else progress) and (
            self.dist.is_main
        )
        self.ckpt_root = self.out / "checkpoints"
        self.metrics = MetricsLog(self.out / "metrics.jsonl")
        self._log_handler: logging.Handler | None = None
        if self.dist.is_main:
            self._check_output_dir()
            self.out.mkdir(parents=True, exist_ok=True)
            self._log_handler = logging.FileHandler(self.out / "train.log", encoding="utf-8")
            self._log_handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(message)s")
            )
            logging.getLogger("odet").addHandler(self._log_handler)
            logging.getLogger("odet").setLevel(logging.INFO)
        else:
            logging.getLogger("odet").setLevel(logging.WARNING)
        self.dist.barrier()

    def _pick_device(self) -> torch.device:
        choice = self.config.train.device
        if self.dist.enabled:
            return self.dist.device
        if choice == "cuda" and not torch.cuda.is_available():
            raise ValueError("train.device is 'cuda' but no CUDA device is available")
        if choice == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(choice)

    def _check_output_dir(self) -> None:
        if not self.out.exists():
            return
        if not self.out.is_dir():
            raise DataError(f"output_dir {self.out} exists and is not a directory")
        is_run = (self.out / "config.yaml").is_file() or (self.out / "checkpoints").is_dir()
        if any(self.out.iterdir()) and not is_run:
            raise DataError(
                f"output_dir {self.out} exists, is not empty and is not an odet run directory; "
                "choose another output_dir (nothing was overwritten)"
            )

    def close(self) -> None:
        if self._log_handler is not None:
            logging.getLogger("odet").removeHandler(self._log_handler)
            self._log_handler.close()
        self._release_wrapper()
        shutdown_distributed(self.dist)

    def _release_wrapper(self) -> None:
        """Free the DDP wrapper while the process group is still registered.

        DDP's C++ reducer holds the group and is freed with the GIL held. Were it the group's last
        holder, the gloo destructor would join a worker thread that may be waiting for the GIL to
        free a finished collective's tensors: a deadlock at exit, seen in about 1 run in 20.
        Freed first, the group's last reference goes with ``destroy_process_group``, whose binding
        releases the GIL.
        """
        if isinstance(getattr(self, "ddp", None), DistributedDataParallel):
            self.ddp = self.model
            gc.collect()

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        c = self.config
        if c.train.threads:
            torch.set_num_threads(c.train.threads)
        torch.manual_seed(c.seed)  # the same initial weights on every rank
        if self.dist.is_main:
            (self.out / "config.yaml").write_text(c.to_yaml(), encoding="utf-8")

        train_pairs = read_split(c.data, c.data.train)
        tok_dir = self.out / "tokenizer"
        if self.dist.is_main and not (
            (tok_dir / "tokenizer.model").is_file() or (tok_dir / "tokenizer.src.model").is_file()
        ):
            started = time.perf_counter()
            train_tokenizers(c.data, train_pairs).save(tok_dir)
            logger.info("trained the tokenizer in %.1fs", time.perf_counter() - started)
        self.dist.barrier()
        self.tokenizers = TokenizerPair.load(tok_dir)
        self.train_set = encode_split(
            c.data, train_pairs, self.tokenizers, filter_lengths=True, progress=self.progress
        )
        self.valid_pairs: TextPairs | None = None
        self.valid_set: ParallelDataset | None = None
        if c.data.valid and self.dist.is_main:
            pairs = read_split(c.data, c.data.valid)
            if c.data.valid_limit:
                pairs = pairs.head(c.data.valid_limit)
            self.valid_pairs = pairs
            self.valid_set = encode_split(c.data, pairs, self.tokenizers, filter_lengths=False)
        self.batcher = TokenBudgetBatcher(
            self.train_set.source_sizes,
            self.train_set.target_sizes,
            c.train.max_tokens,
            max_sentences=c.train.max_sentences or None,
            seed=c.seed,
            num_shards=self.dist.world_size,
            shard_index=self.dist.rank,
        )
        tgt_vocab = None if self.tokenizers.is_joint else self.tokenizers.target.vocab_size
        self.model = Seq2Seq(c.model_config(self.tokenizers.source.vocab_size, tgt_vocab))
        self.model.to(self.device)
        self.model.set_activation_checkpointing(c.train.activation_checkpointing)
        if self.dist.enabled:
            torch.manual_seed(c.seed + self.dist.rank)  # but each rank its own dropout masks
        self.state = TrainerState()
        logger.info(
            "model: %s encoder, %s decoder, %d parameters; %d training pairs in %d batches per "
            "epoch%s; device %s",
            self.model.config.encoder_method,
            self.model.config.decoder_method,
            self.model.num_parameters(),
            len(self.train_set),
            self.batcher.num_batches,
            f" over {self.dist.world_size} ranks ({c.train.parallel})" if self.dist.enabled else "",
            self.device,
        )
        checkpoint = self._latest_checkpoint()
        if checkpoint is not None:  # weights first: sharding distributes what is loaded
            self.model.load_state_dict(Seq2Seq.from_pretrained(checkpoint.path).state_dict())
        self.sharded = self.dist.enabled and c.train.parallel == "fsdp"
        self.ddp: torch.nn.Module = self.model
        if self.sharded:
            fully_shard(self.model)
        elif self.dist.enabled:
            self.ddp = DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=c.optim.lr,
            betas=c.optim.betas,
            eps=c.optim.eps,
            weight_decay=c.optim.weight_decay,
        )
        self.scheduler = make_schedule(
            self.optimizer,
            c.optim.schedule,
            warmup=c.optim.warmup_updates,
            warmup_init_lr=c.optim.warmup_init_lr,
            total=c.train.max_updates,
            min_ratio=c.optim.min_lr_ratio,
        )
        self._resume(checkpoint)

    def _latest_checkpoint(self) -> Checkpoint | None:
        if self.dist.is_main and self.ckpt_root.is_dir():
            for path in remove_partial_writes(self.ckpt_root):
                logger.warning("removed %s, left by an interrupted checkpoint write", path.name)
        self.dist.barrier()
        checkpoint = latest_checkpoint(self.ckpt_root)
        self.dist.barrier()
        return checkpoint

    def _resume(self, checkpoint: Checkpoint | None) -> None:
        """Optimizer, schedule, RNG, counters and data position of ``checkpoint`` (the weights
        were loaded before the model was wrapped)."""
        if checkpoint is None:
            if self.dist.is_main:
                self.metrics.truncate_after(0)
            return
        if self.sharded:
            set_optimizer_state_dict(
                self.model, self.optimizer, checkpoint.optimizer, options=_FULL_STATE
            )
        else:
            self.optimizer.load_state_dict(checkpoint.optimizer)
        self.scheduler.load_state_dict(checkpoint.scheduler)
        if not self.dist.enabled:
            torch.set_rng_state(checkpoint.rng)
        self.state = checkpoint.state
        self.batcher.load_state_dict(self.state.batcher)
        if self.dist.is_main:
            self.metrics.truncate_after(self.state.step)
        logger.info(
            "resumed from %s (update %d, epoch %d)",
            checkpoint.path.name,
            self.state.step,
            self.state.epoch,
        )

    def _evaluation_model(self) -> Seq2Seq:
        """A model rank 0 can run on its own: the training model, or for FSDP a full copy of the
        sharded weights (a collective: every rank must call it)."""
        if not self.sharded:
            return self.model
        weights = get_model_state_dict(self.model, options=_FULL_STATE)
        copy = Seq2Seq(self.model.config)
        if self.dist.is_main:
            copy.load_state_dict(weights)
        return copy.to(self.device)

    # ------------------------------------------------------------------ loop
    def run(self) -> TrainResult:
        c = self.config.train
        started = time.perf_counter() - self.state.elapsed_seconds
        stop_reason = self._budget_spent()
        with _StopSignals() as signals:
            while not stop_reason and self.batcher.epoch < c.max_epochs:
                stop_reason = self._train_epoch(started, signals)
                epoch_completed = self.batcher.state_dict()["position"] == 0
                # Validate at every epoch end, and also when a budget stops training mid-epoch,
                # so the final model competes for "best".
                if stop_reason in ("max_updates", "max_minutes") or (
                    epoch_completed and not stop_reason
                ):
                    stop_reason = self._end_of_epoch(started) or stop_reason
            if stop_reason == "signal":
                self._save(started, is_best=False)
                raise TrainingInterruptedError(
                    f"stopped by a signal at update {self.state.step}; checkpoint saved in "
                    f"{self.ckpt_root}; run the same command to resume"
                )
        last = self._save(started, is_best=False)
        logger.info(
            "training stopped (%s) after %d updates, %.0fs",
            stop_reason or "max_epochs",
            self.state.step,
            self.state.elapsed_seconds,
        )
        return self._finish(last)

    def _budget_spent(self) -> str:
        """Why a (resumed) run has nothing left to do, or ``""``."""
        c = self.config.train
        if c.max_updates and self.state.step >= c.max_updates:
            return "max_updates"
        if c.max_minutes and self.state.elapsed_seconds >= 60 * c.max_minutes:
            return "max_minutes"
        if c.patience and self.state.bad_epochs >= c.patience:
            return "early_stopping"
        return ""

    def _train_epoch(self, started: float, signals: _StopSignals) -> str:
        c = self.config
        model, pad = self.ddp, self.model.config.pad_id
        model.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        accum = tokens = 0
        loss_sum = nll_sum = 0.0
        nfe_sum, nfe_batches = 0.0, 0
        window_tokens, window_start = 0, time.perf_counter()
        epoch = self.batcher.epoch
        total = len(self.batcher) // c.train.update_freq
        done = self.batcher.state_dict()["position"] // c.train.update_freq
        bar = tqdm(
            total=total,
            initial=done,
            desc=f"epoch {epoch + 1}",
            unit="upd",
            disable=not self.progress,
            dynamic_ncols=True,
            leave=False,
        )
        try:
            for indices in self.batcher:
                batch = self.train_set.batch(indices).to(self.device)
                last_of_epoch = self.batcher.state_dict()["position"] >= len(self.batcher)
                updating = accum + 1 >= c.train.update_freq or last_of_epoch
                sync: Any = contextlib.nullcontext()
                if self.sharded:
                    self.model.set_requires_gradient_sync(updating)  # type: ignore[operator]
                elif self.dist.enabled and not updating:
                    sync = self.ddp.no_sync()  # type: ignore[operator]
                with sync:
                    with self._precision():
                        logits, stats = model(batch.src, batch.tgt_in, with_stats=True)
                        loss, nll, ntok = label_smoothed_loss(
                            logits, batch.tgt_out, smoothing=c.optim.label_smoothing, pad_id=pad
                        )
                        if stats is not None:
                            nfe_sum += float(stats.nfe.float().mean())
                            nfe_batches += 1
                        if c.optim.arclength_weight and stats is not None:
                            # λ · mean arclength per update, after normalising by its tokens
                            loss = loss + c.optim.arclength_weight * stats.arclength.mean() * ntok
                    loss.backward()
                accum += 1
                tokens += ntok
                loss_sum += loss.item()
                nll_sum += nll.item()
                if not updating:
                    continue
                # Gradients of the summed loss, normalised by the update's target tokens over
                # all ranks (DDP averages over ranks, hence the factor world_size).
                over_time = bool(c.train.max_minutes) and (
                    time.perf_counter() - started >= 60 * c.train.max_minutes
                )
                total_tokens, total_loss, total_nll, stop_flag, time_flag = (
                    self.dist.all_reduce_sum(
                        [
                            tokens,
                            loss_sum,
                            nll_sum,
                            float(signals.received is not None),
                            float(over_time),
                        ]
                    )
                )
                scale = self.dist.world_size / max(total_tokens, 1.0)
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(scale)
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    params, c.optim.clip_norm or float("inf")
                )
                if isinstance(grad_norm, DTensor):
                    grad_norm = grad_norm.full_tensor()
                if not (math.isfinite(total_loss) and torch.isfinite(grad_norm)):
                    self.optimizer.zero_grad(set_to_none=True)
                    self.state.skipped_updates += 1
                    self.state.bad_in_a_row += 1
                    logger.warning(
                        "non-finite %s at update %d: step skipped (%d in a row, %d in total)",
                        "loss" if not math.isfinite(total_loss) else "gradients",
                        self.state.step + 1,
                        self.state.bad_in_a_row,
                        self.state.skipped_updates,
                    )
                    if self.state.bad_in_a_row >= c.train.max_bad_updates:
                        raise FloatingPointError(
                            f"{self.state.bad_in_a_row} updates in a row had non-finite loss or "
                            f"gradients (at update {self.state.step + 1}); lower optim.lr, "
                            "enable optim.clip_norm, or check the data"
                        )
                    accum = tokens = 0
                    loss_sum = nll_sum = 0.0
                    continue
                self.state.bad_in_a_row = 0
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.state.step += 1
                self.state.target_tokens += int(total_tokens)
                window_tokens += int(total_tokens)
                self.state.elapsed_seconds = time.perf_counter() - started
                loss_value = total_loss / max(total_tokens, 1.0)
                nll_value = total_nll / max(total_tokens, 1.0)
                bar.update(1)
                if self.state.step % c.train.log_every == 0 or self.state.step == 1:
                    elapsed = time.perf_counter() - window_start
                    speed = window_tokens / max(elapsed, 1e-9)
                    lr = self.scheduler.get_last_lr()[0]
                    bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:.0f}")
                    if self.dist.is_main:
                        self.metrics.write(
                            "train",
                            step=self.state.step,
                            epoch=epoch + 1,
                            loss=loss_value,
                            nll=nll_value,
                            lr=lr,
                            target_tokens_per_s=speed,
                            elapsed=self.state.elapsed_seconds,
                            **({"encoder_nfe": nfe_sum / nfe_batches} if nfe_batches else {}),
                        )
                    window_tokens, window_start = 0, time.perf_counter()
                    nfe_sum, nfe_batches = 0.0, 0
                accum = tokens = 0
                loss_sum = nll_sum = 0.0
                if c.train.save_every_updates and self.state.step % c.train.save_every_updates == 0:
                    self._save(started, is_best=False)
                if stop_flag:
                    return "signal"
                if c.train.max_updates and self.state.step >= c.train.max_updates:
                    return "max_updates"
                if time_flag:
                    return "max_minutes"
        finally:
            bar.close()
        return ""

    def _end_of_epoch(self, started: float) -> str:
        self.state.epoch = self.batcher.epoch
        model = self._evaluation_model()
        metrics = self.validate(model) if self.dist.is_main else {}
        metrics = self.dist.broadcast_object(metrics)  # type: ignore[assignment]
        is_best = False
        if metrics:
            key = self.config.train.best_metric
            if key == "metric":
                key = self.config.train.valid_metric
            value = metrics[key]
            better = (
                self.state.best_metric is None
                or (key != "loss" and value > self.state.best_metric)
                or (key == "loss" and value < self.state.best_metric)
            )
            if better:
                self.state.best_metric, self.state.best_step = value, self.state.step
                self.state.bad_epochs = 0
                is_best = True
            else:
                self.state.bad_epochs += 1
            if self.dist.is_main:
                self.metrics.write("valid", step=self.state.step, epoch=self.state.epoch, **metrics)
                logger.info(
                    "epoch %d: %s",
                    self.state.epoch,
                    ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()),
                )
                if self.progress:
                    tqdm.write(
                        f"epoch {self.state.epoch} | update {self.state.step} | "
                        + " | ".join(f"valid {k} {v:.2f}" for k, v in metrics.items())
                    )
                self._log_coefficients(model)
                plot_learning_curve(
                    self.metrics.read(), self.out / "learning_curve.png", title=self.out.name
                )
        self._save(started, is_best=is_best, model=model)
        patience = self.config.train.patience
        if patience and self.state.bad_epochs >= patience:
            return "early_stopping"
        return ""

    def _precision(self) -> Any:
        """The forward-pass context for ``train.precision`` on this device."""
        c = self.config.train
        return autocast(c.precision, self.device, math_sdpa=c.bf16_sdpa == "math")

    def _log_coefficients(self, model: Seq2Seq) -> None:
        """The blocks' weights (``coefficient_snapshot``) on a validation batch; nothing when
        every block's weights are fixed (they would be the same line at every step)."""
        if self.valid_set is None or not has_learned_coefficients(model):
            return
        batch = self.valid_set.batch(list(range(min(64, len(self.valid_set))))).to(self.device)
        snapshot = coefficient_snapshot(model, batch.src, batch.tgt_in)
        if any(row for rows in snapshot.values() for row in rows):
            self.metrics.write("coefficients", step=self.state.step, **snapshot)

    def _save(self, started: float, *, is_best: bool, model: Seq2Seq | None = None) -> Path:
        """Rank 0 writes the checkpoint; every rank waits for it and gets its path (with FSDP
        every rank takes part in gathering the weights and optimizer state first)."""
        self.state.elapsed_seconds = time.perf_counter() - started
        self.state.batcher = dict(self.batcher.state_dict())
        path = self.ckpt_root / checkpoint_name(self.state.step)
        model = model if model is not None else self._evaluation_model()
        optimizer_state = (
            get_optimizer_state_dict(self.model, self.optimizer, options=_FULL_STATE)
            if self.sharded
            else self.optimizer.state_dict()
        )
        if self.dist.is_main:
            path = save_checkpoint(
                self.ckpt_root,
                model=model,
                tokenizers=self.tokenizers,
                config_yaml=self.config.to_yaml(),
                optimizer_state=optimizer_state,
                scheduler=self.scheduler,
                state=self.state,
                keep_last=self.config.train.keep_last,
                is_best=is_best,
            )
        self.dist.barrier()
        return path

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def validation_loss(self, model: Seq2Seq, dataset: ParallelDataset) -> float:
        """Mean NLL per target token (no label smoothing)."""
        model.eval()
        batcher = TokenBudgetBatcher(
            dataset.source_sizes,
            dataset.target_sizes,
            max(
                self.config.train.max_tokens,
                int(max(dataset.source_sizes.max(), dataset.target_sizes.max())),
            ),
            shuffle=False,
        )
        nll_sum, tokens = 0.0, 0
        for indices in batcher:
            batch = dataset.batch(indices).to(self.device)
            with self._precision():
                logits = model(batch.src, batch.tgt_in)
            _, nll, ntok = label_smoothed_loss(
                logits, batch.tgt_out, smoothing=0.0, pad_id=model.config.pad_id
            )
            nll_sum += nll.item()
            tokens += ntok
        return nll_sum / max(tokens, 1)

    def validate(self, model: Seq2Seq) -> dict[str, float]:
        if self.valid_set is None or self.valid_pairs is None:
            return {}
        loss = self.validation_loss(model, self.valid_set)
        metrics = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        metric = self.config.train.valid_metric
        if metric != "none":
            search = replace(self.config.generation, beam_size=self.config.train.valid_beam_size)
            hyps = self.translate(model, list(self.valid_pairs.source), search)
            refs = self._references(self.valid_pairs, self.config.data.valid_references)
            metrics.update(score_text(metric, hyps, refs, self.valid_pairs.source))
        model.train()
        return metrics

    def translate(
        self, model: Seq2Seq, sentences: list[str], search: GenerationConfig | None = None
    ) -> list[str]:
        translator = Translator(model, self.tokenizers, search or self.config.generation)
        with self._precision():
            return translator.translate(sentences, progress=self.progress)

    def _references(self, pairs: TextPairs, extra_files: tuple[str, ...]) -> list[list[str]]:
        """Per sentence: the split's target plus the lines of extra reference files (the reader
        may have skipped lines, so extras are aligned by the pairs' line numbers)."""
        extras = []
        for name in extra_files:
            lines = read_all_lines(self.config.data.path(name))
            if len(lines) < max(pairs.line_numbers, default=0):
                raise DataError(
                    f"reference file {name} has {len(lines)} lines, fewer than the "
                    f"split's {max(pairs.line_numbers)}"
                )
            extras.append([lines[n - 1] for n in pairs.line_numbers])
        return [[t, *(e[i] for e in extras)] for i, t in enumerate(pairs.target)]

    def _finish(self, last: Path) -> TrainResult:
        # Replicated (DDP) ranks must hold identical weights; sharded (FSDP) ones hold shards.
        digests = [] if self.sharded else self.dist.all_gather_object(_parameter_digest(self.model))
        consistent = len(set(digests)) <= 1
        if not consistent:
            raise RuntimeError(f"ranks ended with different parameters: {digests}")
        model = self._evaluation_model()
        index = read_index(self.ckpt_root)
        best = self.ckpt_root / index["best"] if index.get("best") else None
        result = TrainResult(
            output_dir=self.out,
            steps=self.state.step,
            epochs=self.state.epoch,
            elapsed_seconds=self.state.elapsed_seconds,
            best_metric=self.state.best_metric,
            best_checkpoint=best,
            last_checkpoint=last,
            valid={},
            test={},
        )
        if not self.dist.is_main:
            return result
        valid = self.validate(model) if best is None else {}
        test: dict[str, float] = {}
        if self.config.data.test:
            if best is not None:
                model = Seq2Seq.from_pretrained(best).to(self.device)
            pairs = read_split(self.config.data, self.config.data.test)
            hyps = self.translate(model, list(pairs.source))
            (self.out / "test.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
            metric = self.config.train.valid_metric
            refs = self._references(pairs, self.config.data.test_references)
            test = score_text("bleu" if metric == "none" else metric, hyps, refs, pairs.source)
            self.metrics.write("test", step=self.state.step, **test)
            logger.info("test: %s", test)
        result = replace(result, valid=valid, test=test)
        summary = {
            "steps": result.steps,
            "epochs": result.epochs,
            "elapsed_seconds": round(result.elapsed_seconds, 1),
            "best_metric": result.best_metric,
            "best_checkpoint": str(best) if best else None,
            "last_checkpoint": str(last),
            "parameters": model.num_parameters(),
            "world_size": self.dist.world_size,
            "parallel": self.config.train.parallel if self.dist.enabled else "none",
            "parameters_identical_across_ranks": consistent if digests else None,
            "parameter_digest": digests[0] if digests else None,
            "test": test,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return result


def train(config: TrainConfig, *, progress: bool | None = None) -> TrainResult:
    """Train (or resume) the run described by ``config``; returns its result."""
    trainer = Trainer(config, progress=progress)
    try:
        trainer.setup()
        result = trainer.run()
        trainer.dist.barrier()  # ranks leave together: rank 0 may still be decoding the test set
        return result
    finally:
        trainer.close()
