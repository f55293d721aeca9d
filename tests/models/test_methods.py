"""The equivalence suite for the multistep, DLCL, predictor–corrector and implicit stacks."""

import pytest
import torch

from odet.config import ConfigError
from odet.models import Seq2Seq
from tests.devices import fp32_tolerance
from tests.models.test_seq2seq import cached_and_full_logits, lively, small_config, sources

NEW_METHODS = ["ab2", "ab3", "dlcl", "pc", "implicit_euler"]
COMBINATIONS = [
    ("ab2", "ab2", "fixed"),
    ("ab3", "ab3", "learned"),
    ("dlcl", "dlcl", "fixed"),
    ("pc", "pc", "fixed"),
    ("pc", "pc", "ema"),
    ("implicit_euler", "implicit_euler", "fixed"),
    ("rk2", "pc", "ema"),
    ("dlcl", "ab3", "learned"),
    ("implicit_euler", "rk4", "learned"),
]
DEEP = {"encoder_layers": 3, "decoder_layers": 3}  # so AB3 reaches its full order


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
def test_incremental_decoding_logits_equal_teacher_forced_logits(enc, dec, coef, device):
    torch.manual_seed(0)
    cfg = small_config(encoder_method=enc, decoder_method=dec, coefficients=coef, **DEEP)
    model = Seq2Seq(cfg).eval().to(device)
    steps, full, state = cached_and_full_logits(model, sources(device=device))
    torch.testing.assert_close(steps, full, **fp32_tolerance(device))
    assert len(state.self_attn) == sum(model.decoder.stage_counts)


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_generate_with_cache_returns_the_tokens_of_generate_without_cache(
    enc, dec, coef, beam_size, device
):
    torch.manual_seed(1)
    cfg = small_config(
        encoder_method=enc,
        decoder_method=dec,
        coefficients=coef,
        share_decoder_embeddings=False,
        **DEEP,
    )
    model = lively(Seq2Seq(cfg)).double().to(device)
    src = sources(batch=5, seed=1, device=device)
    cached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=True)
    uncached = model.generate(src, beam_size=beam_size, max_len=8, use_cache=False)
    assert cached == uncached
    assert len({tuple(h) for h in cached}) > 1  # a non-degenerate check
    assert any(len(set(h)) > 1 for h in cached)


@pytest.mark.parametrize(
    ("method", "stages"), [("ab2", 1), ("ab3", 1), ("dlcl", 1), ("pc", 3), ("implicit_euler", 3)]
)
def test_decoder_state_holds_one_cache_per_block_and_stage(method, stages):
    model = Seq2Seq(small_config(decoder_method=method, **DEEP)).eval()
    state = model.init_state(model.encode(sources()))
    assert model.decoder.stage_counts == (stages,) * 3
    assert set(state.self_attn) == {(l, i) for l in range(3) for i in range(stages)}


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
def test_gradients_reach_every_parameter(enc, dec, coef, device):
    torch.manual_seed(3)
    model = Seq2Seq(small_config(encoder_method=enc, decoder_method=dec, coefficients=coef))
    model = model.to(device)
    src, tgt = sources(device=device), torch.randint(4, 40, (3, 5)).to(device)
    model(src, tgt).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_parameter_counts_relative_to_the_euler_model():
    def count(method: str, coef: str = "fixed") -> int:
        cfg = small_config(encoder_method=method, decoder_method=method, coefficients=coef, **DEEP)
        return Seq2Seq(cfg).num_parameters()

    euler = count("euler")
    # Same layers, no weights of their own: fixed multistep, fixed PC and implicit Euler.
    assert count("ab2") == count("ab3") == count("pc") == count("implicit_euler") == euler
    # Learned AB3 β: 1 + 2 + 3 per stack of 3 blocks.
    assert count("ab3", "learned") == euler + 2 * 6
    # PC with EMA: one α and three corrector weights γ per block.
    assert count("pc", "ema") == euler + 2 * 3 * (1 + 3)
    # DLCL: the lower triangle of W (4 rows: 1 + 2 + 3 + 4) and one LayerNorm (2·D) per layer.
    assert count("dlcl") == euler + 2 * (10 + 3 * 2 * 32)


def test_zero_layers_make_every_method_but_dlcl_an_identity_stack():
    torch.manual_seed(5)
    x = torch.randn(2, 4, 32)
    for method in NEW_METHODS:
        model = Seq2Seq(small_config(encoder_method=method, coefficients="fixed")).eval()
        for block in model.encoder.blocks:
            for p in block.field.parameters():
                torch.nn.init.zeros_(p)  # zero norms and projections ⇒ every field is zero
        with torch.no_grad():
            out = model.encoder(x, padding_mask=torch.zeros(2, 4, dtype=torch.bool))
        if method == "dlcl":
            assert not torch.allclose(out, x)  # a mix of normalised copies, not the identity
        else:
            torch.testing.assert_close(out, x, atol=0, rtol=0)


@pytest.mark.parametrize(("enc", "dec", "coef"), COMBINATIONS)
def test_save_and_from_pretrained_round_trip_gives_identical_outputs(tmp_path, enc, dec, coef):
    torch.manual_seed(4)
    cfg = small_config(encoder_method=enc, decoder_method=dec, coefficients=coef)
    model = Seq2Seq(cfg).eval()
    with torch.no_grad():  # move learned coefficients off their initial values
        for name, p in model.named_parameters():
            if "coefficients" in name or name.startswith(("encoder.weights", "decoder.weights")):
                p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "m")
    loaded = Seq2Seq.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == cfg
    src, tgt = sources(), torch.randint(4, 40, (3, 5))
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"encoder_method": "pc", "coefficients": "gated"},
            r"coefficients = 'gated' with encoder_method = 'pc': 'gated' coefficients do not "
            r"apply to method 'pc'; use 'fixed', 'learned', 'ema'",
        ),
        (
            {"decoder_method": "pc", "decoder_coefficients": "gated"},
            r"decoder_coefficients = 'gated' with decoder_method = 'pc': .* method 'pc'",
        ),
        (
            {"encoder_method": "rk2", "decoder_method": "ab2", "coefficients": "gated"},
            r"decoder_coefficients = 'gated' with decoder_method = 'ab2': .* method 'ab2'; "
            r"use 'fixed', 'learned'",
        ),
        (
            {"decoder_method": "ab3", "coefficients": "ema"},
            r"'ema' coefficients do not apply to method 'ab3'",
        ),
        ({"encoder_method": "ab4"}, r"encoder_method = 'ab4' is not a known method"),
        ({"decoder_method": "implicit"}, r"did you mean 'implicit_euler'\?"),
    ],
)
def test_bad_method_and_coefficient_combinations_are_rejected_at_construction(overrides, message):
    with pytest.raises(ConfigError, match=message):
        small_config(**overrides)


def test_methods_without_stage_weights_accept_and_ignore_any_scheme():
    for method in ("dlcl", "implicit_euler"):
        cfg = small_config(encoder_method=method, decoder_method=method, coefficients="gated")
        assert (
            Seq2Seq(cfg).num_parameters()
            == Seq2Seq(small_config(encoder_method=method, decoder_method=method)).num_parameters()
        )
