"""Relative positions at d512: alternate single training steps of the plain and the RPR model.

Run from the repository root:
``PYTHONPATH=. python benchmarks/runs/relative_positions_d512_alternating.py``.
"""

import statistics
import time

import torch
import torch.nn.functional as F
from benchmarks.systems import SIZES, odet_model

ROUNDS = 4
BATCH, LENGTH = 128, 16


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 1000, (BATCH, LENGTH), generator=g)
    tgt = torch.randint(4, 1000, (BATCH, LENGTH), generator=g)
    models = {p: odet_model(SIZES["d512"], positions=p).train() for p in ("sinusoidal", "both")}
    optims = {p: torch.optim.Adam(m.parameters(), 1e-4) for p, m in models.items()}

    def step(p: str) -> float:
        start = time.perf_counter()
        optims[p].zero_grad()
        logits = models[p](src, tgt)
        F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten()).backward()
        optims[p].step()
        return time.perf_counter() - start

    for p in models:
        step(p)
    times: dict[str, list[float]] = {p: [] for p in models}
    for _ in range(ROUNDS):
        for p in models:
            times[p].append(step(p))
    ratios = [b / s for b, s in zip(times["both"], times["sinusoidal"], strict=True)]
    print({p: [round(t, 2) for t in v] for p, v in times.items()})
    print("same-round ratios", [round(r, 3) for r in ratios], "median", statistics.median(ratios))


if __name__ == "__main__":
    main()
