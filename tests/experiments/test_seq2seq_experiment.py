import csv
import json
import shutil

import pytest
import yaml

from odet.cli import main
from odet.evaluation import tokenize_13a_lower, tokenized_bleu
from tests.training.conftest import copy_data, tiny_config, write_config  # noqa: F401


def _base_with_test_set(data, tmp_path, **train):
    """A tiny base config with a test set (so runs decode it) and these ``train`` keys."""
    return write_config(
        tmp_path / "base.yaml",
        tiny_config(
            data, tmp_path / "unused", data={"test": ["test.src", "test.tgt"]}, train=train
        ),
    )


def test_experiment_trains_every_variant_and_seed_and_writes_the_report(copy_data, tmp_path):  # noqa: F811
    base = _base_with_test_set(
        copy_data,
        tmp_path,
        max_updates=6,
        valid_metric="bleu",
        best_metric="metric",
        keep_last=2,
        save_every_updates=3,
    )
    experiment = {
        "base": str(base),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1, 2],
        "average_last": 2,
        "variants": {
            "euler": {},
            "rk2-gated": {"model.encoder_method": "rk2", "model.coefficients": "gated"},
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    assert main(["experiment", str(path), "--no-progress"]) == 0
    rows = list(csv.DictReader((tmp_path / "exp" / "results.csv").open()))
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("euler", "1"),
        ("rk2-gated", "1"),
        ("euler", "2"),
        ("rk2-gated", "2"),
    ]
    assert all(r["updates"] == "6" and r["test_bleu"] and r["avg_test_bleu"] for r in rows)
    assert int(rows[1]["parameters"]) == int(rows[0]["parameters"]) + 2 * 32 + 1
    report = (tmp_path / "exp" / "results.md").read_text()
    assert "| rk2-gated |" in report and "avg2 BLEU" in report
    assert "avg2 test decode (s)" in report
    # The averaged test decode's wall time: recorded beside its hypotheses, in the table.
    timing = json.loads((tmp_path / "exp" / "euler" / "seed1" / "test.avg2.time.json").read_text())
    assert timing["sentences"] == len((copy_data / "test.src").read_text().splitlines())
    assert timing["seconds"] > 0 and timing["threads"] >= 1
    assert float(rows[0]["avg_test_decode_seconds"]) == timing["seconds"]
    delta = [line for line in report.splitlines() if line.startswith("| rk2-gated | ")][-1]
    expected = sum(
        float(rows[i + 1]["avg_test_bleu_tok"]) - float(rows[i]["avg_test_bleu_tok"])
        for i in (0, 2)
    )
    assert delta.split(" | ")[1] == f"{expected / 2:+.2f}"  # mean of the per-seed differences
    p_values = [float(p.split(")")[0]) for p in delta.split("(p = ")[1:]]
    assert len(p_values) == 3 and all(0 < p <= 1 for p in p_values)  # all seeds, then each pair
    # "All seeds": BLEU of both seeds' outputs joined, variant minus baseline.
    refs = [tokenize_13a_lower(r) for r in (copy_data / "test.tgt").read_text().splitlines()]

    def joined_bleu(variant: str) -> float:
        hyps = [
            tokenize_13a_lower(h)
            for seed in (1, 2)
            for h in (tmp_path / "exp" / variant / f"seed{seed}" / "test.avg2.hyp")
            .read_text()
            .splitlines()
        ]
        return tokenized_bleu(hyps, refs + refs).score

    pooled = delta.split(" | ")[2]
    assert pooled.startswith(f"{joined_bleu('rk2-gated') - joined_bleu('euler'):+.2f} (p = ")
    assert (tmp_path / "exp" / "bleu_vs_time.png").stat().st_size > 1000
    # Running again trains nothing new: finished runs are skipped.
    mtime = (tmp_path / "exp" / "euler" / "seed1" / "summary.json").stat().st_mtime
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert (tmp_path / "exp" / "euler" / "seed1" / "summary.json").stat().st_mtime == mtime


