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

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from odet.blocks import STACK_METHODS, build_stack
from odet.blocks.continuous import build_continuous_encoder
from odet.config import check, check_types, from_dict, suggest, to_dict
from odet.models.config import ContinuousEncoderConfig
from odet.nn import EncoderField, SinusoidalPositions, TokenEmbedding
from odet.nn.time import TimeConditionedEncoderField
from odet.ode import SolveStats

CONTINUOUS = "continuous"


@dataclass(frozen=True)
class ClassifierConfig:
    """A sequence classifier (see module docstring).

    Discrete encoders use ``coefficients``/``share_layers``; continuous ones use the solver keys
    (``solver`` is an adaptive method of ``backend``, or a tableau when ``fixed_steps`` is set),
    ``time_conditioning``, ``layer_norm`` (False: the N-ODE Transformer's field, without layer
    norm) and ``arclength`` (compute ``∫‖F‖dt``, needed by the arclength regulariser).
    """

    vocab_size: int
    num_classes: int = 2
    d_model: int = 64
    num_heads: int = 4
    ffn_dim: int = 128
    encoder_method: str = "euler"
    encoder_layers: int = 1
    coefficients: Literal["fixed", "learned", "gated", "gated_norm", "ema"] = "fixed"
    share_layers: bool = False
    pooling: Literal["mean", "cls"] = "mean"
    final_norm: bool = True
    layer_norm: bool = True
    time_conditioning: Literal["none", "concat", "embedding", "film"] = "none"
    max_frequency: float = 10.0
    t1: float = 1.0
    solver: str = "dopri5"
    backend: Literal["torchode", "torchdiffeq"] = "torchode"
    rtol: float = 1e-3
    atol: float = 1e-3
    max_steps: int = 1000
    fixed_steps: int | None = None
    arclength: bool = False
    on_failure: Literal["raise", "flag"] = "raise"
    dropout: float = 0.0
    activation: Literal["relu", "gelu"] = "relu"
    max_positions: int = 1024
    scale_embeddings: bool = True
    pad_id: int = 0

    def __post_init__(self) -> None:
        check_types(self)
        name = "ClassifierConfig"
        for key in ("vocab_size", "d_model", "num_heads", "ffn_dim", "encoder_layers"):
            value = getattr(self, key)
            check(value >= 1, f"{name}.{key} must be >= 1, got {value}")
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
        if self.encoder_method == CONTINUOUS:
            self._check_continuous(name)
        else:
            check(
                self.time_conditioning == "none",
                f"{name}.time_conditioning = {self.time_conditioning!r} needs "
                f"encoder_method='continuous' (discrete fields are autonomous)",
            )

    def _check_continuous(self, name: str) -> None:
        check(self.max_frequency >= 1.0, f"{name}.max_frequency must be >= 1")
        ContinuousEncoderConfig(  # the same solver rules as Seq2Seq's continuous encoder
            time_conditioning=self.time_conditioning,
            layer_norm=self.layer_norm,
            t1=self.t1,
            solver=self.solver,
            backend=self.backend,
            rtol=self.rtol,
            atol=self.atol,
            max_steps=self.max_steps,
            fixed_steps=self.fixed_steps,
            arclength=self.arclength,
        )

    @property
    def continuous(self) -> bool:
        return self.encoder_method == CONTINUOUS

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassifierConfig:
        """Build from a mapping (e.g. YAML); unknown keys are errors naming the closest key."""
        return from_dict(cls, data, where="model")

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
        >>> cfg = ClassifierConfig(vocab_size=3, d_model=16, num_heads=2, ffn_dim=32,
        ...                        encoder_method="continuous", time_conditioning="film")
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
        self.encoder: nn.Module = _build_encoder(c)
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
        stats = None
        if c.continuous:
            result = self.encoder(x, padding_mask=padding_mask)
            x, stats = result.y, result.stats
        else:
            x = self.encoder(x, padding_mask=padding_mask)
        x = self.norm(x)
        if self.cls is not None:
            pooled = x[:, 0]  # (B, D)
        else:
            keep = (~padding_mask).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
            pooled = (x * keep).sum(dim=1) / keep.sum(dim=1)
        return ClassifierOutput(self.head(pooled), stats)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _build_encoder(c: ClassifierConfig) -> nn.Module:
    if c.continuous:
        return build_continuous_encoder(
            lambda: TimeConditionedEncoderField(
                c.d_model, c.num_heads, c.ffn_dim, time_conditioning=c.time_conditioning,
                layer_norm=c.layer_norm, max_frequency=c.max_frequency, dropout=c.dropout,
                activation=c.activation,
            ),
            c.encoder_layers, t1=c.t1, solver=c.solver, backend=c.backend, rtol=c.rtol,
            atol=c.atol, max_steps=c.max_steps, fixed_steps=c.fixed_steps,
            arclength=c.arclength, on_failure=c.on_failure,
        )  # fmt: skip

    def make_field() -> EncoderField:
        return EncoderField(
            c.d_model, c.num_heads, c.ffn_dim, dropout=c.dropout, activation=c.activation
        )

    shared = make_field() if c.share_layers else None
    return build_stack(
        c.encoder_method,
        (lambda: shared) if shared is not None else make_field,
        c.encoder_layers,
        coefficients=c.coefficients,
        d_model=c.d_model,
    )


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
