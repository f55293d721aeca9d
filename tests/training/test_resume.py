"""The resume rules on their own: when a budget is spent, when an epoch counts as finished."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from odet.data import TokenBudgetBatcher
from odet.nn.dropout import dropout
from odet.training.checkpoint import Checkpoint, TrainerState, restore_rng_states, rng_states
from odet.training.config import LoopConfig
from odet.training.lm_config import LMLoopConfig
from odet.training.resume import close_finished_epoch, spent_budget


@pytest.mark.parametrize(
    ("state", "loop", "reason"),
    [
        (TrainerState(step=10), LoopConfig(max_updates=10), "max_updates"),
        (TrainerState(step=9), LoopConfig(max_updates=10), ""),
        (TrainerState(elapsed_seconds=120.0), LoopConfig(max_minutes=2.0), "max_minutes"),
        (TrainerState(bad_epochs=3), LoopConfig(patience=3), "early_stopping"),
        (TrainerState(batcher={"epoch": 2, "position": 0}), LoopConfig(max_epochs=2), "max_epochs"),
        (TrainerState(batcher={"epoch": 1, "position": 5}), LoopConfig(max_epochs=2), ""),
        (TrainerState(step=20), LMLoopConfig(max_updates=20), "max_updates"),
        (TrainerState(step=19, bad_epochs=9), LMLoopConfig(max_updates=20), ""),
    ],
)
def test_spent_budget_names_what_is_used_up(state, loop, reason):
    assert spent_budget(state, loop) == reason


def test_close_finished_epoch_moves_only_a_batcher_past_its_last_batch():
    sizes = np.full(12, 4)
    batcher = TokenBudgetBatcher(sizes, sizes, max_tokens=16, seed=1)
    batches = iter(batcher)
    for _ in range(len(batcher) - 1):
        next(batches)
    close_finished_epoch(batcher)
    assert batcher.state_dict()["epoch"] == 0
    next(batches)  # the last batch: handed out, the epoch not yet advanced
    assert batcher.state_dict()["position"] == len(batcher)
    close_finished_epoch(batcher)
    assert (batcher.epoch, batcher.state_dict()["position"]) == (1, 0)
    close_finished_epoch(batcher)
    assert batcher.epoch == 1


def test_saved_rng_states_replay_the_dropout_masks_of_the_device(tmp_path: Path, device) -> None:
    """A GPU run draws its dropout masks from the CUDA generator: resuming must restore it."""
    torch.manual_seed(0)
    x = torch.ones(4096, device=device)
    dropout(x, 0.5)  # the generators have moved past their seeds
    save_file(rng_states(), str(tmp_path / "rng.safetensors"))
    expected = dropout(x, 0.5)
    dropout(x, 0.5)
    states = load_file(str(tmp_path / "rng.safetensors"))
    assert ("cuda" in states) == torch.cuda.is_initialized()
    restore_rng_states(
        Checkpoint(tmp_path, TrainerState(), {}, {}, states["torch"], states.get("cuda"))
    )
    assert torch.equal(dropout(x, 0.5), expected)
