"""Decoding settings as one typed config: the ``generation`` section of a training config and the
flags of ``odet generate``. Model-agnostic; :class:`odet.inference.Translator` applies them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from odet.config import check, check_seed, check_types
from odet.generation.strategies import SearchStrategy, StrategyName, make_strategy

__all__ = ["DECODE_PRECISIONS", "GEMMS", "DecodePrecision", "Gemm", "GenerationConfig"]

DecodePrecision = Literal["fp32", "bf16", "int8", "auto"]
"""Training precisions plus ``"int8"`` (decoding only: :mod:`odet.nn.quantization`); ``"auto"``
is bf16 where the device multiplies bf16 natively, else fp32, as for ``train.precision``
(:func:`odet.inference.resolve_decode_precision`)."""
DECODE_PRECISIONS: tuple[DecodePrecision, ...] = get_args(DecodePrecision)

Gemm = Literal["auto", "torch", "onednn"]
"""Who multiplies the fp32 linear layers of a decode: PyTorch's default (MKL on x86 CPUs),
oneDNN with packed weights (:mod:`odet.nn.onednn`), or ``"auto"``: the one that pays
(:func:`odet.inference.resolve_gemm`)."""
GEMMS: tuple[Gemm, ...] = get_args(Gemm)


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode: the search, its length limits, and how a decoding run is batched and in
    which precision it runs. ``"int8"`` quantises attention, feed-forward and the output
    projection (:mod:`odet.nn.quantization`); training configs refuse it. Speeds of ``"bf16"``
    and ``"int8"``: benchmarks/RESULTS.md. Where the hardware only emulates them, both still
    run (int8 exactly, at about fp32's speed) and warn once."""

    strategy: StrategyName = "beam"
    """Search strategy: ``"beam"``, ``"greedy"`` or ``"sample"`` (``make_strategy``)."""
    beam_size: int = 5
    """Beams per sentence (``"beam"``); 1 without an n-gram ban is greedy search."""
    length_penalty: float = 1.0
    """Exponent of the length normalisation of hypothesis scores (every strategy)."""
    max_len_a: float = 1.5
    """Slope of the output length limit ``max_len_a · source_length + max_len_b``."""
    max_len_b: int = 10
    """Offset of the output length limit (tokens, excluding EOS)."""
    min_len: int = 0
    """Fewest generated tokens before EOS is allowed."""
    no_repeat_ngram_size: int = 0
    """Ban repeating any n-gram of this size within a hypothesis (``"beam"``; 0: off)."""
    temperature: float = 1.0
    """Sampling temperature (``"sample"``)."""
    top_k: int = 0
    """Sample among the ``top_k`` most likely tokens only (``"sample"``; 0: no limit)."""
    top_p: float = 1.0
    """Nucleus sampling: the smallest token set reaching this probability (``"sample"``)."""
    seed: int = 0
    """Seed of the sampler's random generator (``"sample"``)."""
    batch_tokens: int = 4096
    """Most padded source tokens per decoding batch."""
    precision: DecodePrecision = "fp32"
    """Decode as is, in a bf16 or int8 copy (CPU), or ``"auto"``: bf16 on bf16 hardware."""
    compile: bool = False
    """Run the cached decoder steps under ``torch.compile`` (compiled once per process)."""
    gemm: Gemm = "auto"
    """fp32 linears by PyTorch, ``"onednn"``, or ``"auto"``: oneDNN where it pays, else PyTorch."""

    def __post_init__(self) -> None:
        check_types(self)
        check(self.beam_size >= 1, "generation.beam_size must be >= 1")
        check(self.max_len_a >= 0 and self.max_len_b >= 0, "generation.max_len_a/b must be >= 0")
        check(self.min_len >= 0, "generation.min_len must be >= 0")
        check(
            self.max_len_a > 0 or self.max_len_b > 0,
            "generation.max_len_a and max_len_b are both 0: no output token would be allowed; "
            "raise one of them",
        )
        check(
            self.max_len_a > 0 or self.min_len <= self.max_len_b,
            f"generation.min_len {self.min_len} > max_len_b {self.max_len_b} with max_len_a 0: "
            "every output would be cut before its minimum length",
        )
        check(self.no_repeat_ngram_size >= 0, "generation.no_repeat_ngram_size must be >= 0")
        check(self.batch_tokens >= 16, "generation.batch_tokens must be >= 16")
        check(self.temperature > 0, "generation.temperature must be > 0")
        check(0 < self.top_p <= 1, "generation.top_p must lie in (0, 1]")
        check(self.top_k >= 0, "generation.top_k must be >= 0")
        check_seed(self.seed, "generation.seed")
        check(
            self.gemm != "onednn" or self.precision == "fp32",
            f"generation.gemm onednn multiplies in fp32; it cannot be combined with "
            f"generation.precision {self.precision} (set generation.precision: fp32, or "
            "generation.gemm: auto)",
        )
        check(
            self.gemm != "onednn" or not self.compile,
            "generation.gemm onednn is not supported with generation.compile; set one of them",
        )

    def make_strategy(self) -> SearchStrategy:
        """The configured strategy, built by :func:`~odet.generation.make_strategy`."""
        options: dict[str, dict[str, Any]] = {
            "greedy": {"length_penalty": self.length_penalty},
            "beam": {
                "beam_size": self.beam_size,
                "length_penalty": self.length_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size,
            },
            "sample": {
                "temperature": self.temperature,
                "top_k": self.top_k,
                "top_p": self.top_p,
                "length_penalty": self.length_penalty,
                "seed": self.seed,
            },
        }
        return make_strategy(self.strategy, **options[self.strategy])
