"""``generation.gemm: onednn`` (and ``auto``, the default, where it runs): fp32 decoding
through oneDNN's GEMMs stays exact where fp32 is (cached == uncached, batch independence),
matches default fp32 logits to rounding, and is refused where it does not apply."""

import pytest
import torch

from odet.config import ConfigError
from odet.generation import GenerationConfig
from odet.inference import INT8_ALSO, Translator, inference_model, resolve_gemm
from odet.inference.translator import ONEDNN_MIN_WIDTH
from odet.models import Seq2Seq
from odet.nn.onednn import OneDNNLinear, onednn_copy, onednn_supported
from odet.nn.quantization import int8_supported
from tests.generation.test_int8 import DECODERS, decoder_model
from tests.models.test_seq2seq import cached_and_full_logits, small_config, sources

pytestmark = pytest.mark.skipif(
    onednn_supported(torch.device("cpu")) is not None, reason="no oneDNN in this PyTorch build"
)


@pytest.mark.parametrize(("decoder", "coefficients"), DECODERS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_onednn_generate_with_cache_returns_the_tokens_of_generate_without_cache(
    decoder, coefficients, beam_size
):
    model = onednn_copy(decoder_model(decoder, coefficients), INT8_ALSO)
    assert isinstance(model.output_projection, OneDNNLinear)
    src = sources(batch=5, seed=1)
    cached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=True)
    uncached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=False)
    assert cached == uncached
    assert len({tuple(h) for h in cached}) > 1 and any(len(set(h)) > 1 for h in cached)


@pytest.mark.parametrize(("decoder", "coefficients"), DECODERS)
def test_onednn_logits_equal_default_fp32_logits_to_rounding(decoder, coefficients):
    model = decoder_model(decoder, coefficients)
    fast = onednn_copy(model, INT8_ALSO)
    torch.manual_seed(0)
    steps, full, _ = cached_and_full_logits(fast, sources())
    torch.manual_seed(0)  # the same random target
    _, exact, _ = cached_and_full_logits(model, sources())
    torch.testing.assert_close(steps, full, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(full, exact, atol=1e-4, rtol=1e-5)


def test_a_onednn_translation_does_not_depend_on_the_other_sentences_of_its_batch():
    model = onednn_copy(decoder_model("rk2", "gated"), INT8_ALSO)
    src = sources(batch=5, seed=2)
    together = model.generate(src, beam_size=3, max_len=8)
    alone = [model.generate(src[i : i + 1], beam_size=3, max_len=8)[0] for i in range(5)]
    assert together == alone


def test_the_translator_decodes_with_a_onednn_copy_and_leaves_the_model_as_it_is():
    model = Seq2Seq(small_config()).eval()
    translator = Translator(model, tokenizers=None, config=GenerationConfig(gemm="onednn"))
    decoding = translator._inference_model()
    assert decoding is not model and isinstance(decoding.output_projection, OneDNNLinear)
    assert isinstance(model.output_projection, torch.nn.Linear)
    assert inference_model(model, "fp32") is model


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"precision": "bf16"}, "cannot be combined with generation.precision bf16"),
        ({"precision": "int8"}, "cannot be combined with generation.precision int8"),
        ({"compile": True}, "not supported with generation.compile"),
        ({"gemm": "mkl"}, "gemm"),
    ],
)
def test_onednn_combinations_it_does_not_support_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        GenerationConfig(**{"gemm": "onednn", **options})


def test_the_default_gemm_auto_decodes_fp32_with_onednn():
    model = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH)).eval()
    assert GenerationConfig().gemm == "auto"
    decoding = Translator(model, tokenizers=None, config=GenerationConfig())._inference_model()
    assert isinstance(decoding.output_projection, OneDNNLinear)
    assert isinstance(model.output_projection, torch.nn.Linear)
    assert inference_model(model, "fp32", "auto") is not model


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "onednn"),
        ({"precision": "bf16"}, "torch"),
        ({"precision": "int8"}, "torch"),
        ({"compile": True}, "torch"),
        ({"gemm": "torch"}, "torch"),
        ({"gemm": "onednn"}, "onednn"),
    ],
)
def test_gemm_auto_chooses_onednn_only_for_uncompiled_fp32_decoding(options, expected):
    config = GenerationConfig(**options)  # auto combines with every precision and compile
    model = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH)).eval()
    assert resolve_gemm(model, config.precision, config.gemm, config.compile) == expected


def test_gemm_auto_keeps_torch_for_a_bf16_model_and_where_onednn_cannot_run(monkeypatch):
    model = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH)).eval()
    assert resolve_gemm(model.to(torch.bfloat16), "fp32", "auto") == "torch"
    monkeypatch.setattr(
        "odet.inference.translator.onednn_supported", lambda device: "no oneDNN here"
    )
    model = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH)).eval()
    assert resolve_gemm(model, "fp32", "auto") == "torch"
    assert inference_model(model, "fp32", "auto") is model


def test_gemm_auto_decodes_an_inference_copy_as_it_is():
    model = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH)).eval()
    copies = {"onednn": onednn_copy(model, INT8_ALSO)}
    if int8_supported(torch.device("cpu")) is None:
        copies["int8"] = inference_model(model, "int8")
    for name, copy in copies.items():
        assert resolve_gemm(copy, "fp32", "auto") == "torch", name
        assert inference_model(copy, "fp32", "auto") is copy, name


def test_gemm_auto_keeps_torch_below_the_width_where_onednn_pays():
    narrow = Seq2Seq(small_config(d_model=ONEDNN_MIN_WIDTH - 32)).eval()
    assert resolve_gemm(narrow, "fp32", "auto") == "torch"
    assert resolve_gemm(narrow, "fp32", "onednn") == "onednn"
