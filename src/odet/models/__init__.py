"""Models: typed configs, the one encoder builder, the encoder–decoder ODE Transformer, the
decoder-only language model and the sequence classifier."""

from odet.models.causal_lm import LM_POSITIONS, CausalLM, CausalLMConfig, LMPositions
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
from odet.models.size import ModelTooLargeError, check_model_fits, model_parameters

__all__ = [
    "CONTINUOUS",
    "ENCODER_METHOD_ALIASES",
    "LM_POSITIONS",
    "CausalLM",
    "CausalLMConfig",
    "CheckpointError",
    "ClassifierConfig",
    "ClassifierOutput",
    "ContinuousEncoderConfig",
    "Encoder",
    "EncoderOutput",
    "LMPositions",
    "ModelTooLargeError",
    "Seq2Seq",
    "Seq2SeqConfig",
    "Seq2SeqDecoder",
    "SequenceClassifier",
    "build_encoder",
    "canonical_encoder_method",
    "check_model_fits",
    "classification_loss",
    "model_parameters",
]
