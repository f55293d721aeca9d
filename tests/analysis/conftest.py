"""Tiny runs for the depth analysis on one synthetic copy task with a test split (3 updates
each): a continuous-encoder run whose NFE varies per sentence, its Euler twin, and the runs
``depth_vs_difficulty`` refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odet.data.synthetic import SyntheticTask
from tests.training.conftest import tiny_config

TINY_MODEL = {"d_model": 16, "num_heads": 2, "ffn_dim": 32, "dropout": 0.0}
NODE = {"encoder_method": "continuous", "continuous": {"rtol": 1e-5, "atol": 1e-5}}
"""A tolerance at which the 3-update field already takes 68–98 evaluations, varying per
sentence (at the default 1e-3 every sentence takes the same)."""


@pytest.fixture(scope="session")
def depth_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("depth-data")
    SyntheticTask("copy", vocab_words=30, min_length=2, max_length=7, seed=0).write(
        directory, {"train": 200, "valid": 12, "test": 24}
    )
    return directory


def depth_config(
    data_dir: Path, out: Path, *, test: list[str] | None = None, **model: Any
) -> dict[str, Any]:
    """A tiny 3-update run over ``data_dir`` whose test split is ``test`` (default
    ``test.src``/``test.tgt``; ``[]``: none)."""
    config = tiny_config(data_dir, out, model={**TINY_MODEL, **model})
    config["data"]["test"] = ["test.src", "test.tgt"] if test is None else test
    config["train"]["max_updates"] = 3
    return config


@pytest.fixture(scope="session")
def depth_runs(depth_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Trained runs by name: ``node`` (continuous), ``euler`` (its twin), ``fixed`` (a
    continuous encoder of fixed steps), ``other-test`` (an Euler run whose test split is the
    valid files) and ``no-test`` (an Euler run without a test split)."""
    from odet.training import TrainConfig, train

    root = tmp_path_factory.mktemp("depth-runs")
    settings: dict[str, dict[str, Any]] = {
        "node": NODE,
        "euler": {},
        "fixed": {
            "encoder_method": "continuous",
            "continuous": {"fixed_steps": 2, "solver": "rk4"},
        },
        "other-test": {"test": ["valid.src", "valid.tgt"]},
        "no-test": {"test": []},
    }
    for name, model in settings.items():
        train(TrainConfig.from_dict(depth_config(depth_data, root / name, **model)))
    return {name: root / name for name in settings}
