"""The training configuration: one YAML file, typed and validated before any work starts.

::

    output_dir: runs/multi30k-rk2
    seed: 1
    data:       {data_dir, format, train, valid, test, vocab_size, ...}
    model:      {d_model, num_heads, ..., encoder_method, coefficients}   # Seq2SeqConfig keys
    optim:      {lr, betas, warmup_updates, clip_norm, label_smoothing, ...}
    train:      {max_tokens, update_freq, max_epochs, max_updates, max_minutes, precision, ...}
    generation: {beam_size, length_penalty, max_len_a, max_len_b, ...}

``model`` holds ``Seq2SeqConfig`` keys except ``vocab_size`` (and the special ids), which come
from the tokenizer; it is checked at load time, so a typo fails in a second, not after the
tokenizer has trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from odet.config import (
    ConfigError,
    check,
    check_seed,
    check_threads,
    check_types,
    from_dict,
    load_yaml,
    parse_yaml,
    to_dict,
)
from odet.generation import GenerationConfig
from odet.models import Seq2SeqConfig, check_model_fits
from odet.nn import TrainPrecision
from odet.training.schedule import ScheduleName

_FROM_TOKENIZER = ("vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id")


@dataclass(frozen=True)
class DataConfig:
    """Where the data is and how it becomes token ids.

    ``format="text"``: ``train``/``valid``/``test`` are ``[source_file, target_file]`` (plain or
    gzip, line-aligned). ``format="jsonl"``: each is ``[file]`` with ``source_field`` and
    ``target_field``. Relative paths are resolved against ``data_dir``. ``valid_references`` /
    ``test_references`` name extra line-aligned reference files for multi-reference metrics.
    """

    data_dir: str = "."
    """Directory that relative file names below are resolved against."""
    format: Literal["text", "jsonl"] = "text"
    """``text``: line-aligned source/target files; ``jsonl``: one JSON object per line."""
    train: tuple[str, ...] = ()
    """The training split's files (required)."""
    valid: tuple[str, ...] = ()
    """The validation split's files; empty: no validation."""
    test: tuple[str, ...] = ()
    """The test split's files, decoded and scored after training; empty: none."""
    valid_references: tuple[str, ...] = ()
    """Extra line-aligned reference files of the validation split."""
    test_references: tuple[str, ...] = ()
    """Extra line-aligned reference files of the test split."""
    source_field: str = "source"
    """JSON Lines: the field holding the source text."""
    target_field: str = "target"
    """JSON Lines: the field holding the target text."""
    vocab_size: int = 8000
    """SentencePiece vocabulary size (per side when not joint)."""
    tokenizer_type: Literal["bpe", "unigram"] = "bpe"
    """SentencePiece model type."""
    joint_vocab: bool = True
    """One tokenizer for both sides, or one per side."""
    tokenizer_sentences: int = 0
    """Train the tokenizer on a random sample of this many sentences (0: all)."""
    user_defined_symbols: tuple[str, ...] = ()
    """Strings the tokenizer keeps as single pieces (e.g. speaker markers)."""
    max_source_tokens: int = 256
    """Training pairs with longer sources are dropped."""
    max_target_tokens: int = 256
    """Training pairs with longer targets are dropped."""
    max_ratio: float = 0.0
    """Training pairs whose length ratio exceeds this are dropped (0: no limit)."""
    truncate_source: int = 0
    """Cut every source to this many tokens before filtering (0: off)."""
    valid_limit: int = 0
    """Validate on the first this many pairs only (0: all)."""

    def __post_init__(self) -> None:
        check_types(self)
        files = 2 if self.format == "text" else 1
        for split in ("train", "valid", "test"):
            value = getattr(self, split)
            check(
                not value or len(value) == files,
                f"data.{split} needs {files} file(s) for format {self.format!r}, got {list(value)}",
            )
        check(bool(self.train), "data.train is required")
        check(self.vocab_size >= 16, f"data.vocab_size must be >= 16, got {self.vocab_size}")
        for key in ("max_source_tokens", "max_target_tokens"):
            check(getattr(self, key) >= 1, f"data.{key} must be >= 1")
        for key in ("max_ratio", "truncate_source", "valid_limit", "tokenizer_sentences"):
            check(getattr(self, key) >= 0, f"data.{key} must be >= 0 (0 disables it)")

    def path(self, name: str) -> Path:
        return Path(self.data_dir) / name

    def input_files(self) -> list[tuple[str, Path]]:
        """Every file the run reads, as ``(key, path)``: what a start checks before it writes."""
        keys = ("train", "valid", "test", "valid_references", "test_references")
        return [(f"data.{key}", self.path(name)) for key in keys for name in getattr(self, key)]


