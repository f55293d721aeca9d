"""Models: the typed config and the encoder–decoder ODE Transformer."""

from odet.models.classifier import (
    ClassifierConfig,
    ClassifierOutput,
    SequenceClassifier,
    classification_loss,
)
from odet.models.config import ContinuousEncoderConfig, Seq2SeqConfig
from odet.models.seq2seq import EncoderOutput, Seq2Seq, Seq2SeqDecoder
from odet.models.serialization import CheckpointError

__all__ = [
    "CheckpointError",
    "ClassifierConfig",
    "ClassifierOutput",
    "ContinuousEncoderConfig",
    "EncoderOutput",
    "Seq2Seq",
    "Seq2SeqConfig",
    "Seq2SeqDecoder",
    "SequenceClassifier",
    "classification_loss",
]
