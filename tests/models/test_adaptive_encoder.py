"""Seq2Seq with the N-ODE encoder (``encoder_method="adaptive"``)."""

import pytest
import torch

from odet.config import ConfigError
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.models.config import ContinuousEncoderConfig
from tests.devices import fp32_tolerance


def _config(**overrides) -> Seq2SeqConfig:
    options = dict(
        vocab_size=40,
        d_model=16,
        num_heads=2,
        ffn_dim=32,
        encoder_layers=1,
        decoder_layers=1,
        dropout=0.0,
        encoder_method="adaptive",
        continuous=ContinuousEncoderConfig(arclength=True),
    )
    options.update(overrides)
    return Seq2SeqConfig(**options)


def _sources():
    src = torch.randint(4, 40, (3, 6), generator=torch.Generator().manual_seed(0))
    src[1, 4:] = 0
    return src


@pytest.mark.parametrize("decoder", ["euler", "rk2"])
def test_adaptive_encoder_decodes_incrementally_exactly(decoder, device):
    torch.manual_seed(0)
    model = Seq2Seq(_config(decoder_method=decoder)).eval().to(device)
    src, tgt = _sources(), torch.randint(4, 40, (3, 5))
    tgt[:, 0] = 2
    src, tgt = src.to(device), tgt.to(device)
    with torch.no_grad():
        full = model(src, tgt)
        state = model.init_state(model.encode(src))
        steps = torch.cat([model.decode(tgt[:, t : t + 1], state=state) for t in range(5)], 1)
    torch.testing.assert_close(steps, full, **fp32_tolerance(device))
    assert model.generate(src, beam_size=2, max_len=6) == model.generate(
        src, beam_size=2, max_len=6, use_cache=False
    )


def test_encoder_stats_come_back_and_gradients_reach_every_parameter(device):
    torch.manual_seed(1)
    model = Seq2Seq(_config()).to(device)
    src, tgt = _sources().to(device), torch.randint(4, 40, (3, 4)).to(device)
    logits, stats = model(src, tgt, with_stats=True)
    assert stats is not None and stats.nfe.shape == (3,) and (stats.nfe > 0).all()
    (logits.logsumexp(-1).sum() + stats.arclength.mean()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_fixed_step_encoder_round_trips_through_save_and_load(tmp_path):
    config = _config(
        continuous=ContinuousEncoderConfig(solver="rk4", fixed_steps=3, time_conditioning="film")
    )
    model = Seq2Seq(config).eval()
    model.save_pretrained(tmp_path / "m")
    loaded = Seq2Seq.from_pretrained(tmp_path / "m").eval()
    assert loaded.config == config
    src, tgt = _sources(), torch.randint(4, 40, (3, 4))
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt), atol=0, rtol=0)


def test_bad_solver_settings_are_config_errors():
    with pytest.raises(ConfigError, match="not an adaptive method of backend 'torchode'"):
        ContinuousEncoderConfig(solver="rk4")
    with pytest.raises(ConfigError, match="with fixed_steps must be a tableau"):
        ContinuousEncoderConfig(solver="tsit5", fixed_steps=4)
    with pytest.raises(ConfigError, match="decoder_method = 'adaptive' is not a known method"):
        _config(decoder_method="adaptive")
    with pytest.raises(ConfigError, match=r"unknown config key 'model.continuous.rtl'"):
        Seq2SeqConfig.from_dict({"vocab_size": 40, "continuous": {"rtl": 1e-4}})


def _dropout_rates(module: torch.nn.Module) -> list[float]:
    """Every dropout rate the module's submodules apply: dropout modules' ``p`` and the
    attention modules' float ``dropout`` on their weights."""
    rates = {float(m.p) for m in module.modules() if "dropout" in type(m).__name__.lower()}
    rates |= {m.dropout for m in module.modules() if isinstance(getattr(m, "dropout", 0), float)}
    return sorted(rates)


def test_the_fields_own_dropout_overrides_the_models_inside_the_encoder_only(tmp_path):
    """``continuous.field_dropout = 0`` makes the N-ODE field deterministic in training (so the
    adaptive solve's error control sees no mask noise), leaves the decoder's dropout, and is
    saved with the model."""
    solver = dict(solver="rk4", fixed_steps=2)
    x, mask = torch.randn(3, 6, 16), _sources() == 0

    def run(model: Seq2Seq) -> torch.Tensor:
        return model.encoder.integrate(x, padding_mask=mask).y

    torch.manual_seed(0)
    rates = dict(dropout=0.3, attention_dropout=0.2, activation_dropout=0.1)
    quiet = Seq2Seq(
        _config(**rates, continuous=ContinuousEncoderConfig(**solver, field_dropout=0.0))
    )
    quiet.train()
    assert _dropout_rates(quiet.encoder) == [0.0]
    assert {0.3, 0.2, 0.1} <= set(_dropout_rates(quiet.decoder))
    torch.testing.assert_close(run(quiet), run(quiet), atol=0, rtol=0)
    torch.manual_seed(0)
    noisy = Seq2Seq(_config(**rates, continuous=ContinuousEncoderConfig(**solver))).train()
    assert {0.3, 0.2, 0.1} <= set(_dropout_rates(noisy.encoder))
    assert not torch.equal(run(noisy), run(noisy))
    quiet.save_pretrained(tmp_path / "m")
    assert Seq2Seq.from_pretrained(tmp_path / "m").config.continuous.field_dropout == 0.0


@pytest.mark.parametrize("rate", [1.0, -0.1, "0.1", True])
def test_a_field_dropout_outside_zero_one_is_a_config_error(rate):
    with pytest.raises(ConfigError, match="ContinuousEncoderConfig.field_dropout"):
        ContinuousEncoderConfig(field_dropout=rate)
