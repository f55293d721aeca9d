"""``odet analyze``: the probes of :mod:`odet.models.probes` on the best checkpoint of each run
directory, with the coefficients logged over training, written as ``analysis.json`` and plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odet.analysis.plots import plot_coefficients, plot_layer_weights, plot_update_sizes
from odet.data import Batch, DataError, ParallelDataset, TokenizerPair
from odet.io import check_output_dir, claim_output_dir
from odet.models import Seq2Seq
from odet.models.probes import coefficient_snapshot, gate_statistics, update_sizes
from odet.training import load_train_config, resolve_model_dir
from odet.training.metrics import MetricsLog
from odet.training.prepare import read_split


def _batch(
    model: Seq2Seq, tokenizers: TokenizerPair, sources: list[str], targets: list[str]
) -> Batch:
    """One batch of the pairs, each side clipped to the model's positions."""
    dataset = ParallelDataset.from_texts(sources, targets, tokenizers)
    limit = model.config.max_positions - 1
    clipped = ParallelDataset(
        [dataset[i][0][:limit] for i in range(len(dataset))],
        [dataset[i][1][:limit] for i in range(len(dataset))],
    )
    return clipped.batch(list(range(len(clipped))))


def _has_analysis(out: Path) -> bool:
    """Whether ``out`` holds an ``analysis.json`` odet wrote (before the output marker)."""
    try:
        report = json.loads((out / "analysis.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and all(
        isinstance(entry, dict) and "update_sizes" in entry for entry in report.values()
    )


def run_labels(runs: Sequence[str | Path]) -> list[str]:
    """One distinct label per run: the fewest trailing parts of its resolved path that tell it
    from every other (``seed1``, else ``euler/seed1`` ...)."""
    parts = [Path(run).resolve().parts for run in runs]
    for k in range(1, max(map(len, parts), default=0) + 1):
        labels = ["/".join(p[-k:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    raise ValueError(f"two of the runs are the same directory: {[str(r) for r in runs]}")


def _check_runs(runs: Sequence[str | Path], sentences: int) -> None:
    if isinstance(runs, str | Path) or not all(isinstance(r, str | Path) for r in runs):
        raise TypeError(f"runs must be a list of run directories, got {runs!r}")
    if not runs:
        raise ValueError("analyze_runs needs at least one run directory")
    if isinstance(sentences, bool) or not isinstance(sentences, int):
        raise TypeError(f"sentences must be an int, got {sentences!r}")
    if sentences < 1:
        raise ValueError(f"--sentences must be >= 1, got {sentences}")


def coefficient_history(
    metrics: Path, snapshot: dict[str, list[list[float]]]
) -> list[dict[str, Any]]:
    """The ``coefficients`` records of ``metrics`` (a run's ``metrics.jsonl``), each checked
    to have the layout of ``snapshot`` (the model's :func:`coefficient_snapshot`): an int
    ``step`` and, per key, one row of numbers per block. A record of another layout (another
    model's, or edited) is a ``DataError`` naming the file and the step."""
    history = [r for r in MetricsLog(metrics).read() if r.get("event") == "coefficients"]
    for record in history:
        step = record.get("step")
        fits = isinstance(step, int) and not isinstance(step, bool)
        for key, rows in snapshot.items():
            value = record.get(key)
            fits = fits and (
                isinstance(value, list)
                and len(value) == len(rows)
                and all(isinstance(row, list) and all(map(_is_number, row)) for row in value)
            )
        if not fits:
            raise DataError(
                f"{metrics}: the coefficients record of step {step!r} does not fit the model "
                f"(expected an int step and, per block, a list of numbers for {list(snapshot)})"
            )
    return history


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def analyze_runs(
    runs: Sequence[str | Path], out: str | Path, *, sentences: int = 64
) -> dict[str, Any]:
    """``odet analyze``: update sizes, coefficients and gate statistics of each run's best
    checkpoint on its first ``sentences`` validation pairs (text or JSON Lines data), and the
    coefficients logged over training; writes ``analysis.json``, ``update_sizes.png`` and
    ``coefficients.png`` to ``out``, and ``layer_weights.png`` when a run has a DLCL stack.
    Each run is labelled by :func:`run_labels`; a checkpoint given twice is refused."""
    _check_runs(runs, sentences)
    out_dir = check_output_dir(out, "--out", owned=_has_analysis, command="analyze")
    loaded: list[dict[str, Any]] = []
    seen: dict[Path, str | Path] = {}
    for run in runs:  # every run loads and is measured before anything is written
        model_dir = resolve_model_dir(Path(run), "best", model_type="seq2seq")
        if model_dir.resolve() in seen:
            twin = seen[model_dir.resolve()]
            raise ValueError(
                f"{run} and {twin} are the same checkpoint ({model_dir}); give it once"
            )
        seen[model_dir.resolve()] = run
        model = Seq2Seq.from_pretrained(model_dir).eval()
        tokenizers = TokenizerPair.load(model_dir)
        config = load_train_config(model_dir / "train_config.yaml")
        pairs = read_split(config.data, config.data.valid or config.data.train).head(sentences)
        batch = _batch(model, tokenizers, list(pairs.source), list(pairs.target))
        snapshot = coefficient_snapshot(model, batch.src, batch.tgt_in)
        entry = {
            "checkpoint": str(model_dir),
            "encoder_method": model.config.encoder_method,
            "decoder_method": model.config.decoder_method,
            "update_sizes": update_sizes(model, batch.src, batch.tgt_in),
            "coefficients": snapshot,
            "gates": gate_statistics(model, batch.src, batch.tgt_in),
            "coefficient_history": coefficient_history(Path(run) / "metrics.jsonl", snapshot),
        }
        loaded.append(entry)
    report = dict(zip(run_labels(runs), loaded, strict=True))
    claim_output_dir(out_dir, "analyze")
    (out_dir / "analysis.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_update_sizes(report, out_dir / "update_sizes.png")
    plot_coefficients(report, out_dir / "coefficients.png")
    plot_layer_weights(report, out_dir / "layer_weights.png")
    return report
