"""Transformer building blocks: attention with caches, relative positions, feed-forward,
embeddings, dropout, fields, bf16 precision, and the int8 and oneDNN linear layers of decoding."""

from odet.nn.attention import (
    CrossAttention,
    KVCache,
    SelfAttention,
    StaticKVCache,
    attention_mask,
)
from odet.nn.dropout import Dropout
from odet.nn.embedding import SinusoidalPositions, TokenEmbedding, sinusoidal_table
from odet.nn.feedforward import ACTIVATIONS, Activation, FeedForward
from odet.nn.fields import (
    FIELD_CONVENTIONS,
    CausalField,
    DecoderField,
    EncoderField,
    FieldConvention,
    FieldOutput,
    FieldSpec,
)
from odet.nn.precision import (
    PRECISIONS,
    Precision,
    TrainPrecision,
    autocast_bf16,
    has_native_bf16,
    precision_context,
    resolve_precision,
)
from odet.nn.quantization import Int8Linear, int8_copy
from odet.nn.relative import PositionScheme, RelativePositions, relative_attention
from odet.nn.state import DecoderState
from odet.nn.time import TIME_CONDITIONINGS, TimeConditionedEncoderField, TimeConditioning

__all__ = [
    "ACTIVATIONS",
    "FIELD_CONVENTIONS",
    "PRECISIONS",
    "TIME_CONDITIONINGS",
    "Activation",
    "CausalField",
    "CrossAttention",
    "DecoderField",
    "DecoderState",
    "Dropout",
    "EncoderField",
    "FeedForward",
    "FieldConvention",
    "FieldOutput",
    "FieldSpec",
    "Int8Linear",
    "KVCache",
    "PositionScheme",
    "Precision",
    "RelativePositions",
    "SelfAttention",
    "SinusoidalPositions",
    "StaticKVCache",
    "TimeConditionedEncoderField",
    "TimeConditioning",
    "TokenEmbedding",
    "TrainPrecision",
    "attention_mask",
    "autocast_bf16",
    "has_native_bf16",
    "int8_copy",
    "precision_context",
    "relative_attention",
    "resolve_precision",
    "sinusoidal_table",
]
