"""Transformer building blocks: attention with caches, feed-forward, embeddings and fields."""

from odet.nn.attention import CrossAttention, KVCache, SelfAttention, attention_mask
from odet.nn.dropout import Dropout
from odet.nn.embedding import SinusoidalPositions, TokenEmbedding, sinusoidal_table
from odet.nn.feedforward import ACTIVATIONS, FeedForward
from odet.nn.fields import FIELD_CONVENTIONS, DecoderField, EncoderField, FieldOutput
from odet.nn.precision import PRECISIONS, autocast_bf16, precision_context
from odet.nn.state import DecoderState
from odet.nn.time import TIME_CONDITIONINGS, TimeConditionedEncoderField

__all__ = [
    "ACTIVATIONS",
    "FIELD_CONVENTIONS",
    "PRECISIONS",
    "TIME_CONDITIONINGS",
    "CrossAttention",
    "DecoderField",
    "DecoderState",
    "Dropout",
    "EncoderField",
    "FeedForward",
    "FieldOutput",
    "KVCache",
    "SelfAttention",
    "SinusoidalPositions",
    "TimeConditionedEncoderField",
    "TokenEmbedding",
    "attention_mask",
    "autocast_bf16",
    "precision_context",
    "sinusoidal_table",
]
