"""The command line: what each command prints and writes when it succeeds (its bad inputs are
the table of tests/cli/test_bad_inputs.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from odet.cli import main
from odet.training import TrainConfig, train
from tests.training.conftest import copy_data, tiny_config, write_config  # noqa: F401


@pytest.fixture(scope="module")
def trained(copy_data, tmp_path_factory) -> Path:  # noqa: F811
    run = tmp_path_factory.mktemp("cli") / "run"
    train(TrainConfig.from_dict(tiny_config(copy_data, run)))
    return run


def _config_file(tmp_path: Path, copy_data: Path, **sections) -> str:  # noqa: F811
    return str(
        write_config(tmp_path / "c.yaml", tiny_config(copy_data, tmp_path / "run", **sections))
    )


def test_average_refuses_a_non_empty_out_before_averaging(trained, tmp_path, monkeypatch):
    import odet.training.average as average

    loaded = []
    monkeypatch.setattr(average.Seq2Seq, "from_pretrained", lambda p: loaded.append(p))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("keep")
    assert main(["average", str(trained), "--last", "1", "--out", str(tmp_path / "out")]) == 2
    assert loaded == [] and (tmp_path / "out" / "keep.txt").read_text() == "keep"


def test_generate_checks_the_output_before_decoding_and_replaces_it_atomically(
    trained, tmp_path, monkeypatch, capsys
):
    from odet.inference import Translator

    source = tmp_path / "in.txt"
    source.write_text("a b\nc\n")
    out = tmp_path / "out.txt"
    out.write_text("previous\n")

    def failing(self, lines, progress=False):
        raise ValueError("decoding failed")

    real = Translator.translate
    monkeypatch.setattr(Translator, "translate", failing)
    assert main(["generate", str(trained), "-i", str(source), "-o", str(out)]) == 2
    assert out.read_text() == "previous\n" and sorted(tmp_path.iterdir()) == [source, out]
    calls = []
    monkeypatch.setattr(Translator, "translate", lambda *a, **k: calls.append(1) or [])
    assert main(["generate", str(trained), "-i", str(source), "-o", str(source / "x")]) == 2
    assert calls == [] and "cannot be created" in capsys.readouterr().err
    monkeypatch.setattr(Translator, "translate", real)
    assert main(["generate", str(trained), "-i", str(source), "-o", str(out), "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 2 and sorted(tmp_path.iterdir()) == [source, out]


def test_generate_reads_stdin_and_keeps_empty_lines(trained, tmp_path, monkeypatch, capsys):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ka lo\n\nmi ne\n")))
    assert main(["generate", str(trained), "--beam", "2", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3 and captured.out.splitlines()[1] == ""
    assert "1 empty line(s)" in captured.err


def test_generate_writes_output_line_i_for_input_line_i_whatever_the_line_ends(
    trained, tmp_path, monkeypatch
):
    """Lines end at ``\\n`` only, as the corpus readers and ``wc -l`` count them: a lone
    ``\\r``, a form feed or U+2028 inside a line does not split it; CRLF and a BOM are dropped."""
    from odet.inference import Translator

    source = tmp_path / "in.txt"
    source.write_bytes("\ufeffka lo\r\nmi\rne\nla\x0cte\nsu\u2028po\u0085ri\n".encode())
    out = tmp_path / "out.txt"
    echo = lambda self, lines, progress=False: [f"<{line}>" for line in lines]  # noqa: E731
    monkeypatch.setattr(Translator, "translate", echo)
    assert main(["generate", str(trained), "-i", str(source), "-o", str(out)]) == 0
    written = out.read_bytes().decode("utf-8").split("\n")
    assert written == ["<ka lo>", "<mi\rne>", "<la\x0cte>", "<su\u2028po\u0085ri>", ""]


def test_generate_decodes_in_int8(trained, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("ka lo\nmi ne\n")
    out = tmp_path / "out.txt"
    argv = ["generate", str(trained), "-i", str(source), "-o", str(out), "--no-progress"]
    assert main([*argv, "--precision", "int8"]) == 0
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.parametrize(("flags", "chosen"), [("avx512_bf16", "bf16"), ("avx2", "fp32")])
def test_generate_at_auto_precision_says_which_precision_it_chose(
    trained, tmp_path, monkeypatch, capsys, flags, chosen
):
    import odet.nn.precision

    monkeypatch.setattr(odet.nn.precision, "cpu_flags", lambda: frozenset({flags}))
    source = tmp_path / "in.txt"
    source.write_text("ka lo\nmi ne\n")
    out = tmp_path / "out.txt"
    argv = ["generate", str(trained), "-i", str(source), "-o", str(out), "--no-progress"]
    assert main([*argv, "--precision", "auto"]) == 0
    assert f"odet: decoding in {chosen} (--precision auto" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 2
    assert main([*argv, "--precision", "fp32"]) == 0
    assert "decoding in" not in capsys.readouterr().err


def test_generate_compile_flag_overrides_the_run_config_only_when_given(
    trained, tmp_path, monkeypatch
):
    from odet.cli import build_parser
    from odet.inference import Translator

    parser = build_parser()
    assert parser.parse_args(["generate", "m"]).compile is None
    assert parser.parse_args(["generate", "m", "--compile"]).compile is True
    assert parser.parse_args(["generate", "m", "--no-compile"]).compile is False
    seen = []
    monkeypatch.setattr(
        Translator,
        "translate",
        lambda self, lines, progress: seen.append(self.config.compile) or [],
    )
    source = tmp_path / "in.txt"
    source.write_text("ka lo\n")
    assert main(["generate", str(trained), "-i", str(source), "--compile"]) == 0
    assert main(["generate", str(trained), "-i", str(source)]) == 0
    assert seen == [True, False]


def test_evaluate_prints_bleu_with_its_signature(tmp_path, capsys):
    (tmp_path / "h").write_text("the cat sat on the mat\n")
    (tmp_path / "r").write_text("the cat sat on the mat\n")
    assert main(["evaluate", "--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r")]) == 0
    assert "BLEU = 100.00" in capsys.readouterr().out


def test_a_library_warning_repeated_at_every_call_is_shown_once(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("sacrebleu"), "filters", [])  # as in a new process
    tokenized = tmp_path / "h"
    tokenized.write_text("a man is walking .\n" * 120)
    args = ["evaluate", "--hyp", str(tokenized), "--ref", str(tokenized)]
    with caplog.at_level(logging.WARNING):
        assert main(args) == 0
        assert main(args) == 0
    warned = [r for r in caplog.records if r.name == "sacrebleu"]
    assert len(warned) == len({r.getMessage() for r in warned}) > 0


def test_evaluate_with_a_baseline_prints_the_difference_and_its_p_value(tmp_path, capsys):
    refs = [f"the cat {i} sat on the mat" for i in range(20)]
    (tmp_path / "r").write_text("\n".join(refs) + "\n")
    (tmp_path / "b").write_text("\n".join(r.replace("sat", "lay") for r in refs) + "\n")
    argv = ["evaluate", "--hyp", str(tmp_path / "r"), "--ref", str(tmp_path / "r")]
    assert main([*argv, "--baseline", str(tmp_path / "b"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["score"] == pytest.approx(100) and result["delta"] > 0
    assert 0 < result["p_value"] < 0.05


def test_train_config_written_to_run_matches_the_overrides(copy_data, tmp_path):  # noqa: F811
    path = _config_file(tmp_path, copy_data)
    assert main(["train", path, "--set", "seed=11", "--no-progress"]) == 0
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["seed"] == 11


def test_output_dir_flag_is_taken_verbatim_not_as_yaml(copy_data, tmp_path, monkeypatch):  # noqa: F811
    import odet.training

    seen = []

    def record(config, progress=None):
        seen.append(config.output_dir)
        raise ValueError("stop before training")

    monkeypatch.setattr(odet.training, "train", record)
    config = _config_file(tmp_path, copy_data)
    for name in ("run #2", "run: b"):
        assert main(["train", config, "--output-dir", str(tmp_path / name)]) == 2
    assert seen == [str(tmp_path / "run #2"), str(tmp_path / "run: b")]
    assert not (tmp_path / "run").exists()


def test_generate_defaults_to_the_runs_search_settings(trained):
    from odet.generation import GenerationConfig
    from odet.inference import generation_defaults

    assert generation_defaults(str(trained)) == GenerationConfig(beam_size=1)


def test_prepare_writes_the_lead_baseline(shared_data, tmp_path, capsys):
    out = tmp_path / "lead.txt"
    dev = shared_data / "dialogsum" / "dialogsum.dev.jsonl"
    assert main(["prepare", "lead", str(dev), "--out", str(out), "--n", "5"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 500 and all(len(line.split()) <= 5 for line in lines)


def test_prepare_gec_substitutes_frequent_english_words(tmp_path, capsys):
    clean = tmp_path / "clean.txt"
    clean.write_text("A young girl sells yellow apples near the bridge .\n" * 3, encoding="utf-8")
    args = ["prepare", "gec", str(clean), "--out", str(tmp_path / "gec"), "--copies", "20"]
    assert main([*args, "--substitute", "0.5", "--vocabulary", "500"]) == 0
    assert "words replaced from a 500-word list" in capsys.readouterr().out
    report = json.loads((tmp_path / "gec" / "report.json").read_text(encoding="utf-8"))
    assert report["substituted"] > 0 and report["vocabulary"] == 500


def test_generate_truncates_over_long_lines_and_copes_with_unknown_characters(
    trained, tmp_path, capsys
):
    lines = ["ka " * 100, "漢字 ☃ ka lo", "lo mi"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert (
        main(
            [
                "generate",
                str(trained),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert "1 over-long line(s) truncated" in capsys.readouterr().err


def test_every_flag_of_every_command_has_help_and_odet_data_knows_every_dataset():
    import argparse

    from odet.cli import DATA_CHOICES, build_parser
    from odet.data import DATASETS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [
        f"{name} {action.dest}"
        for name, command in sub.choices.items()
        for action in command._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert not missing
    assert sorted(DATA_CHOICES) == sorted(["list", *DATASETS])
    assert "(default: 5)" in sub.choices["average"].format_help()
    # flags refused outside their mode default to None in the parser; --help still says the default
    helps = {name: " ".join(command.format_help().split()) for name, command in sub.choices.items()}
    for name, default in [
        ("generate", "run directory (default: best)"),
        ("sample", "run directory (default: last)"),
        ("data", "(default: data)"),
        ("prepare", "noise seed (default: 1)"),
        ("prepare", "words or turns (default: 23)"),
        ("prepare", "count words or turns (default: words)"),
        ("prepare", "draws from (default: 30000)"),
    ]:
        assert default in helps[name], (name, default)


def test_an_internal_error_keeps_its_traceback_and_says_it_is_a_bug(monkeypatch, capsys):
    from odet import cli

    def broken(args):
        raise RuntimeError("an invariant broke")

    monkeypatch.setitem(cli.COMMANDS, "config", broken)
    assert cli.main(["config", "show", "configs/multi30k/euler.yaml"]) == cli.EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: an invariant broke" in err
    assert err.strip().splitlines()[-1].startswith("odet: internal error (a bug in odet")


def test_a_failed_ode_solve_in_any_command_is_one_line_and_exit_1_not_a_bug(monkeypatch, capsys):
    """``generate``/``evaluate``/``analyze`` of an adaptive model whose solve fails were
    reported as an internal error with a torchode traceback."""
    import torch

    from odet import cli
    from odet.ode import odeint_adaptive

    def failing(args):
        return odeint_adaptive(lambda t, y: -50.0 * y, torch.ones(2, 1), max_steps=2)

    monkeypatch.setitem(cli.COMMANDS, "config", failing)
    assert cli.main(["config", "show", "configs/multi30k/euler.yaml"]) == cli.EXIT_TRAINING_FAILED
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("odet: error: adaptive solve (torchode, dopri5) failed (max_steps)")
