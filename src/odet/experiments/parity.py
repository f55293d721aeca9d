"""The N-ODE Transformer's parity experiment: discrete vs continuous depth, arclength penalty.

Baier-Reinio & De Sterck (2020) asked whether an input-dependent depth (the NFE of an adaptive
solve) lets a Transformer compute the parity of binary sequences, and generalise to longer
sequences than it was trained on. :func:`run_parity` trains every variant of a config on the
same data, once per seed (a seed sets the initialisation and the batch order; the data set is
``task.seed``'s) — discrete stacks (Euler, RK4, weight-tied or not) and continuous N-ODE stacks
at several arclength weights ``λ`` — and writes to ``out_dir``:

- ``results.md`` / ``results.csv``: per variant, mean ± std over seeds of the accuracy on test
  sequences of the trained lengths and of longer ones, NFE, arclength, failed solves and
  training time; below it one row per (variant, seed) (``runs.csv``);
- ``per_length.csv``: accuracy, NFE and arclength for every variant, seed and test length;
- ``accuracy_nfe_vs_length.png`` (accuracy and NFE per test length, mean with a ±1 std band over
  seeds) and ``arclength_nfe_vs_lambda.png`` (the adaptive variants' arclength and NFE against λ);
- ``config.yaml``: the resolved configuration; ``runs/<variant>/seed<k>.json``: each finished
  run, so that a rerun of the same command trains only what is missing (a run whose settings
  changed is trained again).

Run it as ``python -m odet.experiments.parity CONFIG --out DIR [--seeds 0 1 ...]``; with
``--trace DIR`` every continuous run trained writes a per-step trace of its solves, field norms,
weight norms and gradient norms (:mod:`odet.experiments.ode_trace`).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm

from odet.config import (
    ConfigError,
    check,
    check_name,
    check_seed,
    check_types,
    from_dict,
    load_yaml,
    suggest,
    to_dict,
)
from odet.data.parity import (
    PAD_ID,
    VOCAB_SIZE,
    ParityData,
    ParitySplits,
    ParityTaskConfig,
    make_parity_splits,
)
from odet.experiments.ode_trace import maybe_trace
from odet.io import check_output_dir, claim_output_dir
from odet.models.classifier import (
    ClassifierConfig,
    SequenceClassifier,
    classification_loss,
)
from odet.models.config import CONTINUOUS
from odet.models.size import check_model_fits
from odet.ode import get_tableau

# ------------------------------------------------------------------------------------ config


_LATER_TRAINING_KEYS: dict[str, object] = {"skip_nonfinite": False}
"""Training keys added after runs were saved: left out of a run's key at these values, so the
finished runs stay reusable."""


@dataclass(frozen=True)
class TrainingConfig:
    """Adam for ``steps`` updates on shuffled batches of the training split."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    eval_batch_size: int = 512
    skip_nonfinite: bool = False
    """Skip the update of a step whose gradient norm (before clipping) is inf or NaN (the
    run reports how many it skipped); ``False`` applies every update, as plain Adam does."""

    def __post_init__(self) -> None:
        check_types(self)
        for key in ("steps", "batch_size", "eval_batch_size"):
            value = getattr(self, key)
            check(value >= 1, f"TrainingConfig.{key} must be >= 1, got {value}")
        check(self.lr > 0, f"TrainingConfig.lr must be > 0, got {self.lr}")
        check(self.weight_decay >= 0, "TrainingConfig.weight_decay must be >= 0")
        check(
            self.grad_clip is None or self.grad_clip > 0,
            f"TrainingConfig.grad_clip must be > 0 or null, got {self.grad_clip}",
        )


@dataclass(frozen=True)
class VariantConfig:
    """One model to train: ``model`` overrides the experiment's base model keys, ``training``
    its training keys (e.g. ``weight_decay``, ``skip_nonfinite``); the loss is
    ``CE + arclength_weight · mean arclength`` (continuous encoders only)."""

    name: str
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    arclength_weight: float = 0.0
    training: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_types(self)
        check_name(self.name, "variant name")
        check(
            self.arclength_weight >= 0,
            f"variant {self.name!r}: arclength_weight must be >= 0, got {self.arclength_weight}",
        )


