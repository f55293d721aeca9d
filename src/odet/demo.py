"""``odet demo``: the README's end-to-end job on data odet generates itself.

It writes a synthetic translation task (``odet.data.synthetic``), trains an Euler (ordinary
pre-norm) Transformer and an RK2-gated ODE Transformer of the same size with the same data,
schedule and seed through the same ``odet train`` code path users run, decodes the test set with
beam search, scores it, and prints and saves a comparison (table + plot).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from odet.data import DataError
from odet.data.synthetic import SyntheticTask
from odet.io import check_output_dir, claim_output_dir
from odet.training import TrainConfig, train
from odet.training.metrics import MetricsLog
from odet.training.run_dir import is_run_dir

VARIANTS = {
    "euler": {"encoder_method": "euler", "decoder_method": "euler", "coefficients": "fixed"},
    "rk2-gated": {"encoder_method": "rk2", "decoder_method": "euler", "coefficients": "gated"},
}


def demo_config(data_dir: Path, out: Path, model: dict[str, Any], epochs: int) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "output_dir": str(out),
            "seed": 1,
            "data": {
                "data_dir": str(data_dir),
                "train": ["train.src", "train.tgt"],
                "valid": ["valid.src", "valid.tgt"],
                "test": ["test.src", "test.tgt"],
                "vocab_size": 96,
            },
            "model": {
                "d_model": 64,
                "num_heads": 4,
                "ffn_dim": 128,
                "encoder_layers": 2,
                "decoder_layers": 2,
                "dropout": 0.0,
                "max_positions": 64,
                **model,
            },
            "optim": {"lr": 0.004, "warmup_updates": 60, "label_smoothing": 0.0, "clip_norm": 1.0},
            "train": {
                "max_tokens": 1200,
                "max_epochs": epochs,
                "log_every": 10,
                "threads": 0,
                "keep_last": 1,
            },
            "generation": {"beam_size": 4, "max_len_a": 1.2, "max_len_b": 4},
        }
    )


def exact_match(hyp_file: Path, ref_file: Path) -> float:
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    refs = ref_file.read_text(encoding="utf-8").splitlines()
    return 100.0 * sum(h.strip() == r.strip() for h, r in zip(hyps, refs)) / max(len(refs), 1)


TASK_FILE = "TASK"
"""In ``--out/data``: the synthetic task the demo's runs were trained on."""


def _demo_task(out: Path) -> str | None:
    """The task of an earlier demo in ``out``: its ``data/TASK``, or the title of its
    ``results.md`` (written before ``TASK`` was); ``None`` for a new one."""
    task_file = out / "data" / TASK_FILE
    if task_file.is_file():
        return task_file.read_text(encoding="utf-8").strip()
    results = out / "results.md"
    if results.is_file():
        found = re.search(r"synthetic task `([^`]+)`", results.read_text(encoding="utf-8"))
        return found.group(1) if found else None
    return None


def run_demo(
    out: str | Path, *, task: str = "translate", epochs: int = 10, progress: bool = True
) -> dict[str, dict[str, float]]:
    """Train and compare the demo variants; returns ``{variant: {metric: value}}``."""
    out = check_output_dir(
        out, "--out", owned=lambda p: any(is_run_dir(p / v) for v in VARIANTS), command="demo"
    )
    if epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {epochs}")
    data_dir = out / "data"
    earlier = _demo_task(out)
    if earlier is not None and earlier != task:
        raise DataError(
            f"--out {out} holds the demo of task {earlier!r}, whose finished runs would be "
            f"reported as task {task!r}; choose a new --out (nothing was written)"
        )
    claim_output_dir(out, "demo")
    SyntheticTask(task, vocab_words=24, min_length=3, max_length=12, seed=0).write(
        data_dir, {"train": 6000, "valid": 300, "test": 300}
    )
    (data_dir / TASK_FILE).write_text(task + "\n", encoding="utf-8")
    print(f"odet demo: synthetic task {task!r} written to {data_dir}")
    results: dict[str, dict[str, float]] = {}
    for name, model in VARIANTS.items():
        print(
            f"\n== training {name} ({model['encoder_method']} encoder, "
            f"{model['coefficients']} coefficients) =="
        )
        config = demo_config(data_dir, out / name, model, epochs)
        result = train(config, progress=progress)
        summary = json.loads((out / name / "summary.json").read_text())
        results[name] = {
            "parameters": summary["parameters"],
            "updates": result.steps,
            "train_seconds": result.elapsed_seconds,
            "valid_bleu": result.best_metric or 0.0,
            "test_bleu": result.test.get("bleu", 0.0),
            "test_exact_match": exact_match(out / name / "test.hyp", data_dir / "test.tgt"),
        }
    table = _table(results)
    print("\n" + table)
    (out / "results.md").write_text(
        f"# odet demo: synthetic task `{task}`, {epochs} epochs\n\n{table}\n", encoding="utf-8"
    )
    plot = _plot(out, list(VARIANTS))
    print(f"\nresults: {out / 'results.md'}; learning curves: {plot}")
    print("next: the Multi30k recipe — see configs/multi30k/README.md")
    return results


def _table(results: dict[str, dict[str, float]]) -> str:
    lines = [
        "| model | parameters | updates | wall time (s) | valid BLEU | test BLEU "
        "| test exact match (%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {int(r['parameters']):,} | {int(r['updates'])} "
            f"| {r['train_seconds']:.0f} | {r['valid_bleu']:.2f} | {r['test_bleu']:.2f} "
            f"| {r['test_exact_match']:.1f} |"
        )
    return "\n".join(lines)


def _plot(out: Path, names: list[str]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in names:
        records = MetricsLog(out / name / "metrics.jsonl").read()
        train = [r for r in records if r["event"] == "train"]
        valid = [r for r in records if r["event"] == "valid"]
        axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], label=name)
        axes[1].plot([r["step"] for r in valid], [r.get("bleu") for r in valid], "o-", label=name)
    axes[0].set(xlabel="update", ylabel="train loss (nats/token)", yscale="log")
    axes[1].set(xlabel="update", ylabel="valid BLEU")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = out / "comparison.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
