"""Docstrings of generation and inference cite only files of this repository and carry no
benchmark figures (those live in benchmarks/RESULTS.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
FILES = sorted(
    p
    for package in ("generation", "inference")
    for p in (ROOT / "src" / "odet" / package).glob("*.py")
)
FILE_MENTION = re.compile(r"(?<![\w<>./-])(?:\.\./|/)?[\w.-]+(?:/[\w.-]+)+\.(?:md|py|json|yaml)\b")
TOP_LEVEL = {p.name for p in ROOT.iterdir()}
FIGURE = re.compile(r"\d(?:\.\d+)?\s?×|\bAVX|\bCPU\b")


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    docs = [ast.get_docstring(n) for n in nodes]
    return [d for d in docs if d]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_docstrings_cite_repository_files_only_and_no_benchmark_figures(path: Path):
    for doc in _docstrings(path):
        for mention in FILE_MENTION.findall(doc):
            outside = mention.startswith(("/", "../"))
            missing = mention.split("/")[0] in TOP_LEVEL and not (ROOT / mention).is_file()
            assert not (outside or missing), f"{path.name} cites {mention}, not in the repository"
        assert not FIGURE.search(doc), f"{path.name}: benchmark figure in a docstring: {doc!r}"
