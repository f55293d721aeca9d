"""Transformer layers as vector fields: ``F(z)`` is one pre-norm layer without its outer residual.

With ``F`` an encoder layer, the pre-norm Transformer layer ``y + F(y)`` is one explicit-Euler
step of ``dy/dt = F(y)``; an RK block evaluates the same ``F`` at several stage inputs::

    encoder  F(z) = a + FFN(LN(z + a)),            a = SelfAttn(LN z)
    decoder  F(z) = a + c + FFN(LN(z + a + c)),    a = CausalSelfAttn(LN z),
                                                   c = CrossAttn(LN(z + a), memory)
    causal   F(z) = a + FFN(LN(z + a)),            a = CausalSelfAttn(LN z)   (language models)

Two conventions turn the layer's update ``dy`` into the field value (``FieldOutput``):
``"textbook"`` returns ``dy`` (the ODE view, the default); ``"layer"`` returns ``z + dy``, i.e.
``F(z) = Layer(z)`` as in the ODE Transformer's released code, which grows the residual stream at
every stage and is kept only for faithful reproduction — ``stage_norm`` normalises each stage's
output, which that convention needs to stay bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from torch import Tensor, nn

from odet.nn.attention import CrossAttention, KVCache, SelfAttention
from odet.nn.dropout import Dropout
from odet.nn.feedforward import ACTIVATIONS, Activation, FeedForward
from odet.nn.relative import RelativePositions

FieldConvention = Literal["textbook", "layer"]
FIELD_CONVENTIONS: tuple[FieldConvention, ...] = ("textbook", "layer")


@dataclass(frozen=True)
class FieldSpec:
    """What every Transformer-layer field is built from; validated on construction.

    ``FieldSpec(**options)`` is what ``EncoderField(d_model, num_heads, ffn_dim, **options)``,
    ``DecoderField`` and ``TimeConditionedEncoderField`` consume; model builders hold one.
    """

    d_model: int
    """Feature width ``D`` of the residual stream."""
    num_heads: int
    """Attention heads (must divide ``d_model``)."""
    ffn_dim: int
    """Hidden width of the feed-forward sublayer."""
    dropout: float = 0.0
    """Dropout on each sublayer's output."""
    attention_dropout: float = 0.0
    """Dropout on the attention weights."""
    activation_dropout: float = 0.0
    """Dropout after the feed-forward activation."""
    activation: Activation = "relu"
    """The feed-forward activation (``ACTIVATIONS``)."""
    convention: FieldConvention = "textbook"
    """``"textbook"``: ``F(z) = dy``; ``"layer"``: ``F(z) = z + dy`` (the paper code's)."""
    stage_norm: bool = False
    """Layer-normalise every stage's output (what the ``"layer"`` convention needs)."""
    norm_eps: float = 1e-5
    """Epsilon of every layer norm of the field."""
    max_relative_distance: int | None = None
    """Relative position representations in self-attention, clipped at this distance (Shaw et
    al.; ``None``: none)."""
    relative_values: bool = False
    """Relative representations for the values too (keys only by default, as the paper's code)."""
    bias: bool = True
    """Biases in the attention and feed-forward projections and the layer norms (``False``: none,
    as in GPT-style models without biases)."""

    def __post_init__(self) -> None:
        for key in ("d_model", "num_heads", "ffn_dim"):
            if getattr(self, key) < 1:
                raise ValueError(f"FieldSpec.{key} must be >= 1, got {getattr(self, key)}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"FieldSpec.d_model ({self.d_model}) must be divisible by num_heads "
                f"({self.num_heads})"
            )
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ValueError(f"FieldSpec.{key} must lie in [0, 1), got {getattr(self, key)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}; choose one of {list(ACTIVATIONS)}"
            )
        if self.convention not in FIELD_CONVENTIONS:
            raise ValueError(
                f"unknown field convention {self.convention!r}; choose one of {FIELD_CONVENTIONS}"
            )
        if self.norm_eps <= 0:
            raise ValueError(f"FieldSpec.norm_eps must be > 0, got {self.norm_eps}")
        if self.max_relative_distance is not None and self.max_relative_distance < 1:
            raise ValueError(
                f"FieldSpec.max_relative_distance must be >= 1 (or None), got "
                f"{self.max_relative_distance}"
            )

    def norm(self) -> nn.LayerNorm:
        """A layer norm over ``D``."""
        return nn.LayerNorm(self.d_model, eps=self.norm_eps, bias=self.bias)

    def self_attention(self) -> SelfAttention:
        """Self-attention, with this layer's own relative position embeddings if asked for."""
        relative = (
            None
            if self.max_relative_distance is None
            else RelativePositions(
                self.d_model // self.num_heads,
                self.max_relative_distance,
                values=self.relative_values,
            )
        )
        return SelfAttention(
            self.d_model,
            self.num_heads,
            dropout=self.attention_dropout,
            bias=self.bias,
            relative=relative,
        )

    def feed_forward(self) -> FeedForward:
        return FeedForward(
            self.d_model,
            self.ffn_dim,
            activation=self.activation,
            activation_dropout=self.activation_dropout,
            bias=self.bias,
        )

    def output(self) -> FieldOutput:
        """The map from a layer's update ``dy`` to the field value."""
        return FieldOutput(
            self.d_model, self.convention, self.stage_norm, self.norm_eps, bias=self.bias
        )


