"""Issue #25's divergence study: the per-step trace and the opt-in stabilising options."""

import copy
import json
from pathlib import Path

import pytest
import torch

from odet.config import ConfigError, load_yaml
from odet.experiments import parity
from odet.experiments.ode_trace import SolveTracer, field_weight_norms, read_trace
from odet.experiments.parity import ParityExperimentConfig, main, run_key, run_parity
from odet.models.classifier import ClassifierConfig, SequenceClassifier
from odet.nn.time import TimeConditionedEncoderField
from tests.experiments.test_parity import TINY as PARITY_TINY

ROOT = Path(__file__).resolve().parents[2]

NODE = {
    "encoder_method": "continuous", "layer_norm": False, "rtol": 0.01, "atol": 0.01,
    "time_conditioning": "concat", "on_failure": "flag",
}  # fmt: skip
TINY = {**PARITY_TINY, "variants": [{"name": "node", "model": NODE}]}

REFERENCE_FINAL_LOSS = 0.7499366998672485
"""TINY's node variant trained by commit 376a80d (before these options) on one thread."""


def _config(**variant) -> ParityExperimentConfig:
    data = copy.deepcopy(TINY)
    data["variants"][0].update(variant)
    return ParityExperimentConfig.from_dict(data)


def _run(tmp_path: Path, name: str, config: ParityExperimentConfig, **kw):
    return run_parity(config, tmp_path / name, progress=False, **kw).variants[0]


def test_options_off_train_exactly_as_before(tmp_path):
    plain = _run(tmp_path, "plain", _config())
    off = _run(
        tmp_path,
        "off",
        _config(model={**NODE, "spectral_norm": False}, training={"skip_nonfinite": False}),
    )
    assert plain.final_loss == off.final_loss and plain.per_length == off.per_length
    assert plain.final_loss == pytest.approx(REFERENCE_FINAL_LOSS, rel=1e-4)
    assert plain.skipped_updates == 0


def test_run_keys_of_the_saved_quick_runs_are_unchanged():
    config = ParityExperimentConfig.from_dict(load_yaml(ROOT / "configs/parity/quick.yaml"))
    checked = 0
    for variant in config.variants:
        for seed in config.run_seeds:
            path = ROOT / "results/parity/quick/runs" / variant.name / f"seed{seed}.json"
            if path.exists():
                assert json.loads(path.read_text())["key"] == run_key(config, variant, seed)
                checked += 1
    assert checked >= 30


def test_divergence_config_shares_the_quick_runs_keys():
    quick = ParityExperimentConfig.from_dict(load_yaml(ROOT / "configs/parity/quick.yaml"))
    study = ParityExperimentConfig.from_dict(load_yaml(ROOT / "configs/parity/divergence.yaml"))
    by_name = {v.name: v for v in quick.variants}
    for variant in study.variants[:2]:
        assert run_key(study, variant, 0) == run_key(quick, by_name[variant.name], 0)


def test_tracing_writes_one_line_per_step_and_does_not_change_training(tmp_path):
    config = _config()
    plain = _run(tmp_path, "plain", config)
    traced = _run(tmp_path, "traced", config, trace_dir=tmp_path / "trace")
    assert traced.final_loss == plain.final_loss and traced.per_length == plain.per_length
    lines = read_trace(tmp_path / "trace" / "node" / "seed0.jsonl")
    assert [line["step"] for line in lines] == [0, 1, 2]
    first = lines[0]
    (solve,) = first["solves"]
    assert solve["nfe_mean"] >= 6 and solve["failed"] == 0 and solve["status"] == {"success": 16}
    assert first["backward_nfe"] == solve["nfe_total"]  # backprop through every evaluation
    assert solve["f_norm_t0"] > 0 and solve["y_norm_end"] > 0 and solve["arclength"] > 0
    assert first["grad_norm"] > 0 and first["grad_finite"] and first["params_finite"]
    assert set(first["weights"]) == {
        "0.attn_time.proj", "0.self_attn.qkv_proj", "0.self_attn.out_proj",
        "0.ffn_time.proj", "0.ffn.fc1", "0.ffn.fc2",
    }  # fmt: skip
    assert first["weight_spectral_max"] == max(w["spectral"] for w in first["weights"].values())


def test_trace_measures_the_field_at_both_ends():
    config = ClassifierConfig.from_dict(
        {"vocab_size": 3, "d_model": 8, "num_heads": 2, "ffn_dim": 16, **NODE}
    )
    torch.manual_seed(0)
    model = SequenceClassifier(config)
    tokens = torch.tensor([[1, 2, 1], [2, 2, 0]])
    with SolveTracer(model, Path("/dev/null")) as tracer:
        tracer.begin_step()
        model(tokens)
        tracer.mark_backward()
        (solve,) = tracer._solves
    stack = model.encoder.stacks[0]
    x = model.embed(tokens) + model.positions(3)
    mask = tokens.eq(0)
    with torch.no_grad():
        f0 = stack.field(torch.zeros(2), x, padding_mask=mask) * (~mask).unsqueeze(-1)
    assert solve["f_norm_t0"] == pytest.approx(float(f0.flatten(1).norm(dim=1).mean()))


