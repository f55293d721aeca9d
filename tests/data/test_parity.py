import itertools

import numpy as np
import pytest
import torch

from odet.config import ConfigError
from odet.data.parity import (
    BIT_OFFSET,
    PAD_ID,
    ParityData,
    ParityTaskConfig,
    generate_parity,
    make_parity_splits,
)


def _bits(data: ParityData, i: int) -> list[int]:
    return (data.tokens[i, : data.lengths[i]] - BIT_OFFSET).tolist()


def test_label_is_number_of_ones_mod_two_and_padding_follows_the_sequence():
    data = generate_parity(300, 1, 9, seed=0)
    for i in range(len(data)):
        bits, length = _bits(data, i), int(data.lengths[i])
        assert set(bits) <= {0, 1}
        assert data.labels[i] == sum(bits) % 2
        assert (data.tokens[i, length:] == PAD_ID).all()
    assert data.lengths.min() == 1 and data.lengths.max() == 9
    assert data.tokens.shape == (300, 9)


@pytest.mark.parametrize("n", [1, 2, 101, 1000])
def test_labels_are_exactly_balanced(n):
    labels = generate_parity(n, 1, 12, seed=3).labels
    assert int(labels.sum()) == (n + 1) // 2


def test_same_seed_gives_identical_data_and_another_seed_does_not():
    a, b, c = (generate_parity(200, 2, 10, seed=s) for s in (5, 5, 6))
    for x, y in ((a.tokens, b.tokens), (a.lengths, b.lengths), (a.labels, b.labels)):
        assert torch.equal(x, y)
    assert not torch.equal(a.tokens, c.tokens)


def test_every_sequence_of_a_short_length_occurs_with_its_label():
    data = generate_parity(400, 3, 3, seed=0)
    seen = {tuple(_bits(data, i)) for i in range(len(data))}
    assert seen == set(itertools.product((0, 1), repeat=3))


def test_splits_test_every_length_up_to_the_longest_and_train_stays_short():
    config = ParityTaskConfig(
        train_size=500, val_size=50, test_per_length=10, min_length=2, max_length=6,
        test_max_length=9, seed=1,
    )  # fmt: skip
    splits = make_parity_splits(config)
    assert splits.train.lengths.max() <= 6 and splits.val.lengths.max() <= 6
    lengths, counts = torch.unique(splits.test.lengths, return_counts=True)
    assert lengths.tolist() == list(range(2, 10)) and counts.tolist() == [10] * 8
    assert int(splits.test.labels.sum()) == 8 * 5  # balanced within every length
    again = make_parity_splits(config)
    assert torch.equal(again.test.tokens, splits.test.tokens)
    assert not torch.equal(splits.val.tokens[:50], splits.train.tokens[:50, :6])


def test_by_length_and_batches_trim_padding():
    data = generate_parity(60, 1, 8, seed=2)
    total = 0
    for length, part in data.by_length():
        assert part.tokens.shape[1] == length and (part.lengths == length).all()
        assert (part.tokens != PAD_ID).all()
        total += len(part)
    assert total == 60
    gen = torch.Generator().manual_seed(0)
    batches = list(data.batches(16, generator=gen))
    assert [len(b) for b in batches] == [16, 16, 16, 12]
    assert all(b.tokens.shape[1] == int(b.lengths.max()) for b in batches)
    order = np.sort(np.concatenate([b.labels.numpy() for b in batches]))
    assert np.array_equal(order, np.sort(data.labels.numpy()))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_length": 50}, r"min_length <= max_length <= test_max_length"),
        ({"train_size": 0}, r"train_size must be >= 1"),
        ({"seed": 1.5}, r"ParityTaskConfig.seed = 1.5 .* expected int"),
    ],
)
def test_bad_task_configs_are_rejected(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ParityTaskConfig(**kwargs)


def test_bad_generator_arguments_are_rejected():
    with pytest.raises(ValueError, match="need 1 <= min_length <= max_length"):
        generate_parity(10, 0, 5, seed=0)
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        generate_parity(0, 1, 5, seed=0)
