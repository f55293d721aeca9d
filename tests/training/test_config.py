from pathlib import Path

import pytest

from odet.config import ConfigError
from odet.training import TrainConfig, load_train_config
from odet.training.config import apply_overrides, parse_override
from tests.training.conftest import tiny_config, write_config

REPO = Path(__file__).resolve().parents[2]


def test_tiny_config_round_trips_through_yaml(tmp_path):
    config = TrainConfig.from_dict(tiny_config(tmp_path, tmp_path / "run"))
    again = load_train_config(write_config(tmp_path / "c.yaml", config.to_dict()))
    assert again == config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"modle": {}}, r"unknown config key 'modle' \(did you mean 'model'\?\)"),
        (
            {"train": {"max_token": 10}},
            r"unknown config key 'train.max_token' \(did you mean 'max_tokens'\?\)",
        ),
        (
            {"model": {"encoder_metod": "rk2"}},
            r"unknown config key 'model.encoder_metod' \(did you mean 'encoder_method'\?\)",
        ),
        ({"model": {"encoder_method": "rk5"}}, r"encoder_method = 'rk5' is not a known method"),
        (
            {"train": {"max_tokens": "lots"}},
            r"max_tokens = 'lots' \(str\) is invalid; expected int",
        ),
        ({"optim": {"lr": -1}}, r"optim.lr must be > 0"),
        ({"data": {"train": ["only-one-file"]}}, r"data.train needs 2 file\(s\)"),
        ({"model": {"vocab_size": 10}}, r"model.vocab_size is set from the tokenizer"),
        (
            {"optim": {"schedule": "cosine"}},
            r"optim.schedule 'cosine' decays over train.max_updates, which must exceed",
        ),
        ({"optim": {"schedule": "cosin"}}, r"schedule = 'cosin' \(str\) is invalid"),
        (
            {"train": {"precision": "fp16"}},
            r"precision = 'fp16' \(str\) is invalid; expected 'fp32' \| 'bf16'",
        ),
        (
            {"generation": {"precision": "int8"}},
            r"generation.precision int8 is for odet generate only",
        ),
    ],
)
def test_bad_configs_are_rejected_naming_the_key(tmp_path, change, message):
    config = tiny_config(tmp_path, tmp_path / "run")
    for section, values in change.items():
        if section in config and isinstance(config[section], dict):
            config[section] = {**config[section], **values}
        else:
            config[section] = values
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(config)


def test_malformed_yaml_reports_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("data:\n  train: [a, b\nmodel: {}\n")
    with pytest.raises(ConfigError, match=r"malformed YAML at line \d+"):
        load_train_config(path)


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_train_config(tmp_path / "nope.yaml")


def test_overrides_parse_values_as_yaml(tmp_path):
    assert parse_override("model.d_model=256") == (["model", "d_model"], 256)
    assert parse_override("optim.betas=[0.9, 0.997]") == (["optim", "betas"], [0.9, 0.997])
    assert parse_override("model.encoder_method=rk2") == (["model", "encoder_method"], "rk2")
    assert parse_override("optim.lr=5e-4") == (["optim", "lr"], 5e-4)
    data = apply_overrides({"model": {"d_model": 64}}, ["model.d_model=128", "seed=7"])
    assert data == {"model": {"d_model": 128}, "seed": 7}
    with pytest.raises(ConfigError, match="expects key=value"):
        parse_override("model.d_model")


def _shipped_configs():
    return sorted((REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", _shipped_configs(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_config_loads_and_builds(path):
    from odet.config import load_yaml
    from odet.models import Seq2Seq

    if "experiments" in path.parts:
        from odet.experiments.config import load_experiment
        from odet.models import CausalLM
        from odet.training import LMTrainConfig, load_any_config

        experiment = load_experiment(path)
        for variant in experiment.variants:
            overrides = experiment.run_overrides(variant, experiment.seeds[0])
            config = load_any_config(REPO / experiment.base, overrides)
            if isinstance(config, LMTrainConfig):
                assert CausalLM(config.model_config(vocab_size=65))
            else:
                assert Seq2Seq(config.model_config(vocab_size=config.data.vocab_size))
        return
    if "parity" in path.parts:
        from odet.experiments.parity import ParityExperimentConfig
        from odet.models.classifier import SequenceClassifier

        config = ParityExperimentConfig.from_dict(load_yaml(path))
        for variant in config.variants:
            assert SequenceClassifier(config.classifier_config(variant)).training
        return
    if load_yaml(path).get("task") == "lm":
        from odet.models import CausalLM
        from odet.training.lm_config import LMTrainConfig, load_any_config

        lm = load_any_config(path)
        assert isinstance(lm, LMTrainConfig)
        assert CausalLM(lm.model_config(vocab_size=65)).num_parameters() > 0
        return
    config = load_train_config(path)
    model = Seq2Seq(config.model_config(vocab_size=config.data.vocab_size))
    assert model.num_parameters() > 0
