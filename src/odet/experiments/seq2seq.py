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

import csv
import filecmp
import json
import logging
import math
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from odet.config import (
    ConfigError,
    check,
    check_name,
    check_seed,
    check_types,
    from_dict,
    load_yaml,
)
from odet.data import DataError
from odet.evaluation import corpus_bleu, paired_bleu_test, tokenize_13a_lower, tokenized_bleu
from odet.evaluation.files import read_all_lines
from odet.inference import Translator, load_model_and_tokenizers
from odet.io import check_output_dir, claim_output_dir
from odet.ode import SolverError
from odet.training import LMTrainConfig, load_any_config, load_train_config, train, train_lm
from odet.training.average import average_checkpoints
from odet.training.metrics import MetricsLog
from odet.training.prepare import check_data_files
from odet.training.run_dir import check_output_dir as check_run_dir
from odet.training.run_dir import config_changes, is_resume_safe, is_run_dir

logger = logging.getLogger("odet.experiment")


@dataclass(frozen=True)
class ExperimentConfig:
    """Variants × seeds of one training recipe (see the module docstring)."""

    base: str
    output_dir: str
    variants: dict[str, Any]
    seeds: tuple[int, ...] = (1,)
    overrides: tuple[str, ...] = ()
    average_last: int = 0
    baselines: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_types(self)
        check(bool(self.variants), "experiment.variants must name at least one variant")
        check(bool(self.seeds), "experiment.seeds must list at least one seed")
        check(
            len(set(self.seeds)) == len(self.seeds),
            f"experiment.seeds must be distinct, got {list(self.seeds)}",
        )
        for seed in self.seeds:
            check_seed(seed, "experiment.seeds")
        check(bool(self.output_dir.strip()), "experiment.output_dir must name a directory")
        check(self.average_last >= 0, "experiment.average_last must be >= 0")
        for name, sets in self.variants.items():
            check_name(name, "experiment.variants:")
            check(
                isinstance(sets, dict) or sets is None,
                f"experiment.variants.{name} must be a mapping of key: value overrides",
            )
            for key in sets or {}:
                _check_not_per_run(str(key), f"experiment.variants.{name}")
        for override in self.overrides:
            _check_not_per_run(override.split("=", 1)[0].strip(), "experiment.overrides (--set)")
        for name, baseline in self.baselines.items():
            for role, value in (("variant", name), ("baseline", baseline)):
                check(
                    value in self.variants,
                    f"experiment.baselines: {role} {value!r} is not one of the variants "
                    f"{list(self.variants)}",
                )

    def baseline(self, variant: str) -> str:
        """The variant that ``variant`` is compared with (itself for a baseline)."""
        return self.baselines.get(variant, next(iter(self.variants)))

    def run_overrides(self, variant: str, seed: int) -> list[str]:
        sets = self.variants[variant] or {}
        return [
            *self.overrides,
            *(f"{key}={json.dumps(value)}" for key, value in sets.items()),
            f"seed={seed}",
            f"output_dir={json.dumps(str(Path(self.output_dir) / variant / f'seed{seed}'))}",
        ]


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


PER_RUN_KEYS = ("seed", "output_dir")
"""What an experiment sets for each run itself (from ``seeds`` and ``output_dir``)."""


def _check_not_per_run(key: str, where: str) -> None:
    """Refuse an override of a key the experiment sets per run: it would be silently lost."""
    check(
        key.strip() not in PER_RUN_KEYS,
        f"{where} sets {key!r}, which the experiment sets for every run (its seeds and "
        "output_dir/<variant>/seed<k>); use experiment.seeds or experiment.output_dir",
    )


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> ExperimentConfig:
    data = load_yaml(path)
    if overrides:
        saved = data.get("overrides", [])
        data = {**data, "overrides": [*saved, *overrides] if isinstance(saved, list) else saved}
    config = from_dict(ExperimentConfig, data, where="experiment")
    try:
        load_yaml(config.base)
    except ConfigError as error:
        where = (
            ""
            if Path(config.base).is_absolute()
            else f" (read from the current folder, {Path.cwd()})"
        )
        raise ConfigError(f"experiment.base{where}: {error}") from None
    return config


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
    if lm:
        from odet.experiments.lm import lm_results, write_lm_report
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


