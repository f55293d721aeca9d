"""A DLCL layer history around any one-step block: the old ``dlcl`` method as its Euler case,
exact cached decoding for every wrapped method, and the combinations a config refuses."""

from __future__ import annotations

import pytest
import torch

from odet.blocks import DLCLStack, GatedCoefficients
from odet.config import ConfigError
from odet.models import Seq2Seq, Seq2SeqConfig
from tests.models.test_seq2seq import lively, small_config, sources

WRAPPED = [
    ("euler", "fixed"),
    ("rk2", "gated"),
    ("rk2", "learned"),
    ("rk4", "fixed"),
    ("pc", "ema"),
    ("implicit_euler", "fixed"),
]


def test_a_dlcl_history_around_euler_is_the_dlcl_method():
    torch.manual_seed(0)
    method = Seq2Seq(small_config(encoder_method="dlcl", decoder_method="dlcl", encoder_layers=3))
    history = Seq2Seq(
        small_config(encoder_history="dlcl", decoder_history="dlcl", encoder_layers=3)
    )
    assert method.state_dict().keys() == history.state_dict().keys()
    with torch.no_grad():
        for p in method.parameters():
            p.add_(0.05 * torch.randn_like(p))  # history weights off their initial averages
    history.load_state_dict(method.state_dict())
    src, tgt = sources(), torch.randint(4, 40, (3, 6))
    with torch.no_grad():
        torch.testing.assert_close(
            history.eval()(src, tgt), method.eval()(src, tgt), rtol=0, atol=1e-6
        )


@pytest.mark.parametrize("positions", ["sinusoidal", "both"])
@pytest.mark.parametrize(("method", "coefficients"), WRAPPED)
def test_cached_decoding_with_a_history_equals_teacher_forcing(method, coefficients, positions):
    torch.manual_seed(1)
    cfg = small_config(
        encoder_method=method,
        decoder_method=method,
        coefficients=coefficients,
        encoder_history="dlcl",
        decoder_history="dlcl",
        positions=positions,
        max_relative_distance=3,
        share_decoder_embeddings=False,
    )
    model = lively(Seq2Seq(cfg)).double()
    assert isinstance(model.encoder, DLCLStack) and isinstance(model.decoder, DLCLStack)
    src = sources()
    tgt = torch.randint(4, 40, (3, 7))
    tgt[:, 0] = cfg.bos_id
    with torch.no_grad():
        full = model(src, tgt)
        state = model.init_state(model.encode(src))
        steps = [model.decode(tgt[:, t : t + 1], state=state) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    for beam in (1, 3):
        cached = model.generate(sources(batch=4, seed=2), beam_size=beam, max_len=8)
        uncached = model.generate(
            sources(batch=4, seed=2), beam_size=beam, max_len=8, use_cache=False
        )
        assert cached == uncached


def test_a_shared_gate_stays_shared_inside_the_history_and_gradients_reach_everything():
    torch.manual_seed(2)
    cfg = small_config(
        encoder_method="rk2", coefficients="gated", share_gate=True, encoder_history="dlcl",
        field_convention="layer", stage_norm=True, encoder_layers=3,
    )  # fmt: skip
    model = Seq2Seq(cfg)
    gates = {id(m) for m in model.encoder.modules() if isinstance(m, GatedCoefficients)}
    assert len(gates) == 1
    model(sources(), torch.randint(4, 40, (3, 5))).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"encoder_method": "continuous", "encoder_history": "dlcl"},
            r"encoder_history = 'dlcl' with encoder_method = 'continuous': a 'dlcl' layer history "
            r"cannot wrap the continuous encoder",
        ),
        (
            {"decoder_method": "ab2", "decoder_history": "dlcl"},
            r"cannot wrap 'ab2' blocks .*use one of \[",
        ),
        ({"encoder_method": "dlcl", "encoder_history": "dlcl"}, r"cannot wrap 'dlcl' blocks"),
        ({"encoder_history": "dense"}, r"encoder_history = 'dense' .*'none' \| 'dlcl'"),
    ],
)
def test_a_history_a_method_cannot_take_is_a_one_line_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        Seq2SeqConfig.from_dict({"vocab_size": 40, **overrides})
