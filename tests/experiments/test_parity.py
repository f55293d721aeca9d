import csv
import math
from pathlib import Path

import pytest

from odet.config import ConfigError, load_yaml
from odet.experiments.parity import ParityExperimentConfig, main, run_parity

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "parity").glob("*.yaml"))

TINY = {
    "seed": 0,
    "task": {
        "train_size": 64, "val_size": 16, "test_per_length": 4, "min_length": 1,
        "max_length": 3, "test_max_length": 5,
    },
    "training": {"steps": 3, "batch_size": 16},
    "model": {"d_model": 8, "num_heads": 2, "ffn_dim": 16, "activation": "gelu"},
    "variants": [
        {"name": "euler-2", "model": {"encoder_method": "euler", "encoder_layers": 2}},
        {
            "name": "node",
            "arclength_weight": 0.1,
            "model": {"encoder_method": "continuous", "layer_norm": False, "rtol": 0.01,
                      "atol": 0.01, "time_conditioning": "concat"},
        },
    ],
}  # fmt: skip


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads_and_builds_its_models(path):
    config = ParityExperimentConfig.from_dict(load_yaml(path))
    for variant in config.variants:
        config.classifier_config(variant)
    assert {"quick.yaml", "paper.yaml"} <= {p.name for p in CONFIGS}


def test_tiny_run_writes_tables_and_plots_with_consistent_numbers(tmp_path):
    results = run_parity(ParityExperimentConfig.from_dict(TINY), tmp_path, progress=False)
    discrete, node = results.variants
    assert discrete.nfe_trained == discrete.nfe_longer == 2.0  # two Euler layers
    assert node.nfe_trained >= 6 and node.arclength_trained > 0
    assert discrete.arclength_trained is None
    assert [p.length for p in node.per_length] == [1, 2, 3, 4, 5]
    for name in (
        "results.md", "results.csv", "per_length.csv", "config.yaml",
        "accuracy_nfe_vs_length.png", "arclength_nfe_vs_lambda.png",
    ):  # fmt: skip
        assert (tmp_path / name).stat().st_size > 0, name
    with (tmp_path / "per_length.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 10
    longer = [float(r["accuracy"]) for r in rows if r["variant"] == "node" and int(r["length"]) > 3]
    assert node.accuracy_longer == pytest.approx(sum(longer) / 2)
    assert ParityExperimentConfig.from_dict(load_yaml(tmp_path / "config.yaml")) == results.config


def test_same_seed_reproduces_the_same_accuracies(tmp_path):
    config = ParityExperimentConfig.from_dict({**TINY, "variants": TINY["variants"][:1]})
    first = run_parity(config, tmp_path / "a", progress=False).variants[0]
    second = run_parity(config, tmp_path / "b", progress=False).variants[0]
    assert first.per_length == second.per_length and first.final_loss == second.final_loss


def test_a_diverged_fixed_step_node_counts_every_test_solve_as_failed(tmp_path):
    """quick.yaml's RK4×4 seed 4 ended with NaN weights and was reported with 0 failed
    solves: fixed-step solves did not flag non-finite states."""
    fixed = {"encoder_method": "continuous", "layer_norm": False, "solver": "rk4",
             "fixed_steps": 2, "time_conditioning": "concat"}  # fmt: skip
    training = {"steps": 3, "batch_size": 16, "lr": 1e12}
    variants = [{"name": "rk4x2", "model": fixed}]
    config = ParityExperimentConfig.from_dict({**TINY, "training": training, "variants": variants})
    result = run_parity(config, tmp_path, progress=False).variants[0]
    assert math.isnan(result.final_loss) and result.accuracy_trained == 0.5
    assert result.failed == 4 * 5  # every test sentence of lengths 1-5


def test_main_runs_a_yaml_config(tmp_path, capsys):
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "variants": TINY["variants"][:1]}))
    assert main([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert "| euler-2 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"variants": []}, r"at least one variant"),
        (
            {"variants": [TINY["variants"][0]] * 2},
            r"variant names must be unique; repeated: \['euler-2'\]",
        ),
        (
            {"variants": [{**TINY["variants"][0], "arclength_weight": 0.1}]},
            r"variant 'euler-2': arclength_weight > 0 needs encoder_method='continuous'",
        ),
        (
            {"variants": [{"name": "x", "model": {"encoder_method": "rk5"}}]},
            r"encoder_method = 'rk5' is not a known method",
        ),
        ({"trainig": {}}, r"unknown config key 'trainig' \(did you mean 'training'\?\)"),
        ({"model": {"vocab_size": 5}}, r"model.vocab_size is fixed by the parity task"),
        ({"training": {"steps": 0}}, r"TrainingConfig.steps must be >= 1"),
    ],
)
def test_bad_experiment_configs_are_rejected(change, message):
    with pytest.raises(ConfigError, match=message):
        ParityExperimentConfig.from_dict({**TINY, **change})


