"""odet.nn.precision: the bf16 training path tracks fp32 on a tiny task."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from odet.models import Seq2Seq, Seq2SeqConfig
from odet.nn import precision as precision_module
from odet.nn.precision import autocast_bf16, cpu_flags, precision_context, resolve_precision


def _train_curve(precision: str, device: torch.device, steps: int = 40) -> list[float]:
    """Losses of a tiny copy task (identical init and data) trained at ``precision``."""
    torch.manual_seed(0)
    config = Seq2SeqConfig(
        vocab_size=24, d_model=32, num_heads=4, ffn_dim=64, encoder_layers=1,
        decoder_layers=1, encoder_method="rk2", dropout=0.0, max_positions=16,
    )  # fmt: skip
    model = Seq2Seq(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(4, 24, (32, 8), generator=gen)
    tgt_in = torch.cat([torch.full((32, 1), config.bos_id), src[:, :-1]], dim=1)
    src, tgt_in = src.to(device), tgt_in.to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with precision_context(precision, device.type):
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.float().flatten(0, 1), src.flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_bf16_loss_curve_tracks_fp32_on_a_copy_task(device: torch.device) -> None:
    fp32, bf16 = _train_curve("fp32", device), _train_curve("bf16", device)
    assert fp32[-1] < 0.7 * fp32[0]  # the task is learnt, so the comparison means something
    relative = [abs(a - b) / a for a, b in zip(fp32, bf16, strict=True)]
    assert max(relative) < 0.02, relative


def test_bf16_context_runs_matmuls_in_bfloat16_and_keeps_weights_fp32(
    device: torch.device,
) -> None:
    linear = torch.nn.Linear(8, 8).to(device)
    with autocast_bf16(device.type):
        assert torch.is_autocast_enabled(device.type)
        out = linear(torch.randn(2, 8, device=device))
    assert out.dtype == torch.bfloat16
    assert linear.weight.dtype == torch.float32


def test_fp32_context_changes_nothing() -> None:
    with precision_context("fp32"):
        assert torch.nn.Linear(4, 4)(torch.randn(1, 4)).dtype == torch.float32


def test_unknown_precision_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'fp16'.*\('fp32', 'bf16'\)"):
        precision_context("fp16")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("encoder", "decoder", "coefficients"),
    [("rk2", "rk2", "gated"), ("rk2", "euler", "gated_norm"), ("rk4", "rk2", "learned"),
     ("pc", "pc", "ema"), ("continuous", "euler", "fixed")],
)  # fmt: skip
def test_under_bf16_autocast_fields_gates_and_stage_sums_are_fp32(
    encoder, decoder, coefficients, device
):
    """Only the matmuls run in bf16: every field value (the branch sum), every gate and every
    stage combination comes out in fp32, the residual stream's dtype."""
    from odet.blocks.coefficients import Coefficients, GatedCoefficients
    from odet.nn import DecoderField, EncoderField
    from odet.nn.time import TimeConditionedEncoderField

    torch.manual_seed(0)
    config = Seq2SeqConfig.from_dict(dict(
        vocab_size=24, d_model=16, num_heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2,
        encoder_method=encoder, decoder_method=decoder, coefficients=coefficients,
        max_positions=16, continuous={"fixed_steps": 2, "solver": "rk2"},
    ))  # fmt: skip
    model = Seq2Seq(config).to(device)
    seen: dict[str, set[torch.dtype]] = {}

    def record(name):
        return lambda module, args, out: seen.setdefault(name, set()).add(out.dtype)

    kinds = {
        "field": (EncoderField, DecoderField, TimeConditionedEncoderField),
        "combination": (Coefficients,),
    }
    for module in model.modules():
        for name, types in kinds.items():
            if isinstance(module, types):
                module.register_forward_hook(record(name))
    gates: list[torch.dtype] = []
    for module in model.modules():
        if isinstance(module, GatedCoefficients):
            original = module.gate_values
            module.gate_values = lambda k1, k2, f=original: (
                gates.append(f(k1, k2).dtype) or f(k1, k2)
            )
    src = torch.randint(4, 24, (2, 6)).to(device)
    with autocast_bf16(device.type):
        logits = model(src, src)
    assert logits.dtype == torch.bfloat16  # the output projection is a bf16 matmul
    assert seen["field"] == {torch.float32}
    if encoder != "continuous":
        assert seen["combination"] == {torch.float32}
    assert set(gates) <= {torch.float32} and (bool(gates) == coefficients.startswith("gated"))


def test_cpu_flags_read_the_flags_line_and_are_empty_without_cpuinfo(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile\nbugs\t: x\n")
    assert cpu_flags(str(info)) == {"fpu", "avx512f", "amx_bf16", "amx_tile"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx512f", "avx2"}, "fp32"),
        ({"avx512_bf16"}, "bf16"),
        ({"amx_bf16"}, "bf16"),
        (set(), "fp32"),
    ],
)
def test_auto_precision_is_bf16_only_with_bf16_instructions_on_cpu(
    monkeypatch, flags, expected
) -> None:
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    assert resolve_precision("auto", torch.device("cpu")) == expected
    assert resolve_precision("fp32", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"


@pytest.mark.parametrize(("capability", "expected"), [((7, 5), "fp32"), ((8, 0), "bf16")])
def test_auto_precision_on_cuda_needs_compute_capability_8(
    monkeypatch, capability, expected
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", torch.device("cuda")) == expected


def test_auto_is_a_training_precision_and_others_are_refused() -> None:
    from odet.config import ConfigError
    from odet.training.config import LoopConfig
    from odet.training.lm_config import LMLoopConfig

    assert LoopConfig(precision="auto").precision == "auto"
    assert LMLoopConfig(precision="auto").precision == "auto"
    with pytest.raises(ConfigError, match="precision"):
        LoopConfig(precision="fp16")
    with pytest.raises(ValueError, match="choose one of"):
        resolve_precision("fp16", torch.device("cpu"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("flags", "warned"), [({"avx2", "fma"}, True), ({"avx512_bf16"}, False)])
def test_explicit_bf16_warns_once_where_the_cpu_only_emulates_it(
    monkeypatch, caplog, flags, warned
) -> None:
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    precision_module._warn_emulated_bf16.cache_clear()
    cpu = torch.device("cpu")
    with caplog.at_level("WARNING", logger="odet.nn.precision"):
        assert resolve_precision("bf16", cpu) == "bf16"
        assert resolve_precision("bf16", cpu) == "bf16"
        assert resolve_precision("auto", cpu) == ("fp32" if warned else "bf16")
        assert resolve_precision("fp32", cpu) == "fp32"
    messages = [r.getMessage() for r in caplog.records]
    precision_module._warn_emulated_bf16.cache_clear()
    assert len(messages) == int(warned)
    if warned:
        assert "bf16 is emulated here" in messages[0]
        assert "neither AVX-512-BF16 nor AMX-BF16" in messages[0]
        assert "auto picks fp32" in messages[0]


def test_explicit_bf16_warns_on_a_gpu_without_bf16_tensor_cores(monkeypatch, caplog) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    precision_module._warn_emulated_bf16.cache_clear()
    with caplog.at_level("WARNING", logger="odet.nn.precision"):
        assert resolve_precision("bf16", torch.device("cuda")) == "bf16"
    precision_module._warn_emulated_bf16.cache_clear()
    assert "compute capability below 8.0" in caplog.text
