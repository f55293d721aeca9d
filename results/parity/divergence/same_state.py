"""The gradient of one model state with and without backpropagation through the step sizes.

Retrains node-dopri5 (λ = 0) of configs/parity/divergence.yaml with the experiment's own loop
(same seed, batches and updates as the parity run, checked against its trace) and at chosen
steps computes the gradient of that step's batch twice from the same weights: through the
step-size controller (torchode's default, what the run used) and with the step sizes detached
(``grad_through_step_size: false``). The forward solve is the same in both. Writes
``same_state.csv``. Run from the repository root, on one thread:
``OMP_NUM_THREADS=1 python results/parity/divergence/same_state.py [SEED [STEP ...]]``.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

import torch

from odet.config import load_yaml
from odet.data.parity import make_parity_splits
from odet.experiments.ode_trace import read_trace
from odet.experiments.parity import ParityExperimentConfig, _endless
from odet.models.classifier import SequenceClassifier, classification_loss

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def grad_norms(model: SequenceClassifier, tokens: torch.Tensor, labels: torch.Tensor) -> dict:
    """Gradient norm (before clipping) of ``model`` on a batch, with the step sizes in the graph
    and detached, and the largest per-parameter share of the difference."""
    out = {}
    for through in (True, False):
        config = model.config
        other = replace(
            config, continuous=replace(config.continuous, grad_through_step_size=through)
        )
        with torch.random.fork_rng(devices=[]):
            twin = SequenceClassifier(other)
        twin.load_state_dict(model.state_dict())
        twin.train()
        output = twin(tokens)
        loss = classification_loss(output, labels)
        loss.total.backward()
        grads = [p.grad.detach().double() for p in twin.parameters() if p.grad is not None]
        out[through] = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        out[f"ce_{through}"] = float(loss.cross_entropy)
    return out


def main(seed: int = 4, at: tuple[int, ...] = (0, 50, 100, 150, 200, 220, 230, 234, 236)) -> None:
    config = ParityExperimentConfig.from_dict(load_yaml(ROOT / "configs/parity/divergence.yaml"))
    variant = next(v for v in config.variants if v.name == "node-dopri5")
    trace_path = HERE / "traces" / "node-dopri5" / f"seed{seed}.jsonl.gz"
    if not trace_path.exists():
        trace_path = trace_path.with_suffix("")
    trace = {line["step"]: line for line in read_trace(trace_path)}
    train = config.training_config(variant)
    torch.manual_seed(seed)
    model = SequenceClassifier(config.classifier_config(variant))
    optimizer = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
    batches = _endless(make_parity_splits(config.task).train, train.batch_size,
                       torch.Generator().manual_seed(seed))  # fmt: skip
    rows = []
    model.train()
    for step in range(max(at) + 1):
        batch = next(batches)
        if step in at:
            norms = grad_norms(model, batch.tokens, batch.labels)
            rows.append({
                "seed": seed, "step": step, "trace_ce": trace[step]["cross_entropy"],
                "ce": norms["ce_True"], "y_norm_end": trace[step]["solves"][0]["y_norm_end"],
                "grad_through_step_size": float(norms[True]),
                "grad_step_size_detached": float(norms[False]),
                "trace_grad_norm": trace[step]["grad_norm"],
            })  # fmt: skip
            print(rows[-1], flush=True)
        output = model(batch.tokens)
        loss = classification_loss(output, batch.labels)
        optimizer.zero_grad(set_to_none=True)
        loss.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
    with (HERE / f"same_state_seed{seed}.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*args[:1], *([tuple(args[1:])] if len(args) > 1 else []))
