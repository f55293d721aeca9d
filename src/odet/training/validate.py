"""Evaluation during and after training: validation loss and metrics, test-set decoding.

Everything here runs on one process (rank 0) with a model that holds full weights.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from odet.data import DataError, ParallelDataset, TextPairs, TokenBudgetBatcher, TokenizerPair
from odet.evaluation.files import read_all_lines
from odet.evaluation.scoring import score_text
from odet.generation import GenerationConfig
from odet.inference import Translator
from odet.models import Seq2Seq
from odet.models.probes import coefficient_snapshot, has_learned_coefficients
from odet.training.checkpoint import TrainerState
from odet.training.config import DataConfig, LoopConfig, TrainConfig
from odet.training.loss import label_smoothed_loss
from odet.training.metrics import MetricsLog, plot_learning_curve
from odet.training.prepare import ValidationSet
from odet.training.step import ForwardPrecision

logger = logging.getLogger("odet.train")


@torch.no_grad()
def validation_loss(
    model: Seq2Seq,
    dataset: ParallelDataset,
    *,
    max_tokens: int,
    device: torch.device,
    precision: ForwardPrecision,
) -> float:
    """Mean NLL per target token (no label smoothing), in batches of ``max_tokens`` (raised to
    the longest sentence so every pair fits)."""
    model.eval()
    batcher = TokenBudgetBatcher(
        dataset.source_sizes,
        dataset.target_sizes,
        max(max_tokens, int(max(dataset.source_sizes.max(), dataset.target_sizes.max()))),
        shuffle=False,
    )
    nll_sum, tokens = 0.0, 0
    for indices in batcher:
        batch = dataset.batch(indices).to(device)
        with precision.context():
            logits = model(batch.src, batch.tgt_in)
        _, nll, ntok = label_smoothed_loss(
            logits, batch.tgt_out, smoothing=0.0, pad_id=model.config.pad_id
        )
        nll_sum += nll.item()
        tokens += ntok
    return nll_sum / max(tokens, 1)


def references(data: DataConfig, pairs: TextPairs, extra_files: tuple[str, ...]) -> list[list[str]]:
    """Per sentence: the split's target plus the lines of extra reference files (the reader
    may have skipped lines, so extras are aligned by the pairs' line numbers)."""
    extras = []
    for name in extra_files:
        lines = read_all_lines(data.path(name))
        if len(lines) < max(pairs.line_numbers, default=0):
            raise DataError(
                f"reference file {name} has {len(lines)} lines, fewer than the "
                f"split's {max(pairs.line_numbers)}"
            )
        extras.append([lines[n - 1] for n in pairs.line_numbers])
    return [[t, *(e[i] for e in extras)] for i, t in enumerate(pairs.target)]


def best_metric_key(train: LoopConfig) -> str:
    """The validation value that picks the best checkpoint: ``loss`` or the metric's name."""
    return train.valid_metric if train.best_metric == "metric" else train.best_metric


def improves(key: str, value: float, best: float | None) -> bool:
    """Whether ``value`` of ``key`` beats ``best`` (lower loss, higher metric; any first)."""
    return best is None or (value < best if key == "loss" else value > best)


def track_best(state: TrainerState, metrics: dict[str, float], train: LoopConfig) -> bool:
    """Whether ``metrics`` beat the best so far (``train.best_metric``); updates the best and
    the count of epochs without improvement (for ``train.patience``) in ``state``."""
    key = best_metric_key(train)
    better = improves(key, metrics[key], state.best_metric)
    if better:
        state.best_metric, state.best_step = metrics[key], state.step
        state.bad_epochs = 0
    else:
        state.bad_epochs += 1
    return better


