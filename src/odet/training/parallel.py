"""A model under data parallelism: DDP or FSDP wrapping, gradient-sync control, a full model for
evaluation, full optimizer state for checkpoints, and parameter digests to compare ranks.

With one process every method is the identity: ``module`` is the model itself.
"""

from __future__ import annotations

import gc
import hashlib
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from odet.models import Seq2Seq
from odet.training.distributed import DistributedContext

FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Gather sharded (FSDP) weights/optimizer state into ordinary full tensors on the CPU."""


@dataclass
class ParallelModel:
    """The model being trained and the module that runs its forward pass on this rank."""

    model: Seq2Seq
    """The model itself; under FSDP its parameters are this rank's shards."""
    module: nn.Module
    """What training calls: ``model``, or its DDP wrapper."""
    dist: DistributedContext
    sharded: bool
    """FSDP (parameters, gradients and optimizer state sharded across ranks)."""

    def gradient_sync(self, enabled: bool) -> AbstractContextManager[Any]:
        """The context for a backward pass: without sync on accumulation steps (``enabled``
        false), so gradients are reduced across ranks once per update."""
        if self.sharded:
            assert isinstance(self.model, FSDPModule)
            self.model.set_requires_gradient_sync(enabled)
        elif self.dist.enabled and not enabled:
            assert isinstance(self.module, DistributedDataParallel)
            return self.module.no_sync()
        return nullcontext()

    def replica_digests(self) -> list[str]:
        """The parameter digest of every rank (a collective), checked equal: replicated (DDP)
        ranks must hold identical weights (``RuntimeError``); sharded (FSDP) ones hold
        shards: ``[]``."""
        if self.sharded:
            return []
        digests = [str(d) for d in self.dist.all_gather_object(parameter_digest(self.model))]
        if len(set(digests)) > 1:
            raise RuntimeError(f"ranks ended with different parameters: {digests}")
        return digests

    def evaluation_model(self, device: torch.device) -> Seq2Seq:
        """A model rank 0 can run on its own: the training model, or for FSDP a full copy of the
        sharded weights (a collective: every rank must call it)."""
        if not self.sharded:
            return self.model
        weights = get_model_state_dict(self.model, options=FULL_STATE)
        copy = Seq2Seq(self.model.config)
        if self.dist.is_main:
            copy.load_state_dict(weights)
        return copy.to(device)

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The optimizer's full state (gathered from every rank under FSDP: a collective)."""
        if self.sharded:
            return get_optimizer_state_dict(self.model, optimizer, options=FULL_STATE)
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load a full optimizer state (each rank takes its shard under FSDP)."""
        if self.sharded:
            set_optimizer_state_dict(self.model, optimizer, state, options=FULL_STATE)
        else:
            optimizer.load_state_dict(state)

    def release(self) -> None:
        """Free the DDP wrapper while the process group is still registered.

        DDP's C++ reducer holds the group and is freed with the GIL held. Were it the group's last
        holder, the gloo destructor would join a worker thread that may be waiting for the GIL to
        free a finished collective's tensors: a deadlock at exit. Freed first, the group's last
        reference goes with ``destroy_process_group``, whose binding releases the GIL.
        """
        if isinstance(self.module, DistributedDataParallel):
            self.module = self.model
            gc.collect()


def pick_device(choice: Literal["auto", "cpu", "cuda"], dist: DistributedContext) -> torch.device:
    """``train.device`` resolved: a data-parallel rank always uses the device it was given."""
    if dist.enabled:
        return dist.device
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device is 'cuda' but no CUDA device is available")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def parallelize(
    model: Seq2Seq, dist: DistributedContext, parallel: Literal["ddp", "fsdp"]
) -> ParallelModel:
    """Wrap ``model`` (already on its device, with its initial weights) for ``dist``: DDP, or
    FSDP sharding in place; unchanged for a single process."""
    sharded = dist.enabled and parallel == "fsdp"
    module: nn.Module = model
    if sharded:
        fully_shard(model)
    elif dist.enabled:
        device = dist.device
        module = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return ParallelModel(model=model, module=module, dist=dist, sharded=sharded)


def parameter_digest(model: nn.Module) -> str:
    """SHA-256 of the state dict's bytes, to check that data-parallel ranks agree."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(
            tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()
