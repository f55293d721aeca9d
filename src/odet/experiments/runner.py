"""``odet experiment CONFIG``: train several variants × seeds of one recipe and compare them.

An experiment is a base training config plus named variants (each a set of ``--set``-style
overrides) and a list of seeds::

    base: configs/multi30k/euler.yaml
    output_dir: runs/experiments/multi30k-encoders
    seeds: [1, 2]
    overrides: ["data.data_dir=../shared/data/multi30k"]     # applied to every run
    average_last: 5                                         # checkpoint averaging for the test
    variants:
      euler:     {}
      rk2-gated: {model.encoder_method: rk2, model.coefficients: gated}

Each run lives in ``<output_dir>/<variant>/seed<k>`` and is resumed if it was stopped; finished
runs are reused (not retrained) when their saved ``config.yaml`` matches the run's config in
every key a resume may not change, and refused otherwise, so the command can be run again after
an interruption. ``baselines`` maps a variant to the variant it is compared with, seed by seed
(default: the first variant). A base config with ``task: lm`` makes a language-model experiment
(:mod:`odet.experiments.lm`: exact validation loss, paired t-test). After every run the
translation report is rewritten: ``results.md`` / ``results.csv`` (per variant: parameters,
updates, wall time, valid BLEU, test BLEU — sacreBLEU and lower-cased tokenized — and the
checkpoint-averaged test decode's wall time, mean ± std over seeds) and ``bleu_vs_time.png``
(validation BLEU against training wall-clock time).

Runs are too large to keep in a repository (checkpoints), their results are not: ``odet
experiment CONFIG --export DIR`` (:func:`export_experiment`) copies each finished run's result
files — config, metrics, log, summary, test hypotheses; no checkpoints, averaged weights or
tokenizer — into ``DIR/<variant>-seed<k>/`` and writes the report there over every run that
``DIR`` holds, so runs trained on several machines or in several sessions gather in one place,
and the report can be rebuilt from the exported files alone.
"""

from __future__ import annotations

import filecmp
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odet.config import check, load_yaml, suggest
from odet.data import DataError
from odet.experiments.config import ExperimentConfig, is_finished, is_lm_experiment, run_dir
from odet.experiments.lm import lm_results, write_lm_report
from odet.experiments.seq2seq import RunResult, finished_results, write_report
from odet.io import check_output_dir, claim_output_dir
from odet.ode import SolverError
from odet.training import LMTrainConfig, load_any_config, train, train_lm
from odet.training.metrics import MetricsLog
from odet.training.prepare import check_data_files
from odet.training.run_dir import check_output_dir as check_run_dir
from odet.training.run_dir import config_changes, is_resume_safe, is_run_dir

logger = logging.getLogger("odet.experiment")


def run_experiment(
    config: ExperimentConfig,
    *,
    progress: bool = True,
    variants: list[str] | None = None,
    seeds: list[int] | None = None,
) -> list[RunResult]:
    """Train every selected (variant, seed) not yet finished, then write the report.

    ``variants``/``seeds`` restrict which runs this call trains (default: all), so one
    experiment can be split across processes or machines sharing ``output_dir``. The report
    always covers every finished run of the experiment, whoever trained it. A ``task: lm`` base
    config returns :class:`odet.experiments.lm.LMRunResult` rows instead. A run that fails
    numerically (it diverges, or its ODE solve fails: ``FloatingPointError``,
    ``SolverError``) is a result, not a reason to skip the runs after it: they are trained,
    and then one ``FloatingPointError`` names every failed run (rerunning resumes them).
    """
    chosen_variants = _select(variants, list(config.variants), "variant")
    chosen_seeds = _select(seeds, list(config.seeds), "seed")
    out = check_output_dir(
        config.output_dir, "experiment.output_dir", owned=_has_runs, command="experiment"
    )
    for variant in chosen_variants:  # validate every run's config and data before training any
        run_config = load_any_config(config.base, config.run_overrides(variant, chosen_seeds[0]))
        if not isinstance(run_config, LMTrainConfig):
            check_data_files(run_config.data)
            check(
                config.average_last <= run_config.train.keep_last,
                f"experiment.average_last={config.average_last} averages more checkpoints than "
                f"variant {variant!r} keeps (train.keep_last={run_config.train.keep_last}); "
                "lower it or raise train.keep_last",
            )
    claim_output_dir(out, "experiment")
    lm = is_lm_experiment(config)
    failed: list[str] = []
    for seed in chosen_seeds:
        for variant in chosen_variants:
            try:
                _train(config, variant, seed, progress)
            except (FloatingPointError, SolverError) as err:
                failed.append(f"{variant}/seed{seed} ({err})")
                logger.error(
                    "run %s/seed%d failed: %s; going on with the others", variant, seed, err
                )
                continue
            if lm:
                write_lm_report(config, lm_results(config))
            else:
                write_report(config, finished_results(config))
    if failed:
        raise FloatingPointError(
            f"{len(failed)} run(s) of the experiment failed (the others finished and are in its "
            f"report): {'; '.join(failed)}"
        )
    return lm_results(config) if lm else finished_results(config)  # type: ignore[return-value]


