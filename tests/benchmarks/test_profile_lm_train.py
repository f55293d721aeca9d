"""The training-step profile of odet's Euler LM against HF GPT-2, on the toy size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch


def test_profile_lm_train_charges_the_whole_step_to_categories(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from benchmarks import profile_lm_train

    out = tmp_path / "p.md"
    argv = ["--sizes", "lm-toy", "--warmup", "1", "--repeats", "1", "--profile-steps", "1"]
    threads = torch.get_num_threads()
    try:
        assert profile_lm_train.main([*argv, "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    text = out.read_text()
    assert "Budget for 1.3× HF" in text and "| backward: ffn: matmul |" in text
    (result,) = json.loads(out.with_suffix(".json").read_text())["results"]
    assert result["odet_vs_hf"] > 0
    odet, hf = result["profiles"]
    assert (odet["system"], hf["system"]) == ("odet", "hf")
    for p in (odet, hf):
        summary = p["summary"]
        assert sum(p["ms_per_step"].values()) == pytest.approx(p["step_ms"], rel=1e-6)
        assert sum(summary["phase_share"].values()) == pytest.approx(1.0)
        assert sum(summary["kind_share"].values()) == pytest.approx(1.0)
        for phase in ("forward", "backward", "optimizer"):
            assert 0 < summary["phase_share"][phase] < 1
        assert 0 < summary["matmul_share"]["forward"] < summary["matmul_of_phase"]["forward"]
        assert summary["aten_calls_per_step"]["optimizer"] > 0 and p["top_ops"]
        modules = {k.split(": ")[1] for k in p["ms_per_step"] if k.startswith("backward: ")}
        assert {"attention", "ffn", "layer norm", "output head"} <= modules  # matched to forward
    # equal sizes: the same matrix products, op for op
    assert profile_lm_train._gemm_set(odet) == profile_lm_train._gemm_set(hf)