def test_seeds_give_per_seed_runs_and_a_mean_std_summary(tmp_path):
    config = ParityExperimentConfig.from_dict({**TINY, "seeds": [0, 1, 2]})
    results = run_parity(config, tmp_path, progress=False)
    assert [(r.name, r.seed) for r in results.variants] == [
        (name, seed) for name in ("euler-2", "node") for seed in (0, 1, 2)
    ]
    node_runs = [r for r in results.variants if r.name == "node"]
    assert len({r.final_loss for r in node_runs}) == 3  # the seeds differ
    summary = {s.name: s for s in results.summaries()}["node"]
    values = [r.accuracy_trained for r in node_runs]
    mean = sum(values) / 3
    std = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5
    assert summary.accuracy_trained.mean == pytest.approx(mean)
    assert summary.accuracy_trained.std == pytest.approx(std)
    assert summary.seeds == (0, 1, 2) and summary.accuracy_trained.n == 3
    with (tmp_path / "runs.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 6
    with (tmp_path / "results.csv").open() as fh:
        rows = {r["name"]: r for r in csv.DictReader(fh)}
    assert float(rows["node"]["accuracy_trained_mean"]) == pytest.approx(mean)
    assert "±" in (tmp_path / "results.md").read_text()


def test_a_rerun_reuses_finished_runs_and_retrains_changed_ones(tmp_path):
    config = ParityExperimentConfig.from_dict({**TINY, "seeds": [0, 1]})
    first = run_parity(config, tmp_path, progress=False, seeds=[0])
    assert [(r.name, r.seed) for r in first.variants] == [("euler-2", 0), ("node", 0)]
    assert "Not run yet: euler-2 seed 1, node seed 1" in (tmp_path / "results.md").read_text()
    second = run_parity(config, tmp_path, progress=False)
    assert second.variants[0] == first.variants[0]  # reused, train time included
    assert [(r.name, r.seed) for r in second.variants] == [
        ("euler-2", 0), ("euler-2", 1), ("node", 0), ("node", 1)
    ]  # fmt: skip
    changed = ParityExperimentConfig.from_dict(
        {**TINY, "seeds": [0, 1], "training": {"steps": 4, "batch_size": 16}}
    )
    third = run_parity(changed, tmp_path, progress=False, variants=["euler-2"], seeds=[0])
    assert [(r.name, r.seed) for r in third.variants] == [("euler-2", 0)]
    assert third.variants[0].final_loss != first.variants[0].final_loss


def test_unknown_seeds_and_variants_are_rejected_before_training(tmp_path):
    config = ParityExperimentConfig.from_dict(TINY)
    with pytest.raises(ConfigError, match=r"seed 5 is not among the config's seeds \[0\]"):
        run_parity(config, tmp_path, progress=False, seeds=[5])
    with pytest.raises(ConfigError, match=r"unknown variant 'eular-2' \(did you mean 'euler-2'"):
        run_parity(config, tmp_path, progress=False, variants=["eular-2"])
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ConfigError, match="seeds must be distinct"):
        ParityExperimentConfig.from_dict({**TINY, "seeds": [1, 1]})


def test_only_a_runs_directory_of_saved_parity_runs_counts_as_odet_s_output(tmp_path):
    from odet.experiments.parity import _has_parity_runs

    (tmp_path / "proj" / "runs").mkdir(parents=True)
    assert not _has_parity_runs(tmp_path / "proj")
    saved = tmp_path / "old" / "runs" / "euler" / "seed0.json"
    saved.parent.mkdir(parents=True)
    saved.write_text('{"key": "0123", "result": {}}')
    assert _has_parity_runs(tmp_path / "old")


def test_python_m_parity_reports_a_bad_config_in_one_line_exit_2(tmp_path, capsys):
    config = tmp_path / "p.yaml"
    config.write_text("seed: 0\nvariants: []\n")
    assert main([str(config), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "odet: error: ParityExperimentConfig: missing required key(s) ['task', 'training']\n"
    )
    assert main([str(tmp_path / "none.yaml"), "--out", str(tmp_path / "out")]) == 2
    assert "Traceback" not in capsys.readouterr().err
