"""``torch.compile`` on a CPU without a working C++ compiler (inductor builds C++ there): every
command that compiles refuses before its work, in one ``odet: error:`` line naming the setting
and how to turn it off. Inductor reads a user's ``CXX`` into ``cpp.cxx`` when it is imported;
the fixture sets that value as ``CXX=no-such-cxx-compiler`` would."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import (
    assert_one_line_user_error,
    cli_config,
    lm_config,
    run_odet,
    write_yaml,
)


@pytest.fixture
def no_cpp_compiler() -> None:
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.cxx": (None, "no-such-cxx-compiler")}):
        yield


def test_train_with_compile_is_refused_before_any_work(
    cli_data: Path, tmp_path: Path, capsys, no_cpp_compiler
) -> None:
    out = tmp_path / "run"
    config = write_yaml(tmp_path / "c.yaml", cli_config(cli_data, out, train={"compile": True}))
    message = assert_one_line_user_error(
        run_odet(["train", str(config)], capsys), r"train\.compile needs a working C\+\+ compiler"
    )
    assert "no-such-cxx-compiler" in message and "set train.compile: false" in message
    assert not out.exists()


def test_an_lm_run_with_compile_is_refused_before_any_work(
    tmp_path: Path, capsys, no_cpp_compiler
) -> None:
    (tmp_path / "text.txt").write_text("to be or not to be.\n" * 30, encoding="utf-8")
    out = tmp_path / "lmout"
    config = write_yaml(tmp_path / "lm.yaml", lm_config(tmp_path, out, train={"compile": True}))
    assert_one_line_user_error(run_odet(["train", str(config)], capsys), r"C\+\+ compiler")
    assert not out.exists()


def test_generate_and_sample_with_compile_are_refused_in_one_line(
    cli_run: Path, lm_run: Path, tmp_path: Path, capsys, no_cpp_compiler
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("w1 x y\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    argv = ["generate", str(cli_run), "-i", str(source), "-o", str(out), "--compile"]
    message = assert_one_line_user_error(run_odet(argv, capsys), r"--compile needs")
    assert message.endswith("drop --compile") and not out.exists()
    argv = ["sample", str(lm_run), "--prompt", "to", "--max-new-tokens", "2", "--compile"]
    assert_one_line_user_error(run_odet(argv, capsys), r"--compile needs .*drop --compile")
