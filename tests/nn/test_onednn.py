"""oneDNN linear layers: equal to ``nn.Linear`` up to fp32 rounding, row independent, and the
copy replaces what it says and leaves the model alone."""

import pytest
import torch
from torch import nn

from odet.models import Seq2Seq
from odet.nn.onednn import OneDNNLinear, onednn_copy, onednn_supported
from odet.nn.quantization import linear_layer_names
from tests.models.test_seq2seq import small_config

pytestmark = pytest.mark.skipif(
    onednn_supported(torch.device("cpu")) is not None, reason="no oneDNN in this PyTorch build"
)


@pytest.mark.parametrize(("d_in", "d_out"), [(32, 48), (256, 768), (512, 10000), (1024, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_onednn_linear_computes_x_w_t_plus_b(d_in, d_out, bias):
    torch.manual_seed(0)
    linear = nn.Linear(d_in, d_out, bias=bias)
    fast = OneDNNLinear.from_linear(linear)
    for shape in [(1, d_in), (7, d_in), (3, 5, d_in), (320, d_in)]:
        x = torch.randn(*shape)
        with torch.no_grad():
            expected = x.double() @ linear.weight.double().t()
            if bias:
                expected = expected + linear.bias.double()
            torch.testing.assert_close(fast(x).double(), expected, atol=1e-4, rtol=1e-5)
        assert fast(x).shape == (*shape[:-1], d_out) and fast(x).dtype == torch.float32


@pytest.mark.parametrize(("d_in", "d_out"), [(32, 48), (256, 10000)])
def test_a_onednn_linear_row_does_not_depend_on_the_other_rows(d_in, d_out):
    """What keeps cached == uncached decoding and batch independence exact."""
    torch.manual_seed(1)
    fast = OneDNNLinear.from_linear(nn.Linear(d_in, d_out))
    x = torch.randn(321, d_in)
    together = fast(x)
    for rows in [slice(0, 1), slice(5, 6), slice(10, 17), slice(0, 64), slice(300, 321)]:
        assert torch.equal(fast(x[rows]), together[rows])


def test_the_copy_replaces_attention_ffn_and_named_linears_and_leaves_the_model_untouched():
    torch.manual_seed(0)
    model = Seq2Seq(small_config(encoder_method="rk2", coefficients="gated")).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = onednn_copy(model, ["output_projection"])
    replaced = linear_layer_names(model, ["output_projection"])
    modules = dict(fast.named_modules())
    assert all(isinstance(modules[name], OneDNNLinear) for name in replaced)
    others = [n for n, m in fast.named_modules() if isinstance(m, nn.Linear)]
    assert others and all("gate" in n for n in others)  # the RK2 gate reads its .weight
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.output_projection.weight is model.tgt_embed.weight
    assert not fast.training and not any(p.requires_grad for p in fast.parameters())


def test_the_copy_is_refused_for_models_that_are_not_fp32():
    with pytest.raises(ValueError, match="must be fp32"):
        onednn_copy(Seq2Seq(small_config()).to(torch.bfloat16))
    with pytest.raises(ValueError, match="must be fp32"):
        onednn_copy(Seq2Seq(small_config()).to(torch.float64))


def test_onednn_is_refused_off_the_cpu_with_its_reason():
    assert onednn_supported(torch.device("cpu")) is None
    assert "CPU only" in onednn_supported(torch.device("cuda"))
