"""Checkpoints written by earlier code still load and compute the same thing.

The fixtures under ``tests/fixtures/checkpoints/`` were written once by
``tests/fixtures/make_checkpoints.py`` (config spellings of that time included, e.g.
``encoder_method: adaptive``); this pins that later code reads them and gives the same logits,
solve statistics and hypotheses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from odet.models import ClassifierConfig, Seq2Seq, SequenceClassifier

ROOT = Path(__file__).parents[1] / "fixtures" / "checkpoints"
SEQ2SEQ = sorted(p.name for p in ROOT.iterdir() if p.name != "classifier-continuous")


def test_the_fixtures_are_there():
    assert len(SEQ2SEQ) == 6


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_an_old_seq2seq_checkpoint_loads_and_decodes_identically(name):
    directory = ROOT / name
    model = Seq2Seq.from_pretrained(directory).eval()
    expected = load_file(directory / "expected.safetensors")
    with torch.no_grad():
        logits = model(expected["src"], expected["tgt"])
    torch.testing.assert_close(logits, expected["logits"], rtol=0, atol=1e-5)
    hyps = json.loads((directory / "expected.json").read_text(encoding="utf-8"))
    assert model.generate(expected["src"], beam_size=1, max_len=12) == hyps["greedy"]
    assert model.generate(expected["src"], beam_size=3, max_len=12) == hyps["beam3"]


def test_an_old_continuous_classifier_loads_and_classifies_identically():
    directory = ROOT / "classifier-continuous"
    config = ClassifierConfig.from_dict(
        json.loads((directory / "config.json").read_text(encoding="utf-8"))
    )
    model = SequenceClassifier(config).eval()
    model.load_state_dict(load_file(directory / "model.safetensors"))
    expected = load_file(directory / "expected.safetensors")
    with torch.no_grad():
        out = model(expected["src"])
    torch.testing.assert_close(out.logits, expected["logits"], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.stats.nfe.float(), expected["nfe"], rtol=0, atol=0)
    torch.testing.assert_close(out.stats.arclength, expected["arclength"], rtol=0, atol=1e-5)