@dataclass(frozen=True)
class ParityExperimentConfig:
    """The task, the training recipe, a base model (``ClassifierConfig`` keys without
    ``vocab_size``/``pad_id``, which the task fixes) and the variants. Every variant is trained
    once per seed of ``seeds`` (or once with ``seed`` when ``seeds`` is empty); a seed sets the
    initialisation and the batch order, alike for every variant."""

    task: ParityTaskConfig
    training: TrainingConfig
    variants: tuple[VariantConfig, ...]
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_types(self)
        check(len(self.variants) >= 1, "ParityExperimentConfig needs at least one variant")
        check(
            len(set(self.seeds)) == len(self.seeds),
            f"seeds must be distinct, got {list(self.seeds)}",
        )
        for seed in (self.seed, *self.seeds):
            check_seed(seed, "seeds" if seed in self.seeds else "seed")
        names = [v.name for v in self.variants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        check(not duplicates, f"variant names must be unique; repeated: {duplicates}")
        for key in ("vocab_size", "pad_id"):
            check(key not in self.model, f"model.{key} is fixed by the parity task; remove it")
        for variant in self.variants:
            self.training_config(variant)  # validates the merged keys
            config = self.classifier_config(variant)
            check(
                config.max_positions >= self.task.test_max_length,
                f"variant {variant.name!r}: model.max_positions={config.max_positions} is below "
                f"task.test_max_length={self.task.test_max_length}, the longest test sequence",
            )
            check(
                variant.arclength_weight == 0
                or (config.encoder_method == CONTINUOUS and config.continuous.arclength),
                f"variant {variant.name!r}: arclength_weight > 0 needs "
                f"encoder_method='continuous' (with arclength: true)",
            )

    @property
    def run_seeds(self) -> tuple[int, ...]:
        """The seeds every variant is trained with."""
        return self.seeds or (self.seed,)

    def training_config(self, variant: VariantConfig) -> TrainingConfig:
        """The variant's training recipe: the experiment's, then the variant's keys."""
        if not variant.training:
            return self.training
        data = {**to_dict(self.training), **variant.training}
        try:
            return from_dict(TrainingConfig, data, where=f"variants[{variant.name}].training")
        except ConfigError as err:
            raise ConfigError(str(err)) from None

    def classifier_config(self, variant: VariantConfig) -> ClassifierConfig:
        """The variant's model: base keys, then the variant's; continuous encoders compute the
        arclength (it is reported even when unpenalised) and flag failed solves (counted: a
        measured outcome, trained through as the paper's Adam does) unless told otherwise."""
        data: dict[str, Any] = {"vocab_size": VOCAB_SIZE, "pad_id": PAD_ID, **self.model}
        data.update(variant.model)
        if data.get("encoder_method") == CONTINUOUS:
            data.setdefault("arclength", True)
            data.setdefault("on_failure", "flag")
        try:
            return ClassifierConfig.from_dict(data, where=f"variants[{variant.name}].model")
        except ConfigError as err:
            raise ConfigError(str(err)) from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParityExperimentConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key."""
        data = dict(data)
        variants = data.pop("variants", None)
        if not isinstance(variants, list):
            raise ConfigError(
                f"'variants' must be a list of mappings, got {type(variants).__name__}"
            )
        data["variants"] = tuple(
            from_dict(VariantConfig, v, where=f"variants[{i}]") for i, v in enumerate(variants)
        )
        return from_dict(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


# ----------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class LengthResult:
    """Test metrics of one sequence length; ``nfe``/``arclength`` are per-sample means (the
    NFE of a discrete stack is its fixed number of layer evaluations)."""

    length: int
    accuracy: float
    nfe: float
    arclength: float | None


@dataclass(frozen=True)
class VariantResult:
    """One trained variant. ``*_trained`` average the test lengths seen in training,
    ``*_longer`` the longer ones (NaN when the task has none); ``failed`` counts test samples
    whose adaptive solve did not reach ``t1``; ``skipped_updates`` the training steps whose
    update ``skip_nonfinite`` dropped."""

    name: str
    encoder: str
    arclength_weight: float
    parameters: int
    seed: int
    train_seconds: float
    final_loss: float
    val_accuracy: float
    accuracy_trained: float
    accuracy_longer: float
    nfe_trained: float
    nfe_longer: float
    arclength_trained: float | None
    arclength_longer: float | None
    failed: int
    per_length: tuple[LengthResult, ...]
    skipped_updates: int = 0


@dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation over seeds (std 0 for one seed; NaN when absent)."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        present = [v for v in values if v is not None and not math.isnan(v)]
        if not present:
            return cls(math.nan, math.nan, 0)
        std = statistics.stdev(present) if len(present) > 1 else 0.0
        return cls(statistics.fmean(present), std, len(present))

    def format(self, fmt: str) -> str:
        if self.n == 0:
            return "–"
        return fmt.format(self.mean) + (f" ± {fmt.format(self.std)}" if self.n > 1 else "")


@dataclass(frozen=True)
class VariantSummary:
    """One variant over its seeds."""

    name: str
    encoder: str
    arclength_weight: float
    parameters: int
    seeds: tuple[int, ...]
    val_accuracy: Spread
    accuracy_trained: Spread
    accuracy_longer: Spread
    nfe_trained: Spread
    nfe_longer: Spread
    arclength_trained: Spread
    arclength_longer: Spread
    failed: Spread
    runs_with_failures: int
    train_seconds: Spread


@dataclass(frozen=True)
class ParityResults:
    """Every (variant, seed) run, variant by variant in config order and seeds in order within
    a variant; ``config_path`` is the YAML file the run read, if any."""

    config: ParityExperimentConfig
    variants: tuple[VariantResult, ...]
    out_dir: Path
    config_path: Path | None = None

    def summaries(self) -> tuple[VariantSummary, ...]:
        """Per variant, each metric's mean ± std over the seeds that ran."""
        out = []
        for variant in self.config.variants:
            runs = [r for r in self.variants if r.name == variant.name]
            if not runs:
                continue

            def spread(attr: str, runs: list[VariantResult] = runs) -> Spread:
                return Spread.of([getattr(r, attr) for r in runs])

            out.append(
                VariantSummary(
                    name=variant.name,
                    encoder=runs[0].encoder,
                    arclength_weight=variant.arclength_weight,
                    parameters=runs[0].parameters,
                    seeds=tuple(r.seed for r in runs),
                    val_accuracy=spread("val_accuracy"),
                    accuracy_trained=spread("accuracy_trained"),
                    accuracy_longer=spread("accuracy_longer"),
                    nfe_trained=spread("nfe_trained"),
                    nfe_longer=spread("nfe_longer"),
                    arclength_trained=spread("arclength_trained"),
                    arclength_longer=spread("arclength_longer"),
                    failed=Spread.of([float(r.failed) for r in runs]),
                    runs_with_failures=sum(r.failed > 0 for r in runs),
                    train_seconds=spread("train_seconds"),
                )
            )
        return tuple(out)


# ---------------------------------------------------------------------------------- training


def run_parity(
    config: str | Path | ParityExperimentConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    seeds: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    trace_dir: str | Path | None = None,
) -> ParityResults:
    """Train and evaluate every variant of ``config`` (a YAML path or a config) with every seed,
    write the report to ``out_dir`` (created), and return the results.

    Finished runs are kept under ``out_dir/runs/`` and reused when their settings are unchanged,
    so rerunning an interrupted command trains only the missing runs. ``seeds``/``variants``
    restrict what is trained now (e.g. to share the work between machines); the report covers
    every run of the config found in ``out_dir``.

    ``trace_dir``: write a per-step trace of every continuous run trained now (reused runs are
    not retrained) to ``trace_dir/<variant>/seed<k>.jsonl`` (:mod:`odet.experiments.ode_trace`);
    tracing does not change what is trained.
    """
    config_path = None
    if not isinstance(config, ParityExperimentConfig):
        config_path = Path(config)
        config = ParityExperimentConfig.from_dict(load_yaml(config_path))
    names = [v.name for v in config.variants]
    for name in variants or ():
        check(name in names, f"unknown variant {name!r}{suggest(name, names)}; choose from {names}")
    for seed in seeds or ():
        check(seed in config.run_seeds, f"seed {seed} is not among the config's seeds "
              f"{list(config.run_seeds)}")  # fmt: skip
    out = check_output_dir(out_dir, "--out", owned=_has_parity_runs, command="parity")
    for variant in config.variants:  # every variant's model config checks before training
        check_model_fits(config.classifier_config(variant))
    chosen = [v.name for v in config.variants if variants is None or v.name in variants]
    check(
        trace_dir is None
        or any(_is_continuous(config, v) for v in config.variants if v.name in chosen),
        f"--trace applies to continuous-encoder variants only; it has no effect with {chosen}, "
        "none of which is continuous",
    )
    claim_output_dir(out, "parity")
    splits = make_parity_splits(config.task)
    results = []
    for variant in config.variants:
        for seed in config.run_seeds:
            key = run_key(config, variant, seed)
            saved = _load_run(out, variant.name, seed, key)
            wanted = (variants is None or variant.name in variants) and (
                seeds is None or seed in seeds
            )
            if saved is None and wanted:
                trace = None
                if trace_dir is not None and _is_continuous(config, variant):
                    trace = Path(trace_dir) / variant.name / f"seed{seed}.jsonl"
                saved = _run_variant(config, variant, seed, splits, progress=progress, trace=trace)
                _save_run(out, saved, key)
            if saved is not None:
                results.append(saved)
    report = ParityResults(config, tuple(results), out, config_path)
    write_report(report)
    return report


def run_key(config: ParityExperimentConfig, variant: VariantConfig, seed: int) -> str:
    """A digest of the settings a run was asked for: task, training, the model keys as the
    config writes them (base, then the variant's), λ and seed. It does not depend on how the
    code spells a resolved model config, so finished runs stay reusable across refactors."""
    training = {
        key: value
        for key, value in to_dict(config.training_config(variant)).items()
        if _LATER_TRAINING_KEYS.get(key, ()) != value
    }
    settings = {
        "task": to_dict(config.task),
        "training": training,
        "model": {**config.model, **variant.model},
        "arclength_weight": variant.arclength_weight,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _has_parity_runs(out: Path) -> bool:
    """Whether ``out/runs/`` holds a saved parity run (the layout written before the output
    marker), not merely a directory named ``runs``."""
    for path in out.glob("runs/*/seed*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and {"key", "result"} <= data.keys():
            return True
    return False


def _run_path(out: Path, name: str, seed: int) -> Path:
    return out / "runs" / name / f"seed{seed}.json"


def _save_run(out: Path, result: VariantResult, key: str) -> None:
    path = _run_path(out, result.name, result.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "result": dataclasses.asdict(result)}, indent=1))
    tmp.replace(path)


def _load_run(out: Path, name: str, seed: int, key: str) -> VariantResult | None:
    """The saved run when its settings digest matches ``key``; None when absent or stale."""
    path = _run_path(out, name, seed)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["key"] != key:
            return None
        fields = dict(data["result"])
        fields["per_length"] = tuple(LengthResult(**p) for p in fields["per_length"])
        return VariantResult(**fields)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _run_variant(
    config: ParityExperimentConfig,
    variant: VariantConfig,
    seed: int,
    splits: ParitySplits,
    *,
    progress: bool,
    trace: Path | None = None,
) -> VariantResult:
    model_config = config.classifier_config(variant)
    train = config.training_config(variant)
    torch.manual_seed(seed)
    model = SequenceClassifier(model_config)
    optimizer = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    order = torch.Generator().manual_seed(seed)
    batches = _endless(splits.train, train.batch_size, order)
    bar = tqdm(
        range(train.steps),
        desc=f"{variant.name} seed {seed}",
        disable=not progress,
        leave=False,
        mininterval=1.0,
    )
    loss_value = math.nan
    skipped = 0
    start = time.perf_counter()
    model.train()
    with maybe_trace(model, trace) as tracer:
        for step in bar:
            batch = next(batches)
            if tracer is not None:
                tracer.begin_step()
            output = model(batch.tokens)
            loss = classification_loss(
                output, batch.labels, arclength_weight=variant.arclength_weight
            )
            optimizer.zero_grad(set_to_none=True)
            if tracer is not None:
                tracer.mark_backward()
            loss.total.backward()
            if tracer is not None:
                tracer.mark_gradients(model)
            grad_norm = None
            if train.grad_clip is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            if grad_norm is None and (tracer is not None or train.skip_nonfinite):
                grad_norm = _grad_norm(model)
            if tracer is not None:
                tracer.record(
                    step, loss=loss.total, cross_entropy=loss.cross_entropy,
                    grad_norm=grad_norm, model=model,
                )  # fmt: skip
            if train.skip_nonfinite and not bool(torch.isfinite(grad_norm)):
                skipped += 1
            else:
                optimizer.step()
            loss_value = float(loss.cross_entropy.detach())
            postfix = {"ce": f"{loss_value:.3f}"}
            if output.stats is not None:
                postfix["nfe"] = f"{output.stats.nfe.float().mean():.1f}"
            bar.set_postfix(postfix, refresh=False)
    train_seconds = time.perf_counter() - start
    result = _evaluate(
        model, model_config, variant, splits, config, seed=seed, train_seconds=train_seconds,
        final_loss=loss_value, skipped_updates=skipped,
    )  # fmt: skip
    if progress:
        tqdm.write(
            f"{variant.name} seed {seed}: val acc {result.val_accuracy:.3f}, "
            f"longer {result.accuracy_longer:.3f}, NFE {result.nfe_trained:.1f}, "
            f"{train_seconds:.0f} s"
        )
    return result


def _is_continuous(config: ParityExperimentConfig, variant: VariantConfig) -> bool:
    return config.classifier_config(variant).encoder_method == CONTINUOUS


def _grad_norm(model: torch.nn.Module) -> torch.Tensor:
    """The 2-norm of all gradients (what ``clip_grad_norm_`` measures before clipping)."""
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros(())


def _endless(data: ParityData, batch_size: int, generator: torch.Generator):
    while True:
        yield from data.batches(batch_size, generator=generator)


@torch.no_grad()
def _evaluate(
    model: SequenceClassifier,
    model_config: ClassifierConfig,
    variant: VariantConfig,
    splits: ParitySplits,
    config: ParityExperimentConfig,
    *,
    seed: int,
    train_seconds: float,
    final_loss: float,
    skipped_updates: int = 0,
) -> VariantResult:
    model.eval()
    batch_size = config.training.eval_batch_size
    discrete_nfe = (
        0
        if model_config.encoder_method == CONTINUOUS
        else model_config.encoder_layers * get_tableau(model_config.encoder_method).num_stages
    )
    val_correct = sum(
        int((model(b.tokens).logits.argmax(-1) == b.labels).sum())
        for b in splits.val.batches(batch_size)
    )
    per_length, failed = [], 0
    for length, part in splits.test.by_length():
        correct, nfe, arclength = 0, 0.0, 0.0
        has_arclength = False
        for batch in part.batches(batch_size):
            output = model(batch.tokens)
            correct += int((output.logits.argmax(-1) == batch.labels).sum())
            if output.stats is None:
                nfe += discrete_nfe * len(batch)
                continue
            nfe += float(output.stats.nfe.sum())
            failed += len(output.stats.failed)
            if output.stats.arclength is not None:
                has_arclength = True
                arclength += float(output.stats.arclength.sum())
        n = len(part)
        per_length.append(
            LengthResult(length, correct / n, nfe / n, arclength / n if has_arclength else None)
        )
    trained = [r for r in per_length if r.length <= config.task.max_length]
    longer = [r for r in per_length if r.length > config.task.max_length]
    return VariantResult(
        name=variant.name,
        encoder=_describe_encoder(model_config),
        arclength_weight=variant.arclength_weight,
        parameters=model.num_parameters(),
        seed=seed,
        train_seconds=train_seconds,
        final_loss=final_loss,
        val_accuracy=val_correct / len(splits.val),
        accuracy_trained=_mean([r.accuracy for r in trained]),
        accuracy_longer=_mean([r.accuracy for r in longer]),
        nfe_trained=_mean([r.nfe for r in trained]),
        nfe_longer=_mean([r.nfe for r in longer]),
        arclength_trained=_mean_or_none([r.arclength for r in trained]),
        arclength_longer=_mean_or_none([r.arclength for r in longer]),
        failed=failed,
        per_length=tuple(per_length),
        skipped_updates=skipped_updates,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return _mean(present) if present and len(present) == len(values) else None


def _describe_encoder(c: ClassifierConfig) -> str:
    if c.encoder_method == CONTINUOUS:
        ode = c.continuous
        how = (
            f"{ode.solver} rtol={ode.rtol:g}"
            if ode.fixed_steps is None
            else f"{ode.solver}×{ode.fixed_steps} fixed"
        )
        sn = ", spectral norm" if ode.spectral_norm else ""
        sn += "" if ode.grad_through_step_size else ", dt detached"
        return f"continuous {c.encoder_layers}×[{how}, t={ode.time_conditioning}{sn}]"
    tied = ", tied" if c.share_layers and c.encoder_layers > 1 else ""
    return f"{c.encoder_method} ×{c.encoder_layers}{tied}"


# ------------------------------------------------------------------------------------ report

_METRIC_COLUMNS = (
    ("val acc", "val_accuracy", "{:.3f}"),
    ("acc (trained lengths)", "accuracy_trained", "{:.3f}"),
    ("acc (longer)", "accuracy_longer", "{:.3f}"),
    ("NFE (trained)", "nfe_trained", "{:.1f}"),
    ("NFE (longer)", "nfe_longer", "{:.1f}"),
    ("arclength (trained)", "arclength_trained", "{:.2f}"),
    ("arclength (longer)", "arclength_longer", "{:.2f}"),
)
_TIME_COLUMN = ("train s", "train_seconds", "{:.1f}")

_COLUMNS = (
    ("variant", "name", "{}"),
    ("seed", "seed", "{}"),
    ("encoder", "encoder", "{}"),
    ("λ", "arclength_weight", "{:g}"),
    ("params", "parameters", "{:,}"),
    *_METRIC_COLUMNS,
    ("failed solves", "failed", "{}"),
    _TIME_COLUMN,
)
"""The per-run table: (title, ``VariantResult`` attribute, format)."""

_SUMMARY_COLUMNS = (*_METRIC_COLUMNS, ("failed solves / run", "failed", "{:.1f}"), _TIME_COLUMN)
"""The summary table's metric columns: (title, ``VariantSummary`` attribute, format)."""


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def write_report(results: ParityResults) -> None:
    """Write the tables, plots and resolved config of ``results`` to ``results.out_dir``."""
    out, config = results.out_dir, results.config
    summaries = results.summaries()
    with (out / "config.yaml").open("w", encoding="utf-8") as fh:
        yaml.safe_dump(config.to_dict(), fh, sort_keys=False, allow_unicode=True)
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        metrics = [attr for _, attr, _ in _SUMMARY_COLUMNS]
        writer.writerow(
            ["name", "encoder", "arclength_weight", "parameters", "seeds", "runs_with_failures"]
            + [f"{m}_{part}" for m in metrics for part in ("mean", "std")]
        )
        for v in summaries:
            writer.writerow(
                [v.name, v.encoder, v.arclength_weight, v.parameters, len(v.seeds)]
                + [v.runs_with_failures]
                + [x for m in metrics for x in (getattr(v, m).mean, getattr(v, m).std)]
            )
    with (out / "runs.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow([attr for _, attr, _ in _COLUMNS])
        for r in results.variants:
            writer.writerow([getattr(r, attr) for _, attr, _ in _COLUMNS])
    with (out / "per_length.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["variant", "seed", "length", "accuracy", "nfe", "arclength"])
        for r in results.variants:
            for p in r.per_length:
                writer.writerow([r.name, r.seed, p.length, p.accuracy, p.nfe, p.arclength])
    task = config.task
    seeds = list(config.run_seeds)
    missing = [
        f"{v.name} seed {s}"
        for v in config.variants
        for s in seeds
        if not any(r.name == v.name and r.seed == s for r in results.variants)
    ]
    summary_rows = [
        [v.name, v.encoder, f"{v.arclength_weight:g}", f"{v.parameters:,}", str(len(v.seeds))]
        + [getattr(v, attr).format(fmt) for _, attr, fmt in _SUMMARY_COLUMNS]
        + [f"{v.runs_with_failures}/{len(v.seeds)}"]
        for v in summaries
    ]
    run_rows = [
        [_cell(getattr(r, attr), fmt) for _, attr, fmt in _COLUMNS] for r in results.variants
    ]
    lines = [
        "# Parity: discrete vs continuous-depth Transformers",
        "",
        f"Trained on lengths {task.min_length}–{task.max_length} ({task.train_size} sequences, "
        f"{config.training.steps} steps of {config.training.batch_size}); tested on "
        f"{task.test_per_length} sequences of every length {task.min_length}–"
        f"{task.test_max_length} ('longer' = lengths > {task.max_length}). Seeds {seeds} (each "
        f"sets the initialisation and batch order; the data set is task seed {task.seed}).",
        "NFE is the mean number of layer evaluations per sequence (fixed for discrete stacks). "
        "Cells are mean ± sample std over seeds.",
        *(
            [f"Reproduce: `python -m odet.experiments.parity {results.config_path} --out {out}`"]
            if results.config_path is not None
            else []
        ),
        *([f"Not run yet: {', '.join(missing)}."] if missing else []),
        "",
        *_table(
            ["variant", "encoder", "λ", "params", "seeds"]
            + [title for title, _, _ in _SUMMARY_COLUMNS]
            + ["runs with failed solves"],
            summary_rows,
        ),
        "",
        "## Every run",
        "",
        *_table([title for title, _, _ in _COLUMNS], run_rows),
        "",
    ]
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    _plot(results, summaries)


def _per_length_spread(runs: Sequence[VariantResult], attr: str) -> tuple[list[int], Spread]:
    lengths = [p.length for p in runs[0].per_length]
    return lengths, [
        Spread.of([getattr(r.per_length[i], attr) for r in runs]) for i in range(len(lengths))
    ]


def _plot(results: ParityResults, summaries: Sequence[VariantSummary]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, max_length = results.out_dir, results.config.task.max_length
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
    for v in summaries:
        runs = [r for r in results.variants if r.name == v.name]
        for ax, attr in zip(axes, ("accuracy", "nfe")):
            lengths, spreads = _per_length_spread(runs, attr)
            mean = [s.mean for s in spreads]
            (line,) = ax.plot(lengths, mean, marker=".", label=v.name)
            if len(runs) > 1:
                ax.fill_between(
                    lengths,
                    [s.mean - s.std for s in spreads],
                    [s.mean + s.std for s in spreads],
                    color=line.get_color(),
                    alpha=0.15,
                    linewidth=0,
                )
    for ax, ylabel in zip(axes, ("test accuracy", "mean NFE (layer evaluations)")):
        ax.axvline(max_length + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("sequence length (dashed: longest trained)")
        ax.set_ylabel(ylabel)
    axes[0].axhline(0.5, color="grey", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "accuracy_nfe_vs_length.png")
    plt.close(fig)

    config = results.config
    adaptive = {
        v.name
        for v in config.variants
        if (c := config.classifier_config(v)).encoder_method == CONTINUOUS
        and c.continuous.fixed_steps is None
        and c.continuous.arclength
    }
    swept = sorted((v for v in summaries if v.name in adaptive), key=lambda v: v.arclength_weight)
    if not swept:
        return
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), dpi=80)
    lams = [v.arclength_weight for v in swept]
    series = [("trained lengths", "o-", "trained")]
    if not math.isnan(swept[0].nfe_longer.mean):
        series.append(("longer", "s--", "longer"))
    for label, style, which in series:
        for ax, metric in zip(axes, ("arclength", "nfe")):
            spreads = [getattr(v, f"{metric}_{which}") for v in swept]
            ax.errorbar(
                lams,
                [s.mean for s in spreads],
                yerr=[s.std if s.n > 1 else 0.0 for s in spreads],
                fmt=style,
                capsize=3,
                label=label,
            )
    if any(s.mean > 0 for v in swept for s in (v.arclength_trained, v.arclength_longer)):
        axes[0].set_yscale("log")  # not on runs whose arclength is all zero or NaN (diverged)
    for ax, ylabel in zip(axes, ("mean arclength ∫‖F‖dt", "mean NFE")):
        ax.set_xscale("symlog", linthresh=min([lam for lam in lams if lam > 0], default=1.0))
        ax.set_xlabel("arclength weight λ (adaptive continuous variants)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "arclength_nfe_vs_lambda.png")
    plt.close(fig)


# --------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m odet.experiments.parity CONFIG --out DIR [--seeds S ...] [--quiet]``; a user
    error (a bad config, a refused output) is one ``odet: error:`` line and exit status 2, as
    with ``odet parity``."""
    parser = argparse.ArgumentParser(prog="odet parity", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="YAML experiment config, e.g. configs/parity/quick.yaml")
    parser.add_argument("--out", required=True, help="directory for the tables and plots")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="train only these of the config's seeds"
    )
    parser.add_argument("--variants", nargs="+", help="train only these variants")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--trace",
        metavar="DIR",
        help="write a per-step solver/field/gradient trace (JSONL) of every continuous run "
        "trained now to DIR/<variant>/seed<k>.jsonl",
    )
    args = parser.parse_args(argv)
    try:
        results = run_parity(
            args.config, args.out, progress=not args.quiet, seeds=args.seeds,
            variants=args.variants, trace_dir=args.trace,
        )  # fmt: skip
    except (ValueError, OSError) as err:  # ConfigError, DataError, an output refused
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        where = f": {err.filename}" if isinstance(err, OSError) and err.filename else ""
        print(f"odet: error: {reason.strip().splitlines()[0]}{where}", file=sys.stderr)
        return 2
    print((results.out_dir / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
