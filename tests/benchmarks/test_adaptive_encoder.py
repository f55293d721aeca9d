"""The adaptive-encoder benchmark at toy size: it runs and writes the fields of its report."""

import json

from benchmarks import adaptive_encoder


def test_toy_run_writes_every_field(tmp_path):
    assert (
        adaptive_encoder.main(
            [
                "--size",
                "toy",
                "--rounds",
                "1",
                "--warmup",
                "0",
                "--out",
                str(tmp_path),
                "--name",
                "t",
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["command"].startswith("python -m benchmarks.adaptive_encoder")
    assert set(result["systems"]) == {"euler", "continuous"}
    for row in result["systems"].values():
        assert row["train_step_s"] > 0 and row["decode_s_per_sentence"] > 0
        for key in ("encoder_nfe_train_batch", "encoder_nfe_decode_sources"):
            nfe = row[key]
            assert 1 <= nfe["min"] <= nfe["mean"] <= nfe["max"]
    assert result["systems"]["euler"]["encoder_nfe_decode_sources"]["max"] == 1
    assert result["systems"]["continuous"]["encoder_nfe_decode_sources"]["min"] > 1
    for share in result["systems"]["continuous"]["time_outside_field"].values():
        assert 0 < share["share_outside_field"] < 1 and share["field_calls_per_call"] > 1
    assert result["systems"]["continuous"]["encoder_nfe_train_batch_dropout0"]["min"] > 1
    assert set(result["ratio_continuous_over_euler"]) == {"train_step", "decode"}
    text = (tmp_path / "t.md").read_text()
    assert "| continuous |" in text and "share outside" in text
