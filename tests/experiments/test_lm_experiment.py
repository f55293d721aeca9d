"""``odet experiment`` with a ``task: lm`` base config: variants × seeds, the loss table with
the paired t-test, reuse of finished runs and refusal of runs trained otherwise."""

from __future__ import annotations

import csv

import pytest
import yaml

from odet.cli import main
from odet.config import ConfigError
from odet.evaluation import paired_t_test
from odet.experiments.config import load_experiment
from tests.training.test_lm import _config


@pytest.fixture
def experiment(tmp_path):
    base = _config(tmp_path, train={"max_updates": 8, "eval_interval": 4})
    base["optim"].update({"warmup_updates": 2, "decay_updates": 8})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    data = {
        "base": str(tmp_path / "base.yaml"),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1, 2],
        "variants": {
            "euler": {"model.layers": 1},
            "rk2": {"model.layers": 1, "model.method": "rk2"},
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_lm_experiment_trains_variants_and_seeds_and_tests_the_differences(
    experiment, tmp_path, capsys
):
    assert main(["experiment", str(experiment), "--no-progress"]) == 0
    out = tmp_path / "exp"
    rows = list(csv.DictReader((out / "results.csv").open(encoding="utf-8")))
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("euler", "1"),
        ("rk2", "1"),
        ("euler", "2"),
        ("rk2", "2"),
    ]
    assert all(r["updates"] == "8" and r["layers"] == "1" for r in rows)
    assert [r["layer_evaluations"] for r in rows] == ["1", "2", "1", "2"]
    assert rows[0]["parameters"] == rows[1]["parameters"]  # RK2 shares its one layer
    loss = {(r["variant"], r["seed"]): float(r["valid_loss"]) for r in rows}
    test = paired_t_test(
        [loss["euler", "1"], loss["euler", "2"]], [loss["rk2", "1"], loss["rk2", "2"]]
    )
    report = (out / "results.md").read_text(encoding="utf-8")
    row = next(line for line in report.splitlines() if line.startswith("| rk2 | euler |"))
    assert f"| {test.delta:+.4f} | {test.p_value:.2g} |" in row
    assert (out / "loss_vs_time.png").stat().st_size > 1000
    # A second call reuses the finished runs; a different config is refused, naming the key.
    mtime = (out / "rk2" / "seed2" / "summary.json").stat().st_mtime
    assert main(["experiment", str(experiment), "--no-progress"]) == 0
    assert (out / "rk2" / "seed2" / "summary.json").stat().st_mtime == mtime
    assert main(["experiment", str(experiment), "--no-progress", "--set", "optim.lr=0.01"]) != 0
    assert "optim.lr (0.003 -> 0.01)" in capsys.readouterr().err
    # The export (result files only) reports the same table, and so does a rebuild from it.
    dest = tmp_path / "results"
    assert main(["experiment", str(experiment), "--export", str(dest)]) == 0
    assert not (dest / "rk2-seed2" / "checkpoints").exists()
    for name in ("results.md", "results.csv"):
        assert (dest / name).read_text(encoding="utf-8") == (out / name).read_text(encoding="utf-8")
    assert (dest / "loss_vs_time.png").stat().st_size > 1000


def test_baselines_name_variants(experiment):
    config = load_experiment(experiment)
    assert config.baseline("rk2") == "euler" and config.baseline("euler") == "euler"
    data = yaml.safe_load(experiment.read_text(encoding="utf-8"))
    data["baselines"] = {"rk2": "rk4"}
    experiment.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"baseline 'rk4' is not one of the variants .*'rk2'\?\)"):
        load_experiment(experiment)
