"""Shared test fixtures: the shared data directory, thread limits, the ``slow`` marker, and the
``device`` fixture of the device-parametrised subset.

``--device cuda`` (or ``ODET_TEST_DEVICE=cuda``; default ``cpu``) runs the tests that take the
``device`` fixture on that device; every such test is marked ``device``, so ``-m device`` selects
the subset (``make gpu-check`` runs it on CUDA). On CPU they run exactly as the rest of the suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")
    parser.addoption(
        "--device",
        default=os.environ.get("ODET_TEST_DEVICE", "cpu"),
        help="device of the tests marked 'device' (cpu, cuda, cuda:1; env ODET_TEST_DEVICE)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)
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
    name = config.getoption("--device")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise pytest.UsageError(f"--device {name!r}: {err}") from None
    if device.type not in ("cpu", "cuda"):
        raise pytest.UsageError(f"--device {name!r}: the device tests run on cpu or cuda")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise pytest.UsageError(f"--device {name!r} but torch sees no CUDA device")
        # fp32 means fp32 in the tolerance tests: no TF32 tensor-core matmuls or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    """The device of the device-parametrised tests (``--device``; cpu by default). Models and
    inputs are built on the CPU with the usual seeds and moved there, so on CPU every such test
    is the test it always was."""
    return torch.device(pytestconfig.getoption("--device"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's shared datasets (``../shared/data``, or ``$ODET_DATA_DIR``)."""
    path = Path(os.environ.get("ODET_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"shared data directory not found: {path}")
    return path