def _has_runs(out: Path) -> bool:
    """Whether ``out`` holds a run of an experiment (the layout written before the marker)."""
    return any(is_run_dir(run) for run in out.glob("*/seed*"))


RUN_STATES = ("finished", "in progress", "not started")


@dataclass(frozen=True)
class RunStatus:
    """Where one (variant, seed) of an experiment stands (:func:`experiment_status`)."""

    variant: str
    seed: int
    state: str
    """``"finished"``, ``"in progress"`` (a run folder with updates or not yet) or
    ``"not started"``; a run found only in the export counts as finished."""
    exported: bool
    updates: int
    """Updates done: the finished run's, or the last logged by a run in progress."""
    max_updates: int
    """The run's ``train.max_updates`` (0: no cap)."""


def experiment_status(
    config: ExperimentConfig,
    exported: Path | None = None,
    *,
    variants: list[str] | None = None,
    seeds: list[int] | None = None,
) -> list[RunStatus]:
    """Every selected (variant, seed) of the experiment (default: all), seed by seed in variant
    order: finished, in progress or not started in ``output_dir``, and whether ``exported``
    holds it. Reads the runs' files only; trains and writes nothing."""
    chosen_variants = _select(variants, list(config.variants), "variant")
    chosen_seeds = _select(seeds, list(config.seeds), "seed")
    if exported is not None and not Path(exported).is_dir():
        what = "not a folder" if Path(exported).exists() else "no such folder"
        raise DataError(f"--status {exported}: {what} (an --export makes it)")
    statuses = []
    for seed in chosen_seeds:
        for variant in chosen_variants:
            run = run_dir(config, variant, seed)
            in_export = exported is not None and is_finished(config, variant, seed, exported)
            finished = is_finished(config, variant, seed)
            if finished or in_export:
                summary_file = run_dir(config, variant, seed, None if finished else exported)
                summary = json.loads((summary_file / "summary.json").read_text("utf-8"))
                state, updates = "finished", int(summary["steps"])
            elif run.is_dir():
                steps = [
                    int(r["step"])
                    for r in MetricsLog(run / "metrics.jsonl").read()
                    if r.get("event") == "train" and "step" in r
                ]
                state, updates = "in progress", max(steps, default=0)
            else:
                state, updates = "not started", 0
            run_config = load_any_config(config.base, config.run_overrides(variant, seed))
            statuses.append(
                RunStatus(variant, seed, state, in_export, updates, run_config.train.max_updates)
            )
    return statuses


def status_table(statuses: list[RunStatus], exported: Path | None = None) -> str:
    """:func:`experiment_status` as a Markdown table, with a line of counts."""
    lines = ["| variant | seed | state | updates |" + (" exported |" if exported else "")]
    lines.append("|---|---|---|---|" + ("---|" if exported else ""))
    for s in statuses:
        updates = f"{s.updates}/{s.max_updates}" if s.max_updates else str(s.updates)
        exported_cell = (" yes |" if s.exported else " no |") if exported else ""
        lines.append(f"| {s.variant} | {s.seed} | {s.state} | {updates} |{exported_cell}")
    counts = ", ".join(f"{sum(s.state == state for s in statuses)} {state}" for state in RUN_STATES)
    held = f"; {sum(s.exported for s in statuses)} in {exported}" if exported else ""
    return "\n".join([*lines, "", f"{len(statuses)} runs: {counts}{held}."])


LOCATION_KEYS = ("output_dir", "data.data_dir")
"""Where a run was written and read its data: an exported run is the same run wherever those
were."""


