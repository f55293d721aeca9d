import pytest
import torch
from torch import nn

from odet.blocks import ODEBlock
from odet.nn import DecoderField, EncoderField, KVCache, SelfAttention, attention_mask
from tests.devices import fp32_tolerance

D, H, FFN = 16, 4, 32


def _copy_encoder_weights(field: EncoderField, layer: nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        field.self_attn.qkv_proj.weight.copy_(layer.self_attn.in_proj_weight)
        field.self_attn.qkv_proj.bias.copy_(layer.self_attn.in_proj_bias)
        field.self_attn.out_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
        field.ffn.fc1.load_state_dict(layer.linear1.state_dict())
        field.ffn.fc2.load_state_dict(layer.linear2.state_dict())
        field.attn_norm.load_state_dict(layer.norm1.state_dict())
        field.ffn_norm.load_state_dict(layer.norm2.state_dict())


def _copy_decoder_weights(field: DecoderField, layer: nn.TransformerDecoderLayer) -> None:
    with torch.no_grad():
        field.self_attn.qkv_proj.weight.copy_(layer.self_attn.in_proj_weight)
        field.self_attn.qkv_proj.bias.copy_(layer.self_attn.in_proj_bias)
        field.self_attn.out_proj.load_state_dict(layer.self_attn.out_proj.state_dict())
        w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
        field.cross_attn.q_proj.weight.copy_(w[:D])
        field.cross_attn.q_proj.bias.copy_(b[:D])
        field.cross_attn.kv_proj.weight.copy_(w[D:])
        field.cross_attn.kv_proj.bias.copy_(b[D:])
        field.cross_attn.out_proj.load_state_dict(layer.multihead_attn.out_proj.state_dict())
        field.ffn.fc1.load_state_dict(layer.linear1.state_dict())
        field.ffn.fc2.load_state_dict(layer.linear2.state_dict())
        field.self_attn_norm.load_state_dict(layer.norm1.state_dict())
        field.cross_attn_norm.load_state_dict(layer.norm2.state_dict())
        field.ffn_norm.load_state_dict(layer.norm3.state_dict())


def _randomise_norms(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.2)
            nn.init.normal_(m.bias, 0.0, 0.2)


def test_euler_encoder_block_equals_torch_prenorm_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, FFN, dropout=0.0, norm_first=True, batch_first=True)
    _randomise_norms(layer)
    field = EncoderField(D, H, FFN)
    _copy_encoder_weights(field, layer)
    block = ODEBlock(field, "euler")
    x = torch.randn(3, 7, D)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, 5:] = True
    pad[2, 3:] = True
    expected = layer(x, src_key_padding_mask=pad)  # train mode: no fast path
    actual = block(x, padding_mask=pad)
    keep = ~pad
    torch.testing.assert_close(actual[keep], expected[keep], atol=1e-5, rtol=1e-5)


def test_euler_decoder_block_equals_torch_prenorm_decoder_layer():
    torch.manual_seed(1)
    layer = nn.TransformerDecoderLayer(D, H, FFN, dropout=0.0, norm_first=True, batch_first=True)
    _randomise_norms(layer)
    field = DecoderField(D, H, FFN)
    _copy_decoder_weights(field, layer)
    block = ODEBlock(field, "euler")
    x, memory = torch.randn(2, 6, D), torch.randn(2, 5, D)
    memory_pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    expected = layer(
        x, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=memory_pad
    )
    actual = block(x, memory_kv=field.project_memory(memory), memory_padding_mask=memory_pad)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_cached_self_attention_equals_full_causal_attention_step_by_step():
    torch.manual_seed(2)
    attn = SelfAttention(D, H)
    x = torch.randn(2, 5, D)
    full = attn(x, causal=True)
    cache = KVCache()
    steps = [attn(x[:, t : t + 1], causal=True, cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-6)
    assert cache.length == 5


def test_cached_self_attention_with_multi_token_chunks_uses_offset_causal_mask(device):
    torch.manual_seed(3)
    attn = SelfAttention(D, H).to(device)
    x = torch.randn(2, 6, D).to(device)
    cache = KVCache()
    chunks = [attn(x[:, :2], causal=True, cache=cache), attn(x[:, 2:], causal=True, cache=cache)]
    tolerance = {"atol": 1e-6, "rtol": 1e-6} if device.type == "cpu" else fp32_tolerance(device)
    torch.testing.assert_close(torch.cat(chunks, dim=1), attn(x, causal=True), **tolerance)


def test_attention_mask_is_bottom_right_causal_and_hides_padding():
    pad = torch.tensor([[False, False, False, True]])
    mask = attention_mask(pad, num_queries=2, num_keys=4, causal=True)
    assert mask[0, 0].tolist() == [[True, True, True, False], [True, True, True, False]]
    mask = attention_mask(None, num_queries=2, num_keys=3, causal=True)
    assert mask[0, 0].tolist() == [[True, True, False], [True, True, True]]


def test_a_causal_mask_without_padding_is_built_on_the_given_device(device):
    mask = attention_mask(None, num_queries=2, num_keys=3, causal=True, device=device)
    assert mask.device.type == device.type
    assert mask[0, 0].tolist() == [[True, True, False], [True, True, True]]
    pad = torch.tensor([[False, False, True]], device=device)
    assert attention_mask(pad, 2, 3, causal=True).device.type == device.type


def test_layer_convention_returns_layer_output_and_stage_norm_bounds_it():
    torch.manual_seed(4)
    textbook = EncoderField(D, H, FFN)
    layer = EncoderField(D, H, FFN, convention="layer")
    layer.load_state_dict(textbook.state_dict())
    z = torch.randn(2, 3, D)
    torch.testing.assert_close(layer(z), z + textbook(z))
    normed = EncoderField(D, H, FFN, convention="layer", stage_norm=True)
    out = normed(10 * z)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)


