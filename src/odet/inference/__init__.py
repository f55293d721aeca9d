"""Inference: using a trained model — text in, text out, and loading a model with its tokenizers
from a model directory or a training run's checkpoints.

Ranked between models and training: it builds on ``odet.models`` and ``odet.generation`` and
reads (never writes) what ``odet.training`` saves.

Example::

    translator = Translator.from_checkpoint("runs/multi30k-rk2", config=GenerationConfig())
    translator.translate(["A dog runs on the beach."])
"""

from odet.inference.checkpoint import read_index, resolve_model_dir, verify_checkpoint
from odet.inference.translator import (
    INT8_ALSO,
    TranslationReport,
    Translator,
    generation_defaults,
    inference_model,
    load_model_and_tokenizers,
    resolve_decode_precision,
    resolve_gemm,
)

__all__ = [
    "INT8_ALSO",
    "TranslationReport",
    "Translator",
    "generation_defaults",
    "inference_model",
    "load_model_and_tokenizers",
    "read_index",
    "resolve_decode_precision",
    "resolve_gemm",
    "resolve_model_dir",
    "verify_checkpoint",
]
