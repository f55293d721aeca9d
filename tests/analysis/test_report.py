"""``odet analyze`` on run directories, and the probes ``odet.analysis`` re-exports."""

import json
import shutil
from pathlib import Path

import pytest

import odet.analysis
import odet.models.probes
from odet.analysis.report import analyze_runs, run_labels
from odet.cli import main
from odet.data import DataError
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


def _copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def test_analyze_runs_labels_runs_of_one_name_by_their_distinct_parents(depth_runs, tmp_path):
    a = _copy_run(depth_runs["euler"], tmp_path / "x" / "b" / "seed1")
    b = _copy_run(depth_runs["euler"], tmp_path / "y" / "b" / "seed1")
    report = analyze_runs([str(a), str(b)], str(tmp_path / "an"), sentences=4)
    assert list(report) == ["x/b/seed1", "y/b/seed1"]
    assert run_labels(["runs/euler", "runs/rk2"]) == ["euler", "rk2"]


@pytest.mark.parametrize(
    "twice", [lambda r: [r, r], lambda r: [r, f"{r}/"], lambda r: [r, f"{r}/checkpoints"]]
)
def test_analyze_runs_refuses_one_checkpoint_given_twice(depth_runs, tmp_path, twice):
    runs = twice(str(depth_runs["euler"]))
    with pytest.raises(ValueError, match=r"are the same checkpoint .*; give it once"):
        analyze_runs(runs, str(tmp_path / "an"))
    assert not (tmp_path / "an").exists()


def test_analyze_runs_of_a_continuous_encoder_reports_its_decoder_only(
    depth_runs, tmp_path, capsys
):
    out = tmp_path / "an"
    assert main(["analyze", str(depth_runs["node"]), "--out", str(out), "--sentences", "4"]) == 0
    assert "node: continuous encoder, no blocks to measure" in capsys.readouterr().out
    report = json.loads((out / "analysis.json").read_text())
    assert list(report["node"]["update_sizes"]) == ["decoder"]
    for png in ("update_sizes.png", "coefficients.png"):
        assert (out / png).stat().st_size > 1000


@pytest.mark.parametrize(
    "record",
    [
        {"event": "coefficients", "step": 5},
        {"event": "coefficients", "step": 5, "encoder": [[]], "decoder": []},
        {"event": "coefficients", "step": "5", "encoder": [[]], "decoder": [[1.0]]},
        {"event": "coefficients", "step": 5, "encoder": [["a"]], "decoder": [[1.0]]},
    ],
)
def test_a_coefficients_record_of_another_layout_is_a_data_error_naming_the_log(
    depth_runs,
    tmp_path,
    record,
):
    run = _copy_run(depth_runs["euler"], tmp_path / "run")
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"step": 9}) + "\n")  # no event: not a record, left out
        handle.write(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=r"metrics\.jsonl: the coefficients record of step"):
        analyze_runs([str(run)], str(tmp_path / "an"))
    assert not (tmp_path / "an").exists()


@pytest.mark.parametrize(
    ("runs", "sentences", "error"),
    [("a/run", 4, TypeError), ([Path("a")], "4", TypeError), ([], 4, ValueError)],
)
def test_analyze_runs_refuses_arguments_of_the_wrong_kind(runs, sentences, error, tmp_path):
    with pytest.raises(error, match=r"runs|sentences"):
        analyze_runs(runs, str(tmp_path / "an"), sentences=sentences)
