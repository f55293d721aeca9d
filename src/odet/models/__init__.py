"""Models: typed configs, the one encoder builder, the encoder–decoder ODE Transformer and the
sequence classifier."""

from odet.models.classifier import (
    ClassifierConfig,
    ClassifierOutput,
    SequenceClassifier,
    classification_loss,
)
from odet.models.config import (
    CONTINUOUS,
    ENCODER_METHOD_ALIASES,
    ContinuousEncoderConfig,
    Seq2SeqConfig,
    canonical_encoder_method,
)
from odet.models.encoder import Encoder, build_encoder
from odet.models.seq2seq import EncoderOutput, Seq2Seq, Seq2SeqDecoder
from odet.models.serialization import CheckpointError

__all__ = [
    "CONTINUOUS",
    "ENCODER_METHOD_ALIASES",
    "CheckpointError",
    "ClassifierConfig",
    "ClassifierOutput",
    "ContinuousEncoderConfig",
    "Encoder",
    "EncoderOutput",
    "Seq2Seq",
    "Seq2SeqConfig",
    "Seq2SeqDecoder",
    "SequenceClassifier",
    "build_encoder",
    "canonical_encoder_method",
    "classification_loss",
]
