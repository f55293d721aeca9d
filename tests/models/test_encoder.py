"""The one encoder builder, the canonical 'continuous' name and its old 'adaptive' spelling."""

import json
from pathlib import Path

import pytest
import torch

from odet.blocks import StackOptions, StackResult
from odet.config import ConfigError
from odet.models import (
    ClassifierConfig,
    ContinuousEncoderConfig,
    Seq2Seq,
    Seq2SeqConfig,
    SequenceClassifier,
    build_encoder,
)
from odet.nn import FieldSpec
from odet.ode import SolverOptions

FIXTURES = Path(__file__).parents[1] / "fixtures" / "checkpoints"
SMALL = dict(vocab_size=40, d_model=16, num_heads=2, ffn_dim=32, encoder_layers=2)


@pytest.mark.parametrize("method", ["euler", "rk2", "dlcl", "continuous"])
def test_every_encoder_integrates_to_a_stack_result(method):
    encoder = build_encoder(
        method,
        FieldSpec(16, 2, 32),
        2,
        stack=StackOptions(d_model=16),
        continuous=ContinuousEncoderConfig(solver="rk4", fixed_steps=2),
    )
    x = torch.randn(3, 5, 16)
    out = encoder.integrate(x, padding_mask=torch.zeros(3, 5, dtype=torch.bool))
    assert isinstance(out, StackResult) and out.y.shape == x.shape
    assert (out.stats is None) == (method != "continuous")


def test_share_layers_ties_every_block_to_one_field():
    encoder = build_encoder(
        "euler",
        FieldSpec(16, 2, 32),
        3,
        stack=StackOptions(),
        continuous=ContinuousEncoderConfig(),
        share_layers=True,
    )
    assert len({id(block.field) for block in encoder.blocks}) == 1


def test_the_old_adaptive_spelling_is_normalised_to_continuous():
    old = Seq2SeqConfig.from_dict({**SMALL, "encoder_method": "adaptive"})
    assert old.encoder_method == "continuous"
    assert old == Seq2SeqConfig(**SMALL, encoder_method="continuous")
    assert Seq2SeqConfig.from_dict(old.to_dict()) == old
    classifier = ClassifierConfig.from_dict({"vocab_size": 5, "encoder_method": "adaptive"})
    assert classifier.encoder_method == "continuous"


def test_the_old_seq2seq_checkpoint_config_with_adaptive_loads_as_continuous():
    data = json.loads((FIXTURES / "adaptive-dopri5" / "config.json").read_text("utf-8"))
    assert data["config"]["encoder_method"] == "adaptive"
    model = Seq2Seq.from_pretrained(FIXTURES / "adaptive-dopri5")
    assert model.config.encoder_method == "continuous"


def test_an_old_flat_classifier_config_with_the_adaptive_spelling_loads():
    data = json.loads((FIXTURES / "classifier-continuous" / "config.json").read_text("utf-8"))
    config = ClassifierConfig.from_dict({**data, "encoder_method": "adaptive"})
    assert config.encoder_method == "continuous"
    assert config == ClassifierConfig.from_dict(data)
    assert config.continuous.solver_options == SolverOptions(rtol=1e-4, atol=1e-4, arclength=True)
    assert ClassifierConfig.from_dict(config.to_dict()) == config  # the nested layout loads too
    SequenceClassifier(config)


def test_classifier_continuous_keys_flat_or_nested_but_not_both():
    nested = ClassifierConfig.from_dict(
        {"vocab_size": 5, "continuous": {"solver": "rk4", "fixed_steps": 2}}
    )
    flat = ClassifierConfig.from_dict({"vocab_size": 5, "solver": "rk4", "fixed_steps": 2})
    assert nested == flat and flat.continuous.time_conditioning == "none"
    with pytest.raises(ConfigError, match="flat or under 'continuous', not both"):
        ClassifierConfig.from_dict({"vocab_size": 5, "rtol": 0.1, "continuous": {"atol": 0.1}})
    with pytest.raises(ConfigError, match=r"unknown config key 'model.continuous.rtl'"):
        ClassifierConfig.from_dict({"vocab_size": 5, "continuous": {"rtl": 0.1}})


def test_continuous_encoder_config_is_solver_options_plus_the_field():
    config = ContinuousEncoderConfig(solver="rk4", fixed_steps=3, time_conditioning="film")
    assert isinstance(config, SolverOptions)
    assert config.solver_options == SolverOptions(solver="rk4", fixed_steps=3)
    with pytest.raises(ConfigError, match="max_frequency must be a finite number >= 1"):
        ContinuousEncoderConfig(max_frequency=0.5)
