"""The decoder-only language model: Euler is a hand-written pre-norm GPT, cached decoding equals
the full forward for every stack method, cached and uncached sampling agree, checkpoints round
trip, and bad configs and sampling options are one-line errors."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from odet.blocks import STACK_METHODS, DLCLStack
from odet.config import ConfigError
from odet.models import CausalLM, CausalLMConfig, CheckpointError, Seq2Seq, Seq2SeqConfig
from odet.models.causal_lm import StaticState
from odet.nn import CausalField, EncoderField

VOCAB = 23
CASES = [
    (method, scheme, "none")
    for method, spec in STACK_METHODS.items()
    for scheme in (spec.schemes or ("fixed",))
] + [("rk2", "gated", "dlcl"), ("rk4", "fixed", "dlcl"), ("pc", "ema", "dlcl")]
IDS = [f"{m}-{s}" + ("-dlcl" if h == "dlcl" else "") for m, s, h in CASES]


def small(**overrides: object) -> CausalLMConfig:
    options: dict[str, object] = dict(
        vocab_size=VOCAB, d_model=16, num_heads=2, ffn_dim=32, layers=2, block_size=10
    )
    return CausalLMConfig(**{**options, **overrides})  # type: ignore[arg-type]


def lively(model: CausalLM) -> CausalLM:
    """Weights large enough that a random model's next token depends on its context."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
    return model.eval()


