"""Models: the typed config and the encoder–decoder ODE Transformer."""

from odet.models.config import Seq2SeqConfig
from odet.models.seq2seq import EncoderOutput, Seq2Seq, Seq2SeqDecoder
from odet.models.serialization import CheckpointError

__all__ = ["CheckpointError", "EncoderOutput", "Seq2Seq", "Seq2SeqConfig", "Seq2SeqDecoder"]
