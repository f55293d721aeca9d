"""``odet analyze RUN --depth-against REFERENCE``: does a depth-adaptive encoder's depth track
difficulty?

For every pair of one split, the continuous (N-ODE) encoder's number of field evaluations (NFE,
its depth, summed over its blocks) in eval mode, the source length, and the mean token negative
log-likelihood of the target under the reference model (typically the Euler twin: its
per-sentence difficulty) and under the run itself. Summarised by Spearman rank correlations and
drawn as ``nfe_vs_length.png`` and ``nfe_vs_difficulty.png``.

Batches hold sentences of one source length, so no source is padded: the adaptive error norm
is an RMS over all ``T·D`` features of a sample, padded ones included
(:mod:`odet.blocks.continuous`), and padding would loosen a sentence's tolerance and change its
NFE. torchode steps every sample with its own step size, so a sentence's NFE does not depend on
its batch except through rounding: a GEMM over a batch may round a row differently from a
one-row GEMM (MKL on an AVX2 CPU does), which can move a step's acceptance. In the tests that
is at most one dopri5 step for a few sentences; tolerances near float32 rounding (``1e-6``) or
a very stiff field let it move more; ``batch_tokens=1`` solves one sentence at a time.
torchdiffeq shares one step size across the batch, so with it every sentence is solved alone.
"""

from __future__ import annotations

import csv
import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from odet.analysis.plots import plot_nfe
from odet.config import check
from odet.data import ParallelDataset, TokenizerPair
from odet.inference.checkpoint import CONFIG_NAME, resolve_model_dir
from odet.io import check_output_dir, claim_output_dir
from odet.models import CONTINUOUS, Seq2Seq
from odet.ode import SolverError, SolveStats
from odet.training import DataConfig, load_train_config
from odet.training.prepare import encode_split, fit_to_positions, read_checked_split

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "DEPTH_FILES",
    "DepthReport",
    "analyze_depth",
    "binned_means",
    "depth_command",
    "depth_vs_difficulty",
    "length_batches",
    "partial_spearman",
    "ranks",
    "score_sentences",
    "sentence_losses",
    "spearman",
    "write_depth_report",
]

Split = Literal["test", "valid"]
DEFAULT_BATCH_TOKENS = 4096
"""Source tokens per batch of ``depth_vs_difficulty`` (every row of a batch has one length)."""
DEPTH_FILES = ("depth.csv", "depth.json", "nfe_vs_length.png", "nfe_vs_difficulty.png")
"""What ``analyze_depth`` writes into its output directory."""
DIFFICULTY_BINS = 10
"""Equal-count bins of the reference loss whose mean NFE ``nfe_vs_difficulty.png`` overlays."""