def test_experiment_split_across_calls_reports_every_finished_run(copy_data, tmp_path, capsys):  # noqa: F811
    base = write_config(
        tmp_path / "base.yaml",
        tiny_config(copy_data, tmp_path / "unused", train={"max_updates": 3}),
    )
    experiment = {
        "base": str(base),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1],
        "variants": {"euler": {}, "rk2": {"model.encoder_method": "rk2"}},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))

    def variants_in_report() -> list[str]:
        return [r["variant"] for r in csv.DictReader((tmp_path / "exp" / "results.csv").open())]

    assert main(["experiment", str(path), "--no-progress", "--variants", "rk2"]) == 0
    assert variants_in_report() == ["rk2"]
    assert not (tmp_path / "exp" / "euler").exists()
    assert main(["experiment", str(path), "--no-progress", "--variants", "euler"]) == 0
    assert variants_in_report() == ["euler", "rk2"]

    capsys.readouterr()
    assert main(["experiment", str(path), "--no-progress", "--variants", "rk3"]) != 0
    error = capsys.readouterr().err
    assert "unknown variant(s) ['rk3']; the experiment has ['euler', 'rk2']" in error
    assert error.rstrip().endswith("(did you mean 'rk2'?)")


def test_a_run_that_fails_numerically_does_not_stop_the_others(copy_data, tmp_path, capsys, caplog):  # noqa: F811
    """A diverged or failed-solve run ended the whole command: the runs after it never
    started. They now train, and the command fails at the end naming the failed run."""
    base = write_config(
        tmp_path / "base.yaml",
        tiny_config(copy_data, tmp_path / "unused", train={"max_updates": 2}),
    )
    failing = {"model.encoder_method": "adaptive", "model.continuous.max_steps": 1}
    experiment = {
        "base": str(base),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1],
        "variants": {"node": failing, "euler": {}},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    assert main(["experiment", str(path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "run node/seed1 failed: the encoder's solve failed (max_steps)" in caplog.text
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "odet: error: 1 run(s) of the experiment failed (the others finished and are in its "
            "report): node/seed1 (the encoder's solve failed"
        )
    )
    rows = list(csv.DictReader((tmp_path / "exp" / "results.csv").open()))
    assert [r["variant"] for r in rows] == ["euler"]


def test_export_copies_result_files_and_rebuilds_the_same_report(copy_data, tmp_path, capsys):  # noqa: F811
    """``--export DIR``: what a repository commits of an experiment. Each finished run's
    top-level files (no checkpoints, averaged weights, tokenizer or run marker) go to
    ``DIR/<variant>-seed<k>/``; the report rebuilt there from those files alone equals the one
    written beside the runs; nothing exported is ever overwritten with something else."""
    base = _base_with_test_set(
        copy_data, tmp_path, max_updates=4, keep_last=2, save_every_updates=2
    )
    experiment = {
        "base": str(base),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1, 2],
        "average_last": 2,
        "variants": {"euler": {}, "rk2": {"model.encoder_method": "rk2"}},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    exp, dest = tmp_path / "exp", tmp_path / "results"
    assert main(["experiment", str(path), "--no-progress", "--seeds", "1"]) == 0
    assert main(["experiment", str(path), "--export", str(dest)]) == 0
    run = exp / "euler" / "seed1"
    assert (run / "checkpoints").is_dir() and (run / "avg2").is_dir()
    assert sorted(p.name for p in (dest / "euler-seed1").iterdir()) == sorted(
        p.name for p in run.iterdir() if p.is_file() and not p.name.startswith(".")
    )
    assert {"summary.json", "test.avg2.hyp", "metrics.jsonl"} <= {
        p.name for p in (dest / "euler-seed1").iterdir()
    }
    for name in ("results.md", "results.csv"):
        assert (dest / name).read_text() == (exp / name).read_text()
    assert (dest / "bleu_vs_time.png").stat().st_size > 1000

    # More runs later (another session, another machine): the export gathers them.
    assert main(["experiment", str(path), "--no-progress", "--seeds", "2"]) == 0
    assert main(["experiment", str(path), "--export", str(dest), "--seeds", "2"]) == 0
    rows = list(csv.DictReader((dest / "results.csv").open()))
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("euler", "1"),
        ("rk2", "1"),
        ("euler", "2"),
        ("rk2", "2"),
    ]
    assert (dest / "results.md").read_text() == (exp / "results.md").read_text()

    # The runs themselves gone (a fresh checkout): the report rebuilds from the export alone.
    shutil.rmtree(exp)
    report = (dest / "results.md").read_text()
    (dest / "results.md").unlink()
    assert main(["experiment", str(path), "--export", str(dest)]) == 0
    assert (dest / "results.md").read_text() == report

    # A rerun of an exported run is another run (its logs differ): refused, and so is a run
    # exported under another run's name, before anything is written.
    assert main(["experiment", str(path), "--no-progress", "--seeds", "2"]) == 0
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["experiment", str(path), "--export", str(dest)]) == 2
    err = capsys.readouterr().err
    assert "-seed2/" in err and "exists and differs from" in err and "nothing was copied" in err
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    shutil.copytree(dest / "euler-seed1", dest / "rk2-seed1", dirs_exist_ok=True)
    assert main(["experiment", str(path), "--export", str(dest), "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "rk2-seed1 is not run rk2/seed1 of this experiment: its config differs in " in err
    assert "model.encoder_method ('euler' -> 'rk2')" in err


def test_export_with_no_finished_run_writes_nothing(copy_data, tmp_path, capsys):  # noqa: F811
    base = write_config(tmp_path / "base.yaml", tiny_config(copy_data, tmp_path / "unused"))
    experiment = {"base": str(base), "output_dir": str(tmp_path / "exp"), "variants": {"e": {}}}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    assert main(["experiment", str(path), "--export", str(tmp_path / "results")]) == 2
    assert "no finished run to export" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
    (tmp_path / "file").write_text("x")
    assert main(["experiment", str(path), "--export", str(tmp_path / "file")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert main(["experiment", str(path), "--export", " "]) == 2
    assert "--export needs a folder to export into" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", str(path), "--export", "x", "--status"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_status_names_finished_in_progress_and_exported_runs(copy_data, tmp_path, capsys):  # noqa: F811
    base = write_config(
        tmp_path / "base.yaml",
        tiny_config(copy_data, tmp_path / "unused", train={"max_updates": 2}),
    )
    experiment = {
        "base": str(base),
        "output_dir": str(tmp_path / "exp"),
        "seeds": [1, 2],
        "variants": {"euler": {}, "rk2": {"model.encoder_method": "rk2"}},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment))
    assert main(["experiment", str(path), "--no-progress", "--variants", "euler"]) == 0
    dest = tmp_path / "results"
    assert main(["experiment", str(path), "--export", str(dest), "--seeds", "1"]) == 0
    shutil.rmtree(tmp_path / "exp" / "euler" / "seed1")  # kept only in the export now
    stopped = tmp_path / "exp" / "rk2" / "seed2"
    stopped.mkdir(parents=True)
    (stopped / "metrics.jsonl").write_text('{"event": "train", "step": 1, "loss": 3.0}\n')
    capsys.readouterr()
    assert main(["experiment", str(path), "--status", str(dest)]) == 0
    table = capsys.readouterr().out
    assert "| euler | 1 | finished | 2/2 | yes |" in table
    assert "| rk2 | 1 | not started | 0/2 | no |" in table
    assert "| euler | 2 | finished | 2/2 | no |" in table
    assert "| rk2 | 2 | in progress | 1/2 | no |" in table
    assert f"4 runs: 2 finished, 1 in progress, 1 not started; 1 in {dest}." in table
    assert main(["experiment", str(path), "--status"]) == 0
    assert "| euler | 1 | not started | 0/2 |\n" in capsys.readouterr().out
    assert main(["experiment", str(path), "--status", str(tmp_path / "typo")]) == 2
    assert "typo: no such folder" in capsys.readouterr().err
    assert main(["experiment", str(path), "--status", "--variants", "rk2", "--seeds", "2"]) == 0
    assert capsys.readouterr().out.count("| rk2 | 2 | in progress | 1/2 |") == 1
    assert main(["experiment", str(path), "--status", "--variants", "rk3"]) == 2
    assert "unknown variant(s) ['rk3']" in capsys.readouterr().err
    assert main(["experiment", str(path), "--status", "--seeds", "9"]) == 2
    assert "unknown seed(s) [9]" in capsys.readouterr().err
    assert main(["experiment", str(path), "--status", str(base)]) == 2
    assert f"{base}: not a folder" in capsys.readouterr().err


def test_a_missing_base_config_is_named_with_the_folder_it_was_read_from(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "exp.yaml").write_text(
        yaml.safe_dump({"base": "configs/x.yaml", "output_dir": "out", "variants": {"e": {}}})
    )
    monkeypatch.chdir(tmp_path)
    for args in (["--status"], ["--export", "dest"], ["--no-progress"]):
        assert main(["experiment", "exp.yaml", *args]) == 2
        err = capsys.readouterr().err
        assert f"experiment.base (read from the current folder, {tmp_path}): " in err
        assert "config file not found: configs/x.yaml" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]