@dataclass(frozen=True)
class OptimConfig:
    """Adam with a warmup schedule, clipping and label smoothing.

    ``schedule``: ``inverse_sqrt`` (fairseq's default), or ``cosine`` / ``linear`` decay to
    ``min_lr_ratio`` × ``lr`` at ``train.max_updates`` (see :mod:`odet.training.schedule`).
    """

    lr: float = 1e-3
    """Peak learning rate, reached at the end of warmup."""
    betas: tuple[float, float] = (0.9, 0.98)
    """Adam's β1, β2."""
    eps: float = 1e-8
    """Adam's ε."""
    weight_decay: float = 0.0
    """Adam's (L2) weight decay."""
    warmup_updates: int = 4000
    """Updates of linear warmup from ``warmup_init_lr`` to ``lr``."""
    warmup_init_lr: float = 1e-7
    """Learning rate at the first update."""
    schedule: ScheduleName = "inverse_sqrt"
    """Decay after warmup."""
    min_lr_ratio: float = 0.0
    """``cosine``/``linear``: the final lr as a fraction of ``lr``."""
    clip_norm: float = 0.0
    """Clip the total gradient norm to this (0: no clipping)."""
    label_smoothing: float = 0.1
    """ε of label-smoothed cross-entropy."""
    arclength_weight: float = 0.0
    """λ of the arclength regulariser of a continuous encoder (0: off)."""

    def __post_init__(self) -> None:
        check_types(self)
        check(self.lr > 0, f"optim.lr must be > 0, got {self.lr}")
        check(
            all(0.0 <= b < 1.0 for b in self.betas), f"optim.betas must lie in [0, 1): {self.betas}"
        )
        check(self.eps > 0, f"optim.eps must be > 0, got {self.eps}")
        check(self.warmup_updates >= 0, "optim.warmup_updates must be >= 0")
        check(
            self.warmup_init_lr >= 0,
            f"optim.warmup_init_lr must be >= 0, got {self.warmup_init_lr}",
        )
        check(0.0 <= self.min_lr_ratio <= 1.0, "optim.min_lr_ratio must lie in [0, 1]")
        check(self.clip_norm >= 0, "optim.clip_norm must be >= 0 (0 disables clipping)")
        check(0.0 <= self.label_smoothing < 1.0, "optim.label_smoothing must lie in [0, 1)")
        check(self.weight_decay >= 0, "optim.weight_decay must be >= 0")
        check(self.arclength_weight >= 0, "optim.arclength_weight must be >= 0")


@dataclass(frozen=True)
class LoopConfig:
    """How long to train, how batches are formed, and what is saved and validated when."""

    max_tokens: int = 4096
    """Padded tokens per batch (rows × the longer side's length), per rank."""
    max_sentences: int = 0
    """Sentences per batch at most (0: no limit)."""
    update_freq: int = 1
    """Batches accumulated into one update."""
    max_epochs: int = 10
    """Stop after this many epochs."""
    max_updates: int = 0
    """Stop after this many updates (0: no limit)."""
    max_minutes: float = 0.0
    """Stop after this much training time, resumes included (0: no limit)."""
    precision: TrainPrecision = "fp32"
    """Forward passes in fp32, or bf16 autocast (weights stay fp32); ``auto``: bf16 where the
    device has bf16 matrix instructions (AMX-BF16 or AVX-512-BF16 CPUs, CUDA GPUs of compute
    capability >= 8.0), else fp32. An explicit bf16 elsewhere runs emulated, with a warning."""
    bf16_sdpa: Literal["math", "fused"] = "math"
    """bf16 on CPU: SDPA's math backend, or let torch pick the fused kernel."""
    activation_checkpointing: bool = False
    """Recompute block activations in the backward pass to save memory."""
    compile: bool = False
    """Run the training forward pass and loss through ``torch.compile`` (validation, decoding
    and checkpoints stay eager); the first batches pay the compilation. On CPU it needs a
    working C++ compiler, checked before the run starts."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA when available; under ``torchrun`` each rank its own GPU (NCCL) when the
    node has one per rank, else the CPU (gloo)."""
    parallel: Literal["ddp", "fsdp"] = "ddp"
    """Under ``torchrun``: replicate (DDP) or shard (FSDP) the model."""
    threads: int = 0
    """CPU threads for torch (0: torch's default; at most 1024)."""
    save_every_updates: int = 0
    """Also checkpoint every this many updates (0: at epoch ends only)."""
    keep_last: int = 3
    """The newest checkpoints kept (the best one is kept too)."""
    max_bad_updates: int = 5
    """Stop after this many non-finite updates in a row."""
    patience: int = 0
    """Stop after this many validations without improvement (0: never)."""
    valid_metric: Literal["none", "bleu", "chrf", "rouge", "gleu"] = "bleu"
    """Metric of decoded validation and test output; ``none``: loss (test: BLEU)."""
    valid_beam_size: int = 1
    """Beam size of validation decoding."""
    best_metric: Literal["metric", "loss"] = "metric"
    """What picks the best checkpoint: ``valid_metric`` or validation loss."""
    log_every: int = 50
    """Write a ``train`` record every this many updates."""
    progress: bool = True
    """Show progress bars."""

    def __post_init__(self) -> None:
        check_types(self)
        check(self.max_tokens >= 8, f"train.max_tokens must be >= 8, got {self.max_tokens}")
        check(self.update_freq >= 1, "train.update_freq must be >= 1")
        check(self.max_epochs >= 1, "train.max_epochs must be >= 1")
        for key in (
            "max_sentences",
            "max_updates",
            "max_minutes",
            "save_every_updates",
            "patience",
        ):
            check(getattr(self, key) >= 0, f"train.{key} must be >= 0 (0 disables it)")
        check_threads(self.threads, "train.threads")
        check(self.keep_last >= 1, "train.keep_last must be >= 1")
        check(self.max_bad_updates >= 1, "train.max_bad_updates must be >= 1")
        check(self.log_every >= 1, "train.log_every must be >= 1")
        check(self.valid_beam_size >= 1, "train.valid_beam_size must be >= 1")
        check(
            self.best_metric == "loss" or self.valid_metric != "none",
            "train.best_metric 'metric' needs a train.valid_metric other than 'none'",
        )


