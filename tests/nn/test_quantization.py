"""Int8 linear layers: accuracy against fp32, row independence, and what the copy replaces."""

import pytest
import torch
from torch import nn

from odet.models import Seq2Seq
from odet.nn.quantization import Int8Linear, int8_copy, int8_supported, linear_layer_names
from tests.models.test_seq2seq import small_config


def _linear(d_in: int = 64, d_out: int = 48, bias: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(d_in, d_out, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_is_within_the_quantisation_error_of_the_fp32_layer(bias):
    linear = _linear(bias=bias)
    x = torch.randn(5, 7, 64)
    with torch.no_grad():
        exact = linear(x)
        approx = Int8Linear.from_linear(linear)(x)
    assert approx.shape == exact.shape and approx.dtype == torch.float32
    # Each factor is off by at most half a step (1/254 of its row / channel maximum); the
    # errors of 64 terms add up to about 1 % of the output's spread here, never near 5 %.
    error = (approx - exact).abs().max() / exact.std()
    assert 0 < error < 0.05


def test_an_int8_row_depends_on_that_row_alone():
    layer = Int8Linear.from_linear(_linear())
    x = torch.randn(6, 64)
    x[3] *= 100  # one large row would set a per-tensor scale for all of them
    with torch.no_grad():
        together = layer(x)
        apart = torch.cat([layer(x[i : i + 1]) for i in range(6)])
    assert torch.equal(together, apart)


def test_an_all_zero_row_gives_the_bias():
    linear = _linear()
    with torch.no_grad():
        out = Int8Linear.from_linear(linear)(torch.zeros(2, 64))
    torch.testing.assert_close(out, linear.bias.detach().expand(2, -1), atol=0, rtol=0)


def test_int8_copy_replaces_attention_feed_forward_and_named_layers_only():
    model = Seq2Seq(small_config(decoder_method="rk2", coefficients="gated")).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copy = int8_copy(model, ["output_projection"])
    names = linear_layer_names(model, ["output_projection"])
    assert "output_projection" in names
    assert any(n.endswith("qkv_proj") for n in names) and any(n.endswith("fc2") for n in names)
    for name in names:
        assert isinstance(copy.get_submodule(name), Int8Linear)
        assert isinstance(model.get_submodule(name), nn.Linear)
    remaining = [n for n, m in copy.named_modules() if isinstance(m, nn.Linear)]
    assert remaining and all("gate" in n for n in remaining)  # the RK2 gates stay fp32
    assert copy.tgt_embed.weight.dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(p.requires_grad for p in copy.parameters())


def test_int8_copy_rejects_what_it_cannot_quantise():
    model = Seq2Seq(small_config()).eval()
    with pytest.raises(ValueError, match="not an nn.Linear"):
        int8_copy(model, ["decoder_norm"])
    with pytest.raises(ValueError, match="fp32"):
        int8_copy(model.to(torch.bfloat16))
    assert int8_supported(torch.device("cpu")) is None
    assert "CPU only" in (int8_supported(torch.device("cuda")) or "")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_int8_linear_rescales_the_exact_int32_product(dtype):
    linear = _linear().to(dtype)
    layer = Int8Linear.from_linear(linear)
    x = torch.randn(9, 64, dtype=dtype)
    rows_scale = torch.maximum(x.amax(1, keepdim=True), -x.amin(1, keepdim=True)) / 127
    q = (x * rows_scale.reciprocal()).round().to(torch.int64)
    product = (q @ layer.weight_t.to(torch.int64)).to(dtype)
    expected = product * rows_scale * layer.weight_scale + layer.bias
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=0, rtol=0)
