"""Packages import in one direction only: a lower layer never imports a higher one.

Every ``import`` and ``from … import`` in ``src/odet`` counts, function-level ones included.
A module may import its own package and any package of a lower rank; two packages of the same
rank are independent of each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "odet"

RANKS: dict[str, int] = {
    "_version": 0,
    "config": 0,
    "io": 0,
    "runtime": 0,
    "ode": 1,
    "data": 1,
    "nn": 2,
    "evaluation": 2,
    "blocks": 3,
    "generation": 3,
    "models": 4,
    "inference": 5,
    "training": 6,
    "analysis": 7,
    "experiments": 7,
    "tasks": 7,
    "demo": 8,
    "reference": 8,
    "cli": 9,
    "__init__": 10,
    "__main__": 10,
}
"""``config`` holds the validation helpers every layer uses, ``io`` the durable atomic write;
``generation`` is model-agnostic
(the decoding loop, search strategies, the decoder protocol), so models build on it; the
text-in/text-out translator and checkpoint loading are ``inference``."""


def _package(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, package)`` of every odet import; ``from odet import x`` imports the package
    ``x`` when there is one, else the top-level ``__init__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "odet":
            found += [
                (node.lineno, alias.name if alias.name in RANKS else "__init__")
                for alias in node.names
            ]
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("odet.")]
    return found


FILES = sorted(SRC.rglob("*.py"))


def test_every_package_has_a_rank():
    assert {_package(f) for f in FILES} <= set(RANKS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_a_module_imports_only_lower_layers(path):
    own = _package(path)
    upward = [
        f"{path.relative_to(SRC)}:{line} imports odet.{target} (rank {RANKS[target]} >= "
        f"{RANKS[own]} of odet.{own})"
        for line, target in _imports(path)
        if target != own and RANKS.get(target, 99) >= RANKS[own]
    ]
    assert not upward, "\n".join(upward)


def test_the_trainer_is_made_of_small_pieces():
    """``training/`` stays a set of testable steps: no function over 60 lines, and the trainer
    module itself at most 400."""
    long = []
    for path in sorted((SRC / "training").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert not long, long
    assert len((SRC / "training" / "trainer.py").read_text().splitlines()) <= 400


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the odet modules it imports (``from odet.a import b`` counts ``odet.a.b``
    when that is a module, else ``odet.a``)."""
    modules = {_module(f): f for f in FILES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path that ends where it starts, or ``[]``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_two_modules_import_each_other_even_inside_one_package():
    assert not (cycle := _cycle(_module_graph())), " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
