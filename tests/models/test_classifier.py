import itertools

import pytest
import torch

from odet.config import ConfigError
from odet.models.classifier import (
    ClassifierConfig,
    ClassifierOutput,
    SequenceClassifier,
    classification_loss,
)

SMALL = dict(vocab_size=3, d_model=16, num_heads=2, ffn_dim=32)


def _all_parity_sequences(lengths: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every binary sequence of the given lengths: tokens (N, max len) and parity labels."""
    seqs = [s for n in lengths for s in itertools.product((0, 1), repeat=n)]
    tokens = torch.zeros(len(seqs), max(lengths), dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(s) + 1
    return tokens, torch.tensor([sum(s) % 2 for s in seqs])


def _model(**overrides) -> SequenceClassifier:
    torch.manual_seed(0)
    return SequenceClassifier(ClassifierConfig.from_dict({**SMALL, **overrides}))


def test_discrete_classifier_learns_parity_of_short_sequences_exactly():
    tokens, labels = _all_parity_sequences((2, 3, 4))  # 28 sequences
    torch.manual_seed(0)
    config = ClassifierConfig(
        vocab_size=3, d_model=32, num_heads=4, ffn_dim=64, encoder_method="euler", encoder_layers=2
    )
    model = SequenceClassifier(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        output = model(tokens)
        accuracy = (output.logits.argmax(-1) == labels).float().mean().item()
        if accuracy == 1.0:
            break
        optimizer.zero_grad()
        classification_loss(output, labels).total.backward()
        optimizer.step()
    assert accuracy == 1.0
    assert output.stats is None


@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("method", ["rk4", "continuous"])
def test_padding_does_not_change_a_sequences_logits(method, pooling):
    fixed = {"solver": "rk4", "fixed_steps": 2} if method == "continuous" else {}
    model = _model(encoder_method=method, pooling=pooling, **fixed).eval()
    alone = model(torch.tensor([[1, 2, 2]])).logits
    batch = model(torch.tensor([[1, 2, 2, 0, 0], [2, 2, 1, 1, 2]])).logits
    torch.testing.assert_close(batch[0], alone[0], atol=1e-5, rtol=0)


def test_continuous_classifier_returns_solve_stats_and_arclength_loss():
    model = _model(encoder_method="continuous", encoder_layers=2, arclength=True)
    tokens, labels = _all_parity_sequences((2, 3))
    output = model(tokens)
    assert output.logits.shape == (12, 2)
    assert output.stats is not None and output.stats.ok
    assert (output.stats.nfe >= 2 * 6).all()  # two dopri5 solves, at least one step each
    loss = classification_loss(output, labels, arclength_weight=0.5)
    mean_arclength = output.stats.arclength.mean()
    torch.testing.assert_close(loss.total, loss.cross_entropy + 0.5 * mean_arclength)
    loss.total.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_arclength_weight_without_arclength_is_an_error():
    output = ClassifierOutput(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="needs a continuous encoder with arclength=True"):
        classification_loss(output, torch.tensor([0, 1]), arclength_weight=0.1)
    with pytest.raises(ValueError, match="arclength_weight must be >= 0"):
        classification_loss(output, torch.tensor([0, 1]), arclength_weight=-1.0)


def test_shared_layers_tie_every_block_to_one_field():
    tied = _model(encoder_method="euler", encoder_layers=3, share_layers=True)
    one = _model(encoder_method="euler", encoder_layers=1)
    untied = _model(encoder_method="euler", encoder_layers=3)
    assert tied.num_parameters() == one.num_parameters() < untied.num_parameters()
    fields = {id(block.field) for block in tied.encoder.blocks}
    assert len(fields) == 1


def test_empty_and_bad_token_inputs_are_rejected():
    model = _model()
    with pytest.raises(ValueError, match=r"rows \[1\] of tokens contain only padding"):
        model(torch.tensor([[1, 2], [0, 0]]))
    with pytest.raises(ValueError, match=r"tokens must be a \(B, T\) LongTensor"):
        model(torch.tensor([1, 2]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"encoder_method": "eular"}, r"'eular' is not a known method \(did you mean 'euler'\?\)"),
        ({"d_model": 10, "num_heads": 4}, r"d_model \(10\) must be divisible by num_heads \(4\)"),
        ({"time_conditioning": "film"}, r"needs encoder_method='continuous'"),
        ({"pooling": "max"}, r"ClassifierConfig.pooling = 'max' .* expected 'mean' \| 'cls'"),
        (
            {"encoder_method": "continuous", "solver": "rk4"},
            r"solver = 'rk4' is not an adaptive method of backend 'torchode'",
        ),
        (
            {"encoder_method": "continuous", "solver": "tsit5", "fixed_steps": 3},
            r"with fixed_steps must be a tableau",
        ),
        ({"encoder_layers": True}, r"encoder_layers = True \(bool\) is invalid"),
        ({"num_classes": 1}, r"num_classes must be >= 2"),
    ],
)
def test_bad_configs_are_rejected_with_clear_messages(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ClassifierConfig.from_dict({**SMALL, **overrides})


def test_from_dict_rejects_unknown_keys_with_a_suggestion_and_round_trips():
    with pytest.raises(ConfigError, match=r"unknown config key 'model.d_modle' \(did you mean"):
        ClassifierConfig.from_dict({**SMALL, "d_modle": 8})
    config = ClassifierConfig.from_dict(
        {**SMALL, "encoder_method": "continuous", "fixed_steps": 4, "solver": "rk2"}
    )
    assert ClassifierConfig.from_dict(config.to_dict()) == config


def test_a_classifier_config_that_is_not_a_mapping_is_a_config_error():
    with pytest.raises(ConfigError, match="model: expected a mapping, got list"):
        ClassifierConfig.from_dict([("vocab_size", 4)])  # type: ignore[arg-type]
