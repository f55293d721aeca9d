"""A sequence classifier over a discrete or continuous ODE encoder.

::

    tokens (B, T) ─► embed + positions ─► encoder ─► [LN] ─► pool (mean over non-pad | CLS) ─► head

The encoder is either a discrete stack of ``encoder_method`` blocks (``"euler"`` is the
ordinary pre-norm Transformer, ``"rk4"`` an RK4 block over each layer; ``share_layers=True``
ties every block to one layer) or ``"continuous"``: ``encoder_layers`` N-ODE stacks
``dy/dt = F(t, y)`` solved adaptively or with fixed steps, whose solve statistics (NFE,
arclength) come back with the logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from odet.blocks import STACK_METHODS, CoefficientScheme, StackOptions
from odet.config import (
    ConfigError,
    check,
    check_types,
    from_dict,
    require_mapping,
    suggest,
    to_dict,
)
from odet.models.config import (
    CONTINUOUS,
    ContinuousEncoderConfig,
    canonical_encoder_method,
    check_layers,
)
from odet.models.encoder import Encoder, build_encoder
from odet.nn import Activation, FieldSpec, SinusoidalPositions, TokenEmbedding
from odet.ode import SolveStats

CLASSIFIER_CONTINUOUS: dict[str, Any] = {"time_conditioning": "none"}
"""Where the classifier's continuous encoder differs from ``ContinuousEncoderConfig()``."""

CONTINUOUS_KEYS = frozenset(f.name for f in fields(ContinuousEncoderConfig))
"""The continuous encoder's keys, which a classifier config may also give flat (as before #20)."""


@dataclass(frozen=True)
class ClassifierConfig:
    """A sequence classifier (see module docstring).

    Discrete encoders use ``coefficients``/``share_layers``; the continuous one uses
    ``continuous``, whose keys (solver, tolerances, ``time_conditioning``, ``layer_norm`` …) a
    config mapping may also give flat, beside the others (``from_dict``).
    """

    vocab_size: int
    """Vocabulary size."""
    num_classes: int = 2
    """Output classes."""
    d_model: int = 64
    """Feature width ``D``."""
    num_heads: int = 4
    """Attention heads per layer."""
    ffn_dim: int = 128
    """Hidden width of the feed-forward sublayers."""
    encoder_method: str = "euler"
    """A name of ``STACK_METHODS`` or ``"continuous"`` (alias ``"adaptive"``)."""
    encoder_layers: int = 1
    """Blocks (discrete) or ODE stacks (continuous)."""
    coefficients: CoefficientScheme = "fixed"
    """How discrete blocks weigh their stages."""
    share_layers: bool = False
    """Tie every discrete block to one layer."""
    pooling: Literal["mean", "cls"] = "mean"
    """Mean over non-padding positions, or a learned CLS token."""
    final_norm: bool = True
    """Layer norm before pooling."""
    continuous: ContinuousEncoderConfig = field(
        default_factory=lambda: ContinuousEncoderConfig(**CLASSIFIER_CONTINUOUS)
    )
    """Solver and field of the continuous encoder (autonomous by default)."""
    dropout: float = 0.0
    """Dropout on sublayer outputs."""
    activation: Activation = "relu"
    """The feed-forward activation."""
    max_positions: int = 1024
    """Length of the sinusoidal position table."""
    scale_embeddings: bool = True
    """Multiply embeddings by ``√D``."""
    pad_id: int = 0
    """Padding token id."""

    def __post_init__(self) -> None:
        check_types(self)
        object.__setattr__(self, "encoder_method", canonical_encoder_method(self.encoder_method))
        name = "ClassifierConfig"
        for key in ("vocab_size", "d_model", "num_heads", "ffn_dim"):
            value = getattr(self, key)
            check(value >= 1, f"{name}.{key} must be >= 1, got {value}")
        check_layers(f"{name}.encoder_layers", self.encoder_layers)
        check(self.num_classes >= 2, f"{name}.num_classes must be >= 2, got {self.num_classes}")
        check(
            self.d_model % self.num_heads == 0,
            f"{name}.d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})",
        )
        methods = [*sorted(STACK_METHODS), CONTINUOUS]
        check(
            self.encoder_method in methods,
            f"{name}.encoder_method = {self.encoder_method!r} is not a known method"
            f"{suggest(self.encoder_method, methods)}; choose one of {methods}",
        )
        check(0.0 <= self.dropout < 1.0, f"{name}.dropout must lie in [0, 1), got {self.dropout}")
        check(
            0 <= self.pad_id < self.vocab_size,
            f"{name}.pad_id = {self.pad_id} is outside the vocabulary of {self.vocab_size}",
        )
        check(self.max_positions >= 1, f"{name}.max_positions must be >= 1")
        check(
            self.encoder_method == CONTINUOUS or self.continuous.time_conditioning == "none",
            f"{name}.time_conditioning = {self.continuous.time_conditioning!r} needs "
            f"encoder_method='continuous' (discrete fields are autonomous)",
        )

    @property
    def field_spec(self) -> FieldSpec:
        """What the encoder's fields are built from."""
        widths = (self.d_model, self.num_heads, self.ffn_dim)
        return FieldSpec(*widths, dropout=self.dropout, activation=self.activation)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "model") -> ClassifierConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key.

        The continuous encoder's keys may stand flat beside the others (the layout before #20,
        kept by old configs and checkpoints) or under ``continuous``, not both.
        """
        require_mapping(data, where)
        flat = {key: value for key, value in data.items() if key in CONTINUOUS_KEYS}
        nested = data.get("continuous", {})
        if flat and nested:
            raise ConfigError(
                f"{where}: give the continuous encoder's keys {sorted(flat)} flat or under "
                f"'continuous', not both"
            )
        if isinstance(nested, Mapping):
            rest = {key: value for key, value in data.items() if key not in CONTINUOUS_KEYS}
            data = {**rest, "continuous": {**CLASSIFIER_CONTINUOUS, **flat, **nested}}
        return from_dict(cls, data, where=where)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True)
class ClassifierOutput:
    """``logits (B, C)``; ``stats`` of the continuous encoder's solves, else None."""

    logits: Tensor
    stats: SolveStats | None = None


