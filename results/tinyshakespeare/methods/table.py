"""The method × depth table of tiny-Shakespeare runs: ``python table.py RUNS_DIR > results.md``.

Each run is ``RUNS_DIR/<variant>-seed<k>`` (an ``odet train`` run directory with
``summary.json``); the variant's baseline is Euler of the same depth (``euler-<depth>``), and
the difference is tested by a paired t-test over seeds (seed k against seed k).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from scipy import stats

LAYER_EVALUATIONS = {"euler": 1, "rk2": 2, "rk2-gated": 2, "rk4": 4}


def main(root: Path) -> None:
    runs: dict[str, dict[int, dict]] = {}
    for summary in sorted(root.glob("*-seed*/summary.json")):
        name, seed = summary.parent.name.rsplit("-seed", 1)
        runs.setdefault(name, {})[int(seed)] = json.loads(summary.read_text())
    print(
        "| variant | layers | params | layer evaluations / token | seeds | wall s (mean) "
        "| valid loss (exact) | Δ vs Euler, same depth | paired t-test p |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    order = sorted(
        runs, key=lambda n: (int(n.rsplit("-", 1)[1]), n != f"euler-{n.rsplit('-', 1)[1]}", n)
    )
    for name in order:
        method, depth = name.rsplit("-", 1)
        seeds = sorted(runs[name])
        losses = [runs[name][s]["valid_loss"] for s in seeds]
        wall = statistics.fmean(runs[name][s]["elapsed_seconds"] for s in seeds)
        spread = f" ± {statistics.stdev(losses):.4f}" if len(losses) > 1 else ""
        cell = f"{statistics.fmean(losses):.4f}{spread}"
        base = runs.get(f"euler-{depth}", {})
        paired = [s for s in seeds if s in base]
        delta = p = "–"
        if method != "euler" and len(paired) >= 2:
            ours = [runs[name][s]["valid_loss"] for s in paired]
            theirs = [base[s]["valid_loss"] for s in paired]
            delta = f"{statistics.fmean(o - t for o, t in zip(ours, theirs)):+.4f}"
            p = f"{stats.ttest_rel(ours, theirs).pvalue:.2g}"
        params = runs[name][seeds[0]]["parameters"]
        evals = LAYER_EVALUATIONS[method] * int(depth)
        print(
            f"| {method} | {depth} | {params:,} | {evals} | {len(seeds)} | {wall:.0f} | {cell} "
            f"| {delta} | {p} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
