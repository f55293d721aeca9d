"""Data-parallel training through PyTorch's own stack: ``torchrun`` + DDP (gloo on CPU, NCCL
on GPU). Single-process runs use the same code with a world of one.

Launch: ``torchrun --nproc_per_node=N -m odet.cli train CONFIG`` (one machine) or, across
machines, ``torchrun --nnodes=M --nproc_per_node=N --rdzv_backend=c10d
--rdzv_endpoint=HOST:PORT --rdzv_id=JOB -m odet.cli train CONFIG`` on each of them.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Element-wise sums over all ranks (identity for a single process)."""
        if not self.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def all_gather_object(self, value: object) -> list[object]:
        if not self.enabled:
            return [value]
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def broadcast_object(self, value: object) -> object:
        if not self.enabled:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def rank_device(
    choice: Literal["auto", "cpu", "cuda"], local_rank: int, ranks_per_node: int, gpus: int
) -> torch.device:
    """The device of local rank ``local_rank`` for ``train.device``: its own GPU for ``"cuda"``,
    and for ``"auto"`` when the node has a GPU for each of its ``ranks_per_node`` ranks (every
    rank decides alike); else the CPU. Raises ``ValueError`` for ``"cuda"`` without a GPU for
    this rank."""
    if choice == "cuda" or (choice == "auto" and gpus >= ranks_per_node):
        if local_rank >= gpus:
            raise ValueError(
                f"train.device is 'cuda' but local rank {local_rank} has no GPU of its own "
                f"({gpus} visible for {ranks_per_node} ranks per node)"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(
    device: Literal["auto", "cpu", "cuda"] = "auto", timeout_minutes: float = 30.0
) -> DistributedContext:
    """Join the process group that ``torchrun`` describes in the environment, if any: NCCL
    between GPUs, gloo between CPU processes (``rank_device`` picks from ``device``)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    where = rank_device(device, local_rank, per_node, gpus)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    if not dist.is_initialized():
        backend = "nccl" if where.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return DistributedContext(rank, world_size, local_rank, where)


def shutdown_distributed(context: DistributedContext) -> None:
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()