class SequenceClassifier(nn.Module):
    """Classifies token sequences ``(B, T)`` into ``num_classes`` (see module docstring).

    Example:
        >>> import torch
        >>> cfg = ClassifierConfig.from_dict(dict(vocab_size=3, d_model=16, num_heads=2,
        ...     ffn_dim=32, encoder_method="continuous", time_conditioning="film"))
        >>> out = SequenceClassifier(cfg)(torch.tensor([[1, 2, 2], [2, 1, 0]]))
        >>> out.logits.shape, out.stats.nfe.shape
        (torch.Size([2, 2]), torch.Size([2]))
    """

    def __init__(self, config: ClassifierConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id, c.scale_embeddings)
        self.positions = SinusoidalPositions(c.max_positions, c.d_model)
        self.cls = (
            nn.Parameter(torch.randn(c.d_model) * c.d_model**-0.5) if c.pooling == "cls" else None
        )
        self.encoder: Encoder = build_encoder(
            c.encoder_method,
            c.field_spec,
            c.encoder_layers,
            stack=StackOptions(c.coefficients, c.d_model),
            continuous=c.continuous,
            share_layers=c.share_layers,
        )
        self.norm = nn.LayerNorm(c.d_model) if c.final_norm else nn.Identity()
        self.head = nn.Linear(c.d_model, c.num_classes)

    def forward(self, tokens: Tensor) -> ClassifierOutput:
        """``tokens (B, T)`` (``pad_id`` at padding) → logits ``(B, C)`` and solve stats."""
        c = self.config
        if tokens.ndim != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be a (B, T) LongTensor, got {tokens.dtype} {tuple(tokens.shape)}"
            )
        padding_mask = tokens.eq(c.pad_id)  # (B, T)
        if padding_mask.all(dim=1).any():
            empty = padding_mask.all(dim=1).nonzero().flatten().tolist()
            raise ValueError(f"rows {empty} of tokens contain only padding (empty sequences)")
        x = self.embed(tokens)  # (B, T, D)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], 1, -1), x], dim=1)  # (B, 1 + T, D)
            padding_mask = F.pad(padding_mask, (1, 0), value=False)
        x = x + self.positions(x.shape[1])
        out = self.encoder.integrate(x, padding_mask=padding_mask)
        x = self.norm(out.y)
        if self.cls is not None:
            pooled = x[:, 0]  # (B, D)
        else:
            keep = (~padding_mask).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
            pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)
        return ClassifierOutput(self.head(pooled), out.stats)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclass(frozen=True)
class ClassificationLoss:
    """``total = cross_entropy + arclength_weight · mean arclength`` and its parts (0-d)."""

    total: Tensor
    cross_entropy: Tensor
    arclength: Tensor | None


def classification_loss(
    output: ClassifierOutput, labels: Tensor, *, arclength_weight: float = 0.0
) -> ClassificationLoss:
    """Cross-entropy of ``output.logits (B, C)`` against ``labels (B,)``, plus the N-ODE
    arclength regulariser ``λ · mean_b ∫‖F‖dt`` when ``arclength_weight = λ > 0``."""
    if arclength_weight < 0:
        raise ValueError(f"arclength_weight must be >= 0, got {arclength_weight}")
    ce = F.cross_entropy(output.logits, labels)
    arclength = None
    if output.stats is not None and output.stats.arclength is not None:
        arclength = output.stats.arclength.mean()
    if arclength_weight == 0.0:
        return ClassificationLoss(ce, ce, arclength)
    if arclength is None:
        raise ValueError(
            f"arclength_weight = {arclength_weight} needs a continuous encoder with "
            f"arclength=True (the output carries no arclength)"
        )
    return ClassificationLoss(ce + arclength_weight * arclength, ce, arclength)
