"""The N-ODE Transformer's parity experiment: discrete vs continuous depth, arclength penalty.

Baier-Reinio & De Sterck (2020) asked whether an input-dependent depth (the NFE of an adaptive
solve) lets a Transformer compute the parity of binary sequences, and generalise to longer
sequences than it was trained on. :func:`run_parity` trains every variant of a config on the
same data with the same seed — discrete stacks (Euler, RK4, weight-tied or not) and continuous
N-ODE stacks at several arclength weights ``λ`` — and writes to ``out_dir``:

- ``results.md`` / ``results.csv``: accuracy on test sequences of the trained lengths and of
  longer ones, mean NFE, mean arclength, parameters and training time per variant;
- ``per_length.csv``: accuracy, NFE and arclength for every test length;
- ``accuracy_nfe_vs_length.png`` (accuracy and NFE per test length) and
  ``arclength_nfe_vs_lambda.png`` (the continuous variants' arclength and NFE against λ);
- ``config.yaml``: the resolved configuration.

Run it as ``python -m odet.experiments.parity CONFIG --out DIR``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm

from odet.config import ConfigError, check, check_types, from_dict, load_yaml, to_dict
from odet.data.parity import (
    PAD_ID,
    VOCAB_SIZE,
    ParityData,
    ParitySplits,
    ParityTaskConfig,
    make_parity_splits,
)
from odet.models.classifier import (
    ClassifierConfig,
    SequenceClassifier,
    classification_loss,
)
from odet.models.config import CONTINUOUS
from odet.ode import get_tableau

# ------------------------------------------------------------------------------------ config


@dataclass(frozen=True)
class TrainingConfig:
    """Adam for ``steps`` updates on shuffled batches of the training split."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    eval_batch_size: int = 512

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
    """One model to train: ``model`` overrides the experiment's base model keys; the loss is
    ``CE + arclength_weight · mean arclength`` (continuous encoders only)."""

    name: str
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    arclength_weight: float = 0.0

    def __post_init__(self) -> None:
        check_types(self)
        check(bool(self.name.strip()), "VariantConfig.name must not be empty")
        check(
            self.arclength_weight >= 0,
            f"variant {self.name!r}: arclength_weight must be >= 0, got {self.arclength_weight}",
        )


