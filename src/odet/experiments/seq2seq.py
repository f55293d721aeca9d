"""The translation experiment's results and report: per run its valid and test BLEU (and the
checkpoint-averaged test decode), per variant mean ± std over seeds and the paired
differences from its baseline (:mod:`odet.experiments.runner` trains the runs)."""

from __future__ import annotations

import csv
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from odet.evaluation import corpus_bleu, paired_bleu_test, tokenize_13a_lower, tokenized_bleu
from odet.evaluation.files import read_all_lines
from odet.experiments.config import ExperimentConfig, is_finished, run_dir
from odet.experiments.report import mean_std, plot_against_time
from odet.inference import Translator, load_model_and_tokenizers
from odet.training import load_train_config
from odet.training.average import average_checkpoints
from odet.training.metrics import MetricsLog


@dataclass
class RunResult:
    variant: str
    seed: int
    parameters: int
    updates: int
    wall_seconds: float
    valid_bleu: float | None
    test_bleu: float | None
    test_bleu_tok: float | None
    run: Path
    """The run's directory (in ``output_dir``, or an exported copy)."""
    averaged: dict[str, float] = field(default_factory=dict)
    # the lower-cased 13a-tokenized test output behind the compared "tok" score, and references
    compared: list[str] | None = field(default=None, repr=False)
    references: list[str] | None = field(default=None, repr=False)


def finished_results(config: ExperimentConfig, exported: Path | None = None) -> list[RunResult]:
    """Results of every run of the experiment that has finished (has ``summary.json``), in
    ``output_dir`` or, given ``exported``, in that export
    (:func:`~odet.experiments.runner.export_experiment`)."""
    return [
        _result(config, variant, seed, run_dir(config, variant, seed, exported))
        for seed in config.seeds
        for variant in config.variants
        if is_finished(config, variant, seed, exported)
    ]


def _result(config: ExperimentConfig, variant: str, seed: int, run: Path) -> RunResult:
    """The scores of the finished run in ``run`` (the checkpoint-averaged test decode is
    cached)."""
    train_config = load_train_config(config.base, config.run_overrides(variant, seed))
    summary_file = run / "summary.json"
    summary = json.loads(summary_file.read_text())
    references = (
        read_all_lines(train_config.data.path(train_config.data.test[1]))
        if train_config.data.test and train_config.data.format == "text"
        else None
    )
    test_tok = None
    compared = None
    if references is not None and (run / "test.hyp").is_file():
        hyps = read_all_lines(run / "test.hyp")
        test_tok = _tok_bleu(hyps, references)
        compared = hyps
    averaged: dict[str, float] = {}
    if config.average_last and references is not None:
        averaged = _averaged_test(train_config, run, config.average_last, references)
        hyp_file = run / f"test.avg{config.average_last}.hyp"
        compared = read_all_lines(hyp_file) if averaged else None
    valid = [r for r in MetricsLog(run / "metrics.jsonl").read() if r["event"] == "valid"]
    return RunResult(
        variant=variant,
        seed=seed,
        parameters=int(summary["parameters"]),
        updates=int(summary["steps"]),
        wall_seconds=float(summary["elapsed_seconds"]),
        valid_bleu=max((r["bleu"] for r in valid if r.get("bleu") is not None), default=None),
        test_bleu=summary.get("test", {}).get("bleu"),
        test_bleu_tok=test_tok,
        run=run,
        averaged=averaged,
        compared=[tokenize_13a_lower(h) for h in compared] if compared is not None else None,
        references=[tokenize_13a_lower(r) for r in references] if references else None,
    )


def _tok_bleu(hyps: list[str], refs: list[str]) -> float:
    return tokenized_bleu(
        [tokenize_13a_lower(h) for h in hyps], [tokenize_13a_lower(r) for r in refs]
    ).score


