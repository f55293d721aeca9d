"""Figures and the candidates table of results/parity/divergence from its runs and traces.

Run from the repository root after the parity runs (README.md):
``python results/parity/divergence/figures.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from odet.experiments.ode_trace import first_nonfinite_step, plot_traces, read_trace

HERE = Path(__file__).resolve().parent
TRACES = HERE / "traces"
VARIANTS = (
    "node-dopri5",
    "node-dopri5-l0.01",
    "node-dopri5-tol1e-4",
    "node-dopri5-skip",
    "node-dopri5-dt-detached",
    "node-dopri5-sn",
)


def trace(variant: str, seed: int) -> Path | None:
    for name in (f"seed{seed}.jsonl.gz", f"seed{seed}.jsonl"):
        path = TRACES / variant / name
        if path.exists():
            return path
    return None


def run(variant: str, seed: int) -> dict | None:
    path = HERE / "runs" / variant / f"seed{seed}.json"
    return json.loads(path.read_text())["result"] if path.exists() else None


def figures() -> None:
    pairs = {
        "divergence_lambda0.png": (
            "λ = 0: seeds 0 and 4 diverge, seed 1 does not; λ = 0.01 with seed 4",
            [("node-dopri5", 0), ("node-dopri5", 4), ("node-dopri5", 1), ("node-dopri5-l0.01", 4)],
        ),
    }
    for seed in (0, 4, 1):
        pairs[f"candidates_seed{seed}.png"] = (
            f"seed {seed}: λ = 0 and the candidate fixes",
            [(v, seed) for v in VARIANTS],
        )
    for name, (title, runs) in pairs.items():
        found = {f"{v} s{s}": p for v, s in runs if (p := trace(v, s)) is not None}
        if found:
            plot_traces(found, HERE / name, title=title)


def growth_figure() -> None:
    """ln(‖y(t1)‖/‖y(t0)‖) per step against the product of the FFN path's spectral norms."""
    fig, ax = plt.subplots(figsize=(5.5, 4), dpi=80)
    for variant, seed in (("node-dopri5", 0), ("node-dopri5", 4), ("node-dopri5", 1)):
        path = trace(variant, seed)
        if path is None:
            continue
        xs, ys = [], []
        for line in read_trace(path):
            solve = line["solves"][0]
            w = line["weights"]
            if not line["params_finite"] or solve["y_norm_end"] is None:
                continue
            lip = math.prod(
                w[f"0.{k}"]["spectral"] for k in ("ffn_time.proj", "ffn.fc1", "ffn.fc2")
            )
            xs.append(lip)
            ys.append(math.log(solve["y_norm_end"] / solve["y_norm_t0"]))
        ax.scatter(xs, ys, s=4, label=f"{variant} seed {seed}")
    ax.set_xlabel("σ(ffn_time)·σ(fc1)·σ(fc2)  (bound on the FFN's growth rate)")
    ax.set_ylabel("ln ‖y(t1)‖ / ‖y(t0)‖")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "growth_vs_weights.png")
    plt.close(fig)


def grad_vs_state_figure() -> None:
    """Gradient norm before clipping against ‖y(t1)‖, every step of every traced run."""
    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=80)
    for variant in VARIANTS:
        xs, ys = [], []
        for seed in (0, 4, 1):
            path = trace(variant, seed)
            if path is None:
                continue
            for line in read_trace(path):
                y = line["solves"][0]["y_norm_end"]
                if not line["params_finite"] or y is None:
                    continue
                xs.append(y)
                ys.append(line["grad_norm"] if line["grad_finite"] else 1e30)
        if xs:
            ax.scatter(xs, ys, s=3, alpha=0.6, label=variant)
    ax.axhline(1e30, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("‖y(t1)‖ at the step (mean over the batch)")
    ax.set_ylabel("gradient norm before clipping (1e30: inf/NaN)")
    ax.legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    fig.savefig(HERE / "grad_vs_state.png")
    plt.close(fig)


def table() -> str:
    rows = [
        "| variant | seed | acc trained | acc longer | NFE trained | arclength trained | "
        "failed test solves | train s | first inf/NaN grad | max ‖y(t1)‖ | max grad norm | "
        "max fwd NFE | skipped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        for seed in (0, 4, 1):
            result = run(variant, seed)
            if result is None:
                continue
            path = trace(variant, seed)
            bad, y_max, g_max, nfe_max = "–", "–", "–", "–"
            if path is not None:
                lines = read_trace(path)
                step = first_nonfinite_step(lines)
                bad = "none" if step is None else str(step)
                ok = [line for line in lines if line["params_finite"]]
                y_max = f"{max(x['solves'][0]['y_norm_end'] or 0 for x in ok):.3g}"
                g_max = f"{max(x['grad_norm'] or 0 for x in ok):.3g}"
                nfe_max = str(max(x["solves"][0]["nfe_max"] for x in ok))
            arc = result["arclength_trained"]
            rows.append(
                f"| {variant} | {seed} | {result['accuracy_trained']:.3f} | "
                f"{result['accuracy_longer']:.3f} | {result['nfe_trained']:.1f} | "
                f"{'–' if arc is None or arc != arc else f'{arc:.3g}'} | {result['failed']} | "
                f"{result['train_seconds']:.0f} | {bad} | {y_max} | {g_max} | {nfe_max} | "
                f"{result.get('skipped_updates', 0)} |"
            )
    return "\n".join(rows)


if __name__ == "__main__":
    figures()
    growth_figure()
    grad_vs_state_figure()
    text = table()
    (HERE / "candidates.md").write_text(text + "\n", encoding="utf-8")
    print(text)