def test_unknown_field_convention_is_rejected():
    with pytest.raises(ValueError, match="unknown field convention 'paper'"):
        EncoderField(D, H, FFN, convention="paper")  # type: ignore[arg-type]


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        SelfAttention(10, 3)


def test_field_spec_validates_and_builds_every_field():
    from odet.nn import FieldSpec, TimeConditionedEncoderField

    for bad, message in (
        ({"d_model": 10, "num_heads": 3}, "divisible by num_heads"),
        ({"dropout": 1.0}, r"FieldSpec.dropout must lie in \[0, 1\)"),
        ({"activation": "tanh"}, "unknown activation 'tanh'"),
        ({"norm_eps": 0.0}, "norm_eps must be > 0"),
    ):
        with pytest.raises(ValueError, match=message):
            FieldSpec(**{"d_model": D, "num_heads": H, "ffn_dim": FFN, **bad})
    spec = FieldSpec(D, H, FFN, activation="gelu", norm_eps=1e-6)
    assert EncoderField(D, H, FFN, activation="gelu", norm_eps=1e-6).ffn_norm.eps == 1e-6
    assert DecoderField(D, H, FFN, norm_eps=1e-6).cross_attn_norm.eps == spec.norm_eps
    with pytest.raises(ValueError, match="time-conditioned field returns its update"):
        TimeConditionedEncoderField(D, H, FFN, convention="layer")


def _activation_copies(run, shape: tuple[int, ...]) -> int:
    """How many ``aten::copy_`` of a ``shape`` tensor ``run()`` makes: autocast's casts, and the
    copies that CPU type promotion makes for a mixed-dtype addition."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    return sum(
        1 for e in prof.events() if e.name == "aten::copy_" and list(e.input_shapes[0]) == shape
    )


def test_under_bf16_autocast_each_branch_is_widened_once_and_sums_keep_their_values():
    """Every fp32 residual sum reads the same fp32 copy of a bf16 sublayer output: one cast per
    branch besides the bf16 projections' input casts (one per pre-norm), and the field values
    are those of the sums written out."""
    from odet.nn.precision import autocast_bf16

    torch.manual_seed(5)
    b, t, s = 3, 5, 7
    z, memory = torch.randn(b, t, D), torch.randn(b, s, D)
    enc, dec = EncoderField(D, H, FFN).eval(), DecoderField(D, H, FFN).eval()
    with torch.no_grad(), autocast_bf16():
        a = enc.self_attn(enc.attn_norm(z))
        f = enc.ffn(enc.ffn_norm(z + a.float()))
        torch.testing.assert_close(enc(z), a.float() + f.float(), rtol=0, atol=0)
        kv = dec.project_memory(memory)
        a = dec.self_attn(dec.self_attn_norm(z), causal=True)
        c = dec.cross_attn(dec.cross_attn_norm(z + a.float()), kv)
        f = dec.ffn(dec.ffn_norm(z + a.float() + c.float()))
        want = a.float() + c.float() + f.float()
        torch.testing.assert_close(dec(z, memory_kv=kv), want, rtol=0, atol=0)
        assert _activation_copies(lambda: enc(z), [b, t, D]) == 2 + 2
        assert _activation_copies(lambda: dec(z, memory_kv=kv), [b, t, D]) == 3 + 3
