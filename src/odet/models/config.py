"""The model configuration: typed, validated on construction, serialisable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from odet.blocks import STACK_METHODS, coefficient_problem
from odet.config import check, check_types, from_dict, suggest, to_dict
from odet.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from odet.ode import ADAPTIVE_METHODS, TABLEAUS

CoefficientName = Literal["fixed", "learned", "gated", "gated_norm", "ema"]


ADAPTIVE = "adaptive"
"""``encoder_method`` of the N-ODE encoder: one time-conditioned layer per block, integrated by
an (adaptive) ODE solver; its settings are ``Seq2SeqConfig.continuous``."""


@dataclass(frozen=True)
class ContinuousEncoderConfig:
    """The N-ODE encoder (``encoder_method="adaptive"``): ``dy/dt = F(t, y)`` on ``[0, t1]``.

    ``solver`` is an adaptive method of ``backend`` (``odet.ode.ADAPTIVE_METHODS``), or a tableau
    name when ``fixed_steps`` is set (fixed-step RK, a known cost). ``layer_norm=False`` is the
    paper's field; ``arclength`` integrates ``∫‖F‖dt`` (needed by ``optim.arclength_weight``).
    """

    time_conditioning: Literal["none", "concat", "embedding", "film"] = "embedding"
    layer_norm: bool = True
    t1: float = 1.0
    solver: str = "dopri5"
    backend: Literal["torchode", "torchdiffeq"] = "torchode"
    rtol: float = 1e-3
    atol: float = 1e-3
    max_steps: int = 1000
    fixed_steps: int | None = None
    arclength: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        name = "continuous encoder"
        check(self.t1 > 0, f"{name}.t1 must be > 0, got {self.t1}")
        check(self.max_steps >= 1, f"{name}.max_steps must be >= 1, got {self.max_steps}")
        if self.fixed_steps is None:
            allowed = list(ADAPTIVE_METHODS[self.backend])
            check(
                self.solver in allowed,
                f"{name}.solver = {self.solver!r} is not an adaptive method of backend "
                f"{self.backend!r}; choose one of {allowed} (or set fixed_steps and a tableau)",
            )
            check(
                self.rtol >= 0 and self.atol >= 0 and self.rtol + self.atol > 0,
                f"{name} needs rtol, atol >= 0, not both 0; got {self.rtol}, {self.atol}",
            )
        else:
            check(self.fixed_steps >= 1, f"{name}.fixed_steps must be >= 1")
            check(
                self.solver in TABLEAUS,
                f"{name}.solver = {self.solver!r} with fixed_steps must be a tableau; choose one "
                f"of {sorted(TABLEAUS)}",
            )


@dataclass(frozen=True)
class Seq2SeqConfig:
    """An encoder–decoder ODE Transformer.

    ``encoder_method`` / ``decoder_method`` name the integrator of each stack (``"euler"`` is the
    ordinary pre-norm Transformer; ``"rk2"``, ``"rk4"`` … are RK blocks over shared layers;
    ``"ab2"``, ``"ab3"``, ``"dlcl"``, ``"pc"``, ``"implicit_euler"`` are the multistep,
    layer-history, predictor–corrector and implicit stacks of ``odet.blocks.STACK_METHODS``).
    ``coefficients`` applies to every stack whose blocks weigh stages (``decoder_coefficients``
    overrides it for the decoder); a scheme the method cannot use is an error, and methods
    without stage weights (``euler``, ``dlcl``, ``implicit_euler``) ignore it.
    """

    vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    ffn_dim: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_method: str = "euler"
    decoder_method: str = "euler"
    coefficients: CoefficientName = "fixed"
    decoder_coefficients: CoefficientName | None = None
    share_gate: bool = False
    implicit_iterations: int = 2
    continuous: ContinuousEncoderConfig = field(default_factory=ContinuousEncoderConfig)
    field_convention: Literal["textbook", "layer"] = "textbook"
    stage_norm: bool = False
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: Literal["relu", "gelu"] = "relu"
    max_positions: int = 1024
    tgt_vocab_size: int | None = None
    share_all_embeddings: bool = False
    share_decoder_embeddings: bool = True
    scale_embeddings: bool = True
    norm_eps: float = 1e-5
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        check_types(self)
        for key in (
            "vocab_size",
            "d_model",
            "num_heads",
            "ffn_dim",
            "encoder_layers",
            "decoder_layers",
            "max_positions",
        ):
            check(
                getattr(self, key) >= 1,
                f"Seq2SeqConfig.{key} must be >= 1, got {getattr(self, key)}",
            )
        check(
            self.d_model % self.num_heads == 0,
            f"Seq2SeqConfig.d_model ({self.d_model}) must be divisible by num_heads "
            f"({self.num_heads})",
        )
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            check(
                0.0 <= getattr(self, key) < 1.0,
                f"Seq2SeqConfig.{key} must lie in [0, 1), got {getattr(self, key)}",
            )
        for key, methods in (
            ("encoder_method", [*STACK_METHODS, ADAPTIVE]),
            ("decoder_method", list(STACK_METHODS)),
        ):
            method = getattr(self, key)
            check(
                method in methods,
                f"Seq2SeqConfig.{key} = {method!r} is not a known method"
                f"{suggest(method, methods)}; choose one of {sorted(methods)}",
            )
        for key, method_key, scheme in (
            ("coefficients", "encoder_method", self.coefficients),
            ("decoder_coefficients", "decoder_method", self.decoder_scheme),
        ):
            if getattr(self, method_key) == ADAPTIVE:
                continue
            problem = coefficient_problem(getattr(self, method_key), scheme)
            check(not problem, f"Seq2SeqConfig.{key} = {scheme!r} with {method_key}: {problem}")
        if self.tgt_vocab_size is not None:
            check(self.tgt_vocab_size >= 1, "Seq2SeqConfig.tgt_vocab_size must be >= 1")
        check(
            not self.share_all_embeddings or self.target_vocab_size == self.vocab_size,
            "Seq2SeqConfig.share_all_embeddings needs one joint vocabulary (tgt_vocab_size "
            f"{self.tgt_vocab_size} != vocab_size {self.vocab_size})",
        )
        ids = {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }
        check(len(set(ids.values())) == 4, f"Seq2SeqConfig special ids must be distinct: {ids}")
        for key, value in ids.items():
            check(
                0 <= value < min(self.vocab_size, self.target_vocab_size),
                f"Seq2SeqConfig.{key} = {value} is outside the vocabulary",
            )
        check(self.norm_eps > 0, "Seq2SeqConfig.norm_eps must be > 0")
        check(self.implicit_iterations >= 0, "Seq2SeqConfig.implicit_iterations must be >= 0")

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def decoder_scheme(self) -> CoefficientName:
        return self.coefficients if self.decoder_coefficients is None else self.decoder_coefficients

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Seq2SeqConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key."""
        return from_dict(cls, data, where="model")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)
