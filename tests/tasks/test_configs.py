"""The shipped DialogSum, GEC and CNN/DM configs: variants differ only in the encoder integrator,
and the settings the task code relies on agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from odet.config import load_yaml
from odet.tasks.summarization import SPEAKER_TAGS
from odet.training import load_train_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
VARIANT_KEYS = {"encoder_method", "coefficients", "share_gate"}


@pytest.mark.parametrize("task", ["dialogsum", "gec", "cnndm"])
def test_variants_differ_only_in_the_encoder_integrator(task: str) -> None:
    paths = sorted((CONFIGS / task).glob("*.yaml"))
    assert {p.stem for p in paths} >= {"euler", "rk2_gated"}
    configs = {p.stem: load_yaml(p) for p in paths}
    base = configs["euler"]
    for name, config in configs.items():
        assert config["output_dir"].endswith(f"{task}/{name}")
        rest = {k: v for k, v in config.items() if k not in ("output_dir", "model")}
        assert rest == {k: v for k, v in base.items() if k not in ("output_dir", "model")}
        model = {k: v for k, v in config["model"].items() if k not in VARIANT_KEYS}
        assert model == {k: v for k, v in base["model"].items() if k not in VARIANT_KEYS}
    assert configs["rk2_gated"]["model"]["coefficients"] == "gated"


@pytest.mark.parametrize("path", sorted((CONFIGS / "dialogsum").glob("*.yaml")), ids=str)
def test_dialogsum_configs_keep_speaker_tags_and_fit_truncated_sources(path: Path) -> None:
    config = load_train_config(path)
    assert config.data.user_defined_symbols == SPEAKER_TAGS
    assert config.data.truncate_source <= config.data.max_source_tokens
    # Source + EOS fill the position table, so `odet generate` truncates as training did.
    assert config.model["max_positions"] == config.data.truncate_source + 1
    assert config.train.valid_metric == "rouge"
    assert config.generation.max_len_a == 0  # summary length does not grow with the dialogue


@pytest.mark.parametrize("path", sorted((CONFIGS / "gec").glob("*.yaml")), ids=str)
def test_gec_configs_validate_and_test_on_jfleg_with_all_four_references(
    path: Path, shared_data: Path
) -> None:
    config = load_train_config(path)
    assert config.train.valid_metric == "gleu"
    for split, extra in (
        (config.data.valid, config.data.valid_references),
        (config.data.test, config.data.test_references),
    ):
        names = [Path(name).name for name in (*split, *extra)]
        assert names == ["dev.src", "dev.ref0", "dev.ref1", "dev.ref2", "dev.ref3"]
        assert all((shared_data / "jfleg" / name).is_file() for name in names)
