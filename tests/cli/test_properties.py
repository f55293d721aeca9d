"""Random files and random config values into the commands: every outcome is a success or one
``odet: error:`` line with exit status 2, never a traceback, and inputs are never changed."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.conftest import (
    Outcome,
    TreeSnapshot,
    assert_one_line_user_error,
    cli_config,
    run_odet,
    write_yaml,
)

PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LINES = st.lists(
    st.one_of(
        st.text(alphabet="ab cdé\t漢", max_size=12),
        st.sampled_from(["", " ", "\ufeff", "\x00", "a\rb"]),
    ),
    max_size=6,
).map(lambda lines: "\n".join(lines).encode("utf-8"))
FILES = st.one_of(st.binary(max_size=120), LINES, st.just(b"\x1f\x8b\x08\x00broken gzip"))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["[1, 2]", "{a: 1}", "'", "[", "~", "0x10", "1e400", "-.inf", ".nan"]),
)
KEYS = [
    "seed",
    "data.vocab_size",
    "data.max_source_tokens",
    "data.max_ratio",
    "data.format",
    "data.train",
    "data.valid_limit",
    "model.d_model",
    "model.num_heads",
    "model.encoder_method",
    "model.coefficients",
    "model.dropout",
    "model.max_positions",
    "optim.lr",
    "optim.warmup_updates",
    "optim.label_smoothing",
    "train.max_tokens",
    "train.max_updates",
    "train.update_freq",
    "train.keep_last",
    "generation.beam_size",
    "generation.top_p",
    "generation.max_len_a",
]


def _check(outcome: Outcome) -> None:
    """A success, or a one-line user error."""
    assert "Traceback" not in outcome.err, outcome.err
    if outcome.code != 0:
        assert_one_line_user_error(outcome)


def _files(root: Path, contents: dict[str, bytes]) -> dict[str, str]:
    paths = {}
    for name, data in contents.items():
        (root / name).write_bytes(data)
        paths[name] = str(root / name)
    return paths


@PROPERTY
@given(hyp=FILES, ref=FILES, metric=st.sampled_from(["bleu", "chrf", "rouge", "gleu", "m2"]))
def test_evaluate_scores_or_refuses_random_files(hyp, ref, metric, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        f = _files(Path(tmp), {"hyp": hyp, "ref": ref})
        before = TreeSnapshot.take([Path(tmp)])
        argv = ["evaluate", "--metric", metric, "--hyp", f["hyp"], "--ref", f["ref"]]
        _check(run_odet([*argv, "--src", f["ref"]] if metric == "gleu" else argv, capsys))
        before.assert_only()


@PROPERTY
@given(source=FILES)
def test_generate_translates_or_refuses_a_random_input(source, cli_run, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        f = _files(Path(tmp), {"in": source})
        before = TreeSnapshot.take([Path(tmp), cli_run])
        out = Path(tmp) / "out.txt"
        outcome = run_odet(
            ["generate", str(cli_run), "-i", f["in"], "-o", str(out), "--max-len-b", "3"], capsys
        )
        _check(outcome)
        before.assert_only([out] if outcome.code == 0 else [])


@PROPERTY
@given(data=FILES, task=st.sampled_from(["lead", "dialogsum", "m2", "gec"]))
def test_prepare_writes_or_refuses_a_random_input(data, task, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        f = _files(Path(tmp), {"in.jsonl" if task != "m2" else "in.m2": data})
        before = TreeSnapshot.take([Path(tmp)])
        out = Path(tmp) / "out"
        outcome = run_odet(["prepare", task, next(iter(f.values())), "--out", str(out)], capsys)
        _check(outcome)
        if outcome.code != 0:
            before.assert_only()


@settings(PROPERTY, max_examples=100)
@given(key=st.sampled_from(KEYS), value=SCALARS)
def test_config_show_resolves_or_refuses_any_yaml_scalar(key, value, cli_data, capsys):
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        config = write_yaml(Path(tmp) / "c.yaml", cli_config(cli_data, Path(tmp) / "run"))
        text = value if isinstance(value, str) else yaml.safe_dump(value).strip()
        text = text.removesuffix("\n...").strip() if isinstance(text, str) else text
        before = TreeSnapshot.take([Path(tmp)])
        _check(run_odet(["config", "show", str(config), "--set", f"{key}={text}"], capsys))
        before.assert_only()


@settings(PROPERTY, max_examples=6)
@given(source=FILES, target=FILES)
def test_train_trains_or_refuses_random_training_files(source, target, cli_data, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        f = _files(Path(tmp), {"train.src": source, "train.tgt": target})
        sections = {
            "data": {"train": [f["train.src"], f["train.tgt"]], "vocab_size": 40},
            "train": {"max_updates": 1, "max_epochs": 1},
        }
        config = write_yaml(
            Path(tmp) / "c.yaml", cli_config(cli_data, Path(tmp) / "run", **sections)
        )
        before = TreeSnapshot.take([Path(tmp), cli_data])
        outcome = run_odet(["train", str(config), "--no-progress"], capsys)
        _check(outcome)
        before.assert_only([Path(tmp) / "run"])
        if outcome.code != 0:
            assert not (Path(tmp) / "run" / "checkpoints").exists()


def test_odet_in_a_subprocess_prints_one_line_and_exits_2():
    """End to end, as a user runs it: the process's whole stderr is the one error line."""
    import subprocess
    import sys

    argv = ["evaluate", "--hyp", "/nonexistent/h", "--ref", "/nonexistent/r"]
    done = subprocess.run(
        [sys.executable, "-m", "odet.cli", *argv], capture_output=True, text=True, timeout=120
    )
    outcome = Outcome(done.returncode, done.stdout, done.stderr)
    assert_one_line_user_error(outcome, r"--hyp not found: /nonexistent/h")
    assert done.stderr.count("\n") == 1
