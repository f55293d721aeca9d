"""benchmarks.onednn_rows: a toy run times both GEMM back ends on the same decodes and writes
one table row per size × search × batch; a bad ``--out`` or batch is refused before timing."""

from __future__ import annotations

import pytest
import torch
from benchmarks.onednn_rows import main, measure

from odet.nn.onednn import onednn_supported

pytestmark = pytest.mark.skipif(
    onednn_supported(torch.device("cpu")) is not None, reason="no oneDNN in this PyTorch build"
)


def test_toy_decodes_agree_and_both_back_ends_are_timed() -> None:
    torch_speed, onednn_speed, ratio, agree = measure("toy", batch=3, beam=2, rounds=1)
    assert torch_speed > 0 and onednn_speed > 0 and ratio > 0
    assert agree == 1.0


def test_the_report_has_a_row_per_setting(tmp_path) -> None:
    out = tmp_path / "rows.md"
    argv = ["--sizes", "toy", "--batches", "1", "2", "--beams", "1", "--rounds", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| toy |")]
    assert [row.split("|")[3].strip() for row in rows] == ["1", "2"]


@pytest.mark.parametrize(
    "argv", [["--out", "x.json"], ["--batches", "0"], ["--beams", "65"], ["--rounds", "0"]]
)
def test_bad_arguments_exit_2_before_timing(tmp_path, argv) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--sizes", "toy", "--out", str(tmp_path / "r.md"), *argv])
    assert exit_.value.code == 2
    assert not (tmp_path / "r.md").exists()