def tokens(batch: int = 3, length: int = 7, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def cached_logits(model: CausalLM, ids: torch.Tensor) -> torch.Tensor:
    state = model.init_state()
    return torch.cat([model.decode(ids[:, t : t + 1], state) for t in range(ids.shape[1])], 1)


@pytest.mark.parametrize(("method", "coefficients", "history"), CASES, ids=IDS)
def test_cached_decoding_and_sampling_equal_the_full_forward(method, coefficients, history, device):
    torch.manual_seed(0)
    model = lively(CausalLM(small(method=method, coefficients=coefficients, history=history)))
    model = model.double().to(device)
    assert isinstance(model.stack, DLCLStack) == (history == "dlcl" or method == "dlcl")
    ids = tokens().to(device)
    with torch.no_grad():
        full = model(ids)
        torch.testing.assert_close(cached_logits(model, ids), full, rtol=0, atol=1e-5)
    prompt = ids[:, :3]
    cached = model.generate(prompt, 12, temperature=0.9, top_k=10, seed=3)
    uncached = model.generate(prompt, 12, temperature=0.9, top_k=10, seed=3, use_cache=False)
    assert cached.shape == (3, 15) and torch.equal(cached[:, :3], prompt)
    assert torch.equal(cached, uncached)  # 15 > block_size: past the context too


@pytest.mark.parametrize("temperature", [1e-30, 1e-300])
def test_a_tiny_temperature_samples_what_greedy_decoding_picks(temperature):
    torch.manual_seed(0)
    model = lively(CausalLM(small())).eval()
    prompt = tokens(batch=2, length=3)
    greedy = model.generate(prompt, 6, top_k=1, seed=0)
    assert torch.equal(model.generate(prompt, 6, temperature=temperature, seed=1), greedy)


@pytest.mark.parametrize(("method", "coefficients", "history"), CASES, ids=IDS)
def test_the_static_cache_step_equals_the_full_forward(method, coefficients, history):
    torch.manual_seed(0)
    model = lively(CausalLM(small(method=method, coefficients=coefficients, history=history)))
    model = model.double()
    ids = tokens(length=model.config.block_size)
    with torch.no_grad():
        full = model(ids)
        state = model.init_state()
        steps = [model.decode(ids[:, :3], state)[:, -1:]]
        static = StaticState.of(state, model.config.block_size)
        for t in range(3, ids.shape[1]):
            steps.append(model.static_step(ids[:, t : t + 1], static.position, static.caches))
            static.position += 1
        torch.testing.assert_close(torch.cat(steps, 1), full[:, 2:], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["euler", "rk2"])
def test_compiled_sampling_samples_the_eager_tokens(method):
    torch.manual_seed(2)
    model = lively(CausalLM(small(method=method, positions="sinusoidal"))).double()
    prompt = tokens(length=3)
    eager = model.generate(prompt, 12, temperature=0.9, top_k=10, seed=3)
    assert torch.equal(
        model.generate(prompt, 12, temperature=0.9, top_k=10, seed=3, compile=True), eager
    )


def test_compiled_sampling_rejects_relative_positions():
    model = CausalLM(small(positions="relative"))
    with pytest.raises(ValueError, match="does not support relative positions"):
        model.generate(tokens(), 2, compile=True)


@pytest.mark.parametrize(("method", "coefficients", "history"), CASES, ids=IDS)
def test_gradients_reach_every_parameter(method, coefficients, history, device):
    torch.manual_seed(1)
    model = CausalLM(small(method=method, coefficients=coefficients, history=history)).train()
    model = model.to(device)
    ids = tokens(length=10).to(device)
    loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not silent


def test_euler_is_a_hand_written_pre_norm_gpt():
    torch.manual_seed(2)
    cfg = small(layers=3)
    model = lively(CausalLM(cfg))
    w = {k: v.clone() for k, v in model.state_dict().items()}
    ids = tokens(length=cfg.block_size)
    b, t = ids.shape
    d, h = cfg.d_model, cfg.num_heads

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (d,), w[f"{name}.weight"], w[f"{name}.bias"], cfg.norm_eps)

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, w[f"{name}.weight"], w[f"{name}.bias"])

    x = w["token_embed.weight"][ids] + w["positions.weight"][:t]
    for layer in range(cfg.layers):
        p = f"stack.blocks.{layer}.field"
        q, k, v = linear(norm(x, f"{p}.attn_norm"), f"{p}.self_attn.qkv_proj").split(d, -1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + linear(a.transpose(1, 2).reshape(b, t, d), f"{p}.self_attn.out_proj")
        hidden = F.gelu(linear(norm(x, f"{p}.ffn_norm"), f"{p}.ffn.fc1"))
        x = x + linear(hidden, f"{p}.ffn.fc2")
    expected = norm(x, "norm") @ w["token_embed.weight"].t()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("method", ["euler", "rk2", "rk4"])
def test_relative_positions_decode_exactly(method, device):
    torch.manual_seed(3)
    cfg = small(method=method, positions="relative", max_relative_distance=3)
    model = lively(CausalLM(cfg)).double().to(device)
    assert model.positions is None
    assert all(b.field.self_attn.relative is not None for b in model.stack.blocks)
    ids = tokens(length=9).to(device)
    with torch.no_grad():
        torch.testing.assert_close(cached_logits(model, ids), model(ids), rtol=0, atol=1e-5)
    prompt = ids[:, :2]
    assert torch.equal(
        model.generate(prompt, 11, seed=4), model.generate(prompt, 11, seed=4, use_cache=False)
    )


def test_sinusoidal_positions_and_no_biases_decode_exactly(device):
    torch.manual_seed(4)
    cfg = small(method="rk2", positions="sinusoidal", bias=False, stage_norm=True)
    model = lively(CausalLM(cfg)).double().to(device)
    assert not [n for n, _ in model.named_parameters() if n.endswith(".bias")]
    ids = tokens().to(device)
    with torch.no_grad():
        torch.testing.assert_close(cached_logits(model, ids), model(ids), rtol=0, atol=1e-5)


def test_the_causal_field_is_the_encoder_field_with_a_causal_mask():
    torch.manual_seed(5)
    causal, encoder = CausalField(16, 2, 32), EncoderField(16, 2, 32)
    assert causal.state_dict().keys() == encoder.state_dict().keys()
    encoder.load_state_dict(causal.state_dict())
    z = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(causal(z)[:, :1], encoder(z[:, :1]))
        assert not torch.allclose(causal(z), encoder(z))


def test_top_k_one_is_the_argmax_and_a_long_prompt_is_cropped():
    torch.manual_seed(6)
    model = lively(CausalLM(small(method="rk2", coefficients="gated")))
    ids = tokens(length=4)
    out = model.generate(ids, 1, top_k=1, seed=0)
    with torch.no_grad():
        assert torch.equal(out[:, -1], model(ids)[:, -1].argmax(-1))
    long = tokens(length=14, seed=1)
    tail = long[:, -model.config.block_size :]
    grown = model.generate(long, 5, seed=7)
    assert grown.shape == (3, 19) and torch.equal(grown[:, :14], long)
    assert torch.equal(grown[:, 14:], model.generate(tail, 5, seed=7)[:, -5:])
    assert not torch.equal(model.generate(ids, 8, seed=1), model.generate(ids, 8, seed=2))


def test_top_p_keeps_the_nucleus():
    torch.manual_seed(7)
    model = lively(CausalLM(small()))
    ids = tokens(batch=1, length=3)
    with torch.no_grad():
        best = model(ids)[:, -1].argmax(-1)
    draws = torch.cat([model.generate(ids, 1, top_p=1e-6, seed=s)[:, -1] for s in range(5)])
    assert torch.equal(draws, best.expand(5))


def test_a_state_without_memory_reorders_its_rows():
    torch.manual_seed(8)
    model = lively(CausalLM(small(method="rk2"))).double()
    ids = tokens()
    index = torch.tensor([2, 0, 0])
    with torch.no_grad():
        state = model.init_state()
        model.decode(ids[:, :4], state)
        state.reorder(index, rows_per_source=1)
        step = model.decode(ids[index, 4:], state)
        torch.testing.assert_close(step, model(ids[index])[:, 4:], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"top_k": 0}, "top_k must be an integer >= 1"),
        ({"top_k": 2.5}, "top_k must be an integer >= 1 (or None), got 2.5"),
        ({"top_p": 0.0}, "top_p must lie in (0, 1]"),
        ({"top_p": 1.5}, "top_p must lie in (0, 1]"),
        ({"seed": -1}, "seed must be an integer in [0, 2**64 - 1], got -1"),
        ({"seed": 1.5}, "seed must be an integer in [0, 2**64 - 1], got 1.5"),
        ({"seed": 2**70}, "seed must be an integer in [0, 2**64 - 1]"),
    ],
)
def test_bad_sampling_options_are_one_line_errors(kwargs, message):
    model = CausalLM(small())
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        model.generate(tokens(), 2, **kwargs)
    assert "\n" not in str(err.value)