def _averaged_test(config: Any, run: Path, last: int, references: list[str]) -> dict[str, float]:
    """Average the last checkpoints, decode the test set with the run's search settings.

    The decode's wall time goes to ``test.avg{last}.time.json`` (seconds, sentences, torch
    threads) and comes back as ``decode_seconds``: the cost of a method at inference, which a
    continuous encoder's adaptive depth changes. Runs decoded before it was recorded have none.
    """
    out = run / f"avg{last}"
    hyp_file = run / f"test.avg{last}.hyp"
    time_file = run / f"test.avg{last}.time.json"
    if not hyp_file.is_file():
        if not (run / "checkpoints" / "index.json").is_file():  # an export keeps no weights
            return {}
        index = json.loads((run / "checkpoints" / "index.json").read_text())
        if len(index["checkpoints"]) < last:
            return {}
        if not (out / "config.json").is_file():
            average_checkpoints(run, last, out)
        translator = Translator(*load_model_and_tokenizers(out), config.generation)
        sources = read_all_lines(config.data.path(config.data.test[0]))
        started = time.perf_counter()
        hyps = translator.translate(sources)
        seconds = time.perf_counter() - started
        timing = {"seconds": seconds, "sentences": len(sources), "threads": torch.get_num_threads()}
        time_file.write_text(json.dumps(timing) + "\n", encoding="utf-8")
        hyp_file.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    hyps = read_all_lines(hyp_file)
    scores = {"bleu": corpus_bleu(hyps, references).score, "bleu_tok": _tok_bleu(hyps, references)}
    if time_file.is_file():
        scores["decode_seconds"] = float(json.loads(time_file.read_text())["seconds"])
    return scores


def write_report(
    config: ExperimentConfig, results: list[RunResult], out: Path | None = None
) -> Path:
    """``results.md``, ``results.csv`` and ``bleu_vs_time.png`` under ``out`` (default:
    ``output_dir``)."""
    out = Path(config.output_dir) if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "variant",
                "seed",
                "parameters",
                "updates",
                "wall_seconds",
                "valid_bleu",
                "test_bleu",
                "test_bleu_tok",
                "avg_test_bleu",
                "avg_test_bleu_tok",
                "avg_test_decode_seconds",
            ]
        )
        for r in results:
            writer.writerow(
                [
                    r.variant,
                    r.seed,
                    r.parameters,
                    r.updates,
                    round(r.wall_seconds),
                    r.valid_bleu,
                    r.test_bleu,
                    r.test_bleu_tok,
                    r.averaged.get("bleu"),
                    r.averaged.get("bleu_tok"),
                    r.averaged.get("decode_seconds"),
                ]
            )
    lines = [
        f"# Experiment `{Path(config.output_dir).name}`",
        "",
        f"Base config `{config.base}`, seeds {list(config.seeds)}, overrides "
        f"`{' '.join(config.overrides) or '–'}`. Mean ± std over seeds; test BLEU is sacreBLEU "
        'on detokenized output, "tok" is BLEU on lower-cased 13a-tokenized text (the '
        "published-Multi30k convention)"
        + (
            f'; "avg{config.average_last}" decodes with the average of the last '
            f"{config.average_last} checkpoints."
            if config.average_last
            else "."
        ),
        "",
        "| variant | params | updates | wall time (min) | valid BLEU (greedy) | test BLEU | "
        "test BLEU tok | "
        + (
            f"avg{config.average_last} BLEU | avg{config.average_last} tok | "
            f"avg{config.average_last} test decode (s) |"
            if config.average_last
            else ""
        ),
        "|---|---|---|---|---|---|---|" + ("---|---|---|" if config.average_last else ""),
    ]
    for variant in config.variants:
        rs = [r for r in results if r.variant == variant]
        if not rs:
            continue
        row = (
            f"| {variant} | {rs[0].parameters:,} | {rs[0].updates} | "
            f"{mean_std([r.wall_seconds / 60 for r in rs])} | "
            f"{mean_std([r.valid_bleu for r in rs])} | {mean_std([r.test_bleu for r in rs])} | "
            f"{mean_std([r.test_bleu_tok for r in rs])} |"
        )
        if config.average_last:
            row += (
                f" {mean_std([r.averaged.get('bleu') for r in rs])} |"
                f" {mean_std([r.averaged.get('bleu_tok') for r in rs])} |"
                f" {mean_std([r.averaged.get('decode_seconds') for r in rs], digits=1)} |"
            )
        lines.append(row)
    lines += _paired_differences(config, results)
    lines += ["", f"Runs: {', '.join(f'{r.variant}/seed{r.seed}' for r in results)}.", ""]
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    plot_against_time(config, results, out / "bleu_vs_time.png")
    return out / "results.md"