def widen(z: Tensor, branch: Tensor) -> Tensor:
    """A sublayer's output ``branch`` in the dtype of the residual stream ``z``.

    Under bf16 autocast the sublayers return bf16 while ``z`` is fp32; the update and the
    residual sums that read it run in fp32. Cast once and reused by every sum, rather than
    promoted by each (on CPU a mixed-dtype add copies its bf16 input to fp32 first), so the
    forward values are the same and the branch's gradient is rounded to bf16 once."""
    return branch.to(z.dtype)


class FieldOutput(nn.Module):
    """Maps a layer's update ``dy`` at input ``z`` to the field value (see module docstring)."""

    def __init__(
        self,
        d_model: int,
        convention: FieldConvention,
        stage_norm: bool,
        eps: float = 1e-5,
        *,
        bias: bool = True,
    ):
        super().__init__()
        if convention not in FIELD_CONVENTIONS:
            raise ValueError(
                f"unknown field convention {convention!r}; choose one of {FIELD_CONVENTIONS}"
            )
        self.convention = convention
        self.norm = nn.LayerNorm(d_model, eps=eps, bias=bias) if stage_norm else None

    def forward(self, z: Tensor, dy: Tensor) -> Tensor:
        out = dy if self.convention == "textbook" else z + dy
        return out if self.norm is None else self.norm(out)


class _LayerField(nn.Module):
    """A field built from ``FieldSpec(d_model, num_heads, ffn_dim, **options)`` by ``_build``."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, **options: Any):
        super().__init__()
        self.d_model = d_model
        self._build(FieldSpec(d_model, num_heads, ffn_dim, **options))

    def _build(self, spec: FieldSpec) -> None:
        raise NotImplementedError


class _SelfAttentionField(_LayerField):
    """What the encoder and causal fields share: ``F(z) = a + FFN(LN(z + a))`` around the
    self-attention output ``a`` that each computes its own way."""

    def _build(self, spec: FieldSpec) -> None:
        self.attn_norm = spec.norm()
        self.self_attn = spec.self_attention()
        self.ffn_norm = spec.norm()
        self.ffn = spec.feed_forward()
        self.dropout = Dropout(spec.dropout)
        self.output = spec.output()

    def _field(self, z: Tensor, a: Tensor) -> Tensor:
        """``F(z)`` from ``z`` and the self-attention output ``a``, both ``(B, T, D)``."""
        a = widen(z, self.dropout(a))
        f = widen(z, self.dropout(self.ffn(self.ffn_norm(z + a))))
        return self.output(z, a + f)


class EncoderField(_SelfAttentionField):
    """``F(z) = a + FFN(LN(z + a))``, ``a = SelfAttn(LN z)``: ``(B, T, D) -> (B, T, D)``.

    Built from ``FieldSpec(d_model, num_heads, ffn_dim, **options)``.
    """

    def forward(self, z: Tensor, *, padding_mask: Tensor | None = None) -> Tensor:
        """``z (B, T, D)``, ``padding_mask (B, T)`` True at padding → ``F(z) (B, T, D)``."""
        return self._field(z, self.self_attn(self.attn_norm(z), padding_mask=padding_mask))


class CausalField(_SelfAttentionField):
    """``F(z) = a + FFN(LN(z + a))``, ``a = CausalSelfAttn(LN z)``: the decoder-only (language
    model) layer, ``(B, T, D) -> (B, T, D)``.

    ``cache`` holds this stage's self-attention keys/values (one per (block, stage), as in
    :class:`DecoderField`), so every block family decodes incrementally and exactly. Built from
    ``FieldSpec(d_model, num_heads, ffn_dim, **options)``.
    """

    def forward(self, z: Tensor, *, cache: KVCache | None = None) -> Tensor:
        """``z (B, T, D)`` (the new positions when ``cache`` holds earlier ones) → ``F(z)``."""
        return self._field(z, self.self_attn(self.attn_norm(z), causal=True, cache=cache))


class DecoderField(_LayerField):
    """Causal self-attention, cross-attention to the encoder memory and FFN, as a field.

    ``cache`` holds this stage's self-attention keys/values (one per (block, stage), since every
    stage of an RK block sees a different input); ``memory_kv`` holds the block's projected
    memory, shared by all its stages. Built from ``FieldSpec(d_model, num_heads, ffn_dim,
    **options)``.
    """

    def _build(self, spec: FieldSpec) -> None:
        self.self_attn_norm = spec.norm()
        self.self_attn = spec.self_attention()
        self.cross_attn_norm = spec.norm()
        self.cross_attn = CrossAttention(
            spec.d_model, spec.num_heads, dropout=spec.attention_dropout
        )
        self.ffn_norm = spec.norm()
        self.ffn = spec.feed_forward()
        self.dropout = Dropout(spec.dropout)
        self.output = spec.output()

    def project_memory(self, memory: Tensor) -> KVCache:
        """This layer's cross-attention keys/values of the memory ``(B, S, D)``."""
        return self.cross_attn.project_memory(memory)

    def forward(
        self,
        z: Tensor,
        *,
        memory_kv: KVCache,
        memory_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """``z (B, T, D)``; ``memory_kv`` from ``project_memory(memory (B, S, D))``;
        ``memory_padding_mask (B, S)``; ``cache``: this stage's self-attention cache."""
        a = self.dropout(self.self_attn(self.self_attn_norm(z), causal=True, cache=cache))
        a = widen(z, a)
        za = z + a
        c = self.dropout(
            self.cross_attn(
                self.cross_attn_norm(za), memory_kv, memory_padding_mask=memory_padding_mask
            )
        )
        c = widen(z, c)
        f = widen(z, self.dropout(self.ffn(self.ffn_norm(za + c))))
        return self.output(z, a + c + f)
