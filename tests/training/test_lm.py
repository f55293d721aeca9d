"""Language models through ``odet train`` (``task: lm``) and ``odet sample``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from odet.cli import main
from odet.config import ConfigError
from odet.data import DataError
from odet.models import CausalLM, CausalLMConfig
from odet.training.lm import build_adamw, exact_loss, load_lm, train_lm
from odet.training.lm_config import LMTrainConfig, load_any_config
from odet.training.step import ForwardPrecision

TEXT = "the quick brown fox jumps over the lazy dog.\nto be, or not to be: that is it.\n" * 60


def _config(tmp_path: Path, **sections) -> dict:
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    data = {
        "task": "lm",
        "output_dir": str(tmp_path / "run"),
        "seed": 3,
        "data": {"data_dir": str(tmp_path), "text": "text.txt", "block_size": 16},
        "model": {"d_model": 32, "num_heads": 2, "ffn_dim": 64, "layers": 2, "block_size": 16},
        "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_updates": 5, "decay_updates": 60},
        "train": {"max_updates": 60, "eval_interval": 30, "log_every": 1, "progress": False},
    }
    data["data"].update({"batch_size": 4, "eval_iters": 2})
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values} if isinstance(values, dict) else values
    return data


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _records(run: Path, event: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def test_a_tiny_language_model_trains_and_its_loss_falls(tmp_path, device):
    config = LMTrainConfig.from_dict(_config(tmp_path, train={"device": device.type}))
    result = train_lm(config, progress=False)
    run = tmp_path / "run"
    valid = _records(run, "valid")
    assert valid[0]["step"] == 0 and valid[-1]["exact"] is True
    assert valid[-1]["loss"] < valid[0]["loss"] - 1.0
    assert result.valid_loss == pytest.approx(valid[-1]["loss"])
    train = _records(run, "train")
    assert [r["step"] for r in train] == list(range(1, 61))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["task"] == "lm" and summary["steps"] == 60
    assert summary["valid_loss"] == pytest.approx(result.valid_loss)
    assert (result.last_checkpoint / "vocab.json").is_file()
    model, vocab = load_lm(run)
    assert vocab.chars == "".join(sorted(set(TEXT))) and model.config.vocab_size == vocab.size


def test_a_stopped_run_resumes_to_the_same_losses(tmp_path):
    straight = _config(tmp_path, train={"max_updates": 24, "eval_interval": 10})
    straight["optim"]["decay_updates"] = 24
    train_lm(LMTrainConfig.from_dict(straight), progress=False)
    stopped = {**straight, "output_dir": str(tmp_path / "b")}
    stopped["train"] = {**straight["train"], "max_updates": 10}
    train_lm(LMTrainConfig.from_dict(stopped), progress=False)
    resumed = train_lm(LMTrainConfig.from_dict({**straight, "output_dir": stopped["output_dir"]}))
    a, b = tmp_path / "run", tmp_path / "b"
    losses = [[r["loss"] for r in _records(run, "train")] for run in (a, b)]
    assert len(losses[0]) == 24 and losses[0] == losses[1]
    estimates = [[(r["step"], r["loss"]) for r in _records(run, "valid")] for run in (a, b)]
    assert estimates[0][-1] == estimates[1][-1] and resumed.steps == 24
    assert json.loads((b / "summary.json").read_text())["valid_loss"] == resumed.valid_loss


def test_an_error_mid_run_saves_the_trained_updates_and_the_resume_matches(tmp_path, monkeypatch):
    """An error (out of memory, say) lost every update since the newest checkpoint."""
    import odet.training.lm as lm_module

    straight = _config(tmp_path, train={"max_updates": 12, "eval_interval": 0})
    straight["optim"]["decay_updates"] = 12
    train_lm(LMTrainConfig.from_dict(straight), progress=False)
    failing = {**straight, "output_dir": str(tmp_path / "b")}
    real, calls = lm_module.lm_loss_sum, {"n": 0}

    def fails_at_the_8th_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:
            raise MemoryError("out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_module, "lm_loss_sum", fails_at_the_8th_batch)
    with pytest.raises(MemoryError):
        train_lm(LMTrainConfig.from_dict(failing), progress=False)
    assert (tmp_path / "b" / "checkpoints" / "step_0000007").is_dir()
    monkeypatch.setattr(lm_module, "lm_loss_sum", real)
    train_lm(LMTrainConfig.from_dict(failing), progress=False)
    losses = [[r["loss"] for r in _records(tmp_path / d, "train")] for d in ("run", "b")]
    assert len(losses[0]) == 12 and losses[0] == losses[1]


def test_the_exact_validation_pass_equals_a_token_by_token_computation():
    torch.manual_seed(0)
    model = CausalLM(CausalLMConfig(vocab_size=7, d_model=16, num_heads=2, ffn_dim=32, layers=2))
    model.eval()
    stream = torch.randint(0, 7, (23,))
    block = 5
    total = 0.0
    with torch.no_grad():
        for j in range(1, stream.numel()):  # token j, read from the start of its window
            start = (j - 1) // block * block
            logits = model(stream[start:j].unsqueeze(0))[0, -1]
            total -= float(logits.log_softmax(-1)[stream[j]])
    loss, tokens = exact_loss(model, stream, block, 2, ForwardPrecision("fp32", "cpu"))
    assert tokens == 22
    assert loss == pytest.approx(total / 22, rel=1e-5)


def _decayed_names(model: nn.Module, **optim) -> tuple[set[str], set[str]]:
    config = LMTrainConfig.from_dict({"output_dir": "x", "data": {"text": "t.txt"}, "optim": optim})
    decay, no_decay = build_adamw(model, config.optim).param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for p in decay["params"]}, {names[id(p)] for p in no_decay["params"]}


def test_decay_embeddings_true_is_nanogpts_every_matrix_rule():
    model = CausalLM(
        CausalLMConfig(vocab_size=7, d_model=16, num_heads=2, ffn_dim=32, layers=1, bias=False)
    )
    decay, spared = _decayed_names(model, decay_embeddings=True)
    field = "stack.blocks.0.field."
    assert decay == {
        "token_embed.weight",  # tied: the output projection is the same tensor, listed once
        "positions.weight",
        *(field + n for n in ("self_attn.qkv_proj.weight", "self_attn.out_proj.weight")),
        *(field + n for n in ("ffn.fc1.weight", "ffn.fc2.weight")),
    }
    assert spared == {field + "attn_norm.weight", field + "ffn_norm.weight", "norm.weight"}


def test_by_default_embeddings_norms_and_biases_are_spared():
    model = CausalLM(CausalLMConfig(vocab_size=7, d_model=16, num_heads=2, ffn_dim=32, layers=1))
    decay, spared = _decayed_names(model)
    assert {"token_embed.weight", "positions.weight"} <= spared
    assert any(n.endswith(".bias") for n in spared) and not any("norm" in n for n in decay)
    assert all(n.endswith(".weight") and "embed" not in n for n in decay)
    assert len(decay) + len(spared) == len(list(model.parameters()))


def test_the_schedule_is_nanogpts_warmup_and_cosine(tmp_path):
    config = LMTrainConfig.from_dict(_config(tmp_path, optim={"warmup_updates": 10}))
    from odet.training.lm import LMTrainer

    trainer = LMTrainer(config, progress=False)
    try:
        trainer.setup()
        lrs = []
        for _ in range(60):
            lrs.append(trainer.optimizer.param_groups[0]["lr"])
            trainer.optimizer.step()
            trainer.scheduler.step()
    finally:
        trainer.close()

    def nanogpt(it: int, lr=3e-3, min_lr=3e-4, warmup=10, decay=60) -> float:
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        ratio = (it - warmup) / (decay - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    assert lrs == pytest.approx([nanogpt(k) for k in range(60)])


def test_odet_sample_is_seeded_and_rejects_unknown_characters(tmp_path, capsys, monkeypatch):
    path = _write(tmp_path, _config(tmp_path, train={"max_updates": 10, "eval_interval": 0}))
    assert main(["train", str(path), "--no-progress"]) == 0
    assert "valid loss" in capsys.readouterr().out
    run = str(tmp_path / "run")
    args = ["sample", run, "--prompt", "the ", "--max-new-tokens", "30", "--seed", "5"]
    outputs = []
    for extra in ([], [], ["--top-k", "3", "--num-samples", "2"]):
        assert main([*args, *extra]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("the ")
    assert len(outputs[0].rstrip("\n")) >= 34 and outputs[2].count("the ") >= 2
    assert main(["sample", run, "--prompt", "the Zörn", "--seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'Z'" in err and "'ö'" in err
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("to be"))
    assert main(["sample", run, "--max-new-tokens", "5", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("to be")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"data": {"tokenizer": "sentencepiece"}}, "data.tokenizer 'sentencepiece'"),
        ({"data": {"block_size": 32}}, "exceeds the model's position table"),
        ({"model": {"vocab_size": 10}}, "model.vocab_size is set from the vocabulary"),
        ({"task": "translation"}, "task must be 'seq2seq' or 'lm'"),
        ({"model": {"d_modle": 8}}, "d_modle"),
        ({"optim": {"decay_updates": 3}}, "must exceed optim.warmup_updates"),
    ],
)
def test_config_errors_are_one_line(tmp_path, capsys, change, message):
    assert main(["train", str(_write(tmp_path, _config(tmp_path, **change)))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    with pytest.raises(ConfigError):
        load_any_config(tmp_path / "lm.yaml")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"   \n", "the text is empty"),
        (b"caf\xe9 au lait" * 20, "not valid UTF-8"),
        (("x" * 150).encode(), "the validation split has 15 characters"),
    ],
)
def test_bad_text_files_are_one_line_errors(tmp_path, capsys, content, message):
    path = _write(tmp_path, _config(tmp_path))
    (tmp_path / "text.txt").write_bytes(content)
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    with pytest.raises(DataError):
        train_lm(load_any_config(path), progress=False)


def test_config_show_fills_in_the_causal_lm_defaults(tmp_path, capsys):
    path = _write(tmp_path, _config(tmp_path))
    assert main(["config", "show", str(path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["task"] == "lm" and "norm_eps" in shown["model"]
    assert "vocab_size" not in shown["model"]
    resolved, original = LMTrainConfig.from_dict(shown), load_any_config(path)
    assert isinstance(original, LMTrainConfig)
    assert resolved.model_config(5) == original.model_config(5)
    assert (resolved.data, resolved.optim, resolved.train) == (
        original.data,
        original.optim,
        original.train,
    )


def test_bf16_training_runs_and_evaluates_in_fp32(tmp_path, device):
    train = {"max_updates": 6, "eval_interval": 0, "precision": "bf16", "device": device.type}
    sections = {"train": train}
    result = train_lm(LMTrainConfig.from_dict(_config(tmp_path, **sections)), progress=False)
    losses = [r["loss"] for r in _records(tmp_path / "run", "train")]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert math.isfinite(result.valid_loss) and result.valid_tokens == len(TEXT) // 10 - 1