@dataclass(frozen=True)
class ParityExperimentConfig:
    """The task, the training recipe, a base model (``ClassifierConfig`` keys without
    ``vocab_size``/``pad_id``, which the task fixes) and the variants; ``seed`` seeds every
    variant's initialisation and batch order alike."""

    task: ParityTaskConfig
    training: TrainingConfig
    variants: tuple[VariantConfig, ...]
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        check_types(self)
        check(len(self.variants) >= 1, "ParityExperimentConfig needs at least one variant")
        names = [v.name for v in self.variants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        check(not duplicates, f"variant names must be unique; repeated: {duplicates}")
        for key in ("vocab_size", "pad_id"):
            check(key not in self.model, f"model.{key} is fixed by the parity task; remove it")
        for variant in self.variants:
            config = self.classifier_config(variant)  # validates the merged keys
            check(
                variant.arclength_weight == 0
                or (config.encoder_method == CONTINUOUS and config.continuous.arclength),
                f"variant {variant.name!r}: arclength_weight > 0 needs "
                f"encoder_method='continuous' (with arclength: true)",
            )

    def classifier_config(self, variant: VariantConfig) -> ClassifierConfig:
        """The variant's model: base keys, then the variant's; continuous encoders compute the
        arclength unless told not to (it is reported even when unpenalised)."""
        data: dict[str, Any] = {"vocab_size": VOCAB_SIZE, "pad_id": PAD_ID, **self.model}
        data.update(variant.model)
        if data.get("encoder_method") == CONTINUOUS:
            data.setdefault("arclength", True)
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
    whose adaptive solve did not reach ``t1``."""

    name: str
    encoder: str
    arclength_weight: float
    parameters: int
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


@dataclass(frozen=True)
class ParityResults:
    """All variants' results; ``config_path`` is the YAML file the run read, if any."""

    config: ParityExperimentConfig
    variants: tuple[VariantResult, ...]
    out_dir: Path
    config_path: Path | None = None


# ---------------------------------------------------------------------------------- training


def run_parity(
    config: str | Path | ParityExperimentConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
) -> ParityResults:
    """Train and evaluate every variant of ``config`` (a YAML path or a config), write the
    report to ``out_dir`` (created), and return the results."""
    config_path = None
    if not isinstance(config, ParityExperimentConfig):
        config_path = Path(config)
        config = ParityExperimentConfig.from_dict(load_yaml(config_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    splits = make_parity_splits(config.task)
    results = tuple(
        _run_variant(config, variant, splits, progress=progress) for variant in config.variants
    )
    report = ParityResults(config, results, out, config_path)
    write_report(report)
    return report


def _run_variant(
    config: ParityExperimentConfig,
    variant: VariantConfig,
    splits: ParitySplits,
    *,
    progress: bool,
) -> VariantResult:
    model_config = config.classifier_config(variant)
    train = config.training
    torch.manual_seed(config.seed)
    model = SequenceClassifier(model_config)
    optimizer = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    order = torch.Generator().manual_seed(config.seed)
    batches = _endless(splits.train, train.batch_size, order)
    bar = tqdm(
        range(train.steps), desc=variant.name, disable=not progress, leave=False, mininterval=1.0
    )
    loss_value = math.nan
    start = time.perf_counter()
    model.train()
    for _ in bar:
        batch = next(batches)
        output = model(batch.tokens)
        loss = classification_loss(output, batch.labels, arclength_weight=variant.arclength_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        if train.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
        loss_value = float(loss.cross_entropy.detach())
        postfix = {"ce": f"{loss_value:.3f}"}
        if output.stats is not None:
            postfix["nfe"] = f"{output.stats.nfe.float().mean():.1f}"
        bar.set_postfix(postfix, refresh=False)
    train_seconds = time.perf_counter() - start
    result = _evaluate(
        model, model_config, variant, splits, config, train_seconds=train_seconds,
        final_loss=loss_value,
    )  # fmt: skip
    if progress:
        tqdm.write(
            f"{variant.name}: val acc {result.val_accuracy:.3f}, "
            f"longer {result.accuracy_longer:.3f}, NFE {result.nfe_trained:.1f}, "
            f"{train_seconds:.0f} s"
        )
    return result


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
    train_seconds: float,
    final_loss: float,
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
        return f"continuous {c.encoder_layers}×[{how}, t={ode.time_conditioning}]"
    tied = ", tied" if c.share_layers and c.encoder_layers > 1 else ""
    return f"{c.encoder_method} ×{c.encoder_layers}{tied}"


# ------------------------------------------------------------------------------------ report

_COLUMNS = (
    ("variant", "name", "{}"),
    ("encoder", "encoder", "{}"),
    ("λ", "arclength_weight", "{:g}"),
    ("params", "parameters", "{:,}"),
    ("val acc", "val_accuracy", "{:.3f}"),
    ("acc (trained lengths)", "accuracy_trained", "{:.3f}"),
    ("acc (longer)", "accuracy_longer", "{:.3f}"),
    ("NFE (trained)", "nfe_trained", "{:.1f}"),
    ("NFE (longer)", "nfe_longer", "{:.1f}"),
    ("arclength (trained)", "arclength_trained", "{:.2f}"),
    ("arclength (longer)", "arclength_longer", "{:.2f}"),
    ("failed solves", "failed", "{}"),
    ("train s", "train_seconds", "{:.1f}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return fmt.format(value)


def write_report(results: ParityResults) -> None:
    """Write the tables, plots and resolved config of ``results`` to ``results.out_dir``."""
    out, config = results.out_dir, results.config
    with (out / "config.yaml").open("w", encoding="utf-8") as fh:
        yaml.safe_dump(config.to_dict(), fh, sort_keys=False, allow_unicode=True)
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow([attr for _, attr, _ in _COLUMNS])
        for r in results.variants:
            writer.writerow([getattr(r, attr) for _, attr, _ in _COLUMNS])
    with (out / "per_length.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["variant", "length", "accuracy", "nfe", "arclength"])
        for r in results.variants:
            for p in r.per_length:
                writer.writerow([r.name, p.length, p.accuracy, p.nfe, p.arclength])
    task = config.task
    header = "| " + " | ".join(title for title, _, _ in _COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in _COLUMNS) + "|"
    rows = [
        "| " + " | ".join(_cell(getattr(r, attr), fmt) for _, attr, fmt in _COLUMNS) + " |"
        for r in results.variants
    ]
    lines = [
        "# Parity: discrete vs continuous-depth Transformers",
        "",
        f"Trained on lengths {task.min_length}–{task.max_length} ({task.train_size} sequences, "
        f"{config.training.steps} steps of {config.training.batch_size}); tested on "
        f"{task.test_per_length} sequences of every length {task.min_length}–"
        f"{task.test_max_length} ('longer' = lengths > {task.max_length}). Seed {config.seed}.",
        "NFE is the mean number of layer evaluations per sequence (fixed for discrete stacks).",
        *(
            [f"Reproduce: `python -m odet.experiments.parity {results.config_path} --out {out}`"]
            if results.config_path is not None
            else []
        ),
        "",
        header,
        rule,
        *rows,
        "",
    ]
    (out / "results.md").write_text("\n".join(lines), encoding="utf-8")
    _plot(results)


def _plot(results: ParityResults) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, max_length = results.out_dir, results.config.task.max_length
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
    for r in results.variants:
        lengths = [p.length for p in r.per_length]
        axes[0].plot(lengths, [p.accuracy for p in r.per_length], marker=".", label=r.name)
        axes[1].plot(lengths, [p.nfe for p in r.per_length], marker=".", label=r.name)
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
    swept = sorted(
        (r for r in results.variants if r.name in adaptive), key=lambda r: r.arclength_weight
    )
    if not swept:
        return
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), dpi=80)
    lams = [r.arclength_weight for r in swept]
    series = [("trained lengths", "o-", "trained")]
    if not math.isnan(swept[0].nfe_longer):
        series.append(("longer", "s--", "longer"))
    for label, style, which in series:
        axes[0].plot(lams, [getattr(r, f"arclength_{which}") for r in swept], style, label=label)
        axes[1].plot(lams, [getattr(r, f"nfe_{which}") for r in swept], style, label=label)
    axes[0].set_yscale("log")
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
    """``python -m odet.experiments.parity CONFIG --out DIR [--quiet]``."""
    parser = argparse.ArgumentParser(prog="odet parity", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="YAML experiment config, e.g. configs/parity/quick.yaml")
    parser.add_argument("--out", required=True, help="directory for the tables and plots")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    results = run_parity(args.config, args.out, progress=not args.quiet)
    print((results.out_dir / "results.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
