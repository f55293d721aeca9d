"""Translator settings that do not need a trained model (the end-to-end path is tested in
tests/training/test_trainer.py)."""

import torch

from odet.generation import GenerationConfig
from odet.inference import Translator
from odet.models import Seq2Seq
from tests.models.test_seq2seq import small_config, sources


def test_bf16_precision_decodes_with_a_bf16_copy_and_leaves_the_model_in_fp32():
    model = Seq2Seq(small_config()).eval()
    translator = Translator(model, tokenizers=None, config=GenerationConfig(precision="bf16"))
    decoding = translator._inference_model()
    assert next(decoding.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32
    src = sources()
    with torch.no_grad():
        full = model.encode(src).memory
        half = decoding.encode(src).memory
    torch.testing.assert_close(half.float(), full, atol=0.1, rtol=0.05)
    fp32 = Translator(model, tokenizers=None, config=GenerationConfig())
    assert fp32._inference_model() is model
