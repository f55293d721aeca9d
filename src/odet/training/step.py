"""One training step and one optimizer update, as functions with typed results.

``train_step`` is the forward pass, the loss (label smoothing plus regularisers such as the
arclength of a continuous encoder), the backward pass and the step's statistics (NFE);
``apply_update`` turns the accumulated gradients of one or more steps into an update: rescale,
clip, skip when non-finite, optimizer and schedule step. The trainer only orders them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from odet.data import Batch
from odet.generation import DecodePrecision
from odet.nn.precision import Precision, autocast_bf16, precision_context, resolve_precision
from odet.ode import SolverError, SolveStats
from odet.training.checkpoint import TrainerState
from odet.training.compile import compile_step
from odet.training.config import LoopConfig, OptimConfig
from odet.training.loss import loss_sums
from odet.training.schedule import make_schedule

logger = logging.getLogger("odet.train")


@dataclass(frozen=True)
class ForwardPrecision:
    """The precision of forward passes (training and validation) on one kind of device."""

    precision: Precision
    device_type: str
    math_sdpa: bool = True
    """bf16 on CPU: restrict SDPA to its math backend (``train.bf16_sdpa: math``)."""

    @classmethod
    def from_config(cls, train: LoopConfig, device: torch.device) -> ForwardPrecision:
        """``train.precision`` on ``device`` (``auto`` decided here)."""
        precision = resolve_precision(train.precision, device)
        return cls(precision, device.type, math_sdpa=train.bf16_sdpa == "math")

    @classmethod
    def for_evaluation(cls, precision: DecodePrecision, device: torch.device) -> ForwardPrecision:
        """Validation and test passes run at ``generation.precision`` (fp32 by default;
        ``auto`` decided for ``device``), whatever the training precision, so that runs trained
        in fp32 and bf16 are evaluated alike; ``"int8"`` is for decoding only (``TrainConfig``
        rejects it)."""
        if precision == "int8":
            raise ValueError("generation.precision int8 is for decoding only, not for training")
        return cls(resolve_precision(precision, device), device.type)

    def context(self) -> AbstractContextManager[None]:
        """A fresh context for one forward pass (see :mod:`odet.nn.precision`)."""
        if self.precision == "bf16" and not self.math_sdpa:
            return autocast_bf16(self.device_type, math_sdpa=False)
        return precision_context(self.precision, self.device_type)


SOLVE_FAILURE_REMEDY = (
    "raise model.continuous.max_steps, loosen its rtol/atol, lower optim.lr or set "
    "model.continuous.spectral_norm"
)
"""What to change when a continuous encoder's solve keeps failing in training."""


def solve_failure(err: SolverError, update: int) -> FloatingPointError:
    """The training error for an encoder solve that raised (``on_failure: raise``) at
    ``update``: what failed, for how many sentences, and what to change."""
    stats = err.result.stats
    reasons = ", ".join(sorted({stats.status[i].value for i in stats.failed}))
    return FloatingPointError(
        f"the encoder's solve failed ({reasons}) for {len(stats.failed)} of "
        f"{len(stats.status)} sentences at update {update}; {SOLVE_FAILURE_REMEDY}, or set "
        "model.continuous.on_failure: flag to skip the updates whose solve fails (both may "
        "change when the run resumes from its last checkpoint)"
    )


ForwardLoss = Callable[
    [nn.Module, Tensor, Tensor, Tensor, float, int], tuple[Tensor, Tensor, SolveStats | None]
]
"""``(module, src, tgt_in, tgt_out, smoothing, pad_id) -> (loss_sum, nll_sum, stats)``:
:func:`forward_loss`, or it compiled (``train.compile``)."""


def forward_loss(
    module: nn.Module, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, smoothing: float, pad_id: int
) -> tuple[Tensor, Tensor, SolveStats | None]:
    """The teacher-forced forward pass and the summed label-smoothed loss and NLL: the part of
    a training step that ``train.compile`` compiles."""
    logits, stats = module(src, tgt_in, with_stats=True)
    loss, nll = loss_sums(logits, tgt_out, smoothing=smoothing, pad_id=pad_id)
    return loss, nll, stats


