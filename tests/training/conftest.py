"""Tiny synthetic data and configs for training tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from odet.data.synthetic import SyntheticTask


@pytest.fixture(scope="session")
def copy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("copy-data")
    SyntheticTask("copy", vocab_words=30, min_length=2, max_length=5, seed=0).write(
        directory, {"train": 3000, "valid": 100, "test": 200}
    )
    return directory


def tiny_config(data_dir: Path, output_dir: Path, **sections: Any) -> dict[str, Any]:
    """A config dict for a tiny model on the synthetic data (sections merged in)."""
    config: dict[str, Any] = {
        "output_dir": str(output_dir),
        "seed": 3,
        "data": {
            "data_dir": str(data_dir),
            "train": ["train.src", "train.tgt"],
            "valid": ["valid.src", "valid.tgt"],
            "vocab_size": 60,
        },
        "model": {
            "d_model": 32,
            "num_heads": 4,
            "ffn_dim": 64,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "dropout": 0.1,
            "max_positions": 32,
        },
        "optim": {"lr": 0.003, "warmup_updates": 30, "label_smoothing": 0.1, "clip_norm": 1.0},
        "train": {
            "max_tokens": 600,
            "max_epochs": 1,
            "log_every": 1,
            "threads": 1,
            "valid_metric": "none",
            "best_metric": "loss",
            "progress": False,
        },
        "generation": {"beam_size": 1},
    }
    for name, values in sections.items():
        if isinstance(values, dict):
            config.setdefault(name, {}).update(values)
        else:
            config[name] = values
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
