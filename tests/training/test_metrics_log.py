"""The metrics log reads back what a crash or a hand edit left: only JSON objects."""

from __future__ import annotations

from pathlib import Path

from odet.training.metrics import MetricsLog


def test_lines_that_are_not_json_objects_are_left_out_on_read_and_resume(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write("train", step=1, loss=2.0)
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write('[1]\n"text"\n3\nnull\n{"event": "train", "step": 2, "loss": 1.5\n')
    log.write("train", step=3, loss=1.0)
    assert [r["step"] for r in log.read()] == [1, 3]
    log.truncate_after(2)
    assert [r["step"] for r in log.read()] == [1]
