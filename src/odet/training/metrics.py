"""The metrics log (JSON Lines next to the checkpoints) and the learning-curve plot."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class MetricsLog:
    """Appends one JSON object per event (``train``/``valid``/``test``) to ``metrics.jsonl``."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, event: str, **values: Any) -> None:
        """Append one record (the folder is made on the first: a start refused before then
        leaves nothing behind)."""
        record = {"event": event, **{k: _clean(v) for k, v in values.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def read(self) -> list[dict[str, Any]]:
        """The records (JSON objects) of the log; a line that is not one is left out."""
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if isinstance(record, dict):
                records.append(record)
        return records

    def truncate_after(self, step: int) -> None:
        """Drop records logged after ``step`` (on resume, the steps will be redone) and the
        records of a run's end (``is_final_record``): a resumed run writes them when it ends."""
        kept = [r for r in self.read() if r.get("step", 0) <= step and not is_final_record(r)]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")


def train_record(
    window: ThroughputWindow, *, step: int, epoch: int, loss: float, nll: float, lr: float,
    elapsed: float,
) -> dict[str, Any]:  # fmt: skip
    """The values of the ``train`` record of ``step`` for the updates since ``window`` started,
    which it restarts."""
    nfe = window.mean_nfe()
    record = {
        "step": step, "epoch": epoch, "loss": loss, "nll": nll, "lr": lr,
        "target_tokens_per_s": window.tokens_per_second(), "elapsed": elapsed,
    }  # fmt: skip
    window.restart()
    return record | ({"encoder_nfe": nfe} if nfe is not None else {})


def is_final_record(record: dict[str, Any]) -> bool:
    """Whether ``record`` is written once, when a run finishes: the ``test`` scores, or the
    exact validation pass of a language model."""
    event = record.get("event")
    return event == "test" or (event == "valid" and bool(record.get("exact")))


@dataclass
class ThroughputWindow:
    """Target tokens, wall time and encoder NFE since the last ``train`` record."""

    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    nfe_sum: float = 0.0
    nfe_batches: int = 0

    def add_nfe(self, nfe: float | None) -> None:
        """Count one batch's mean NFE (``None``: a discrete encoder, nothing to count)."""
        if nfe is not None:
            self.nfe_sum += nfe
            self.nfe_batches += 1

    def tokens_per_second(self) -> float:
        return self.tokens / max(time.perf_counter() - self.started, 1e-9)

    def mean_nfe(self) -> float | None:
        return self.nfe_sum / self.nfe_batches if self.nfe_batches else None

    def restart(self) -> None:
        self.tokens, self.started = 0, time.perf_counter()
        self.nfe_sum, self.nfe_batches = 0.0, 0


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plot_learning_curve(records: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Train/valid loss against updates, and validation BLEU when present, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if r["event"] == "train" and r.get("loss") is not None]
    valid = [r for r in records if r["event"] == "valid"]
    has_bleu = any(r.get("bleu") is not None for r in valid)
    fig, axes = plt.subplots(1, 2 if has_bleu else 1, figsize=(10 if has_bleu else 5.5, 3.8))
    loss_ax = axes[0] if has_bleu else axes
    if train:
        loss_ax.plot(
            [r["step"] for r in train],
            [r["loss"] for r in train],
            label="train (smoothed CE)",
            lw=1,
        )
    if valid:
        loss_ax.plot(
            [r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="valid NLL"
        )
    loss_ax.set_xlabel("update")
    loss_ax.set_ylabel("loss per token (nats)")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)
    if has_bleu:
        points = [r for r in valid if r.get("bleu") is not None]
        axes[1].plot([r["step"] for r in points], [r["bleu"] for r in points], "o-", color="C2")
        axes[1].set_xlabel("update")
        axes[1].set_ylabel("valid BLEU")
        axes[1].grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
