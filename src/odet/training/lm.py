"""``odet train`` for a language model (``task: lm``): one text, a character vocabulary, a
``CausalLM`` trained on seeded random windows.

The run directory is the seq2seq trainer's (marker and guard, ``config.yaml``, ``train.log``,
``metrics.jsonl``, ``learning_curve.png``, ``checkpoints/``, ``summary.json``), written by the same
pieces; every checkpoint holds the model and ``vocab.json``. Batch ``k`` is a function of
``(seed, k)``, so resuming at update ``k`` needs only the step, the optimizer and the RNG.

Validation loss is in nats per token: a cheap estimate every ``train.eval_interval`` updates on
``data.eval_iters`` batches of fixed random windows (of both splits, as nanoGPT), and an exact
pass over the whole validation split at the end, every token after the first predicted once.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import Optimizer
from tqdm import tqdm

from odet.data import DataError
from odet.data.lm import CharVocabulary, WindowSampler, evaluation_batches, read_text, split_text
from odet.inference.checkpoint import resolve_model_dir
from odet.io import write_bytes_atomic
from odet.models import CausalLM, CheckpointError
from odet.nn.precision import resolve_precision
from odet.training.checkpoint import TrainerState, checkpoint_name
from odet.training.compile import check_compilable, compile_counts, compile_step
from odet.training.distributed import init_distributed
from odet.training.lm_config import LMOptimConfig, LMTrainConfig
from odet.training.metrics import MetricsLog, plot_learning_curve
from odet.training.parallel import parallelize, pick_device
from odet.training.resume import (
    RunCheckpoints,
    checkpoint_before_error,
    completed_run,
    reopen_finished_run,
    spent_budget,
)
from odet.training.run_dir import SUMMARY_NAME, open_run_dir
from odet.training.schedule import make_schedule
from odet.training.signals import StopSignals, TrainingInterruptedError
from odet.training.step import (
    ForwardPrecision,
    apply_update,
    fused_adam_supported,
    record_skipped_update,
)

logger = logging.getLogger("odet.train")

VOCAB_NAME = "vocab.json"
"""The vocabulary file in every language-model checkpoint."""
VALID_SEED_OFFSET = 7919
"""The windows of the cheap estimates are drawn with ``seed + this`` (fixed for the run)."""


@dataclass(frozen=True)
class VocabularyFile:
    """A ``CharVocabulary`` as checkpoints save it (``vocab.json`` in the directory)."""

    vocab: CharVocabulary

    def save(self, directory: str | os.PathLike[str]) -> Path:
        path = Path(directory) / VOCAB_NAME
        self.vocab.save(path)
        return path


@dataclass(frozen=True)
class LMData:
    """The vocabulary and the two token streams ``(N,)``."""

    vocab: CharVocabulary
    train: Tensor
    valid: Tensor


def prepare_lm_data(config: LMTrainConfig) -> LMData:
    """Read, split and encode the text; the vocabulary is the whole text's characters (nanoGPT),
    so the validation text never holds an unknown one."""
    text = read_text(config.data.path)
    train_text, valid_text = split_text(text, config.data.valid_fraction)
    need = config.block_size + 1
    for name, part in (("training", train_text), ("validation", valid_text)):
        if len(part) < need:
            raise DataError(
                f"{config.data.path}: the {name} split has {len(part)} characters, fewer than "
                f"block_size + 1 = {need}; use a smaller data.block_size or more text"
            )
    vocab = CharVocabulary.from_text(text)
    encode = lambda part: torch.tensor(vocab.encode(part), dtype=torch.long)  # noqa: E731
    return LMData(vocab, encode(train_text), encode(valid_text))


def build_adamw(model: nn.Module, optim: LMOptimConfig) -> Optimizer:
    """AdamW with decoupled weight decay on matrices (``dim >= 2``), never on norms or biases;
    embeddings (and the output projection tied to one) only with ``optim.decay_embeddings``."""
    decay, no_decay = decay_groups(model, embeddings=optim.decay_embeddings)
    groups = [
        {"params": decay, "weight_decay": optim.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
        fused=fused_adam_supported([*decay, *no_decay]),
    )


def decay_groups(
    model: nn.Module, *, embeddings: bool
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """``(decayed, not decayed)`` trainable parameters of ``model``, each once (tied ones too)."""
    spared: set[int] = set()
    if not embeddings:
        spared = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 and id(p) not in spared else no_decay).append(p)
    return decay, no_decay


def lm_loss_sum(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    precision: ForwardPrecision,
    loss: LMLoss | None = None,
) -> Tensor:
    """Cross-entropy of next tokens ``y (B, T)`` given ``x (B, T)``, summed over tokens (nats);
    ``loss``: :func:`next_token_loss` (the default) or its compiled form (``train.compile``)."""
    with precision.context():
        return (loss or next_token_loss)(model, x, y)


def next_token_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """The forward pass and the summed cross-entropy, at the caller's precision: the part of a
    training step that ``train.compile`` compiles."""
    logits = model(x).float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum")


LMLoss = Callable[[nn.Module, Tensor, Tensor], Tensor]
""":func:`next_token_loss` or it compiled."""


@torch.no_grad()
def estimate_loss(
    model: nn.Module, sampler: WindowSampler, iters: int, precision: ForwardPrecision
) -> float:
    """Mean loss per token over batches ``0 … iters − 1`` of ``sampler`` (the same windows at
    every call)."""
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    for k in range(iters):
        batch = sampler.batch(k)
        total += float(lm_loss_sum(model, batch.x.to(device), batch.y.to(device), precision))
        tokens += batch.num_tokens
    return total / tokens


@torch.no_grad()
def exact_loss(
    model: nn.Module, stream: Tensor, block_size: int, batch_size: int, precision: ForwardPrecision
) -> tuple[float, int]:
    """``(nats per token, tokens)`` over the whole ``stream (N,)``: every token after the first
    predicted once, from at most ``block_size`` tokens of context (``evaluation_batches``)."""
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    for batch in evaluation_batches(stream, block_size, batch_size):
        total += float(lm_loss_sum(model, batch.x.to(device), batch.y.to(device), precision))
        tokens += batch.num_tokens
    return total / tokens, tokens


@dataclass(frozen=True)
class LMResult:
    """What a finished (or budget-stopped) language-model run produced."""

    output_dir: Path
    steps: int
    elapsed_seconds: float
    valid_loss: float
    """Exact validation loss, nats per token."""
    valid_tokens: int
    last_checkpoint: Path
    already_complete: bool = False
    """The run had finished before this call, which trained and wrote nothing."""

    @classmethod
    def from_summary(cls, out: Path, summary: dict[str, Any]) -> LMResult:
        """The result of a finished run, read back from its ``summary.json``."""
        keys = ("steps", "elapsed_seconds", "valid_loss", "valid_tokens")
        values = [summary[k] for k in keys]
        return cls(out, *values, Path(summary["last_checkpoint"]), already_complete=True)


class LMTrainer:
    """One language-model run in one process (see the module docstring)."""

    def __init__(self, config: LMTrainConfig, *, progress: bool | None = None):
        self.config = config
        self.dist = init_distributed(config.train.device)
        if self.dist.enabled:
            raise ValueError("task: lm trains in one process; run it without torchrun")
        self.device = pick_device(config.train.device, self.dist)
        precision = resolve_precision(config.train.precision, self.device)
        self.precision = ForwardPrecision(precision, self.device.type)
        self.evaluation = ForwardPrecision("fp32", self.device.type)
        if config.train.compile:
            check_compilable(self.device)
        self.out = Path(config.output_dir)
        self.progress = config.train.progress if progress is None else progress
        self.metrics = MetricsLog(self.out / "metrics.jsonl")
        self._run_dir = open_run_dir(self.out, config)

    def close(self, *, failed_start: bool = False) -> None:
        self._run_dir.close(failed_start=failed_start)

    def setup(self) -> None:
        c = self.config
        if c.train.threads:
            torch.set_num_threads(c.train.threads)
        self.data = prepare_lm_data(c)
        block, batch = c.block_size, c.data.batch_size
        self.sampler = WindowSampler(self.data.train, block, batch, c.seed)
        valid_seed = c.seed + VALID_SEED_OFFSET
        self.estimators = {
            "train": WindowSampler(self.data.train, block, batch, valid_seed),
            "valid": WindowSampler(self.data.valid, block, batch, valid_seed),
        }
        torch.manual_seed(c.seed)
        self.model = CausalLM(c.model_config(self.data.vocab.size)).to(self.device)
        self.loss = compile_step(next_token_loss) if c.train.compile else next_token_loss
        self.checkpoints = RunCheckpoints(
            self.out / "checkpoints",
            self.dist,
            VocabularyFile(self.data.vocab),
            c.to_yaml(),
            c.train.keep_last,
        )
        self.optimizer = build_adamw(self.model, c.optim)
        self.scheduler = make_schedule(
            self.optimizer,
            "cosine",
            warmup=c.optim.warmup_updates,
            warmup_init_lr=c.optim.lr / (c.optim.warmup_updates + 1),
            total=c.decay_updates,
            min_ratio=c.optim.min_lr / c.optim.lr,
        )
        self.state = TrainerState()
        self.resumed_step: int | None = None
        checkpoint = self.checkpoints.latest()
        if checkpoint is not None:
            self.model.load_state_dict(CausalLM.from_pretrained(checkpoint.path).state_dict())
            self.state = self.checkpoints.restore(
                checkpoint,
                parallel=parallelize(self.model, self.dist, "ddp"),  # type: ignore[arg-type]
                optimizer=self.optimizer,
                scheduler=self.scheduler,
            )
            self.resumed_step = self.state.step
        self._saved_step = self.state.step
        reopen_finished_run(self.out, self.metrics, self.state.step)
        logger.info(
            "language model: %s, %d layers, %d parameters; %d-character vocabulary; %d training "
            "and %d validation tokens; device %s, %s",
            self.model.config.method,
            self.model.config.layers,
            self.model.num_parameters(),
            self.data.vocab.size,
            self.data.train.numel(),
            self.data.valid.numel(),
            self.device,
            self.precision.precision,
        )

    # ------------------------------------------------------------------ loop
    def run(self) -> LMResult:
        c = self.config.train
        started = time.perf_counter() - self.state.elapsed_seconds
        if self.state.step == 0 and c.eval_interval:
            self._estimate()
        bar = tqdm(
            total=c.max_updates,
            initial=min(self.state.step, c.max_updates),
            unit="upd",
            disable=not self.progress,
            dynamic_ncols=True,
            leave=False,
        )
        stopped = spent_budget(self.state, c)
        with StopSignals() as signals, bar:
            while not stopped:
                try:
                    self._update(started, bar)
                except Exception:  # e.g. out of memory: keep what was trained
                    self._rescue(started)
                    raise
                stopped = self._stop_reason(started, signals)
        if stopped == "signal":
            self._save(started)
            raise TrainingInterruptedError(
                f"stopped by a signal at update {self.state.step}; checkpoint saved in "
                f"{self.checkpoints.root}; run the same command to resume"
            )
        if self.state.step == self.resumed_step:  # nothing trained since that checkpoint
            last = self.checkpoints.root / checkpoint_name(self.state.step)
        else:
            last = self._save(started)
        logger.info(
            "training stopped (%s) after %d updates, %.0fs",
            stopped,
            self.state.step,
            self.state.elapsed_seconds,
        )
        if c.compile:
            logger.info("torch.compile: %s", compile_counts())
        return self._finish(last)

    def _stop_reason(self, started: float, signals: StopSignals) -> str:
        c = self.config.train
        if signals.received is not None:
            return "signal"
        if c.max_minutes and time.perf_counter() - started >= 60 * c.max_minutes:
            return "max_minutes"
        return "max_updates" if self.state.step >= c.max_updates else ""

    def _update(self, started: float, bar: tqdm) -> None:
        """Train on batch ``step``; log, estimate and save on their intervals."""
        c = self.config
        self.model.train()
        batch = self.sampler.batch(self.state.step)
        x, y = batch.x.to(self.device), batch.y.to(self.device)
        window = time.perf_counter()
        loss = lm_loss_sum(self.model, x, y, self.precision, self.loss)
        loss.backward()
        result = apply_update(
            list(self.model.parameters()),
            self.optimizer,
            self.scheduler,
            loss=loss.item(),
            tokens=float(batch.num_tokens),
            world_size=1,
            clip_norm=c.optim.clip_norm,
        )
        if not result.applied:
            record_skipped_update(self.state, result, max_in_a_row=c.train.max_bad_updates)
            self.state.step += 1  # batch k stays batch k: the skipped one is not redrawn
            return
        self.state.bad_in_a_row = 0
        self.state.step += 1
        self.state.target_tokens += batch.num_tokens
        self.state.elapsed_seconds = time.perf_counter() - started
        mean = loss.item() / batch.num_tokens
        bar.update(1)
        step = self.state.step
        if step % c.train.log_every == 0 or step == 1:
            lr = self.scheduler.get_last_lr()[0]
            speed = batch.num_tokens / max(time.perf_counter() - window, 1e-9)
            bar.set_postfix(loss=f"{mean:.3f}", lr=f"{lr:.2e}")
            self.metrics.write(
                "train",
                step=step,
                loss=mean,
                lr=lr,
                grad_norm=result.grad_norm,
                tokens_per_s=speed,
                elapsed=self.state.elapsed_seconds,
            )
        if c.train.eval_interval and step % c.train.eval_interval == 0:
            self._estimate()
        if c.train.save_every_updates and step % c.train.save_every_updates == 0:
            self._save(started)

    # ------------------------------------------------------------------ evaluation
    def _estimate(self) -> dict[str, float]:
        """The cheap loss estimate of both splits, written as a ``valid`` record."""
        self.model.eval()
        iters = self.config.data.eval_iters
        losses = {
            name: estimate_loss(self.model, sampler, iters, self.evaluation)
            for name, sampler in self.estimators.items()
        }
        self.model.train()
        self.metrics.write(
            "valid", step=self.state.step, loss=losses["valid"], train_loss=losses["train"]
        )
        logger.info(
            "update %d: train loss %.4f, valid loss %.4f (estimate)",
            self.state.step,
            losses["train"],
            losses["valid"],
        )
        return losses

    def _rescue(self, started: float) -> None:
        """``checkpoint_before_error`` (batch ``k`` is a function of ``k``: resumed exactly)."""
        checkpoint_before_error(self.state, self._saved_step, partial(self._save, started))

    def _save(self, started: float) -> Path:
        self.state.elapsed_seconds = time.perf_counter() - started
        self.state.batcher = {"position": self.state.step}
        self._saved_step = self.state.step
        return self.checkpoints.save(
            self.state,
            model=self.model,
            optimizer_state=self.optimizer.state_dict(),
            scheduler=self.scheduler,
            is_best=False,
        )

    def _finish(self, last: Path) -> LMResult:
        """The exact validation pass, its record, the learning curve and ``summary.json``."""
        c = self.config
        self.model.eval()
        loss, tokens = exact_loss(
            self.model, self.data.valid, c.block_size, c.data.batch_size, self.evaluation
        )
        self.metrics.write("valid", step=self.state.step, loss=loss, exact=True, tokens=tokens)
        logger.info("exact validation loss %.4f nats per token (%d tokens)", loss, tokens)
        plot_learning_curve(self.metrics.read(), self.out / "learning_curve.png", self.out.name)
        s = self.state
        result = LMResult(self.out, s.step, s.elapsed_seconds, loss, tokens, last)
        summary: dict[str, Any] = {
            "task": "lm",
            **{k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()},
            "parameters": self.model.num_parameters(),
            "vocab_size": self.data.vocab.size,
            "target_tokens": s.target_tokens,
            "skipped_updates": s.skipped_updates,
        }
        summary["elapsed_seconds"] = round(s.elapsed_seconds, 1)
        summary.pop("output_dir")
        summary.pop("already_complete")
        write_bytes_atomic(
            self.out / SUMMARY_NAME, (json.dumps(summary, indent=2) + "\n").encode("utf-8")
        )
        return result


def train_lm(config: LMTrainConfig, *, progress: bool | None = None) -> LMResult:
    """Train (or resume) the language-model run described by ``config``; returns its result."""
    trainer = LMTrainer(config, progress=progress)
    started = False
    try:
        summary = completed_run(trainer.out, config.train)  # before the text is read
        if summary is not None:
            return LMResult.from_summary(trainer.out, summary)
        trainer.setup()
        started = True
        return trainer.run()
    finally:
        trainer.close(failed_start=not started)


def load_lm(path: str | Path, which: str = "last") -> tuple[CausalLM, CharVocabulary]:
    """The model and vocabulary of a language-model checkpoint or run directory."""
    model_dir = resolve_model_dir(path, which)
    vocab_path = model_dir / VOCAB_NAME
    if not vocab_path.is_file():
        raise CheckpointError(f"{model_dir} is not a language-model checkpoint (no {VOCAB_NAME})")
    return CausalLM.from_pretrained(model_dir), CharVocabulary.load(vocab_path)
