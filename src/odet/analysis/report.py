"""``odet analyze``: the probes of :mod:`odet.models.probes` on the best checkpoint of each run
directory, with the coefficients logged over training, written as ``analysis.json`` and plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from odet.analysis.plots import plot_coefficients, plot_layer_weights, plot_update_sizes
from odet.data import Batch, ParallelDataset, TokenizerPair
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


def analyze_runs(runs: list[str], out: str, *, sentences: int = 64) -> dict[str, Any]:
    """``odet analyze``: update sizes, coefficients and gate statistics of each run's best
    checkpoint on its first ``sentences`` validation pairs (text or JSON Lines data), and the
    coefficients logged over training; writes ``analysis.json``, ``update_sizes.png`` and
    ``coefficients.png`` to ``out``, and ``layer_weights.png`` when a run has a DLCL stack."""
    if sentences < 1:
        raise ValueError(f"--sentences must be >= 1, got {sentences}")
    out_dir = check_output_dir(out, "--out", owned=_has_analysis)
    loaded = []
    for run in runs:  # every run loads before anything is written
        model_dir = resolve_model_dir(Path(run), "best")
        model = Seq2Seq.from_pretrained(model_dir).eval()
        tokenizers = TokenizerPair.load(model_dir)
        config = load_train_config(model_dir / "train_config.yaml")
        pairs = read_split(config.data, config.data.valid or config.data.train).head(sentences)
        loaded.append((Path(run), model_dir, model, tokenizers, pairs))
    claim_output_dir(out_dir, "analyze")
    report: dict[str, Any] = {}
    names = [Path(run).name for run in runs]
    unique = len(set(names)) == len(names)
    for run_dir, model_dir, model, tokenizers, pairs in loaded:
        label = run_dir.name if unique else f"{run_dir.parent.name}/{run_dir.name}"
        batch = _batch(model, tokenizers, list(pairs.source), list(pairs.target))
        history = [
            r for r in MetricsLog(run_dir / "metrics.jsonl").read() if r["event"] == "coefficients"
        ]
        report[label] = {
            "checkpoint": str(model_dir),
            "encoder_method": model.config.encoder_method,
            "decoder_method": model.config.decoder_method,
            "update_sizes": update_sizes(model, batch.src, batch.tgt_in),
            "coefficients": coefficient_snapshot(model, batch.src, batch.tgt_in),
            "gates": gate_statistics(model, batch.src, batch.tgt_in),
            "coefficient_history": history,
        }
    (out_dir / "analysis.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_update_sizes(report, out_dir / "update_sizes.png")
    plot_coefficients(report, out_dir / "coefficients.png")
    plot_layer_weights(report, out_dir / "layer_weights.png")
    return report
