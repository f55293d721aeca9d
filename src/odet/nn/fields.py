"""Transformer layers as vector fields: ``F(z)`` is one pre-norm layer without its outer residual.

With ``F`` an encoder layer, the pre-norm Transformer layer ``y + F(y)`` is one explicit-Euler
step of ``dy/dt = F(y)``; an RK block evaluates the same ``F`` at several stage inputs::

    encoder  F(z) = a + FFN(LN(z + a)),            a = SelfAttn(LN z)
    decoder  F(z) = a + c + FFN(LN(z + a + c)),    a = CausalSelfAttn(LN z),
                                                   c = CrossAttn(LN(z + a), memory)

Two conventions turn the layer's update ``dy`` into the field value (``FieldOutput``):
``"textbook"`` returns ``dy`` (the ODE view, the default); ``"layer"`` returns ``z + dy``, i.e.
``F(z) = Layer(z)`` as in the ODE Transformer's released code, which grows the residual stream at
every stage and is kept only for faithful reproduction — ``stage_norm`` normalises each stage's
output, which that convention needs to stay bounded.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from odet.nn.attention import CrossAttention, KVCache, SelfAttention
from odet.nn.dropout import Dropout
from odet.nn.feedforward import Activation, FeedForward

FieldConvention = Literal["textbook", "layer"]
FIELD_CONVENTIONS: tuple[FieldConvention, ...] = ("textbook", "layer")


class FieldOutput(nn.Module):
    """Maps a layer's update ``dy`` at input ``z`` to the field value (see module docstring)."""

    def __init__(
        self, d_model: int, convention: FieldConvention, stage_norm: bool, eps: float = 1e-5
    ):
        super().__init__()
        if convention not in FIELD_CONVENTIONS:
            raise ValueError(
                f"unknown field convention {convention!r}; choose one of {FIELD_CONVENTIONS}"
            )
        self.convention = convention
        self.norm = nn.LayerNorm(d_model, eps=eps) if stage_norm else None

    def forward(self, z: Tensor, dy: Tensor) -> Tensor:
        out = dy if self.convention == "textbook" else z + dy
        return out if self.norm is None else self.norm(out)


class EncoderField(nn.Module):
    """``F(z) = a + FFN(LN(z + a))``, ``a = SelfAttn(LN z)``: ``(B, T, D) -> (B, T, D)``."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        *,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: Activation = "relu",
        convention: FieldConvention = "textbook",
        stage_norm: bool = False,
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.d_model = d_model
        self.attn_norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.self_attn = SelfAttention(d_model, num_heads, dropout=attention_dropout)
        self.ffn_norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.ffn = FeedForward(
            d_model, ffn_dim, activation=activation, activation_dropout=activation_dropout
        )
        self.dropout = Dropout(dropout)
        self.output = FieldOutput(d_model, convention, stage_norm, norm_eps)

    def forward(self, z: Tensor, *, padding_mask: Tensor | None = None) -> Tensor:
        """``z (B, T, D)``, ``padding_mask (B, T)`` True at padding → ``F(z) (B, T, D)``."""
        a = self.dropout(self.self_attn(self.attn_norm(z), padding_mask=padding_mask))
        f = self.dropout(self.ffn(self.ffn_norm(z + a)))
        return self.output(z, a + f)


class DecoderField(nn.Module):
    """Causal self-attention, cross-attention to the encoder memory and FFN, as a field.

    ``cache`` holds this stage's self-attention keys/values (one per (block, stage), since every
    stage of an RK block sees a different input); ``memory_kv`` holds the block's projected
    memory, shared by all its stages.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        *,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: Activation = "relu",
        convention: FieldConvention = "textbook",
        stage_norm: bool = False,
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.d_model = d_model
        self.self_attn_norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.self_attn = SelfAttention(d_model, num_heads, dropout=attention_dropout)
        self.cross_attn_norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.cross_attn = CrossAttention(d_model, num_heads, dropout=attention_dropout)
        self.ffn_norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.ffn = FeedForward(
            d_model, ffn_dim, activation=activation, activation_dropout=activation_dropout
        )
        self.dropout = Dropout(dropout)
        self.output = FieldOutput(d_model, convention, stage_norm, norm_eps)

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
        c = self.dropout(
            self.cross_attn(
                self.cross_attn_norm(z + a), memory_kv, memory_padding_mask=memory_padding_mask
            )
        )
        f = self.dropout(self.ffn(self.ffn_norm(z + a + c)))
        return self.output(z, a + c + f)
