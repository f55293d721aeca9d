"""The run directory around the checkpoints: its marker and guard (what a rerun may change),
``train.log`` and ``summary.json``."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from odet._version import __version__
from odet.config import parse_yaml
from odet.data import DataError
from odet.data.text import check_input_file
from odet.io import blocking_file, write_bytes_atomic
from odet.runtime import freed_memory_kept
from odet.training.lm_config import AnyTrainConfig, LMTrainConfig, config_from_dict

logger = logging.getLogger("odet.train")


@dataclass(frozen=True)
class TrainResult:
    """What a finished (or budget-stopped) run produced."""

    output_dir: Path
    steps: int
    epochs: int
    """The epoch of the last update (1-based; a run stopped mid-epoch counts the partial one)."""
    elapsed_seconds: float
    best_metric: float | None
    best_checkpoint: Path | None
    last_checkpoint: Path
    valid: dict[str, float]
    test: dict[str, float]
    already_complete: bool = False
    """The run had finished before this call, which trained and wrote nothing."""


SUMMARY_NAME = "summary.json"
"""Written when a run finishes; a rerun of a finished run reads it and does nothing."""
MARKER_NAME = ".odet-run"
"""The file only odet writes that makes a directory a run directory (JSON: version, created)."""

RESUME_SAFE_KEYS: frozenset[str] = frozenset(
    {
        "output_dir",
        "train.max_updates",
        "train.max_epochs",
        "train.max_minutes",
        "train.threads",
        "train.compile",
        "train.log_every",
        "train.progress",
        "train.keep_last",
        "train.patience",
        "train.max_bad_updates",
        "train.save_every_updates",
        "model.continuous.on_failure",
        "model.continuous.max_steps",
    }
)
RESUME_SAFE_SECTIONS: tuple[str, ...] = ("generation.",)


def is_resume_safe(key: str) -> bool:
    """Whether the dotted config ``key`` may differ between a run's saved ``config.yaml`` and
    the config it is resumed with.

    This is the one rule: budgets, logging, threads, compilation, checkpoint retention,
    patience, when skipped updates stop a run, what a continuous encoder's failed solve does
    (``on_failure``, and ``max_steps``, which only decides when a solve has failed) and the
    ``generation`` section change what is done next, not the model, the optimizer or the
    order of the data, so a resumed run stays the run it was. Every other key (``model.*``,
    ``data.*``, ``optim.*``, ``seed``, ``train.max_tokens``, ``train.update_freq``, ...) must
    be equal, or the rerun is refused.
    """
    return key in RESUME_SAFE_KEYS or key.startswith(RESUME_SAFE_SECTIONS)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


_FROM_TOKENIZER = ("vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id")
"""Model keys the tokenizer sets, left out of a comparison of configs."""


def _resolved(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the defaults filled in, as YAML would store it (raw when it no longer
    loads, e.g. a key this version dropped). The ``model`` section, a mapping in the training
    config, is resolved too (defaults and preset), so that a key written out at its default
    value, or a preset spelled out key by key, is no change."""
    try:
        config = config_from_dict(data)
        resolved = parse_yaml(config.to_yaml())
        vocab_size = max(64, getattr(config.data, "vocab_size", 0) or 0)
        model = config.model_config(vocab_size=vocab_size).to_dict()
        resolved["model"] = {k: v for k, v in model.items() if k not in _FROM_TOKENIZER}
    except (ValueError, TypeError):
        resolved = parse_yaml(yaml.safe_dump(data))
    return _flatten(parse_yaml(yaml.safe_dump(resolved)))


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The dotted keys whose values differ, as ``(saved, current)`` (``None`` when absent)."""
    old, new = _resolved(saved), _resolved(current)
    return {k: (old.get(k), new.get(k)) for k in sorted(old | new) if old.get(k) != new.get(k)}


def is_run_dir(out: Path) -> bool:
    """Whether ``out`` is an odet run: the marker, or the layout of runs written before it."""
    legacy = (out / "metrics.jsonl").is_file() and (out / "config.yaml").is_file()
    return (out / MARKER_NAME).is_file() or (out / "checkpoints" / "index.json").is_file() or legacy


def _saved_config(out: Path) -> dict[str, Any] | None:
    path = out / "config.yaml"
    if not path.is_file():
        return None
    try:
        saved = parse_yaml(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        raise DataError(f"{path} is corrupt; restore it or use a new output_dir") from None
    if not isinstance(saved, dict):
        raise DataError(f"{path} is not a training config; restore it or use a new output_dir")
    return saved


def _task(config: dict[str, Any]) -> str:
    """What a (saved) training config trains, in words."""
    return "language-model" if config.get("task") == "lm" else "translation"


UNTRAINED_OUTPUTS = (
    "checkpoints",
    "metrics.jsonl",
    "learning_curve.png",
    "summary.json",
    "test.hyp",
)
"""What a run writes before its first checkpoint, removed when it restarts with a new config
(and ``tokenizer/`` too when a ``data.*`` key changed: the tokenizer depends on those only)."""


def has_saved_updates(out: Path) -> bool:
    """Whether run ``out`` holds a checkpoint (``step_*``; an interrupted write's temporary
    ``.step_*`` is not one): what a change of config on resume could spoil."""
    root = out / "checkpoints"
    return root.is_dir() and any(p.name.startswith("step_") for p in root.iterdir())


def check_output_dir(out: Path, config: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Refuse an ``output_dir`` that is a non-empty folder other than an odet run, or a run
    with checkpoints whose saved config differs from ``config`` in keys ``is_resume_safe``
    rejects; returns the changes (any, for a run that saved no update: it starts afresh, see
    ``open_run_dir``). Nothing is written."""
    if not out.exists():
        if (blocking := blocking_file(out)) is not None:
            raise DataError(
                f"output_dir {out} cannot be created: {blocking} is a file, not a directory"
            )
        return {}
    if not out.is_dir():
        raise DataError(f"output_dir {out} exists and is not a directory")
    if not any(out.iterdir()):
        return {}
    if not is_run_dir(out):
        raise DataError(
            f"output_dir {out} exists, is not empty and is not an odet run directory (no "
            f"{MARKER_NAME}); choose another output_dir (nothing was overwritten)"
        )
    saved = _saved_config(out)
    if saved is not None and _task(saved) != _task(config):
        raise DataError(
            f"output_dir {out} holds a {_task(saved)} run, and this config trains a "
            f"{_task(config)} one; use a new output_dir (nothing was written)"
        )
    changes = config_changes(saved, config) if saved is not None else {}
    refused = {k: v for k, v in changes.items() if not is_resume_safe(k)}
    if refused and has_saved_updates(out):
        listed = ", ".join(f"{k} ({old!r} -> {new!r})" for k, (old, new) in refused.items())
        raise DataError(
            f"output_dir {out} is a run trained with a different config; these keys cannot "
            f"change on resume: {listed}; use a new output_dir, or change only "
            f"{', '.join(sorted(RESUME_SAFE_KEYS))} or generation.* (nothing was written)"
        )
    return changes


