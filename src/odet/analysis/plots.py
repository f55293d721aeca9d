"""The plots of ``odet analyze``: update sizes per block, coefficients over training and DLCL
layer weights, each drawn from the report that :func:`odet.analysis.report.analyze_runs` builds;
and a continuous encoder's NFE per sentence (:mod:`odet.analysis.depth`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def plot_update_sizes(report: dict[str, Any], path: Path) -> None:
    """``‖y_{l+1} − y_l‖ / ‖y_l‖`` against the block, one panel per stack, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, entry in report.items():
        for ax, stack in zip(axes, ("encoder", "decoder")):
            sizes = entry["update_sizes"].get(stack)  # none for a continuous stack: no blocks
            if sizes is not None:
                label = f"{name} ({entry[f'{stack}_method']})"
                ax.plot(range(1, len(sizes) + 1), sizes, "o-", label=label)
    for ax, stack in zip(axes, ("encoder", "decoder")):
        ylabel = r"$\|y_{l+1} - y_l\| \,/\, \|y_l\|$"
        ax.set(xlabel=f"{stack} block", ylabel=ylabel, title=stack)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "continuous: no blocks", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_coefficients(report: dict[str, Any], path: Path) -> None:
    """Each block's first logged weight (the gate mean for gated RK2) over training, for the
    blocks whose weight changed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    plotted = False
    for name, entry in report.items():
        history = entry["coefficient_history"]
        for stack in ("encoder", "decoder"):
            blocks = [r[stack] for r in history if stack in r]
            steps = [r["step"] for r in history]
            for b in range(len(blocks[0]) if blocks else 0):
                series = [row[b][0] for row in blocks if row[b]]
                if len(series) == len(steps) and series and max(series) > min(series):
                    ax.plot(steps, series, "o-", ms=3, label=f"{name} {stack} block {b + 1}")
                    plotted = True
    ax.set(xlabel="update", ylabel="gate mean g / first stage weight")
    ax.grid(alpha=0.3)
    if plotted:
        ax.legend(fontsize=7)
    else:
        ax.text(
            0.5, 0.5, "no learned coefficients in these runs", ha="center", transform=ax.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_layer_weights(report: dict[str, Any], path: Path) -> None:
    """The learned DLCL combinations ``W`` (one heat map per DLCL stack); nothing without one."""
    panels = [
        (f"{name} {key.removesuffix('_layers')}", rows)
        for name, entry in report.items()
        for key, rows in entry["coefficients"].items()
        if key.endswith("_layers")
    ]
    if not panels:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels):
        dense = np.full((len(rows), len(rows)), np.nan)
        for l, row in enumerate(rows):
            dense[l, : len(row)] = row
        image = ax.imshow(dense, cmap="viridis")
        low, high = np.nanmin(dense), np.nanmax(dense)
        for (l, k), value in np.ndenumerate(dense):
            if not np.isnan(value):
                light = high > low and (value - low) / (high - low) > 0.6
                color = "k" if light else "w"
                ax.text(k, l, f"{value:.2f}", ha="center", va="center", fontsize=7, color=color)
        labels = ["emb", *(f"y{k}" for k in range(1, len(rows)))]
        ax.set_xticks(range(len(rows)), labels)
        ax.set_yticks(range(len(rows)), [*(f"in {l + 1}" for l in range(len(rows) - 1)), "out"])
        ax.set_title(f"{title}: W[l, k]", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_nfe(
    x: np.ndarray,
    nfe: np.ndarray,
    means: Sequence[tuple[float, int, float]],
    *,
    xlabel: str,
    title: str,
    path: Path,
) -> None:
    """NFE per sentence ``(N,)`` against ``x (N,)`` as points, with the mean NFE of each bin
    (``(mean x, count, mean NFE)``, :func:`odet.analysis.depth.binned_means`) as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    alpha = min(0.8, max(0.15, 10 / len(nfe) ** 0.5))
    ax.scatter(x, nfe, s=10, alpha=alpha, linewidths=0, label=f"sentences ({len(nfe)})")
    bin_x = [m[0] for m in means]
    bin_nfe = [m[2] for m in means]
    ax.plot(bin_x, bin_nfe, "o-", color="C3", ms=4, label="mean NFE per bin")
    ax.set(xlabel=xlabel, ylabel="NFE (field evaluations, all blocks)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
