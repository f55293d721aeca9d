"""``train.compile``: compiled training steps track eager ones, resume each other's checkpoints
and keep the checkpoint format, for translation and language models.

Inductor's code generation takes minutes on 2 loaded cores, so most tests compile with the
``aot_eager`` backend (Dynamo's tracing, guards and AOTAutograd: what the trainers' integration
relies on); the inductor trajectory tests are marked slow.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from odet.config import ConfigError
from odet.data import Batch
from odet.models import CausalLM, Seq2Seq, Seq2SeqConfig
from odet.nn.dropout import dropout, quantised_drop_rate
from odet.training import LMTrainConfig, TrainConfig, lm, step, train, train_lm
from odet.training.checkpoint import checkpoint_name
from odet.training.compile import compile_counts, compile_step
from odet.training.step import ForwardPrecision, Objective, forward_loss, train_step
from tests.training.conftest import tiny_config
from tests.training.test_lm import _config as lm_config


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # tests compile different models; no cache limits carried over
    yield
    torch._dynamo.reset()


@pytest.fixture
def aot_eager(monkeypatch):
    fast = functools.partial(compile_step, backend="aot_eager")
    for module in (step, lm):
        monkeypatch.setattr(module, "compile_step", fast)


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["event"] == "train"]


def _seq2seq(copy_data: Path, out: Path, compile: bool, updates: int, **train_keys) -> dict:
    # No dropout: compiled code draws its masks differently (see odet.nn.dropout).
    return tiny_config(
        copy_data,
        out,
        model={"dropout": 0.0},
        train={"max_updates": updates, "compile": compile, "max_tokens": 300, **train_keys},
    )


def _track_eager(copy_data: Path, tmp_path: Path, updates: int) -> None:
    for compile in (False, True):  # batches of varying shapes
        config = _seq2seq(copy_data, tmp_path / str(compile), compile, updates)
        train(TrainConfig.from_dict(config))
    eager, compiled = _losses(tmp_path / "False"), _losses(tmp_path / "True")
    assert len(eager) == len(compiled) == updates
    assert compiled == pytest.approx(eager, rel=1e-4)
    counts = compile_counts()  # one graph with symbolic sizes for every batch shape
    assert counts["recompiles"] == 0 and counts["graph_breaks"] == 0, counts


def test_traced_translation_steps_track_eager_ones(copy_data, tmp_path, aot_eager):
    _track_eager(copy_data, tmp_path, 8)


@pytest.mark.slow
def test_inductor_translation_steps_track_eager_ones(copy_data, tmp_path):
    _track_eager(copy_data, tmp_path, 8)


def test_compiled_and_eager_runs_resume_each_others_checkpoints(copy_data, tmp_path, aot_eager):
    straight = _seq2seq(copy_data, tmp_path / "straight", False, 6, save_every_updates=3)
    train(TrainConfig.from_dict(straight))
    # 3 eager updates, then 3 compiled from that checkpoint; and compiled first, then eager.
    for first, second, name in ((False, True, "eager_then"), (True, False, "compiled_then")):
        out = tmp_path / name
        train(TrainConfig.from_dict(_seq2seq(copy_data, out, first, 3, save_every_updates=3)))
        saved = Seq2Seq.from_pretrained(out / "checkpoints" / checkpoint_name(3)).state_dict()
        assert not any("_orig_mod" in key for key in saved)
        train(TrainConfig.from_dict(_seq2seq(copy_data, out, second, 6, save_every_updates=3)))
        assert _losses(out) == pytest.approx(_losses(tmp_path / "straight"), rel=1e-4)


def test_compiled_bf16_translation_steps_track_eager_bf16_ones(copy_data, tmp_path, aot_eager):
    for compile in (False, True):
        config = _seq2seq(copy_data, tmp_path / str(compile), compile, 3, precision="bf16")
        train(TrainConfig.from_dict(config))
    assert _losses(tmp_path / "True") == pytest.approx(_losses(tmp_path / "False"), rel=1e-3)


def _lm_track_and_resume(tmp_path: Path) -> None:
    def config(out: str, compile: bool, updates: int) -> LMTrainConfig:
        data = lm_config(tmp_path, train={"max_updates": updates, "eval_interval": 0})
        data["train"]["compile"] = compile
        data["model"]["dropout"] = 0.0
        data["optim"]["decay_updates"] = 8
        return LMTrainConfig.from_dict({**data, "output_dir": str(tmp_path / out)})

    train_lm(config("eager", False, 8), progress=False)
    train_lm(config("compiled", True, 4), progress=False)
    saved = CausalLM.from_pretrained(tmp_path / "compiled" / "checkpoints" / checkpoint_name(4))
    assert not any("_orig_mod" in key for key in saved.state_dict())
    train_lm(config("compiled", False, 8), progress=False)
    eager, resumed = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert len(eager) == len(resumed) == 8 and resumed == pytest.approx(eager, rel=1e-4)


def test_traced_language_model_tracks_eager_and_resumes_eagerly(tmp_path, aot_eager):
    _lm_track_and_resume(tmp_path)


@pytest.mark.slow
def test_inductor_language_model_tracks_eager_and_resumes_eagerly(tmp_path):
    _lm_track_and_resume(tmp_path)


def test_compiled_dropout_drops_at_the_quantised_rate_and_keeps_the_mean():
    x = torch.ones(256, 1024)
    torch.manual_seed(0)
    y = torch.compile(dropout)(x, 0.1)
    assert (y == 0).float().mean().item() == pytest.approx(quantised_drop_rate(0.1), abs=2e-3)
    assert y.mean().item() == pytest.approx(1.0, abs=5e-3)
    assert compile_counts()["graph_breaks"] == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": {"encoder_method": "continuous"}}, "does not support model.encoder_method"),
        ({"train": {"parallel": "fsdp"}}, "supports train.parallel: ddp only"),
    ],
)
def test_unsupported_combinations_are_rejected(copy_data, tmp_path, change, message):
    config = _seq2seq(copy_data, tmp_path, True, 1)
    for section, values in change.items():
        config[section].update(values)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(config)


def test_compile_is_off_by_default_and_must_be_a_bool(copy_data, tmp_path):
    assert not TrainConfig.from_dict(tiny_config(copy_data, tmp_path)).train.compile
    assert not LMTrainConfig.from_dict(lm_config(tmp_path)).train.compile
    with pytest.raises(ConfigError, match="compile"):
        TrainConfig.from_dict(_seq2seq(copy_data, tmp_path, "yes", 1))  # type: ignore[arg-type]


def test_a_compiled_step_through_ddp_gives_the_eager_gradients(tmp_path):
    # A world of one in this process: DDP's wrapper, hooks and Dynamo's DDP graph splitting run.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        config = Seq2SeqConfig(
            vocab_size=40, d_model=16, num_heads=2, ffn_dim=32, encoder_layers=1,
            decoder_layers=1, dropout=0.0,
        )  # fmt: skip
        model = Seq2Seq(config)
        src, tgt = torch.randint(4, 40, (3, 5)), torch.randint(4, 40, (3, 4))
        batch = Batch(src, tgt, tgt, torch.arange(3), src.numel(), tgt.numel())
        precision, grads = ForwardPrecision("fp32", "cpu"), []
        for forward in (forward_loss, compile_step(forward_loss, backend="aot_eager")):
            objective = Objective(pad_id=0, label_smoothing=0.1, forward=forward)
            ddp = DistributedDataParallel(model)
            model.zero_grad(set_to_none=True)
            result = train_step(ddp, batch, objective, precision)
            grads.append(([p.grad.clone() for p in model.parameters()], result.loss))
        assert grads[1][1] == pytest.approx(grads[0][1], rel=1e-5)
        for compiled, eager in zip(grads[1][0], grads[0][0], strict=True):
            torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-6)
    finally:
        dist.destroy_process_group()


@pytest.fixture
def no_cpp_compiler():
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.cxx": ("no-such-cxx-compiler",)}):
        yield


def test_check_compilable_names_a_missing_cpp_compiler_on_cpu(no_cpp_compiler):
    from odet.training.compile import check_compilable

    with pytest.raises(ValueError) as err:
        check_compilable(torch.device("cpu"))
    reason = str(err.value)
    assert "\n" not in reason and reason.startswith("train.compile needs a working C++ compiler")
    assert "no-such-cxx-compiler" in reason and "train.compile: false" in reason
    check_compilable(torch.device("cuda"))


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++, as inductor on CPU does")
def test_check_compilable_passes_where_inductor_finds_a_compiler():
    from odet.training.compile import check_compilable

    check_compilable(torch.device("cpu"))


def test_compiled_runs_without_a_cpp_compiler_are_refused_before_any_work(
    copy_data, tmp_path, no_cpp_compiler
):
    out = tmp_path / "seq2seq"
    with pytest.raises(ValueError, match=r"^train\.compile needs a working C\+\+ compiler"):
        train(TrainConfig.from_dict(_seq2seq(copy_data, out, True, 2)))
    assert not out.exists()
    lm_run = tmp_path / "lm"
    config = lm_config(tmp_path, train={"compile": True, "max_updates": 2})
    with pytest.raises(ValueError, match="C\\+\\+ compiler"):
        train_lm(LMTrainConfig.from_dict({**config, "output_dir": str(lm_run)}), progress=False)
    assert not lm_run.exists()
    eager = _seq2seq(copy_data, tmp_path / "eager", False, 1)
    train(TrainConfig.from_dict(eager))  # eager runs need no compiler
