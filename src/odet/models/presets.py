"""The ODE Transformer's architectures by name, as its authors' code registers them.

``model.preset: NAME`` starts a ``Seq2SeqConfig`` from these keys; keys given beside it
override them one by one (e.g. ``encoder_layers: 12`` for the released WMT En-De model).
Read off ``fairseq/models/ode_transformer.py`` of ``libeineu/ODE-Transformer``:

- every ``t2t`` arch is pre-norm with attention and ReLU dropout 0.1, a learnable dense layer
  history (``learnable_dense``: DLCL, pre-norm) around the encoder and decoder, and an RK2
  encoder (``enc_calculate_num = 2``) whose one gate ``sigmoid(W [k1; k2] + b)`` is shared by
  all blocks (``rk_type = learnable``); its layer keeps its own residual (``F(z) = Layer(z)``,
  the ``"layer"`` field convention); the decoder takes one evaluation per layer, an ordinary
  pre-norm residual step (Euler with the ``"textbook"`` convention);
- ``relative`` adds Shaw et al.'s relative keys, clipped at 8, to every self-attention, with
  the absolute sinusoids kept (``positions: both``);
- ``big`` is 1024 wide, 16 heads, FFN 4096, dropout 0.3.

Embedding sharing is a training option there (``--share-all-embeddings``), so it is not part
of a preset; the shipped WMT configs set it.
"""

from __future__ import annotations

from typing import Any

_T2T: dict[str, Any] = {
    "d_model": 512,
    "num_heads": 8,
    "ffn_dim": 2048,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_method": "rk2",
    "decoder_method": "euler",
    "coefficients": "gated",
    "share_gate": True,
    "field_convention": "layer",
    "decoder_field_convention": "textbook",
    "encoder_history": "dlcl",
    "decoder_history": "dlcl",
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "activation": "relu",
    "positions": "sinusoidal",
}
_RELATIVE: dict[str, Any] = {"positions": "both", "max_relative_distance": 8}
_BIG: dict[str, Any] = {"d_model": 1024, "num_heads": 16, "ffn_dim": 4096, "dropout": 0.3}

PRESETS: dict[str, dict[str, Any]] = {
    "ode_transformer_t2t_wmt_en_de": _T2T,
    "ode_relative_transformer_t2t_wmt_en_de": {**_T2T, **_RELATIVE},
    "ode_relative_transformer_t2t_wmt_en_de_big": {**_T2T, **_RELATIVE, **_BIG},
}
"""Preset name → ``Seq2SeqConfig`` keys."""
