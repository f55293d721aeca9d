"""The paper's architectures by name: each preset builds, and its parameter count matches a
count written out from the module shapes of the authors' code (``libeineu/ODE-Transformer``:
``ode_transformer.py``, ``relative_multihead_attention.py``, ``layer_history.py``)."""

from __future__ import annotations

import pytest

from odet.config import ConfigError
from odet.models import Seq2Seq, Seq2SeqConfig
from odet.models.presets import PRESETS

VOCAB = 1000


def authors_count(d: int, f: int, h: int, enc: int, dec: int, relative: bool) -> int:
    """Parameters of the authors' model with all embeddings shared (``--share-all-embeddings``)."""
    ln = 2 * d
    attn = 4 * d * d + 4 * d  # in_proj (3d × d + 3d) and out_proj (d × d + d)
    rpr = (2 * 8 + 1) * (d // h) if relative else 0  # relative_position_keys, keys only
    ffn = d * f + f + f * d + d
    encoder_layer = attn + rpr + 2 * ln + ffn
    decoder_layer = attn + rpr + attn + 3 * ln + ffn  # self-attn, encoder attn, three norms
    history = lambda layers: layers * ln + (layers + 1) ** 2  # noqa: E731  (norms + W)
    encoder = enc * encoder_layer + (2 * d + 1) + ln + history(enc)  # + one RK2 gate, final LN
    decoder = dec * decoder_layer + ln + history(dec)
    return VOCAB * d + encoder + decoder


def dead_history_weights(layers: int) -> int:
    """``layer_history.py`` stores ``W`` as a full ``(L+1)²`` parameter of which only the lower
    triangle is ever read; odet keeps only that triangle."""
    return layers * (layers + 1) // 2


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("encoder_layers", [None, 12])
def test_each_preset_has_the_parameters_of_the_authors_model(name, encoder_layers):
    keys = {"vocab_size": VOCAB, "preset": name, "share_all_embeddings": True}
    if encoder_layers is not None:
        keys["encoder_layers"] = encoder_layers
    config = Seq2SeqConfig.from_dict(keys)
    big = name.endswith("_big")
    d, f, h = (1024, 4096, 16) if big else (512, 2048, 8)
    enc = encoder_layers or 6
    assert (config.d_model, config.ffn_dim, config.num_heads, config.encoder_layers) == (
        d, f, h, enc
    )  # fmt: skip
    expected = authors_count(d, f, h, enc, 6, relative="relative" in name)
    expected -= dead_history_weights(enc) + dead_history_weights(6)
    assert Seq2Seq(config).num_parameters() == expected


def test_a_preset_is_a_set_of_defaults_that_keys_override_and_that_round_trips():
    config = Seq2SeqConfig.from_dict(
        {"vocab_size": 64, "preset": "ode_relative_transformer_t2t_wmt_en_de", "dropout": 0.2}
    )
    assert (config.dropout, config.positions, config.max_relative_distance) == (0.2, "both", 8)
    assert (config.encoder_method, config.coefficients, config.share_gate) == ("rk2", "gated", True)
    assert (config.encoder_history, config.decoder_history) == ("dlcl", "dlcl")
    assert config.field_convention == "layer"
    assert Seq2SeqConfig.from_dict(config.to_dict()) == config


def test_an_unknown_preset_names_the_nearest_one():
    with pytest.raises(
        ConfigError,
        match=r"model.preset = 'ode_relative_transformer_t2t_wmt_en_de_bigg' is not a known "
        r"architecture \(did you mean 'ode_relative_transformer_t2t_wmt_en_de_big'\?\)",
    ):
        Seq2SeqConfig.from_dict(
            {"vocab_size": 64, "preset": "ode_relative_transformer_t2t_wmt_en_de_bigg"}
        )


def test_the_paper_model_keeps_the_residual_in_its_rk_encoder_layer_but_not_in_its_decoder():
    from odet.nn import DecoderField, EncoderField

    model = Seq2Seq(
        Seq2SeqConfig.from_dict(
            {"vocab_size": 64, "preset": "ode_transformer_t2t_wmt_en_de", "d_model": 16,
             "num_heads": 2, "ffn_dim": 32}
        )
    )  # fmt: skip
    encoder = {m.output.convention for m in model.modules() if isinstance(m, EncoderField)}
    decoder = {m.output.convention for m in model.modules() if isinstance(m, DecoderField)}
    assert (encoder, decoder) == ({"layer"}, {"textbook"})