def is_lm_experiment(config: ExperimentConfig) -> bool:
    """Whether the base config is a language model's (``task: lm``)."""
    return isinstance(load_any_config(config.base, list(config.overrides)), LMTrainConfig)


def run_dir(
    config: ExperimentConfig, variant: str, seed: int, exported: Path | None = None
) -> Path:
    """Where a run lives: ``<output_dir>/<variant>/seed<k>``, or ``<exported>/<variant>-seed<k>``
    for the copy that :func:`export_experiment` made into ``exported``."""
    if exported is None:
        return Path(config.output_dir) / variant / f"seed{seed}"
    return Path(exported) / f"{variant}-seed{seed}"


def is_finished(
    config: ExperimentConfig, variant: str, seed: int, exported: Path | None = None
) -> bool:
    """Whether the run has finished (has ``summary.json``)."""
    return (run_dir(config, variant, seed, exported) / "summary.json").is_file()


def _has_runs(out: Path) -> bool:
    """Whether ``out`` holds a run of an experiment (the layout written before the marker)."""
    return any(is_run_dir(run) for run in out.glob("*/seed*"))


def finished_results(config: ExperimentConfig, exported: Path | None = None) -> list[RunResult]:
    """Results of every run of the experiment that has finished (has ``summary.json``), in
    ``output_dir`` or, given ``exported``, in that export (:func:`export_experiment`)."""
    return [
        _result(config, variant, seed, run_dir(config, variant, seed, exported))
        for seed in config.seeds
        for variant in config.variants
        if is_finished(config, variant, seed, exported)
    ]


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
        from odet.experiments.lm import lm_results, write_lm_report

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
    check(not unknown, f"unknown {what}(s) {unknown}; the experiment has {available}")
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


def _mean_std(values: list[float | None], digits: int = 2) -> str:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


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
            f"{_mean_std([r.wall_seconds / 60 for r in rs])} | "
            f"{_mean_std([r.valid_bleu for r in rs])} | {_mean_std([r.test_bleu for r in rs])} | "
            f"{_mean_std([r.test_bleu_tok for r in rs])} |"
        )
        if config.average_last:
            row += (
                f" {_mean_std([r.averaged.get('bleu') for r in rs])} |"
                f" {_mean_std([r.averaged.get('bleu_tok') for r in rs])} |"
                f" {_mean_std([r.averaged.get('decode_seconds') for r in rs], digits=1)} |"
            )
        lines.append(row)
    lines += _paired_differences(config, results)
    lines += ["", f"Runs: {', '.join(f'{r.variant}/seed{r.seed}' for r in results)}.", ""]
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    _plot(config, results, out / "bleu_vs_time.png")
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


def _plot(
    config: ExperimentConfig,
    results: list[Any],
    path: Path,
    metric: str = "bleu",
    ylabel: str = "valid BLEU (greedy)",
) -> None:
    """``metric`` of the ``valid`` records (not the final exact pass) of every run (each result's
    ``run`` directory) against its training wall-clock, one colour per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, variant in enumerate(config.variants):
        for r in (r for r in results if r.variant == variant):
            records = MetricsLog(r.run / "metrics.jsonl").read()
            train_times = [(x["step"], x["elapsed"]) for x in records if x["event"] == "train"]
            points = []
            for x in records:
                if x["event"] != "valid" or x.get(metric) is None or x.get("exact"):
                    continue
                # older logs lack "elapsed" on validation records: use the last train record's
                seconds = x.get("elapsed") or max(
                    (t for step, t in train_times if step <= x["step"]), default=None
                )
                if seconds is not None:
                    points.append((seconds / 60, x[metric]))
            if points:
                ax.plot(
                    *zip(*points),
                    "o-",
                    color=f"C{i}",
                    alpha=0.8,
                    ms=3,
                    label=variant if r.seed == config.seeds[0] else None,
                )
    ax.set(xlabel="training wall-clock (min)", ylabel=ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
