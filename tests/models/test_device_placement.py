"""The stacks create every tensor on the device of their input, checked on the CPU with the
``meta`` device: a tensor made without ``device=`` (a CPU mask, a CPU weight vector) meets a
meta tensor and raises, as it would meet a CUDA tensor on a GPU. Training (forward and
backward) and cached decoding, for every stack method with absolute and relative positions.
Relative positions build the most masks and indices; absolute ones are checked for two
methods. ``make gpu-check`` runs the device-parametrised tests on a real GPU."""

from __future__ import annotations

import contextlib

import pytest
import torch

from odet.models import CausalLM, CausalLMConfig, Seq2Seq, Seq2SeqConfig
from odet.models.seq2seq import STAGE_CACHES, EncoderOutput

META = torch.device("meta")
FAMILIES = [
    ("euler", "fixed"), ("rk2", "fixed"), ("rk2", "learned"), ("rk2", "gated"),
    ("rk2", "gated_norm"), ("rk4", "ema"), ("dopri5", "fixed"), ("ab2", "fixed"),
    ("ab3", "learned"), ("dlcl", "fixed"), ("pc", "fixed"), ("pc", "ema"),
    ("implicit_euler", "fixed"),
]  # fmt: skip
"""One method of each stack family and every coefficient scheme (the other tableaus share
the one-step stage loop)."""
CASES = [(m, s, "relative") for m, s in FAMILIES] + [
    ("euler", "fixed", "absolute"),
    ("rk2", "gated", "absolute"),
]
IDS = [f"{m}-{s}-{p}" for m, s, p in CASES]
ABSOLUTE = {"seq2seq": "sinusoidal", "lm": "learned"}


@pytest.fixture(autouse=True)
def _autocast_off_on_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.autocast`` has no meta device type; the gate's fp32 region is a no-op there."""
    autocast = torch.autocast

    def patched(device_type: str, *args, **kwargs):
        if device_type == "meta":
            return contextlib.nullcontext()
        return autocast(device_type, *args, **kwargs)

    monkeypatch.setattr(torch, "autocast", patched)


@pytest.mark.parametrize(("method", "scheme", "positions"), CASES, ids=IDS)
def test_seq2seq_stacks_train_and_decode_on_the_device_of_their_input(method, scheme, positions):
    config = Seq2SeqConfig(
        vocab_size=40, d_model=16, num_heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2,
        encoder_method=method, decoder_method=method, coefficients=scheme, dropout=0.1,
        positions=ABSOLUTE["seq2seq"] if positions == "absolute" else positions,
        max_relative_distance=3,
    )  # fmt: skip
    model = Seq2Seq(config).to(META).train()
    pad = torch.zeros(2, 5, dtype=torch.bool, device=META)
    x = torch.randn(2, 5, 16, device=META, requires_grad=True)
    memory = model.encoder.integrate(x, padding_mask=pad).y
    kwargs = [{"memory_kv": b.field.project_memory(memory)} for b in model.decoder.blocks]
    y = model.decoder(
        torch.randn(2, 4, 16, device=META), block_kwargs=kwargs, memory_padding_mask=pad
    )
    (y.sum() + memory.sum()).backward()
    stacks = [*model.encoder.parameters(), *model.decoder.parameters()]
    assert all(p.grad is not None and p.grad.device == META for p in stacks)
    model.eval()
    with torch.no_grad():
        state = model.init_state(EncoderOutput(memory.detach(), pad))
        for _ in range(3):
            kwargs = [
                {"memory_kv": state.memory_kv[l], STAGE_CACHES: state.block_caches(l)}
                for l in range(len(model.decoder.blocks))
            ]
            step = model.decoder(
                torch.randn(2, 1, 16, device=META), block_kwargs=kwargs, memory_padding_mask=pad
            )
            state.length += 1
    assert step.device == META and state.length == 3


@pytest.mark.parametrize(("method", "scheme", "positions"), CASES, ids=IDS)
def test_causal_lms_train_and_decode_on_the_device_of_their_input(
    method, scheme, positions, monkeypatch
):
    monkeypatch.setattr(CausalLM, "_check_tokens", lambda self, tokens, offset: None)
    config = CausalLMConfig(
        vocab_size=23, d_model=16, num_heads=2, ffn_dim=32, layers=2, block_size=10,
        method=method, coefficients=scheme, dropout=0.1,
        positions=ABSOLUTE["lm"] if positions == "absolute" else positions,
        max_relative_distance=3,
    )  # fmt: skip
    model = CausalLM(config).to(META).train()
    tokens = torch.zeros(2, 6, dtype=torch.long, device=META)
    model(tokens).sum().backward()
    assert all(p.grad is not None and p.grad.device == META for p in model.parameters())
    model.eval()
    with torch.no_grad():
        state = model.init_state()
        logits = [model.decode(tokens[:, :3], state), model.decode(tokens[:, 3:4], state)]
    assert all(t.device == META for t in logits) and state.length == 4
