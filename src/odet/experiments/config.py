"""The experiment config: a base training recipe, named variants and seeds, and where each
run lives (``<output_dir>/<variant>/seed<k>``; see :mod:`odet.experiments.runner`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odet.config import (
    ConfigError,
    check,
    check_name,
    check_seed,
    check_types,
    from_dict,
    load_yaml,
    suggest,
)
from odet.training import LMTrainConfig, load_any_config


@dataclass(frozen=True)
class ExperimentConfig:
    """Variants × seeds of one training recipe (see :mod:`odet.experiments.runner`)."""

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
                    f"{list(self.variants)}{suggest(value, self.variants)}",
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


def is_lm_experiment(config: ExperimentConfig) -> bool:
    """Whether the base config is a language model's (``task: lm``)."""
    return isinstance(load_any_config(config.base, list(config.overrides)), LMTrainConfig)


def run_dir(
    config: ExperimentConfig, variant: str, seed: int, exported: Path | None = None
) -> Path:
    """Where a run lives: ``<output_dir>/<variant>/seed<k>``, or ``<exported>/<variant>-seed<k>``
    for the copy that :func:`~odet.experiments.runner.export_experiment` made into ``exported``."""
    if exported is None:
        return Path(config.output_dir) / variant / f"seed{seed}"
    return Path(exported) / f"{variant}-seed{seed}"


def is_finished(
    config: ExperimentConfig, variant: str, seed: int, exported: Path | None = None
) -> bool:
    """Whether the run has finished (has ``summary.json``)."""
    return (run_dir(config, variant, seed, exported) / "summary.json").is_file()