def export_experiment(
    config: ExperimentConfig,
    dest: str | Path,
    *,
    variants: list[str] | None = None,
    seeds: list[int] | None = None,
) -> Path:
    """Copy the finished runs' result files into ``dest`` and write the report there.

    Each selected finished run of ``output_dir`` (default: all; none is trained) has its
    top-level files copied into ``dest/<variant>-seed<k>/`` — not its folders (checkpoints,
    averaged weights, tokenizer) nor hidden files (the run marker). A file that would change
    is refused before anything is copied, and so is an exported run whose config differs from
    the one the experiment gives it in a key other than ``output_dir``, ``data.data_dir`` and
    the keys a resume may change. The report (``results.md``/``.csv`` and the plot) is then
    rewritten in ``dest`` over every run that ``dest`` holds, copied now or before; its
    checkpoint-averaged scores come from the exported ``test.avg<N>.hyp`` files. Returns the
    report's ``results.md``.
    """
    chosen_variants = _select(variants, list(config.variants), "variant")
    chosen_seeds = _select(seeds, list(config.seeds), "seed")
    if not str(dest).strip():
        raise DataError("--export needs a folder to export into, got an empty name")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise DataError(f"--export {dest} exists and is not a directory")
    copies: list[tuple[Path, Path]] = []
    for seed in chosen_seeds:
        for variant in chosen_variants:
            if not is_finished(config, variant, seed):
                continue
            source = run_dir(config, variant, seed)
            target = run_dir(config, variant, seed, dest)
            for file in sorted(source.iterdir()):
                if not file.is_file() or file.name.startswith("."):
                    continue
                copy = target / file.name
                if copy.exists() and not (copy.is_file() and filecmp.cmp(file, copy, False)):
                    raise DataError(
                        f"{copy} exists and differs from {file}: another run was exported "
                        "there; export into a new folder (nothing was copied)"
                    )
                copies.append((file, copy))
    runs = {
        (variant, seed): run_dir(config, variant, seed, dest)
        for seed in config.seeds
        for variant in config.variants
        if is_finished(config, variant, seed, dest)
    }
    for seed in chosen_seeds:
        for variant in chosen_variants:
            if is_finished(config, variant, seed):
                runs[variant, seed] = run_dir(config, variant, seed)
    if not runs:
        raise DataError(
            f"no finished run to export: none in {config.output_dir} (variants "
            f"{chosen_variants}, seeds {chosen_seeds}) nor in {dest}; nothing was written"
        )
    for (variant, seed), run in runs.items():
        _check_same_run(config, variant, seed, run)
    # summary.json last: a copy cut short is not a finished run, and a rerun completes it
    for file, copy in sorted(copies, key=lambda pair: pair[1].name == "summary.json"):
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(copy.name + ".part")
        shutil.copy2(file, partial)
        partial.replace(copy)
    if is_lm_experiment(config):
        return write_lm_report(config, lm_results(config, dest), dest)
    return write_report(config, finished_results(config, dest), dest)


def _check_same_run(config: ExperimentConfig, variant: str, seed: int, run: Path) -> None:
    """Refuse ``run`` unless its saved config is the one the experiment gives (variant, seed),
    up to where it was written and read its data and the keys a resume may change."""
    saved = load_yaml(run / "config.yaml")
    expected = load_any_config(config.base, config.run_overrides(variant, seed)).to_dict()
    changed = {
        key: values
        for key, values in config_changes(saved, expected).items()
        if key not in LOCATION_KEYS and not is_resume_safe(key)
    }
    if changed:
        listed = ", ".join(f"{k} ({old!r} -> {new!r})" for k, (old, new) in changed.items())
        raise DataError(
            f"{run} is not run {variant}/seed{seed} of this experiment: its config differs in "
            f"{listed} (nothing was copied)"
        )


def _select(chosen: list[Any] | None, available: list[Any], what: str) -> list[Any]:
    if not chosen:
        return available
    unknown = [c for c in chosen if c not in available]
    hint = suggest(unknown[0], available) if unknown and isinstance(unknown[0], str) else ""
    check(not unknown, f"unknown {what}(s) {unknown}; the experiment has {available}{hint}")
    return [a for a in available if a in chosen]


def _train(config: ExperimentConfig, variant: str, seed: int, progress: bool) -> None:
    """Train (or resume) one run unless it has finished with the same config."""
    train_config = load_any_config(config.base, config.run_overrides(variant, seed))
    if is_finished(config, variant, seed):
        check_run_dir(Path(train_config.output_dir), train_config.to_dict())
    elif isinstance(train_config, LMTrainConfig):
        train_lm(train_config, progress=progress)
    else:
        train(train_config, progress=progress)