def _paired_differences(config: ExperimentConfig, results: list[RunResult]) -> list[str]:
    """Per variant, its tokenized test BLEU minus the first variant's, seed by seed (the
    comparison the seeds are for: both runs of a pair share data order and initial seed), each
    with the p-value of a paired approximate-randomization test on the test sentences; with two
    or more seed pairs, also one test over all of them (each seed's test set appended to the
    last, so a sentence is paired with its own seed's baseline translation)."""

    def tok(r: RunResult) -> float | None:
        return r.averaged.get("bleu_tok") if config.average_last else r.test_bleu_tok

    rows = []
    for variant in config.variants:
        baseline = config.baseline(variant)
        if baseline == variant:
            continue
        base = {r.seed: r for r in results if r.variant == baseline and tok(r) is not None}
        cells = {}
        pairs: list[tuple[int, list[str], list[str], list[str]]] = []
        for r in results:
            b = base.get(r.seed)
            if r.variant != variant or b is None or tok(r) is None:
                continue
            cell = f"seed {r.seed}: {tok(r) - tok(b):+.2f}"
            if r.compared is not None and b.compared is not None and r.references:
                test = paired_bleu_test(b.compared, r.compared, r.references, tokenize="none")
                cell += f" (p = {test.p_value:.2g})"
                pairs.append((r.seed, b.compared, r.compared, r.references))
            cells[r.seed] = (tok(r) - tok(b), cell)
        if cells:
            mean = statistics.mean(delta for delta, _ in cells.values())
            per_seed = ", ".join(cell for _, (_, cell) in sorted(cells.items()))
            rows.append(f"| {variant} | {mean:+.2f} | {_pooled(pairs)} | {per_seed} |")
    if not rows:
        return []
    which = f"avg{config.average_last} tok" if config.average_last else "test BLEU tok"
    named = {config.baseline(v) for v in config.variants}
    against = f"`{named.pop()}`" if len(named) == 1 else "each variant's baseline (`baselines`)"
    return [
        "",
        f"Difference from {against} in {which}, paired by seed. p: paired approximate "
        "randomization over the test sentences (sacrebleu, 10,000 trials), the chance of so "
        "large a difference between equally good systems; it measures test-set noise, not the "
        'variation between training seeds. "All seeds" is one test over every seed\'s '
        "translations of the test set together (BLEU of the joined outputs), so it has the "
        "power of all the runs; it still does not say how a new seed would do.",
        "",
        "| variant | mean Δ | all seeds | per seed |",
        "|---|---|---|---|",
        *rows,
    ]


def _pooled(pairs: list[tuple[int, list[str], list[str], list[str]]]) -> str:
    """Δ and p of one paired test over the joined test outputs of every (seed, baseline
    outputs, variant outputs, references) pair of runs; "–" with fewer than two pairs."""
    if len(pairs) < 2:
        return "–"
    baseline: list[str] = []
    system: list[str] = []
    references: list[str] = []
    for _, base_hyps, hyps, refs in sorted(pairs, key=lambda pair: pair[0]):
        baseline += base_hyps
        system += hyps
        references += refs
    test = paired_bleu_test(baseline, system, references, tokenize="none")
    return f"{test.delta:+.2f} (p = {test.p_value:.2g})"