def test_flags_and_counts_of_the_wrong_type_are_refused_not_taken_as_truthy():
    model = CausalLM(small())
    with pytest.raises(TypeError, match="use_cache must be True or False, got 'no'"):
        model.generate(tokens(), 2, use_cache="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="compile must be True or False, got 1"):
        model.generate(tokens(), 2, compile=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got True"):
        model.generate(tokens(), True)


def test_max_new_tokens_beyond_a_64_bit_length_is_a_value_error_not_a_type_error():
    prompt = tokens()
    with pytest.raises(ValueError, match=r"max_new_tokens=\d+ with a prompt of \d+ tokens exceeds"):
        CausalLM(small()).generate(prompt, 2**63 - prompt.shape[-1])


def test_a_prompt_is_checked_whole_though_only_its_last_block_size_tokens_are_read():
    model = CausalLM(small())
    prompt = torch.cat([torch.full((3, 4), -1), tokens(length=10)], dim=1)
    with pytest.raises(ValueError, match="id -1 outside the vocabulary"):
        model.generate(prompt, 2)


def test_inputs_past_the_context_or_vocabulary_are_errors():
    model = CausalLM(small())
    with pytest.raises(ValueError, match="block_size=10"):
        model(tokens(length=11))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 3), VOCAB))
    state = model.init_state()
    model.decode(tokens(length=10), state)
    with pytest.raises(ValueError, match="11 positions exceed"):
        model.decode(tokens(length=1), state)