@dataclass(frozen=True)
class Objective:
    """What a training step minimises."""

    pad_id: int
    label_smoothing: float
    arclength_weight: float = 0.0
    """λ of the arclength regulariser ``λ · mean arclength`` per target token (0: off)."""
    forward: ForwardLoss = forward_loss
    """What computes the loss: ``forward_loss``, or it compiled (``train.compile``)."""

    @classmethod
    def from_config(cls, optim: OptimConfig, pad_id: int, compiled: bool = False) -> Objective:
        """``compiled``: the forward and loss compiled with symbolic sizes, since translation
        batches vary in shape (:mod:`odet.training.compile`)."""
        forward = compile_step(forward_loss, dynamic=True) if compiled else forward_loss
        return cls(pad_id, optim.label_smoothing, optim.arclength_weight, forward)


@dataclass(frozen=True)
class StepResult:
    """The sums one batch adds to an update (normalised per token only at the update)."""

    loss: float
    """Training loss summed over target tokens: label-smoothed NLL plus regularisers."""
    nll: float
    """NLL summed over target tokens, without smoothing or regularisers."""
    tokens: int
    """Target tokens (non-padding) of the batch."""
    nfe: float | None
    """Mean encoder function evaluations per sentence; ``None`` for a discrete encoder."""
    failed_solves: int = 0
    """Sentences whose encoder solve failed (``on_failure: flag``); their step's ``loss`` is
    NaN, so that the update skips on every rank."""


def train_step(
    model: nn.Module, batch: Batch, objective: Objective, precision: ForwardPrecision
) -> StepResult:
    """Forward, loss and backward for one batch; gradients accumulate in ``model``.

    ``model`` is the module training calls (the model or its data-parallel wrapper) and must
    return ``(logits, stats)`` for ``with_stats=True``; ``stats`` is ``None`` unless the encoder
    is continuous. ``objective.forward`` computes the loss (``forward_loss`` or it compiled).
    A solve that failed for some sentences (flagged, not raised) still backpropagates, so that
    data-parallel ranks stay in step, but reports a NaN loss: the update is skipped, not
    trained on states that never reached ``t1``.
    """
    ntok = int(batch.tgt_out.ne(objective.pad_id).sum())
    with precision.context():
        loss, nll, stats = objective.forward(
            model,
            batch.src,
            batch.tgt_in,
            batch.tgt_out,
            objective.label_smoothing,
            objective.pad_id,
        )
        nfe = None if stats is None else float(stats.nfe.float().mean())
        if objective.arclength_weight and stats is not None:
            # λ · mean arclength per update, after normalising by its tokens
            loss = loss + objective.arclength_weight * stats.arclength.mean() * ntok
    loss.backward()
    failed = 0 if stats is None else len(stats.failed)
    return StepResult(
        loss=math.nan if failed else loss.item(),
        nll=nll.item(),
        tokens=ntok,
        nfe=nfe,
        failed_solves=failed,
    )


@dataclass
class Accumulation:
    """The sums of the steps accumulated into the coming update (on this rank)."""

    batches: int = 0
    tokens: int = 0
    loss: float = 0.0
    nll: float = 0.0
    failed_solves: int = 0

    def add(self, step: StepResult) -> None:
        self.batches += 1
        self.tokens += step.tokens
        self.loss += step.loss
        self.nll += step.nll
        self.failed_solves += step.failed_solves


@dataclass(frozen=True)
class UpdateResult:
    """What ``apply_update`` did."""

    applied: bool
    """False: the update was skipped (non-finite loss or gradients) and gradients cleared."""
    loss_finite: bool
    grad_norm: float
    """Total gradient norm after rescaling, before clipping."""


_FUSED_ADAM_DEVICES = ("cpu", "cuda")


