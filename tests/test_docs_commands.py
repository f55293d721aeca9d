"""The ``odet`` commands that the repository's Markdown files show (README, results, benchmarks)
still parse, and the configs they train or run still load with their ``--set`` overrides: a
renamed flag or key would otherwise leave the docs wrong without a failing test."""

from __future__ import annotations

import ast
import importlib
import re
import shlex
import subprocess

import pytest

from odet.cli import build_parser
from odet.experiments.config import load_experiment
from odet.training.lm_config import load_any_config
from tests.conftest import REPO_ROOT


def _documented_commands(program: str = "odet ") -> list[tuple[str, str]]:
    """``(file, command line)`` for each line of a fenced block in a tracked Markdown file that
    starts with ``program`` (after any ``VAR=value`` prefixes), continuation lines joined; lines
    with shell substitutions (``$``) or elided arguments (``...``) left out."""
    git = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO_ROOT, capture_output=True, text=True)
    listed = git.stdout.split() if git.returncode == 0 else [  # not a git checkout
        str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.rglob("*.md")
        if not {".venv", "runs", "data", "node_modules"} & set(p.relative_to(REPO_ROOT).parts)
    ]  # fmt: skip
    commands = []
    for name in listed:
        text = (REPO_ROOT / name).read_text(encoding="utf-8")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^(\S+=\S+\s+)*", "", line.strip())
                if line.startswith(program) and "$" not in line and "..." not in line:
                    commands.append((name, line))
    return commands


COMMANDS = _documented_commands()
BENCHMARK_COMMANDS = _documented_commands("python -m benchmarks ")


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 50
    assert {line.split()[1] for _, line in COMMANDS} >= {"train", "generate", "experiment"}


@pytest.mark.parametrize(("where", "line"), COMMANDS, ids=[f"{w}:{i}" for i, (w, _) in
                                                           enumerate(COMMANDS)])  # fmt: skip
def test_a_documented_command_parses_and_its_config_loads(where, line, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    try:
        args = build_parser().parse_args(shlex.split(line, comments=True)[1:])
    except SystemExit:
        pytest.fail(f"{where}: `{line}` no longer parses: {capsys.readouterr().err.strip()}")
    overrides = list(getattr(args, "set", None) or [])
    if args.command == "train" or (args.command == "config" and args.action == "show"):
        load_any_config(args.config, overrides)
    elif args.command == "experiment":
        experiment = load_experiment(args.config, overrides)
        for variant in args.variants or experiment.variants:
            load_any_config(experiment.base, experiment.run_overrides(variant, experiment.seeds[0]))


def _committed_scripts() -> list[str]:
    git = subprocess.run(
        ["git", "ls-files", "results/*.py", "*/results/*.py"],
        cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if git.returncode == 0:
        return sorted(git.stdout.split())
    return sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "results").rglob("*.py"))


SCRIPTS = _committed_scripts()


def test_the_results_hold_scripts():
    assert len(SCRIPTS) >= 3


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_results_script_imports_names_that_odet_still_has(script):
    """The scripts that reproduce a committed result need data or a trained model, so they do
    not run here; what an API change breaks first is their imports, checked without running
    them."""
    tree = ast.parse((REPO_ROOT / script).read_text(encoding="utf-8"), script)
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in targets:
            if module.split(".")[0] != "odet":
                continue
            try:
                imported = importlib.import_module(module)
            except ImportError:
                missing.append(module)
                continue
            if name is not None and not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{module}.{name}")
    assert not missing, f"{script} imports what odet no longer has: {sorted(set(missing))}"


def test_the_docs_show_benchmark_commands():
    assert len(BENCHMARK_COMMANDS) >= 20


@pytest.mark.parametrize(("where", "line"), BENCHMARK_COMMANDS, ids=[
    f"{w}:{i}" for i, (w, _) in enumerate(BENCHMARK_COMMANDS)])  # fmt: skip
def test_a_documented_benchmark_command_parses(where, line, monkeypatch, capsys):
    """Its flags and system names still exist (``benchmarks.runner.parse_args`` checks both)."""
    from benchmarks import runner

    monkeypatch.chdir(REPO_ROOT)
    try:
        runner.parse_args(shlex.split(line, comments=True)[3:])
    except SystemExit:
        pytest.fail(f"{where}: `{line}` no longer parses: {capsys.readouterr().err.strip()}")
