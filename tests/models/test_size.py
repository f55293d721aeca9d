"""Parameter counts from configs (``odet.models.size``) equal those of the models built, for
every model family, block method, coefficient scheme, layer history and option that adds
weights; a model too large for the memory is refused before it is built."""

from __future__ import annotations

import pytest
from torch import nn

from odet.blocks import COEFFICIENTS, STACK_METHODS
from odet.blocks.stack import coefficient_problem, history_problem
from odet.models import CausalLM, CausalLMConfig, Seq2Seq, Seq2SeqConfig
from odet.models.classifier import ClassifierConfig, SequenceClassifier
from odet.models.size import ModelTooLargeError, check_model_fits, model_parameters

COMBINATIONS = [
    (method, scheme, history)
    for method in STACK_METHODS
    for scheme in COEFFICIENTS
    for history in ("none", "dlcl")
    if not coefficient_problem(method, scheme) and not history_problem(method, history)
]
SMALL = {"d_model": 8, "num_heads": 2, "ffn_dim": 12}


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("share_gate", [False, True])
@pytest.mark.parametrize(("method", "scheme", "history"), COMBINATIONS)
def test_causal_lm_counts_match(method, scheme, history, share_gate):
    config = CausalLMConfig(
        vocab_size=11,
        layers=3,
        method=method,
        coefficients=scheme,
        history=history,
        share_gate=share_gate,
        block_size=7,
        **SMALL,
    )
    assert model_parameters(config) == _count(CausalLM(config))


@pytest.mark.parametrize(
    "options",
    [
        {"positions": "sinusoidal", "tie_embeddings": False},
        {"positions": "relative", "bias": False},
        {"positions": "learned", "bias": False, "tie_embeddings": False},
    ],
)
def test_causal_lm_options_match(options):
    config = CausalLMConfig(vocab_size=11, layers=2, block_size=9, **SMALL, **options)
    assert model_parameters(config) == _count(CausalLM(config))


@pytest.mark.parametrize(("method", "scheme", "history"), COMBINATIONS)
def test_seq2seq_counts_match_for_every_method_on_both_sides(method, scheme, history):
    config = Seq2SeqConfig(
        vocab_size=13,
        encoder_layers=3,
        decoder_layers=2,
        encoder_method=method,
        decoder_method=method,
        coefficients=scheme,
        encoder_history=history,
        decoder_history=history,
        **SMALL,
    )
    assert model_parameters(config) == _count(Seq2Seq(config))


@pytest.mark.parametrize(
    "options",
    [
        {"share_all_embeddings": True},
        {"share_decoder_embeddings": False, "tgt_vocab_size": 17},
        {"tgt_vocab_size": 17},
        {"positions": "both", "relative_values": True, "max_relative_distance": 3},
        {"positions": "relative", "stage_norm": True, "field_convention": "layer"},
        {"encoder_method": "rk2", "coefficients": "gated", "share_gate": True},
        {"encoder_method": "rk4", "decoder_method": "pc", "coefficients": "learned"},
        {"preset": "ode_relative_transformer_t2t_wmt_en_de", "encoder_layers": 2},
        *[
            {"encoder_method": "continuous", "continuous": {"time_conditioning": kind, **more}}
            for kind in ("none", "concat", "embedding", "film")
            for more in ({}, {"layer_norm": False, "spectral_norm": True})
        ],
    ],
)
def test_seq2seq_options_match(options):
    config = Seq2SeqConfig.from_dict(
        {"vocab_size": 13, "encoder_layers": 2, "decoder_layers": 2, **SMALL, **options}
    )
    assert model_parameters(config) == _count(Seq2Seq(config))


@pytest.mark.parametrize(
    "options",
    [
        *[{"encoder_method": m, "coefficients": s} for m, s, h in COMBINATIONS if h == "none"],
        {"encoder_method": "rk2", "coefficients": "gated", "share_layers": True},
        {"encoder_method": "dlcl", "share_layers": True, "pooling": "cls", "final_norm": False},
        {"encoder_method": "continuous", "time_conditioning": "film", "num_classes": 5},
        {"encoder_method": "continuous", "time_conditioning": "concat", "layer_norm": True},
    ],
)
def test_classifier_counts_match(options):
    config = ClassifierConfig.from_dict({"vocab_size": 5, "encoder_layers": 3, **SMALL, **options})
    assert model_parameters(config) == _count(SequenceClassifier(config))


def test_a_model_larger_than_memory_is_refused_before_it_is_built():
    config = Seq2SeqConfig(vocab_size=100, **SMALL)
    parameters = model_parameters(config)
    assert check_model_fits(config, memory=4 * parameters) == parameters
    with pytest.raises(ModelTooLargeError, match=r"GiB requested for the model's [\d,]+ fp32"):
        check_model_fits(config, memory=4 * parameters - 1)
    huge = CausalLMConfig(vocab_size=2**40, d_model=2**20, num_heads=1, ffn_dim=1, layers=1)
    with pytest.raises(ModelTooLargeError):
        check_model_fits(huge)  # counted, not built: 2**60 weights


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda n: Seq2SeqConfig(vocab_size=9, decoder_layers=n, **SMALL), "decoder_layers"),
        (lambda n: CausalLMConfig(vocab_size=9, layers=n, **SMALL), "layers"),
        (lambda n: ClassifierConfig(vocab_size=9, encoder_layers=n, **SMALL), "encoder_layers"),
    ],
)
def test_layer_counts_are_bounded_in_every_config(build, key):
    from odet.config import ConfigError
    from odet.models.config import MAX_LAYERS

    assert getattr(build(MAX_LAYERS), key) == MAX_LAYERS
    with pytest.raises(ConfigError, match=rf"{key} must be at most {MAX_LAYERS}, got {2**40}"):
        build(2**40)