def fused_adam_supported(params: Iterable[Tensor]) -> bool:
    """Whether torch's fused Adam/AdamW kernel (one pass over each parameter per update, what
    HF's Trainer uses by default) can update ``params``: floating-point tensors on CPU or CUDA,
    FSDP's sharded ``DTensor`` parameters included, so that one process and its sharded twin
    run the same kernel."""
    params = list(params)
    return bool(params) and all(
        p.is_floating_point() and p.device.type in _FUSED_ADAM_DEVICES for p in params
    )


def build_optimizer(
    params: Iterable[nn.Parameter], optim: OptimConfig, max_updates: int
) -> tuple[Optimizer, LRScheduler]:
    """Adam and its learning-rate schedule (``max_updates``: the length decaying schedules
    need)."""
    params = list(params)
    optimizer = torch.optim.Adam(
        params,
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        fused=fused_adam_supported(params),
    )
    scheduler = make_schedule(
        optimizer,
        optim.schedule,
        warmup=optim.warmup_updates,
        warmup_init_lr=optim.warmup_init_lr,
        total=max_updates,
        min_ratio=optim.min_lr_ratio,
    )
    return optimizer, scheduler


def apply_update(
    params: Iterable[nn.Parameter],
    optimizer: Optimizer,
    scheduler: LRScheduler,
    *,
    loss: float,
    tokens: float,
    world_size: int,
    clip_norm: float,
) -> UpdateResult:
    """Rescale, clip and apply the accumulated gradients of summed losses as one update.

    ``loss`` and ``tokens`` are the update's sums over all ranks. Gradients are divided by the
    update's target tokens, times ``world_size`` because DDP averages gradients over ranks.
    ``clip_norm`` 0 disables clipping. A non-finite loss or gradient norm skips the update.
    """
    params = list(params)
    scale = world_size / max(tokens, 1.0)
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, scale)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_norm or float("inf"))
    if isinstance(grad_norm, DTensor):
        grad_norm = grad_norm.full_tensor()
    loss_finite = math.isfinite(loss)
    if not (loss_finite and torch.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return UpdateResult(applied=False, loss_finite=loss_finite, grad_norm=float(grad_norm))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return UpdateResult(applied=True, loss_finite=True, grad_norm=float(grad_norm))


def record_skipped_update(
    state: TrainerState,
    result: UpdateResult,
    *,
    max_in_a_row: int,
    failed_solves: int = 0,
    before_stop: Callable[[], object] | None = None,
) -> None:
    """Count a skipped update in ``state`` and log it; ``max_in_a_row`` in a row stop training
    with ``FloatingPointError``, after ``before_stop()`` (e.g. a checkpoint of the last applied
    update) with ``state.bad_in_a_row`` reset, so that a run resumed with the remedy gets a
    fresh allowance. ``failed_solves``: the update's sentences whose encoder solve failed (what
    made its loss NaN)."""
    state.skipped_updates += 1
    state.bad_in_a_row += 1
    if failed_solves:
        what = f"encoder solve failed for {failed_solves} sentences"
    else:
        what = f"non-finite {'gradients' if result.loss_finite else 'loss'}"
    logger.warning(
        "%s at update %d: step skipped (%d in a row, %d in total)",
        what,
        state.step + 1,
        state.bad_in_a_row,
        state.skipped_updates,
    )
    if state.bad_in_a_row < max_in_a_row:
        return
    if failed_solves:
        message = (
            f"{state.bad_in_a_row} updates in a row were skipped, the last because the {what} "
            f"(at update {state.step + 1}); {SOLVE_FAILURE_REMEDY}"
        )
    else:
        message = (
            f"{state.bad_in_a_row} updates in a row had non-finite loss or "
            f"gradients (at update {state.step + 1}); lower optim.lr, "
            "enable optim.clip_norm, or check the data"
        )
    state.bad_in_a_row = 0
    if before_stop is not None:
        before_stop()
    raise FloatingPointError(message)
