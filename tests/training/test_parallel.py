"""Data-parallel pieces on a single process (the two-rank runs are in test_distributed.py)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from odet.models import Seq2Seq, Seq2SeqConfig
from odet.training.distributed import DistributedContext, rank_device
from odet.training.parallel import parallelize, parameter_digest, pick_device


def _model() -> Seq2Seq:
    config = Seq2SeqConfig(
        vocab_size=20, d_model=8, num_heads=2, ffn_dim=16, encoder_layers=1, decoder_layers=1
    )
    return Seq2Seq(config)


def test_parameter_digest_covers_scalar_parameters():
    model = torch.nn.Module()
    model.alpha = torch.nn.Parameter(torch.tensor(0.5))
    before = parameter_digest(model)
    with torch.no_grad():
        model.alpha.fill_(0.25)
    assert parameter_digest(model) != before


def test_parameter_digest_is_equal_for_equal_weights_and_names():
    torch.manual_seed(0)
    first = _model()
    second = _model()
    assert parameter_digest(first) != parameter_digest(second)
    second.load_state_dict(first.state_dict())
    assert parameter_digest(first) == parameter_digest(second)


def test_a_single_process_trains_the_model_itself():
    model = _model()
    parallel = parallelize(model, DistributedContext(), "fsdp")
    assert parallel.module is model and not parallel.sharded
    assert isinstance(parallel.gradient_sync(False), nullcontext)
    assert parallel.evaluation_model(torch.device("cpu")) is model
    parallel.release()
    assert parallel.module is model


def test_optimizer_state_round_trips_on_a_single_process():
    model = _model()
    parallel = parallelize(model, DistributedContext(), "ddp")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]])).sum().backward()
    optimizer.step()
    state = parallel.optimizer_state(optimizer)
    fresh = torch.optim.Adam(model.parameters(), lr=0.5)
    parallel.load_optimizer_state(fresh, state)
    assert fresh.param_groups[0]["lr"] == 0.1
    for key, value in optimizer.state_dict()["state"].items():
        torch.testing.assert_close(fresh.state_dict()["state"][key]["exp_avg"], value["exp_avg"])


def test_pick_device_resolves_train_device():
    assert pick_device("cpu", DistributedContext()) == torch.device("cpu")
    rank = DistributedContext(rank=1, world_size=2, device=torch.device("cpu"))
    assert pick_device("cuda", rank) == torch.device("cpu")  # a rank keeps the device it got
    if not torch.cuda.is_available():
        assert pick_device("auto", DistributedContext()) == torch.device("cpu")
        with pytest.raises(ValueError, match="no CUDA device"):
            pick_device("cuda", DistributedContext())


@pytest.mark.parametrize(
    ("choice", "gpus", "expected"),
    [("auto", 0, "cpu"), ("auto", 1, "cpu"), ("auto", 2, "cuda:1"), ("auto", 8, "cuda:1"),
     ("cpu", 8, "cpu"), ("cuda", 2, "cuda:1")],
)  # fmt: skip
def test_rank_device_gives_each_rank_its_own_gpu_only_when_every_rank_has_one(
    choice, gpus, expected
):
    assert rank_device(choice, local_rank=1, ranks_per_node=2, gpus=gpus) == torch.device(expected)


def test_rank_device_cuda_without_a_gpu_for_the_rank_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"local rank 1 has no GPU of its own \(1 visible for 2"):
        rank_device("cuda", local_rank=1, ranks_per_node=2, gpus=1)