@dataclass(frozen=True)
class TrainConfig:
    """Everything ``odet train`` needs (see the module docstring for the YAML layout)."""

    output_dir: str
    """The run directory (created; rerunning resumes it)."""
    data: DataConfig
    """The ``data`` section."""
    model: dict[str, Any] = field(default_factory=dict)
    """``Seq2SeqConfig`` keys except the vocabulary size and special ids."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The ``optim`` section."""
    train: LoopConfig = field(default_factory=LoopConfig)
    """The ``train`` section."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Search settings of validation and test decoding."""
    seed: int = 1
    """Seed of the initial weights, dropout and batch order."""

    def __post_init__(self) -> None:
        check_types(self)
        check(bool(self.output_dir.strip()), "output_dir must name the run directory, got ''")
        check_seed(self.seed, "seed")
        for key in _FROM_TOKENIZER:
            check(
                key not in self.model,
                f"model.{key} is set from the tokenizer; set data.vocab_size instead",
            )
        model = self.model_config(vocab_size=max(64, self.data.vocab_size))  # validate early
        check(
            self.optim.schedule == "inverse_sqrt"
            or self.train.max_updates > self.optim.warmup_updates,
            f"optim.schedule {self.optim.schedule!r} decays over train.max_updates, which must "
            f"exceed optim.warmup_updates ({self.optim.warmup_updates}); got "
            f"{self.train.max_updates}",
        )
        check(
            self.generation.precision != "int8",
            "generation.precision int8 is for odet generate only; training validates and tests "
            "in fp32 or bf16",
        )
        check(
            not self.train.compile or model.encoder_method != "continuous",
            "train.compile does not support model.encoder_method: continuous (the adaptive "
            "solver's number of steps depends on the data); set train.compile: false",
        )
        check(
            not self.train.compile or self.train.parallel == "ddp",
            "train.compile supports train.parallel: ddp only, not fsdp; set train.compile: false",
        )
        check(
            not self.optim.arclength_weight
            or (model.encoder_method == "continuous" and model.continuous.arclength),
            "optim.arclength_weight > 0 needs model.encoder_method: continuous with "
            "model.continuous.arclength: true",
        )

    def model_config(self, vocab_size: int, tgt_vocab_size: int | None = None) -> Seq2SeqConfig:
        """The ``Seq2SeqConfig`` for a tokenizer with the given vocabulary size(s); a model whose
        weights alone exceed the machine's memory is refused here, before anything is built."""
        config = Seq2SeqConfig.from_dict(
            {**self.model, "vocab_size": vocab_size, "tgt_vocab_size": tgt_vocab_size}
        )
        check_model_fits(config)
        return config

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        return from_dict(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def with_output_dir(self, output_dir: str | Path) -> TrainConfig:
        return replace(self, output_dir=str(output_dir))


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"model.d_model=256"`` → ``(["model", "d_model"], 256)`` (the value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set has an empty key segment in {key!r}")
    try:
        value = parse_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with ``--set key.sub=value`` overrides applied."""
    result: dict[str, Any] = parse_yaml(yaml.safe_dump(data))
    for text in overrides:
        parts, value = parse_override(text)
        node = result
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return result


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read, override and validate a training YAML file."""
    return TrainConfig.from_dict(apply_overrides(load_yaml(path), overrides or []))
