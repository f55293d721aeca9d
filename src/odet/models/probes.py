"""Pure probes of a trained ``Seq2Seq``: what each block does, measured without changing it.

Two views from the ODE Transformer paper's analysis:

- **coefficients**: the stage weights each block uses — fixed, learned or EMA weights, and for
  gated RK2 the mean gate ``g`` over the positions of a batch (``y' = y + g·k1 + (1 − g)·k2``);
  the trainer logs them at every validation, so they can be followed over training;
- **update sizes**: ``‖y_{l+1} − y_l‖ / ‖y_l‖`` per block, averaged over real tokens — the
  "truncation error" view: how far each block moves the representation.

Every probe is a function of a model and a batch only. Measurements use forward hooks on the
blocks of a model in eval mode; they never change what the model computes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from odet.blocks import Coefficients, DLCLStack, FixedCoefficients, GatedCoefficients, Stack
from odet.models.seq2seq import Seq2Seq

__all__ = [
    "GateStats",
    "coefficient_snapshot",
    "gate_statistics",
    "has_learned_coefficients",
    "update_sizes",
]


def _stacks(model: Seq2Seq) -> dict[str, Stack]:
    """The model's discrete stacks (a continuous encoder has no blocks to inspect)."""
    stacks = {"encoder": model.encoder, "decoder": model.decoder}
    return {name: stack for name, stack in stacks.items() if isinstance(stack, Stack)}


@contextmanager
def _recording(modules: list[nn.Module], store: list[Any], fn: Any) -> Iterator[None]:
    handles = [
        m.register_forward_hook(lambda mod, args, out, i=i: store.append((i, fn(args, out))))
        for i, m in enumerate(modules)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _first_tensor(value: Any) -> Tensor:
    return value[0] if isinstance(value, tuple) else value


GateStats = dict[str, float]


@torch.no_grad()
def gate_statistics(
    model: Seq2Seq, src: Tensor, tgt_in: Tensor, *, threshold: float = 0.01
) -> dict[str, list[GateStats | None]]:
    """Per stack, per block: how the gated RK2 gate ``g`` behaves over the real tokens of a
    teacher-forced pass (``None`` for blocks without a gate).

    ``mean`` and ``std`` of ``g``; ``saturated``, the fraction of tokens with ``g < threshold``
    or ``g > 1 − threshold`` (there the block uses one stage alone and the other gets almost no
    gradient); ``logit_rms``, the root mean square of ``W [k1; k2] + b``.
    """
    gated: dict[str, list[GatedCoefficients | None]] = {}
    for name, stack in _stacks(model).items():
        gated[name] = []
        for block in stack.blocks:
            coefficients = next((m for m in block.modules() if isinstance(m, Coefficients)), None)
            is_gated = isinstance(coefficients, GatedCoefficients)
            gated[name].append(coefficients if is_gated else None)
    modules = list({id(c.gate): c.gate for rows in gated.values() for c in rows if c}.values())
    if not modules:
        return {name: [None] * len(rows) for name, rows in gated.items()}
    calls: list[tuple[int, Tensor]] = []
    was_training = model.training
    model.eval()
    with _recording(modules, calls, lambda args, out: out.detach()[..., 0]):
        model(src, tgt_in)
    model.train(was_training)
    # A gate shared by several blocks (``share_gate``) is called once per block, in block order.
    queues: dict[int, list[Tensor]] = {}
    for index, logits in calls:
        queues.setdefault(index, []).append(logits)
    masks = {"encoder": src.ne(model.config.pad_id), "decoder": tgt_in.ne(model.config.pad_id)}
    positions = {id(m): i for i, m in enumerate(modules)}
    stats: dict[str, list[GateStats | None]] = {}
    for name, rows in gated.items():
        stats[name] = []
        for coefficients in rows:
            if coefficients is None:
                stats[name].append(None)
                continue
            logits = queues[positions[id(coefficients.gate)]].pop(0)[masks[name]].double()
            g = torch.sigmoid(logits)
            stats[name].append(
                {
                    "mean": g.mean().item(),
                    "std": g.std(correction=0).item(),
                    "saturated": ((g < threshold) | (g > 1 - threshold)).double().mean().item(),
                    "logit_rms": logits.square().mean().sqrt().item(),
                }
            )
    return stats


def has_learned_coefficients(model: nn.Module) -> bool:
    """Whether any block weights change in training: learned, gated or EMA stage weights, or a
    DLCL layer combination."""
    return any(
        isinstance(m, DLCLStack)
        or (isinstance(m, Coefficients) and not isinstance(m, FixedCoefficients))
        for m in model.modules()
    )


@torch.no_grad()
def coefficient_snapshot(
    model: Seq2Seq, src: Tensor | None = None, tgt_in: Tensor | None = None
) -> dict[str, list[list[float]]]:
    """Per stack, per block: the block's weights, ``[]`` when it has none.

    A block's row lists the weights of each of its coefficient modules in order: the stage
    weights, or ``[mean g]`` for gated RK2 over the real positions of ``src``/``tgt_in``; a
    predictor–corrector block gives its predictor weights ``w`` then its corrector weights
    ``γ``. A DLCL stack adds ``"<stack>_layers"``: the rows ``W[l, :l+1]`` of its layer
    combination (row ``l`` is the input of block ``l + 1``, the last row the stack's output).
    """
    gates: dict[str, list[GateStats | None]] = {}
    if src is not None and tgt_in is not None:
        gates = gate_statistics(model, src, tgt_in)
    snapshot: dict[str, list[list[float]]] = {}
    for name, stack in _stacks(model).items():
        rows: list[list[float]] = []
        for index, block in enumerate(stack.blocks):
            row: list[float] = []
            for coefficients in (m for m in block.modules() if isinstance(m, Coefficients)):
                if isinstance(coefficients, GatedCoefficients):
                    stats = gates[name][index] if gates else None
                    row.extend([stats["mean"]] if stats else [])
                elif (weights := coefficients.weights()) is not None:
                    row.extend(float(w) for w in weights)
            rows.append(row)
        snapshot[name] = rows
        if isinstance(stack, DLCLStack):
            dense = stack.combination_weights()
            snapshot[f"{name}_layers"] = [row[: l + 1].tolist() for l, row in enumerate(dense)]
    return snapshot


@torch.no_grad()
def update_sizes(model: Seq2Seq, src: Tensor, tgt_in: Tensor) -> dict[str, list[float]]:
    """Per stack, per block: mean over real tokens of ``‖output − input‖ / ‖input‖``."""
    was_training = model.training
    model.eval()
    results: dict[str, list[float]] = {}
    pad = model.config.pad_id
    masks = {"encoder": src.ne(model.config.pad_id), "decoder": tgt_in.ne(pad)}
    for name, stack in _stacks(model).items():
        records: list[tuple[int, float]] = []
        mask = masks[name]

        def measure(args: tuple[Any, ...], out: Any, mask: Tensor = mask) -> float:
            before, after = args[0], _first_tensor(out)
            ratio = (after - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(1e-12)
            return ratio[mask].mean().item()

        with _recording(list(stack.blocks), records, measure):
            model(src, tgt_in)
        results[name] = [value for _, value in sorted(records)]
    model.train(was_training)
    return results