# ---------------------------------------------------------------------------- statistics
def ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks ``(N,)`` of ``values``; tied values share the average of their ranks."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    starts = np.r_[0, np.flatnonzero(np.diff(x[order])) + 1]
    ends = np.r_[starts[1:], len(x)]
    out = np.empty(len(x), dtype=np.float64)
    out[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    dx, dy = x - x.mean(), y - y.mean()
    scale = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / scale if scale > 0 else None


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Spearman's rank correlation of ``x`` and ``y`` (``(N,)`` each): the Pearson correlation
    of their average ranks; ``None`` when undefined (fewer than 3 values, or one side constant)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman needs two (N,) arrays, got {x.shape} and {y.shape}")
    if len(x) < 3:
        return None
    return _pearson(ranks(x), ranks(y))


def partial_spearman(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    given: Sequence[float] | np.ndarray,
) -> float | None:
    """The rank correlation of ``x`` and ``y`` once ``given`` is regressed out of both ranks:
    ``(r_xy − r_xg·r_yg) / √((1 − r_xg²)(1 − r_yg²))`` over Spearman correlations ``r``;
    ``None`` when undefined (a correlation undefined, or ``given`` ranks exactly like a side)."""
    r_xy, r_xg, r_yg = spearman(x, y), spearman(x, given), spearman(y, given)
    if r_xy is None or r_xg is None or r_yg is None:
        return None
    scale = (1 - r_xg**2) * (1 - r_yg**2)
    return (r_xy - r_xg * r_yg) / math.sqrt(scale) if scale > 1e-12 else None


def binned_means(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, bins: int | None = None
) -> list[tuple[float, int, float]]:
    """``(mean x, count, mean y)`` per bin of ``x``, in increasing ``x``: one bin per distinct
    value of ``x`` (``bins=None``), or ``bins`` bins of (nearly) equal counts in ``x`` order."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if bins is None:
        groups = [np.flatnonzero(x == value) for value in np.unique(x)]
    else:
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        order = np.argsort(x, kind="stable")
        groups = [g for g in np.array_split(order, min(bins, len(x))) if len(g)]
    return [(float(x[g].mean()), len(g), float(y[g].mean())) for g in groups]


# ---------------------------------------------------------------------------- scoring
def sentence_losses(logits: Tensor, target: Tensor, pad_id: int) -> Tensor:
    """Mean negative log-likelihood per sentence ``(B,)`` of ``target (B, T)`` under
    ``logits (B, T, V)``: no label smoothing, ``pad_id`` positions excluded."""
    if logits.shape[:2] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} disagree on (B, T)"
        )
    keep = target.ne(pad_id)
    counts = keep.sum(dim=1)
    if bool((counts == 0).any()):
        raise ValueError("every sentence needs a target token that is not padding")
    nll = F.cross_entropy(
        logits.float().transpose(1, 2), target, ignore_index=pad_id, reduction="none"
    )  # (B, T)
    return nll.sum(dim=1) / counts


def length_batches(
    source_sizes: Sequence[int] | np.ndarray,
    target_sizes: Sequence[int] | np.ndarray,
    batch_tokens: int,
) -> list[np.ndarray]:
    """Example indices grouped by source size (so no source is padded), sorted by target size
    within a group and cut into batches of at most ``batch_tokens`` source tokens (at least
    one sentence each); every index appears once."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    sources, targets = np.asarray(source_sizes), np.asarray(target_sizes)
    batches = []
    for size in np.unique(sources):
        group = np.flatnonzero(sources == size)
        group = group[np.argsort(targets[group], kind="stable")]
        rows = max(1, batch_tokens // int(size))
        batches.extend(group[i : i + rows] for i in range(0, len(group), rows))
    return batches


def _per_sentence_solves(model: Seq2Seq) -> bool:
    """Whether the encoder's NFE depends on the batch (torchdiffeq: one step size for all)."""
    options = model.config.continuous
    return model.config.encoder_method == CONTINUOUS and options.backend == "torchdiffeq"


def _solve_failed(rows: np.ndarray, stats: SolveStats, why: str) -> FloatingPointError:
    failed = [int(rows[i]) for i in stats.failed]
    return FloatingPointError(
        f"the encoder's ODE solve failed on pair(s) {failed} (0-based): {why}"
    )


@torch.no_grad()
def score_sentences(
    model: Seq2Seq,
    dataset: ParallelDataset,
    *,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = False,
    desc: str = "scoring",
) -> tuple[np.ndarray | None, np.ndarray]:
    """NFE ``(N,)`` of the encoder (``None`` for a discrete one) and mean target NLL ``(N,)``
    (:func:`sentence_losses`; the target ends with EOS) of every pair of ``dataset``, in its
    order, under ``model`` in eval mode; batched by :func:`length_batches`. ``progress``: a
    bar in sentences, labelled ``desc``. A failed solve (raised or flagged) is a
    ``FloatingPointError`` naming the pairs."""
    if len(dataset) == 0:
        raise ValueError("score_sentences got no pairs")
    if _per_sentence_solves(model):
        batch_tokens = 1
    training = model.training
    model.eval()
    device = next(model.parameters()).device
    nfe = np.zeros(len(dataset), dtype=np.int64)
    losses = np.zeros(len(dataset), dtype=np.float64)
    discrete = False
    bar = tqdm(total=len(dataset), desc=desc, unit="sent", disable=not progress, leave=False)
    try:
        for rows in length_batches(dataset.source_sizes, dataset.target_sizes, batch_tokens):
            batch = dataset.batch(rows.tolist())
            try:
                logits, stats = model(
                    batch.src.to(device), batch.tgt_in.to(device), with_stats=True
                )
            except SolverError as err:
                raise _solve_failed(rows, err.result.stats, str(err)) from None
            if stats is not None and not stats.ok:  # on_failure: flag
                raise _solve_failed(rows, stats, "flagged by the solver")
            loss = sentence_losses(logits, batch.tgt_out.to(device), model.config.pad_id)
            losses[rows] = loss.double().cpu().numpy()
            if stats is None:
                discrete = True
            else:
                nfe[rows] = stats.nfe.cpu().numpy()
            bar.update(len(rows))
    finally:
        bar.close()
        model.train(training)
    return (None if discrete else nfe), losses


# ---------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class DepthReport:
    """One split's pairs, in the split's order: ``(N,)`` arrays of the 1-based line numbers,
    source tokens (without EOS, as the run's tokenizer cuts them), the run's NFE, the reference's
    and the run's own mean target NLL (nats per token), and where they came from."""

    run: str
    reference: str
    checkpoint: str
    reference_checkpoint: str
    split: Split
    files: tuple[str, ...]
    same_tokenizers: bool
    """Whether the two runs tokenize with the same models (both sides)."""
    line_numbers: np.ndarray
    source_tokens: np.ndarray
    nfe: np.ndarray
    reference_loss: np.ndarray
    loss: np.ndarray

    def __len__(self) -> int:
        return len(self.nfe)

    def correlations(self) -> dict[str, float | None]:
        """Spearman correlations; ``nfe_vs_reference_loss_given_length`` is the
        :func:`partial_spearman` of NFE and reference loss with source length regressed out."""
        return {
            "nfe_vs_source_tokens": spearman(self.nfe, self.source_tokens),
            "nfe_vs_reference_loss": spearman(self.nfe, self.reference_loss),
            "nfe_vs_reference_loss_given_length": partial_spearman(
                self.nfe, self.reference_loss, self.source_tokens
            ),
            "nfe_vs_loss": spearman(self.nfe, self.loss),
            "reference_loss_vs_source_tokens": spearman(self.reference_loss, self.source_tokens),
        }

    def summary(self) -> dict[str, Any]:
        """What ``depth.json`` holds but the command: counts, NFE mean/std (over sentences,
        ddof 0)/min/max, the correlations and mean NFE per source length and per difficulty
        decile."""
        by_length = binned_means(self.source_tokens, self.nfe)
        by_difficulty = binned_means(self.reference_loss, self.nfe, DIFFICULTY_BINS)
        return {
            "run": self.run,
            "reference": self.reference,
            "checkpoint": self.checkpoint,
            "reference_checkpoint": self.reference_checkpoint,
            "split": self.split,
            "files": list(self.files),
            "same_tokenizers": self.same_tokenizers,
            "sentences": len(self),
            "nfe": {
                "mean": float(self.nfe.mean()),
                "std": float(self.nfe.std()),
                "min": int(self.nfe.min()),
                "max": int(self.nfe.max()),
            },
            "source_tokens": {
                "mean": float(self.source_tokens.mean()),
                "min": int(self.source_tokens.min()),
                "max": int(self.source_tokens.max()),
            },
            "reference_loss_mean": float(self.reference_loss.mean()),
            "loss_mean": float(self.loss.mean()),
            "spearman": self.correlations(),
            "nfe_by_length": [
                {"source_tokens": int(x), "sentences": n, "nfe_mean": y} for x, n, y in by_length
            ],
            "nfe_by_difficulty": [
                {"reference_loss_mean": x, "sentences": n, "nfe_mean": y}
                for x, n, y in by_difficulty
            ],
        }


@dataclass(frozen=True)
class _Run:
    """A run's best checkpoint: model (eval mode), tokenizers and data config."""

    model_dir: Path
    model: Seq2Seq
    tokenizers: TokenizerPair
    data: DataConfig


def _load(run: str | Path) -> _Run:
    model_dir = resolve_model_dir(Path(run), "best", model_type="seq2seq")
    check(
        (model_dir / CONFIG_NAME).is_file(),
        f"{model_dir} has no {CONFIG_NAME} (its data is unknown): give a training run "
        "directory or one of its checkpoints",
    )
    model = Seq2Seq.from_pretrained(model_dir).eval()
    data = load_train_config(model_dir / CONFIG_NAME).data
    return _Run(model_dir, model, TokenizerPair.load(model_dir), data)


def _split_source(data: DataConfig, split: Split) -> tuple[object, ...]:
    """What decides which pairs a split is: its files (resolved), format and JSON fields."""
    files = tuple(str(data.path(f).resolve()) for f in getattr(data, split))
    fields = (data.source_field, data.target_field) if data.format == "jsonl" else ()
    return (data.format, files, fields)


def _check_runs(
    run: str | Path, node: _Run, reference: str | Path, ref: _Run, split: Split
) -> None:
    method = node.model.config.encoder_method
    check(
        method == CONTINUOUS,
        f"{run} has a {method!r} encoder, whose depth is the same for every sentence: "
        "--depth-against needs a run with model.encoder_method: continuous",
    )
    steps = node.model.config.continuous.fixed_steps
    check(
        steps is None,
        f"{run}'s continuous encoder takes fixed_steps={steps}: every sentence gets the same "
        "NFE; only an adaptive solver's depth can track difficulty",
    )
    other = "valid" if split == "test" else "test"
    for path, loaded in ((run, node), (reference, ref)):
        check(
            bool(getattr(loaded.data, split)),
            f"the training config of {path} names no data.{split} files; try --split {other}",
        )
    mine, theirs = _split_source(node.data, split), _split_source(ref.data, split)
    check(
        mine == theirs,
        f"{reference} reads data.{split} from {list(theirs[1])} ({theirs[0]}), {run} from "
        f"{list(mine[1])} ({mine[0]}): the reference's losses would be of other sentences",
    )


def depth_vs_difficulty(
    run: str | Path,
    reference: str | Path,
    *,
    split: Split = "test",
    limit: int | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = False,
) -> DepthReport:
    """NFE, source length and per-sentence losses of the best checkpoints of a
    continuous-encoder run and of ``reference`` (its Euler twin: same split files) on the
    first ``limit`` pairs (all: ``None``) of ``split``; see the module docstring for batching.

    Refused (``ConfigError``) when ``run``'s encoder is not continuous or takes fixed steps,
    when either config names no files for ``split``, or when the two read other files.
    """
    check(split in ("test", "valid"), f"--split must be test or valid, got {split!r}")
    check(limit is None or limit >= 1, f"--limit must be >= 1, got {limit}")
    check(batch_tokens >= 1, f"--batch-tokens must be >= 1, got {batch_tokens}")
    node, ref = _load(run), _load(reference)
    _check_runs(run, node, reference, ref, split)
    pairs = read_checked_split(node.data, split)
    if limit is not None:
        pairs = pairs.head(limit)
    encoded = []
    for loaded in (node, ref):
        dataset = encode_split(loaded.data, pairs, loaded.tokenizers, filter_lengths=False)
        encoded.append(fit_to_positions(dataset, loaded.model.config.max_positions, split))
    nfe, loss = score_sentences(
        node.model, encoded[0], batch_tokens=batch_tokens, progress=progress, desc="run"
    )
    _, reference_loss = score_sentences(
        ref.model, encoded[1], batch_tokens=batch_tokens, progress=progress, desc="reference"
    )
    assert nfe is not None  # a continuous encoder returns its stats
    same = all(
        a.to_bytes() == b.to_bytes()
        for a, b in (
            (node.tokenizers.source, ref.tokenizers.source),
            (node.tokenizers.target, ref.tokenizers.target),
        )
    )
    return DepthReport(
        run=str(run),
        reference=str(reference),
        checkpoint=str(node.model_dir),
        reference_checkpoint=str(ref.model_dir),
        split=split,
        files=tuple(str(node.data.path(f)) for f in getattr(node.data, split)),
        same_tokenizers=same,
        line_numbers=np.asarray(pairs.line_numbers, dtype=np.int64),
        source_tokens=encoded[0].source_lengths.astype(np.int64),
        nfe=nfe,
        reference_loss=reference_loss,
        loss=loss,
    )


def write_depth_report(report: DepthReport, out: str | Path, *, command: str = "") -> Path:
    """Write :data:`DEPTH_FILES` into the existing directory ``out``: ``depth.csv`` (one row
    per sentence), ``depth.json`` (``report.summary()`` and ``command``) and the two plots."""
    out = Path(out)
    with open(out / "depth.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "line", "source_tokens", "nfe", "reference_loss", "loss"])
        for i in range(len(report)):
            writer.writerow(
                [
                    i,
                    int(report.line_numbers[i]),
                    int(report.source_tokens[i]),
                    int(report.nfe[i]),
                    f"{report.reference_loss[i]:.6f}",
                    f"{report.loss[i]:.6f}",
                ]
            )
    summary = {"command": command, **report.summary()}
    (out / "depth.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    rho = summary["spearman"]
    plot_nfe(
        report.source_tokens,
        report.nfe,
        binned_means(report.source_tokens, report.nfe),
        xlabel="source tokens",
        title=f"NFE against source length (Spearman {_rho(rho['nfe_vs_source_tokens'])})",
        path=out / "nfe_vs_length.png",
    )
    plot_nfe(
        report.reference_loss,
        report.nfe,
        binned_means(report.reference_loss, report.nfe, DIFFICULTY_BINS),
        xlabel=f"loss per sentence (nats/token) of {_short(report.reference)}",
        title=f"NFE against difficulty (Spearman {_rho(rho['nfe_vs_reference_loss'])}, "
        f"given length {_rho(rho['nfe_vs_reference_loss_given_length'])})",
        path=out / "nfe_vs_difficulty.png",
    )
    return out


def _short(run: str) -> str:
    """The last two parts of a run's path (``euler/seed1`` in an experiment)."""
    return "/".join(Path(run).parts[-2:])


def _rho(value: float | None) -> str:
    return "undefined" if value is None else f"{value:+.2f}"


def depth_command(
    run: str | Path,
    reference: str | Path,
    out: str | Path,
    *,
    split: Split,
    limit: int | None,
    batch_tokens: int,
) -> str:
    """The ``odet analyze`` command line of these arguments."""
    argv = ["odet", "analyze", str(run), "--depth-against", str(reference), "--out", str(out)]
    argv += ["--split", split, "--batch-tokens", str(batch_tokens)]
    argv += ["--limit", str(limit)] if limit is not None else []
    return shlex.join(argv)


def analyze_depth(
    run: str | Path,
    reference: str | Path,
    out: str | Path,
    *,
    split: Split = "test",
    limit: int | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = False,
) -> DepthReport:
    """``odet analyze RUN --depth-against REFERENCE --out OUT``: :func:`depth_vs_difficulty`
    written by :func:`write_depth_report`; ``out`` is checked first and written only once
    everything is computed (never a directory odet did not write)."""
    out_dir = check_output_dir(out, "--out", command="analyze")
    report = depth_vs_difficulty(
        run, reference, split=split, limit=limit, batch_tokens=batch_tokens, progress=progress
    )
    claim_output_dir(out_dir, "analyze")
    command = depth_command(
        run, reference, out, split=split, limit=limit, batch_tokens=batch_tokens
    )
    write_depth_report(report, out_dir, command=command)
    return report
