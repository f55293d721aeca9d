"""Int8 linear layers: accuracy against fp32, row independence, and what the copy replaces."""

import pytest
import torch
from torch import nn

import odet.nn.precision
import odet.nn.quantization
from odet.models import Seq2Seq
from odet.nn.quantization import (
    Int8Linear,
    has_native_int8,
    int8_copy,
    int8_supported,
    int_mm,
    linear_layer_names,
)
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


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_int8_linear_rescales_the_exact_int32_product(dtype, native):
    linear = _linear().to(dtype)
    layer = Int8Linear.from_linear(linear, native=native)
    x = torch.randn(9, 64, dtype=dtype)
    rows_scale = torch.maximum(x.amax(1, keepdim=True), -x.amin(1, keepdim=True)) / 127
    q = (x * rows_scale.reciprocal()).round().to(torch.int64)
    product = (q @ layer.weight_t.to(torch.int64)).to(dtype)
    expected = product * rows_scale * layer.weight_scale + layer.bias
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, atol=0, rtol=0)


@pytest.mark.parametrize("k", [1, 64, 1024, 1025, 2048, 3000])
def test_int_mm_fallback_is_the_exact_integer_product_at_the_extremes(k):
    torch.manual_seed(k)
    a = torch.randint(-128, 128, (6, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (k, 5), dtype=torch.int8)
    a[0], a[1], b[:, 0], b[:, 1] = -128, 127, -128, 127  # the largest partial sums, both signs
    exact = a.long() @ b.long()
    fallback = int_mm(a, b, native=False)
    assert torch.equal(fallback.long(), exact)
    assert fallback.dtype == (torch.float32 if k <= 1024 else torch.int32)
    assert torch.equal(int_mm(a.float(), b, native=False).long(), exact)
    assert torch.equal(int_mm(a, b).long(), exact)


@pytest.mark.parametrize("d_in", [64, 2048])
def test_int8_linear_gives_the_same_bits_through_the_fp32_fallback(d_in):
    linear = _linear(d_in=d_in, d_out=24)
    x = torch.randn(3, 7, d_in) * 5
    with torch.no_grad():
        native = Int8Linear.from_linear(linear)(x)
        fallback = Int8Linear.from_linear(linear, native=False)(x)
    assert torch.equal(native, fallback)


@pytest.mark.parametrize(("flags", "native"), [({"avx2", "fma"}, False), ({"avx512_vnni"}, True)])
def test_int8_copy_multiplies_natively_only_with_avx512_vnni_and_warns_once_otherwise(
    monkeypatch, caplog, flags, native
):
    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset(flags))
    odet.nn.quantization._warn_emulated_int8.cache_clear()
    model = Seq2Seq(small_config()).eval()
    with caplog.at_level("WARNING", logger="odet.nn.quantization"):
        copies = [int8_copy(model), int8_copy(model)]
    odet.nn.quantization._warn_emulated_int8.cache_clear()
    assert has_native_int8(torch.device("cpu")) == (native and torch.backends.mkldnn.is_available())
    layers = [m for m in copies[0].modules() if isinstance(m, Int8Linear)]
    assert layers and {layer.native for layer in layers} == {has_native_int8(torch.device("cpu"))}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == int(not native)
    if warnings:
        assert "int8 is emulated here" in warnings[0] and "AVX-512-VNNI" in warnings[0]
    src = torch.randint(4, 24, (2, 6))
    with torch.no_grad():
        assert torch.equal(copies[0](src, src), copies[1](src, src))