def check_input_files(config: AnyTrainConfig) -> None:
    """A ``DataError`` naming the key and the path for the first data file of ``config`` that
    is missing, a directory or unreadable: a start that would fail on its data is refused
    before it writes anything."""
    for key, path in config.data.input_files():
        check_input_file(path, f"{key} file")


def remove_path(path: Path) -> None:
    """Remove a file, a link or a folder with its contents (nothing when there is none)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class NewRun:
    """What a start that fails before training removes so as to leave nothing behind: ``root``,
    the outermost folder of the run's path that the start creates (the run's folder or a
    parent), or the run's folder that existed empty (``keep_root``: emptied, not removed)."""

    root: Path
    keep_root: bool = False

    @classmethod
    def before_start(cls, out: Path) -> NewRun | None:
        """Taken before a start writes; ``None`` for a run being resumed (nothing is removed)."""
        if out.is_dir():
            return None if any(out.iterdir()) else cls(out, keep_root=True)
        root = None
        for path in (out, *out.parents):
            if path.exists():
                break
            root = path
        return None if root is None else cls(root)

    def discard(self) -> None:
        if not self.root.is_dir():
            return
        if not self.keep_root:
            shutil.rmtree(self.root)
            return
        for child in list(self.root.iterdir()):
            remove_path(child)


@dataclass
class RunDir:
    """An open run directory: its ``train.log`` handler, and what a start that fails before
    training removes (``NewRun``; ``None`` for a resumed run)."""

    handler: logging.Handler
    new_run: NewRun | None

    def close(self, *, failed_start: bool = False) -> None:
        """Detach ``train.log``; after a start that failed before training, remove what it
        made, so that it leaves nothing behind."""
        detach_log_file(self.handler)
        if failed_start and self.new_run is not None:
            self.new_run.discard()


