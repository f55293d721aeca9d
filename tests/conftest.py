"""Shared test fixtures: the shared data directory, thread limits, and the ``slow`` marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    # One intra-op thread per test process: two xdist workers share two cores, and tiny test
    # models run faster (and reproducibly) on one thread than on contended ones.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared datasets (``../shared/data``, or ``$ODET_DATA_DIR``)."""
    path = Path(os.environ.get("ODET_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"shared data directory not found: {path}")
    return path
