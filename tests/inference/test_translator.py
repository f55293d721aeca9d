"""Translator settings that do not need a trained model (the end-to-end path is tested in
tests/training/test_trainer.py)."""

import json

import pytest
import torch

import odet.nn.precision
from odet.generation import GenerationConfig
from odet.inference import Translator, resolve_decode_precision
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
    fp32 = Translator(model, tokenizers=None, config=GenerationConfig(gemm="torch"))
    assert fp32._inference_model() is model


@pytest.mark.parametrize(("flags", "expected"), [("avx512_bf16", "bf16"), ("avx2", "fp32")])
def test_auto_precision_decodes_in_bf16_only_where_the_cpu_has_bf16_units(
    flags, expected, monkeypatch
):
    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset({flags}))
    cpu = torch.device("cpu")
    assert resolve_decode_precision("auto", cpu) == expected
    assert [resolve_decode_precision(p, cpu) for p in ("fp32", "bf16", "int8")] == [
        "fp32",
        "bf16",
        "int8",
    ]
    model = Seq2Seq(small_config()).eval()
    config = GenerationConfig(precision="auto", gemm="torch")
    decoding = Translator(model, tokenizers=None, config=config)._inference_model()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[expected]
    assert next(decoding.parameters()).dtype == dtype
    assert (decoding is model) == (expected == "fp32")


def test_bf16_decoding_on_a_cpu_that_emulates_bf16_warns_and_still_decodes_in_bf16(
    monkeypatch, caplog
):
    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset({"avx2"}))
    odet.nn.precision._warn_emulated_bf16.cache_clear()
    model = Seq2Seq(small_config()).eval()
    translator = Translator(model, tokenizers=None, config=GenerationConfig(precision="bf16"))
    with caplog.at_level("WARNING", logger="odet.nn.precision"):
        decoding = translator._inference_model()
        resolve_decode_precision("int8", torch.device("cpu"))
    odet.nn.precision._warn_emulated_bf16.cache_clear()
    assert next(decoding.parameters()).dtype == torch.bfloat16
    assert [r.getMessage()[:21] for r in caplog.records] == ["bf16 is emulated here"]


def test_onednn_gemms_refuse_a_precision_that_may_be_bf16():
    with pytest.raises(ValueError, match="generation.precision auto"):
        GenerationConfig(precision="auto", gemm="onednn")


def test_from_checkpoint_translates_as_the_model_generates(tmp_path):
    from odet.data import Tokenizer, TokenizerPair, pad_tokens
    from odet.inference import load_model_and_tokenizers
    from odet.inference.checkpoint import sha256_file

    corpus = ["the cat sat on the mat", "a dog runs in the park", "two men walk"] * 10
    tokenizer = Tokenizer.train(corpus, vocab_size=40)
    model = Seq2Seq(small_config(vocab_size=tokenizer.vocab_size)).eval()
    step = tmp_path / "run" / "checkpoints" / "step_0000001"
    model.save_pretrained(step)
    TokenizerPair.joint(tokenizer).save(step)
    sums = {f.name: sha256_file(f) for f in step.iterdir()}  # as training writes it
    (step / "checksums.json").write_text(json.dumps(sums))
    (step.parent / "index.json").write_text(
        '{"checkpoints": [], "last": "step_0000001", "best": "step_0000001"}'
    )
    loaded, tokenizers = load_model_and_tokenizers(tmp_path / "run")
    assert tokenizers.source.to_bytes() == tokenizer.to_bytes()
    config = GenerationConfig(beam_size=2, max_len_a=0.0, max_len_b=6)
    translator = Translator.from_checkpoint(tmp_path / "run", config=config)
    sentences = ["the cat sat", "", "a dog runs in the park"]
    expected = [
        tokenizer.decode(
            loaded.generate(pad_tokens([tokenizer.encode(s)], append_eos=True), 2, max_len=6)[0]
        )
        if s
        else ""
        for s in sentences
    ]
    assert translator.translate(sentences) == expected
    assert translator.report.empty == 1