def open_run_dir(out: Path, config: AnyTrainConfig) -> RunDir:
    """Check ``out`` (``check_output_dir``) and, for a run not yet finished, its data files
    (``check_input_files``); create and mark it, save the config, attach ``train.log``, log
    the allocator setting and the keys changed on resume."""
    changes = check_output_dir(out, config.to_dict())
    if read_summary(out) is None:
        check_input_files(config)
    new_run = NewRun.before_start(out)
    restart = any(not is_resume_safe(key) for key in changes)
    if restart:  # no update was saved: what the old config wrote goes
        retokenize = any(key.startswith("data.") for key in changes)
        for name in UNTRAINED_OUTPUTS + (("tokenizer",) if retokenize else ()):
            remove_path(out / name)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / MARKER_NAME
    if not marker.is_file():
        info = {"odet_version": __version__, "created": datetime.now(UTC).isoformat()}
        write_bytes_atomic(marker, (json.dumps(info) + "\n").encode("utf-8"))
    saved = config.to_yaml().encode("utf-8")
    config_file = out / "config.yaml"
    if not config_file.is_file() or config_file.read_bytes() != saved:  # a rerun touches nothing
        write_bytes_atomic(config_file, saved)
    run_dir = RunDir(attach_log_file(out / "train.log"), new_run)
    log_allocator()
    if restart:
        logger.info(
            "no update had been saved: started afresh with the new config (%s changed)",
            ", ".join(changes),
        )
        return run_dir
    for key, (old, new) in changes.items():
        logger.info("resumed with %s changed from %r to %r (config.yaml updated)", key, old, new)
    if "train.max_updates" in changes:
        warn_if_the_schedule_stretches(config, *changes["train.max_updates"])
    return run_dir


def warn_if_the_schedule_stretches(config: AnyTrainConfig, old: int, new: int) -> None:
    """Warn when the learning-rate schedule decays over ``train.max_updates``, so changing it
    on resume moves the rest of the decay (the rate jumps to the new curve)."""
    if isinstance(config, LMTrainConfig):
        follows = not config.optim.decay_updates
    else:
        follows = config.optim.schedule != "inverse_sqrt"
    if follows:
        logger.warning(
            "the learning rate decays over train.max_updates: from the resumed update on it "
            "follows the curve of %s updates instead of %s, so it jumps there (the run is not "
            "the one a first start with %s would give)",
            new,
            old,
            new,
        )


def log_allocator() -> None:
    """Say in the run's log when the process keeps freed memory (``odet.runtime``), and how to
    turn it off."""
    if freed_memory_kept():
        logger.info(
            "allocator: freed large blocks kept for reuse (ODET_MALLOC=system turns this off)"
        )


def attach_log_file(path: Path) -> logging.Handler:
    """Send the ``odet`` loggers' INFO records to ``path`` too; returns the handler."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("odet").addHandler(handler)
    logging.getLogger("odet").setLevel(logging.INFO)
    return handler


def detach_log_file(handler: logging.Handler) -> None:
    logging.getLogger("odet").removeHandler(handler)
    handler.close()


def write_summary(
    result: TrainResult,
    *,
    parameters: int,
    world_size: int,
    parallel: str,
    digests: list[str],
) -> Path:
    """``summary.json`` in the run directory: the result, the model size, and for replicated
    (DDP) ranks the parameter digest they agreed on (``None`` under FSDP: ranks hold shards)."""
    best = result.best_checkpoint
    summary = {
        "steps": result.steps,
        "epochs": result.epochs,
        "elapsed_seconds": round(result.elapsed_seconds, 1),
        "best_metric": result.best_metric,
        "best_checkpoint": str(best) if best else None,
        "last_checkpoint": str(result.last_checkpoint),
        "parameters": parameters,
        "world_size": world_size,
        "parallel": parallel,
        "parameters_identical_across_ranks": len(set(digests)) == 1 if digests else None,
        "parameter_digest": digests[0] if digests else None,
        "test": result.test,
    }
    path = result.output_dir / SUMMARY_NAME
    write_bytes_atomic(path, (json.dumps(summary, indent=2) + "\n").encode("utf-8"))
    return path


def read_summary(out: Path) -> dict[str, Any] | None:
    """The ``summary.json`` of the run in ``out``; ``None`` when there is none or it does not
    read as one (a run that has not finished)."""
    try:
        summary = json.loads((out / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def result_from_summary(out: Path, summary: dict[str, Any]) -> TrainResult:
    """The ``TrainResult`` of a finished run, read back from its ``summary.json``."""
    best = summary.get("best_checkpoint")
    return TrainResult(
        out,
        int(summary["steps"]),
        int(summary.get("epochs", 0)),
        float(summary.get("elapsed_seconds", 0.0)),
        summary.get("best_metric"),
        Path(best) if best else None,
        Path(summary["last_checkpoint"]),
        {},
        dict(summary.get("test") or {}),
        already_complete=True,
    )