@dataclass(frozen=True)
class Evaluator:
    """Validation and test decoding for one run: its config, tokenizer and device.

    ``precision`` is the evaluation precision (``ForwardPrecision.for_evaluation``: the run's
    ``generation.precision``), not the training one; decoding runs at that precision through
    the ``Translator`` (a bf16 copy of the model for ``"bf16"``)."""

    config: TrainConfig
    tokenizers: TokenizerPair
    device: torch.device
    precision: ForwardPrecision
    progress: bool = False

    def translate(
        self,
        model: Seq2Seq,
        sentences: list[str],
        search: GenerationConfig | None = None,
        split: TextPairs | None = None,
        name: str = "data.test",
    ) -> list[str]:
        """Decode ``sentences`` with ``search`` (default: the run's ``generation`` section);
        logs, per reason, the sentences of split ``name`` not decoded as given (truncated), by
        their line numbers in ``split``'s files."""
        translator = Translator(model, self.tokenizers, search or self.config.generation)
        outputs = translator.translate(sentences, progress=self.progress)  # at its precision
        report = translator.report
        if split is not None:
            report.truncated_lines = [split.line_numbers[i - 1] for i in report.truncated_lines]
        for note in report.notes():
            logger.info("%s (decoding): %s", name, note)
        return outputs

    def validate(self, model: Seq2Seq, valid: ValidationSet | None) -> dict[str, float]:
        """``loss`` and ``ppl``, and ``train.valid_metric`` of greedy or beam decoding (with
        ``train.valid_beam_size``) unless it is ``"none"``; leaves ``model`` in train mode.
        Nothing (``{}``) without validation data."""
        if valid is None:
            return {}
        loss = validation_loss(
            model,
            valid.dataset,
            max_tokens=self.config.train.max_tokens,
            device=self.device,
            precision=self.precision,
        )
        metrics = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        metric = self.config.train.valid_metric
        if metric != "none":
            search = replace(self.config.generation, beam_size=self.config.train.valid_beam_size)
            hyps = self.translate(
                model, list(valid.pairs.source), search, valid.pairs, "data.valid"
            )
            refs = references(self.config.data, valid.pairs, self.config.data.valid_references)
            metrics.update(score_text(metric, hyps, refs, valid.pairs.source))
        model.train()
        return metrics

    def test(self, model: Seq2Seq, pairs: TextPairs, hypotheses: Path) -> dict[str, float]:
        """Decode the test pairs with the run's search settings, write them to ``hypotheses``
        and score them with ``train.valid_metric`` (BLEU when that is ``"none"``)."""
        hyps = self.translate(model, list(pairs.source), split=pairs)
        hypotheses.write_text("\n".join(hyps) + "\n", encoding="utf-8")
        metric = self.config.train.valid_metric
        refs = references(self.config.data, pairs, self.config.data.test_references)
        return score_text("bleu" if metric == "none" else metric, hyps, refs, pairs.source)


def coefficient_record(
    model: Seq2Seq, valid: ValidationSet | None, device: torch.device
) -> dict[str, list[list[float]]] | None:
    """The blocks' weights (``coefficient_snapshot``) on the first 64 validation pairs; ``None``
    without validation data or when no block has a weight that changes in training (it would
    be the same record at every step)."""
    if valid is None or not has_learned_coefficients(model):
        return None
    dataset = valid.dataset
    batch = dataset.batch(list(range(min(64, len(dataset))))).to(device)
    snapshot = coefficient_snapshot(model, batch.src, batch.tgt_in)
    return snapshot if any(row for rows in snapshot.values() for row in rows) else None


def report_validation(
    log: MetricsLog,
    state: TrainerState,
    metrics: dict[str, float],
    model: Seq2Seq,
    valid: ValidationSet | None,
    *,
    curve: Path,
    progress: bool,
) -> None:
    """The ``valid`` record of ``state``'s update, its log and progress lines, the blocks'
    coefficients and the learning curve (``curve``)."""
    log.write("valid", step=state.step, epoch=state.epoch, **metrics)
    logger.info("epoch %d: %s", state.epoch, ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))
    if progress:
        tqdm.write(
            f"epoch {state.epoch} | update {state.step} | "
            + " | ".join(f"valid {k} {v:.2f}" for k, v in metrics.items())
        )
    device = next(model.parameters()).device
    snapshot = coefficient_record(model, valid, device)
    if snapshot is not None:
        log.write("coefficients", step=state.step, **snapshot)
    plot_learning_curve(log.read(), curve, curve.parent.name)
