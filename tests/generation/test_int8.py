"""``generation.precision: int8``: cached decoding stays exact within int8, outputs do not
depend on the batch, logits stay close to fp32, and int8 is refused where it does not apply."""

import pytest
import torch

from odet.generation import GenerationConfig
from odet.inference import INT8_ALSO, Translator, inference_model
from odet.models import Seq2Seq
from odet.nn import Int8Linear
from odet.nn.quantization import int8_copy
from odet.training.step import ForwardPrecision
from tests.models.test_seq2seq import cached_and_full_logits, lively, small_config, sources

DECODERS = [
    ("euler", "fixed"),
    ("rk2", "fixed"),
    ("rk2", "gated"),
    ("rk4", "fixed"),
    ("ab2", "fixed"),
    ("dlcl", "fixed"),
    ("pc", "ema"),
]
"""One decoder per method family: one-step (Euler, RK2 fixed and gated, RK4), multistep,
layer history, predictor–corrector."""


def decoder_model(decoder: str, coefficients: str, seed: int = 1) -> Seq2Seq:
    """A lively 3+3-layer model with ``decoder`` (and an encoder of its family), eval mode."""
    torch.manual_seed(seed)
    cfg = small_config(
        encoder_method="rk2" if decoder in ("euler", "rk2", "rk4") else decoder,
        decoder_method=decoder,
        coefficients=coefficients,
        encoder_layers=3,
        decoder_layers=3,
        share_decoder_embeddings=False,
    )
    return lively(Seq2Seq(cfg))


def _int8_model(decoder: str, coefficients: str, dtype: torch.dtype, seed: int = 1) -> Seq2Seq:
    return int8_copy(decoder_model(decoder, coefficients, seed).to(dtype), INT8_ALSO)


@pytest.mark.parametrize(("decoder", "coefficients"), DECODERS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_int8_generate_with_cache_returns_the_tokens_of_generate_without_cache(
    decoder, coefficients, beam_size
):
    # fp64 around the int8 matmuls, as the fp32 exactness tests: each row is quantised alone,
    # so the cached step and the full prefix give each position the same int8 inputs.
    model = _int8_model(decoder, coefficients, torch.float64)
    assert isinstance(model.output_projection, Int8Linear)
    src = sources(batch=5, seed=1)
    cached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=True)
    uncached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=False)
    assert cached == uncached
    assert len({tuple(h) for h in cached}) > 1 and any(len(set(h)) > 1 for h in cached)


@pytest.mark.parametrize(("decoder", "coefficients"), [("euler", "fixed"), ("rk4", "fixed")])
def test_int8_incremental_logits_equal_teacher_forced_int8_logits(decoder, coefficients):
    model = _int8_model(decoder, coefficients, torch.float64)
    steps, full, _ = cached_and_full_logits(model, sources())
    torch.testing.assert_close(steps, full, atol=1e-9, rtol=1e-9)


def test_an_int8_translation_does_not_depend_on_the_other_sentences_of_its_batch():
    model = _int8_model("rk2", "gated", torch.float64)
    src = sources(batch=5, seed=2)
    together = model.generate(src, beam_size=3, max_len=8)
    alone = [model.generate(src[i : i + 1], beam_size=3, max_len=8)[0] for i in range(5)]
    assert together == alone


@pytest.mark.parametrize(("decoder", "coefficients"), DECODERS)
def test_int8_logits_are_close_to_fp32_logits(decoder, coefficients):
    torch.manual_seed(0)
    cfg = small_config(encoder_method="rk2", decoder_method=decoder, coefficients=coefficients)
    model = Seq2Seq(cfg).eval()
    quantized = inference_model(model, "int8")
    src = sources()
    tgt = torch.randint(4, 40, (3, 6))
    tgt[:, 0] = model.config.bos_id
    with torch.no_grad():
        exact, approx = model(src, tgt), quantized(src, tgt)
    # Measured on these models (euler / rk2 / rk4, three seeds): max |Δ| 0.023-0.048 for
    # logits of std ~1, mean |Δ| 0.005-0.010; a trained Multi30k model: max 0.23, mean 0.02
    # for std 1.5. Twice the worst small-model figures:
    difference = (approx - exact).abs()
    assert 0 < difference.max() < 0.1 and difference.mean() < 0.02
    assert (approx.argmax(-1) == exact.argmax(-1)).float().mean() >= 0.9


def test_the_translator_decodes_int8_with_a_copy_and_leaves_the_model_in_fp32():
    model = Seq2Seq(small_config()).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    translator = Translator(model, tokenizers=None, config=GenerationConfig(precision="int8"))
    decoding = translator._inference_model()
    assert decoding is not model and isinstance(decoding.output_projection, Int8Linear)
    assert isinstance(model.output_projection, torch.nn.Linear)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.output_projection.weight is model.tgt_embed.weight  # still tied


def test_int8_is_refused_for_training_time_evaluation_and_non_fp32_models():
    with pytest.raises(ValueError, match="decoding only"):
        ForwardPrecision.for_evaluation("int8", torch.device("cpu"))
    with pytest.raises(ValueError, match="fp32"):
        inference_model(Seq2Seq(small_config()).to(torch.bfloat16), "int8")


def test_int8_decodes_on_the_cpu_and_is_refused_with_its_reason_on_other_devices(device):
    model = Seq2Seq(small_config()).eval().to(device)
    src = sources(device=device)
    if device.type == "cpu":
        decoding = inference_model(model, "int8")
        assert isinstance(decoding.output_projection, Int8Linear)
        assert len(decoding.generate(src, beam_size=2, max_len=4)) == 3
    else:  # torch._int_mm's CUDA kernel has other shape rules: not a silent fallback
        with pytest.raises(ValueError, match=r"runs on CPU only \(the model is on cuda\)"):
            inference_model(model, "int8")