def test_continuing_a_state_with_another_batch_size_is_an_error():
    model = CausalLM(small()).eval()
    state = model.init_state()
    model.decode(tokens(batch=2, length=3), state)
    with pytest.raises(ValueError, match="batch size 1 but the DecoderState holds 2 rows"):
        model.decode(tokens(batch=1, length=1), state)


def test_save_and_from_pretrained_round_trip(tmp_path):
    torch.manual_seed(9)
    cfg = small(method="rk2", coefficients="gated", share_gate=True, history="dlcl")
    model = lively(CausalLM(cfg))
    model.save_pretrained(tmp_path / "lm")
    loaded = CausalLM.from_pretrained(tmp_path / "lm").eval()
    assert loaded.config == cfg and loaded.head.weight is loaded.token_embed.weight
    ids = tokens()
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
    assert torch.equal(loaded.generate(ids, 4, seed=0), model.generate(ids, 4, seed=0))
    Seq2Seq(Seq2SeqConfig(vocab_size=30, d_model=16, num_heads=2, ffn_dim=32)).save_pretrained(
        tmp_path / "mt"
    )
    with pytest.raises(CheckpointError, match="'seq2seq' model, not 'causal_lm'"):
        CausalLM.from_pretrained(tmp_path / "mt")


@pytest.mark.parametrize("scaled", [True, False])
def test_residual_projections_start_as_gpt2s(scaled):
    torch.manual_seed(0)
    config = small(d_model=64, num_heads=4, ffn_dim=256, layers=3, scaled_residual_init=scaled)
    lm = CausalLM(config)
    residual = lm.residual_projections()
    assert len(residual) == 2 * 3
    expected = 0.02 / (2 * 3) ** 0.5 if scaled else 0.02
    for weight in residual:
        assert float(weight.detach().std()) == pytest.approx(expected, rel=0.1)
    field = lm.stack.blocks[0].field
    assert float(field.self_attn.qkv_proj.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
    assert float(lm.token_embed.weight.detach().std()) == pytest.approx(0.02, rel=0.1)


def test_parameter_counts_tie_the_head_and_count_shared_layers_once():
    tied, untied = CausalLM(small()), CausalLM(small(tie_embeddings=False))
    assert untied.num_parameters() - tied.num_parameters() == VOCAB * 16
    assert CausalLM(small(method="rk4")).num_parameters() == tied.num_parameters()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"method": "continuous"}, "method = 'continuous' is not supported yet for language"),
        ({"method": "rk5"}, "method = 'rk5' is not a known method (did you mean 'rk4'?)"),
        ({"method": "rk4", "coefficients": "gated"}, "coefficients = 'gated'"),
        ({"method": "ab2", "history": "dlcl"}, "history = 'dlcl'"),
        ({"positions": "both"}, "CausalLMConfig.positions = 'both'"),
        ({"block_size": 0}, "CausalLMConfig.block_size must be >= 1"),
        ({"num_heads": 3}, "CausalLMConfig.d_model (16) must be divisible by num_heads (3)"),
        ({"dropout": 1.0}, "CausalLMConfig.dropout must lie in [0, 1)"),
        ({"max_relative_distance": 0}, "CausalLMConfig.max_relative_distance must be >= 1"),
        ({"n_layer": 4}, "unknown config key 'model.n_layer'"),
        ({"layer": 4}, "(did you mean 'layers'?)"),
    ],
)
def test_bad_configs_are_one_line_errors_naming_the_key(overrides, message):
    data = {**small().to_dict(), **overrides}
    with pytest.raises(ConfigError) as err:
        CausalLMConfig.from_dict(data)
    assert message in str(err.value) and "\n" not in str(err.value)
