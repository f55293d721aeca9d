"""What the translation and language-model reports share: mean ± std cells and the plot of a
validation metric against training wall-clock."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from odet.experiments.config import ExperimentConfig
from odet.training.metrics import MetricsLog


def mean_std(values: list[float | None], digits: int = 2) -> str:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def plot_against_time(
    config: ExperimentConfig,
    results: list[Any],
    path: Path,
    metric: str = "bleu",
    ylabel: str = "valid BLEU (greedy)",
) -> None:
    """``metric`` of the ``valid`` records (not the final exact pass) of every run (each result's
    ``run`` directory) against its training wall-clock, one colour per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, variant in enumerate(config.variants):
        for r in (r for r in results if r.variant == variant):
            records = MetricsLog(r.run / "metrics.jsonl").read()
            train_times = [(x["step"], x["elapsed"]) for x in records if x["event"] == "train"]
            points = []
            for x in records:
                if x["event"] != "valid" or x.get(metric) is None or x.get("exact"):
                    continue
                # older logs lack "elapsed" on validation records: use the last train record's
                seconds = x.get("elapsed") or max(
                    (t for step, t in train_times if step <= x["step"]), default=None
                )
                if seconds is not None:
                    points.append((seconds / 60, x[metric]))
            if points:
                ax.plot(
                    *zip(*points),
                    "o-",
                    color=f"C{i}",
                    alpha=0.8,
                    ms=3,
                    label=variant if r.seed == config.seeds[0] else None,
                )
    ax.set(xlabel="training wall-clock (min)", ylabel=ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
