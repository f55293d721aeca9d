"""``odet experiment CONFIG`` for language models: variants × seeds of a ``task: lm`` recipe.

The experiment config is the translation one (:mod:`odet.experiments.config`: ``base``,
``output_dir``, ``seeds``, ``overrides``, ``variants``, ``baselines``), with a base config of
``task: lm``; runs live in ``<output_dir>/<variant>/seed<k>`` and finished ones are reused when
their config matches. The report, rewritten after every run:

- ``results.md`` / ``results.csv``: per variant its layers, parameters, layer evaluations per
  token (the stack's stages summed over blocks), seeds, updates, wall time and the exact
  validation loss (nats per token, mean ± std over seeds); then per variant its difference from
  its baseline, seed against seed, with the paired t-test over the seeds;
- ``loss_vs_time.png``: the validation-loss estimates against training wall-clock.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from odet.evaluation import paired_t_test
from odet.experiments.config import ExperimentConfig, is_finished, run_dir
from odet.experiments.report import mean_std, plot_against_time
from odet.models import CausalLM
from odet.training import LMTrainConfig, load_any_config


@dataclass(frozen=True)
class LMRunResult:
    """One finished language-model run of an experiment."""

    variant: str
    seed: int
    parameters: int
    layers: int
    layer_evaluations: int
    """Evaluations of a layer per token in one forward pass (stages summed over blocks)."""
    updates: int
    wall_seconds: float
    valid_loss: float
    """Exact validation loss, nats per token."""
    run: Path
    """The run's directory (in ``output_dir``, or an exported copy)."""


def lm_results(config: ExperimentConfig, exported: Path | None = None) -> list[LMRunResult]:
    """Every finished run of the experiment (in ``output_dir``, or in the export
    ``exported``), seed by seed in variant order."""
    return [
        lm_result(config, variant, seed, run_dir(config, variant, seed, exported))
        for seed in config.seeds
        for variant in config.variants
        if is_finished(config, variant, seed, exported)
    ]


def lm_result(config: ExperimentConfig, variant: str, seed: int, run: Path) -> LMRunResult:
    """The figures of the finished run in ``run`` (its ``summary.json`` and its model's
    shape)."""
    train_config = load_any_config(config.base, config.run_overrides(variant, seed))
    assert isinstance(train_config, LMTrainConfig)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    model_config = train_config.model_config(int(summary["vocab_size"]))
    with torch.device("meta"):
        stages = CausalLM(model_config).stack.stage_counts
    return LMRunResult(
        variant=variant,
        seed=seed,
        parameters=int(summary["parameters"]),
        layers=model_config.layers,
        layer_evaluations=sum(stages),
        updates=int(summary["steps"]),
        wall_seconds=float(summary["elapsed_seconds"]),
        valid_loss=float(summary["valid_loss"]),
        run=run,
    )


def write_lm_report(
    config: ExperimentConfig, results: list[LMRunResult], out: Path | None = None
) -> Path:
    """``results.md``, ``results.csv`` and ``loss_vs_time.png`` under ``out`` (default:
    ``output_dir``)."""
    out = Path(config.output_dir) if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    columns = [
        "variant",
        "seed",
        "parameters",
        "layers",
        "layer_evaluations",
        "updates",
        "wall_seconds",
        "valid_loss",
    ]
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for r in results:
            writer.writerow([getattr(r, c) for c in columns])
    lines = [
        f"# Experiment `{Path(config.output_dir).name}`",
        "",
        f"Base config `{config.base}`, seeds {list(config.seeds)}, overrides "
        f"`{' '.join(config.overrides) or '–'}`. Validation loss: the exact pass over the whole "
        "validation split, nats per token, mean ± std over seeds.",
        "",
        "| variant | layers | params | layer evaluations / token | seeds | updates | "
        "wall time (s) | valid loss (exact) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in config.variants:
        rs = [r for r in results if r.variant == variant]
        if rs:
            lines.append(
                f"| {variant} | {rs[0].layers} | {rs[0].parameters:,} | "
                f"{rs[0].layer_evaluations} | {len(rs)} | {rs[0].updates} | "
                f"{mean_std([r.wall_seconds for r in rs], 0)} | "
                f"{mean_std([r.valid_loss for r in rs], 4)} |"
            )
    lines += paired_loss_differences(config, results)
    lines += ["", f"Runs: {', '.join(f'{r.variant}/seed{r.seed}' for r in results)}.", ""]
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    plot_against_time(
        config, results, out / "loss_vs_time.png", "loss", "validation loss (estimate)"
    )
    return out / "results.md"


def paired_loss_differences(config: ExperimentConfig, results: list[LMRunResult]) -> list[str]:
    """Rows of each variant's validation loss minus its baseline's, paired by seed, with the
    paired t-test over the seeds both have finished (``–`` with fewer than two pairs)."""
    loss = {(r.variant, r.seed): r.valid_loss for r in results}
    rows = []
    for variant in config.variants:
        baseline = config.baseline(variant)
        seeds = [s for s in config.seeds if (variant, s) in loss and (baseline, s) in loss]
        if baseline == variant or not seeds:
            continue
        ours = [loss[variant, s] for s in seeds]
        theirs = [loss[baseline, s] for s in seeds]
        delta = statistics.fmean(o - t for o, t in zip(ours, theirs))
        p = f"{paired_t_test(theirs, ours).p_value:.2g}" if len(seeds) > 1 else "–"
        per_seed = ", ".join(f"seed {s}: {o - t:+.4f}" for s, o, t in zip(seeds, ours, theirs))
        rows.append(f"| {variant} | {baseline} | {len(seeds)} | {delta:+.4f} | {p} | {per_seed} |")
    if not rows:
        return []
    return [
        "",
        "Difference from the baseline in exact validation loss (negative: better), paired by "
        "seed (both runs of a pair share the seed of initialisation and batch order); p: "
        "two-sided paired t-test over the seeds, which measures the variation between training "
        "seeds.",
        "",
        "| variant | baseline | pairs | mean Δ | paired t-test p | per seed |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
