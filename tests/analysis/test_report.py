"""``odet analyze`` on run directories, and the probes ``odet.analysis`` re-exports."""

import json

import odet.analysis
import odet.models.probes
from odet.cli import main
from odet.training import TrainConfig, train
from tests.training.conftest import copy_data, tiny_config  # noqa: F401


def test_analysis_re_exports_the_probes_of_odet_models():
    for name in odet.models.probes.__all__:
        assert getattr(odet.analysis, name) is getattr(odet.models.probes, name)


def test_analyze_command_writes_plots_and_json(copy_data, tmp_path, capsys):  # noqa: F811
    runs = []
    for name, model in [
        ("euler", {}),
        ("gated", {"encoder_method": "rk2", "coefficients": "gated"}),
        ("dlcl", {"encoder_method": "dlcl"}),
    ]:
        run = tmp_path / name
        train(
            TrainConfig.from_dict(tiny_config(copy_data, run, model=model, train={"max_epochs": 2}))
        )
        runs.append(str(run))
    assert main(["analyze", *runs, "--out", str(tmp_path / "analysis"), "--sentences", "16"]) == 0
    printed = capsys.readouterr().out
    assert "dlcl: encoder DLCL output weights (embedding, blocks 1…): " in printed
    report = json.loads((tmp_path / "analysis" / "analysis.json").read_text())
    assert report["gated"]["coefficient_history"][-1]["step"] > 0
    assert len(report["euler"]["update_sizes"]["encoder"]) == 1
    assert report["euler"]["gates"]["encoder"] == [None]
    assert 0 <= report["gated"]["gates"]["encoder"][0]["saturated"] <= 1
    assert "encoder_layers" in report["dlcl"]["coefficient_history"][-1]
    assert len(report["dlcl"]["coefficients"]["encoder_layers"]) == 2  # W rows: block 1, output
    for png in ("update_sizes.png", "coefficients.png", "layer_weights.png"):
        assert (tmp_path / "analysis" / png).stat().st_size > 1000
