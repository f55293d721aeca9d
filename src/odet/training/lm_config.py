"""The language-model training configuration (``task: lm``), typed and validated at load time.

::

    task: lm
    output_dir: runs/tinyshakespeare-baby
    seed: 1337
    data:  {text, data_dir, tokenizer: char, valid_fraction, block_size, batch_size, eval_iters}
    model: {d_model, num_heads, layers, method, ...}        # CausalLMConfig keys less vocab_size
    optim: {lr, min_lr, betas, weight_decay, decay_embeddings, warmup_updates, ...}
    train: {max_updates, eval_interval, precision, threads, save_every_updates, ...}

``model`` holds ``CausalLMConfig`` keys except ``vocab_size``, which the vocabulary sets. A
config without ``task`` (or with ``task: seq2seq``) is a :class:`~odet.training.TrainConfig`;
:func:`load_any_config` dispatches on the key.
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
    to_dict,
)
from odet.models import CausalLMConfig, check_model_fits
from odet.nn import TrainPrecision
from odet.training.config import TrainConfig, apply_overrides

TOKENIZERS = ("char",)


@dataclass(frozen=True)
class LMDataConfig:
    """One text file, split by characters into training and validation text."""

    text: str = ""
    """The UTF-8 text file (required), relative to ``data_dir``."""
    data_dir: str = "."
    """Directory that ``text`` is resolved against."""
    tokenizer: str = "char"
    """``char``: the distinct characters of the training text (nanoGPT's ``shakespeare_char``)."""
    valid_fraction: float = 0.1
    """The last this fraction of the characters is the validation text."""
    block_size: int = 0
    """Context length of training windows (0: the model's ``block_size``)."""
    batch_size: int = 12
    """Windows per update."""
    eval_iters: int = 20
    """Batches of random windows in each cheap loss estimate."""

    def __post_init__(self) -> None:
        check_types(self)
        check(bool(self.text), "data.text is required (the text file to train on)")
        check(
            self.tokenizer in TOKENIZERS,
            f"data.tokenizer {self.tokenizer!r} is not supported; choose one of "
            f"{list(TOKENIZERS)} (SentencePiece is not available for language models yet)",
        )
        check(
            0.0 < self.valid_fraction < 1.0,
            f"data.valid_fraction must lie in (0, 1), got {self.valid_fraction}",
        )
        check(self.block_size >= 0, "data.block_size must be >= 0 (0: the model's block_size)")
        for key in ("batch_size", "eval_iters"):
            check(getattr(self, key) >= 1, f"data.{key} must be >= 1, got {getattr(self, key)}")

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / self.text

    def input_files(self) -> list[tuple[str, Path]]:
        """Every file the run reads, as ``(key, path)``: what a start checks before it writes."""
        return [("data.text", self.path)]


@dataclass(frozen=True)
class LMOptimConfig:
    """AdamW with decoupled weight decay, linear warmup and cosine decay (as nanoGPT)."""

    lr: float = 1e-3
    """Peak learning rate, reached at the end of warmup."""
    min_lr: float = 1e-4
    """The learning rate at the end of the cosine decay, kept afterwards."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW's β1, β2."""
    eps: float = 1e-8
    """AdamW's ε."""
    weight_decay: float = 0.1
    """Decoupled weight decay of every matrix (parameters with two or more dimensions); norms
    and biases are never decayed."""
    decay_embeddings: bool = False
    """Decay the token embedding (tied to the output projection) and a learned position table
    too, nanoGPT's rule ("every parameter with dim >= 2"); ``False`` (default) spares them, which
    scored better on tinyshakespeare (results/tinyshakespeare/baby)."""
    warmup_updates: int = 100
    """Updates of linear warmup; update ``k`` < warmup uses ``lr · (k + 1) / (warmup + 1)``."""
    decay_updates: int = 0
    """The cosine reaches ``min_lr`` at this update (0: ``train.max_updates``)."""
    clip_norm: float = 1.0
    """Clip the total gradient norm to this (0: no clipping)."""

    def __post_init__(self) -> None:
        check_types(self)
        check(self.lr > 0, f"optim.lr must be > 0, got {self.lr}")
        check(0 <= self.min_lr <= self.lr, f"optim.min_lr must lie in [0, lr], got {self.min_lr}")
        check(
            all(0.0 <= b < 1.0 for b in self.betas), f"optim.betas must lie in [0, 1): {self.betas}"
        )
        check(self.eps > 0, f"optim.eps must be > 0, got {self.eps}")
        for key in ("weight_decay", "warmup_updates", "decay_updates", "clip_norm"):
            check(getattr(self, key) >= 0, f"optim.{key} must be >= 0")


@dataclass(frozen=True)
class LMLoopConfig:
    """How long to train, and what is validated, logged and saved when."""

    max_updates: int = 2000
    """Updates to train."""
    max_minutes: float = 0.0
    """Stop after this much training time, resumes included (0: no limit)."""
    eval_interval: int = 250
    """Estimate the training and validation loss every this many updates (0: never)."""
    precision: TrainPrecision = "fp32"
    """Forward passes in fp32, or bf16 autocast (weights stay fp32); ``auto``: bf16 where the
    device has bf16 matrix instructions (AMX-BF16 or AVX-512-BF16 CPUs, CUDA GPUs of compute
    capability >= 8.0), else fp32. An explicit bf16 elsewhere runs emulated, with a warning."""
    compile: bool = False
    """Run the training forward pass and loss through ``torch.compile`` (loss estimates and
    checkpoints stay eager); the first update pays the compilation. On CPU it needs a working
    C++ compiler, checked before the run starts."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """``auto``: CUDA when available."""
    threads: int = 0
    """CPU threads for torch (0: torch's default; at most 1024)."""
    save_every_updates: int = 0
    """Also checkpoint every this many updates (0: at the end only)."""
    keep_last: int = 3
    """The newest checkpoints kept."""
    max_bad_updates: int = 5
    """Stop after this many non-finite updates in a row."""
    log_every: int = 10
    """Write a ``train`` record every this many updates."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        check_types(self)
        check(self.max_updates >= 1, f"train.max_updates must be >= 1, got {self.max_updates}")
        for key in ("max_minutes", "eval_interval", "save_every_updates"):
            check(getattr(self, key) >= 0, f"train.{key} must be >= 0 (0 disables it)")
        check_threads(self.threads, "train.threads")
        check(self.keep_last >= 1, "train.keep_last must be >= 1")
        check(self.max_bad_updates >= 1, "train.max_bad_updates must be >= 1")
        check(self.log_every >= 1, "train.log_every must be >= 1")


@dataclass(frozen=True)
class LMTrainConfig:
    """Everything ``odet train`` needs for a language model (``task: lm``)."""

    output_dir: str
    """The run directory (created; rerunning resumes it)."""
    data: LMDataConfig
    """The ``data`` section."""
    task: Literal["lm"] = "lm"
    """``lm``: a decoder-only language model on one text."""
    model: dict[str, Any] = field(default_factory=dict)
    """``CausalLMConfig`` keys except ``vocab_size``."""
    optim: LMOptimConfig = field(default_factory=LMOptimConfig)
    """The ``optim`` section."""
    train: LMLoopConfig = field(default_factory=LMLoopConfig)
    """The ``train`` section."""
    seed: int = 1
    """Seed of the initial weights, dropout and the training windows."""

    def __post_init__(self) -> None:
        check_types(self)
        check(bool(self.output_dir.strip()), "output_dir must name the run directory, got ''")
        check_seed(self.seed, "seed")
        check("vocab_size" not in self.model, "model.vocab_size is set from the vocabulary")
        model = self.model_config(vocab_size=1)  # validate early
        check(
            self.data.block_size <= model.block_size,
            f"data.block_size {self.data.block_size} exceeds the model's position table "
            f"(model.block_size {model.block_size})",
        )
        check(
            self.decay_updates > self.optim.warmup_updates,
            f"the cosine decay ends at update {self.decay_updates}, which must exceed "
            f"optim.warmup_updates ({self.optim.warmup_updates})",
        )

    @property
    def block_size(self) -> int:
        """The context length of training and evaluation windows."""
        return self.data.block_size or self.model_config(vocab_size=1).block_size

    @property
    def decay_updates(self) -> int:
        return self.optim.decay_updates or self.train.max_updates

    def model_config(self, vocab_size: int) -> CausalLMConfig:
        """The ``CausalLMConfig`` for a vocabulary of ``vocab_size`` tokens; a model whose weights
        alone exceed the machine's memory is refused here, before anything is built."""
        config = CausalLMConfig.from_dict({**self.model, "vocab_size": vocab_size})
        check_model_fits(config)
        return config

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMTrainConfig:
        return from_dict(cls, data)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def with_output_dir(self, output_dir: str | Path) -> LMTrainConfig:
        return replace(self, output_dir=str(output_dir))


AnyTrainConfig = TrainConfig | LMTrainConfig


def config_from_dict(data: dict[str, Any]) -> AnyTrainConfig:
    """A ``TrainConfig`` (``task`` absent or ``seq2seq``) or an ``LMTrainConfig`` (``lm``)."""
    task = data.get("task", "seq2seq")
    if task == "lm":
        return LMTrainConfig.from_dict(data)
    if task != "seq2seq":
        raise ConfigError(f"task must be 'seq2seq' or 'lm', got {task!r}")
    return TrainConfig.from_dict({k: v for k, v in data.items() if k != "task"})


def load_any_config(path: str | Path, overrides: list[str] | None = None) -> AnyTrainConfig:
    """Read, override and validate a training YAML file of either task."""
    return config_from_dict(apply_overrides(load_yaml(path), overrides or []))