def test_tracer_needs_a_continuous_model():
    model = SequenceClassifier(ClassifierConfig(vocab_size=3, d_model=8, num_heads=2, ffn_dim=16))
    with pytest.raises(ValueError, match="continuous"):
        SolveTracer(model, "unused.jsonl")


def test_main_writes_traces(tmp_path):
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    out, trace = tmp_path / "out", tmp_path / "trace"
    assert main([str(path), "--out", str(out), "--trace", str(trace), "--quiet"]) == 0
    assert len(read_trace(trace / "node" / "seed0.jsonl")) == 3


def test_spectral_norm_bounds_every_linear_layer_of_the_field():
    torch.manual_seed(0)
    field = TimeConditionedEncoderField(8, 2, 16, time_conditioning="concat", spectral_norm=True)
    for _ in range(30):  # power iterations converge in training mode
        field(0.0, torch.randn(2, 3, 8))
    field.eval()
    norms = field_weight_norms(field)
    assert len(norms) == 6
    for name, norm in norms.items():
        assert norm["spectral"] == pytest.approx(1.0, abs=1e-3), name
    plain = TimeConditionedEncoderField(8, 2, 16, time_conditioning="concat")
    assert max(n["spectral"] for n in field_weight_norms(plain).values()) > 1.05
    assert "spectral_norm=True" in repr(field)


def test_spectral_norm_is_one_weight_per_solve_and_configurable():
    config = ClassifierConfig.from_dict(
        {"vocab_size": 3, "d_model": 8, "num_heads": 2, "ffn_dim": 16, **NODE,
         "spectral_norm": True}
    )  # fmt: skip
    assert config.continuous.spectral_norm
    torch.manual_seed(0)
    model = SequenceClassifier(config)
    fc1 = model.encoder.stacks[0].field.ffn.fc1
    calls = []
    fc1.parametrizations.weight[0].register_forward_hook(lambda *a: calls.append(1))
    out = model(torch.tensor([[1, 2, 1], [2, 1, 1]]))
    assert out.stats.nfe_total > 6 and len(calls) == 1  # cached for the whole solve
    out.logits.sum().backward()
    assert fc1.parametrizations.weight.original.grad is not None
    with pytest.raises(ConfigError, match="spectral_norm"):
        ClassifierConfig.from_dict({"vocab_size": 3, "d_model": 8, **NODE, "spectral_norm": "yes"})


def test_spectral_norm_changes_the_model_only_when_asked(tmp_path):
    off = _run(tmp_path, "off", _config())
    on = _run(tmp_path, "on", _config(model={**NODE, "spectral_norm": True}))
    assert on.encoder.endswith("spectral norm]") and "spectral" not in off.encoder
    assert on.final_loss != off.final_loss


@pytest.mark.filterwarnings("error::UserWarning")  # its plots: no log scale over no positive data
def test_skip_nonfinite_drops_updates_with_inf_gradients(tmp_path, monkeypatch):
    real = parity.classification_loss

    def infinite_loss(*args, **kwargs):
        loss = real(*args, **kwargs)
        return type(loss)(loss.total * float("inf"), loss.cross_entropy, loss.arclength)

    monkeypatch.setattr(parity, "classification_loss", infinite_loss)
    skipped = _run(tmp_path, "skip", _config(training={"skip_nonfinite": True}))
    applied = _run(tmp_path, "apply", _config())
    assert skipped.skipped_updates == 3 and applied.skipped_updates == 0
    assert skipped.failed == 0 and applied.failed > 0  # NaN weights: every test solve fails


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"training": {"skip_nonfinte": True}}, r"skip_nonfinite"),
        ({"training": {"skip_nonfinite": 1}}, r"skip_nonfinite"),
        ({"training": {"lr": -1.0}}, r"lr must be > 0"),
        ({"model": {**NODE, "spectral_norm": 1}}, r"spectral_norm"),
    ],
)
def test_bad_options_are_rejected(variant, message):
    with pytest.raises(ConfigError, match=message):
        _config(**variant)


def test_a_variant_training_override_changes_only_that_variant():
    data = copy.deepcopy(TINY)
    data["variants"].append({"name": "wd", "model": NODE, "training": {"weight_decay": 0.1}})
    config = ParityExperimentConfig.from_dict(data)
    plain, wd = config.variants
    assert config.training_config(plain) is config.training
    assert config.training_config(wd).weight_decay == 0.1
    assert config.training_config(wd).steps == config.training.steps
    assert run_key(config, plain, 0) != run_key(config, wd, 0)


def test_traces_plot_and_read_gzipped(tmp_path):
    import gzip

    from odet.experiments.ode_trace import first_nonfinite_step, plot_traces

    _run(tmp_path, "traced", _config(), trace_dir=tmp_path / "trace")
    path = tmp_path / "trace" / "node" / "seed0.jsonl"
    zipped = tmp_path / "seed0.jsonl.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes()))
    assert read_trace(zipped) == read_trace(path)
    assert first_nonfinite_step(read_trace(path)) is None
    plot_traces({"a": path, "b": zipped}, tmp_path / "trace.png", title="t")
    assert (tmp_path / "trace.png").stat().st_size > 0
