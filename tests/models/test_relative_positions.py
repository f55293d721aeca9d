"""Relative position representations in a whole Seq2Seq: exact cached decoding for every block
method, gradients to the new parameters, checkpoints, and the config's checks."""

from __future__ import annotations

import pytest
import torch

from odet.config import ConfigError
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.nn import RelativePositions
from tests.models.test_seq2seq import lively, small_config, sources

METHODS = [
    ("euler", "euler", "fixed"),
    ("rk2", "rk2", "gated"),
    ("rk4", "rk4", "learned"),
    ("ab2", "ab2", "fixed"),
    ("dlcl", "dlcl", "fixed"),
    ("pc", "pc", "ema"),
    ("implicit_euler", "implicit_euler", "fixed"),
]
POSITIONS = [("relative", False), ("both", False), ("both", True)]


def _config(enc, dec, coef, positions, values, **overrides) -> Seq2SeqConfig:
    return small_config(
        encoder_method=enc,
        decoder_method=dec,
        coefficients=coef,
        positions=positions,
        relative_values=values,
        max_relative_distance=3,  # shorter than the sequences, so clipping is exercised
        **overrides,
    )


@pytest.mark.parametrize(("positions", "values"), POSITIONS)
@pytest.mark.parametrize(("enc", "dec", "coef"), METHODS)
def test_cached_logits_equal_teacher_forced_logits_position_by_position(
    enc, dec, coef, positions, values, device
):
    torch.manual_seed(0)
    model = lively(Seq2Seq(_config(enc, dec, coef, positions, values))).double().to(device)
    src = sources(device=device)
    tgt = torch.randint(4, 40, (3, 8))
    tgt[:, 0] = model.config.bos_id
    tgt = tgt.to(device)
    with torch.no_grad():
        full = model(src, tgt)
        state = model.init_state(model.encode(src))
        steps = [model.decode(tgt[:, t : t + 1], state=state) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("positions", "values"), POSITIONS[:2])
@pytest.mark.parametrize(("enc", "dec", "coef"), METHODS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_search_return_the_same_tokens(
    enc, dec, coef, positions, values, beam_size, device
):
    torch.manual_seed(1)
    model = lively(
        Seq2Seq(_config(enc, dec, coef, positions, values, share_decoder_embeddings=False))
    ).double()
    model = model.to(device)
    src = sources(batch=4, seed=1, device=device)
    cached = model.generate(src, beam_size=beam_size, max_len=10, use_cache=True)
    assert cached == model.generate(src, beam_size=beam_size, max_len=10, use_cache=False)
    assert len({tuple(h) for h in cached}) > 1


@pytest.mark.parametrize(("positions", "values"), POSITIONS)
def test_every_self_attention_has_its_own_relative_embeddings_and_gradients_reach_them(
    positions, values
):
    torch.manual_seed(2)
    model = Seq2Seq(_config("rk2", "rk2", "gated", positions, values))
    relative = [m for m in model.modules() if isinstance(m, RelativePositions)]
    assert len(relative) == 4  # 2 encoder + 2 decoder self-attentions, none in cross-attention
    assert all(m.keys.shape == (7, 8) and (m.values is not None) == values for m in relative)
    assert (model.positions is None) == (positions == "relative")
    src, tgt = sources(), torch.randint(4, 40, (3, 5))
    model(src, tgt).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_relative_positions_make_the_encoder_order_aware_without_sinusoids():
    torch.manual_seed(3)
    model = lively(Seq2Seq(_config("euler", "euler", "fixed", "relative", False)))
    src = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        forward = model.encode(src).memory
        backward = model.encode(src.flip(1)).memory.flip(1)
    assert not torch.allclose(forward, backward, atol=1e-4)


def test_a_relative_model_round_trips_through_save_pretrained(tmp_path):
    torch.manual_seed(4)
    model = lively(Seq2Seq(_config("rk2", "euler", "gated", "both", True)))
    model.save_pretrained(tmp_path / "m")
    loaded = Seq2Seq.from_pretrained(tmp_path / "m").eval()
    src, tgt = sources(), torch.randint(4, 40, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt), model(src, tgt), rtol=0, atol=0)
    assert loaded.config == model.config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_relative_distance": 0}, r"max_relative_distance must be >= 1, got 0"),
        ({"positions": "rotary"}, r"positions = 'rotary' .*'sinusoidal' \| 'relative' \| 'both'"),
    ],
)
def test_bad_relative_settings_are_one_line_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        Seq2SeqConfig.from_dict({"vocab_size": 40, **overrides})
