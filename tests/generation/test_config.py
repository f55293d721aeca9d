"""GenerationConfig: validation, and that its strategy comes from the one builder."""

import ast
import dataclasses
import inspect
import itertools

import pytest

from odet.config import ConfigError
from odet.generation import BeamSearch, GenerationConfig, Greedy, Sampling, make_strategy


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="precision"):
        GenerationConfig(precision="fp16")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (GenerationConfig(), BeamSearch(beam_size=5)),
        (GenerationConfig(beam_size=1), Greedy()),
        (GenerationConfig(beam_size=1, no_repeat_ngram_size=2), BeamSearch(1, 1.0, 2)),
        (GenerationConfig(strategy="greedy", length_penalty=0.5), Greedy(0.5)),
        (
            GenerationConfig(beam_size=4, length_penalty=0.6),
            make_strategy("beam", beam_size=4, length_penalty=0.6),
        ),
    ],
)
def test_config_strategies_equal_make_strategy_ones(config, expected):
    assert config.make_strategy() == expected


def test_sampling_config_builds_a_seeded_sampler():
    config = GenerationConfig(strategy="sample", temperature=0.7, top_k=5, top_p=0.9, seed=3)
    sampler, same = (
        config.make_strategy(),
        make_strategy("sample", temperature=0.7, top_k=5, top_p=0.9, seed=3),
    )
    assert isinstance(sampler, Sampling) and isinstance(same, Sampling)
    assert dataclasses.replace(sampler, generator=None) == dataclasses.replace(same, generator=None)
    assert sampler.generator is not None and same.generator is not None
    assert (sampler.generator.get_state() == same.generator.get_state()).all()


def test_every_field_has_a_one_line_docstring():
    tree = ast.parse(inspect.getsource(GenerationConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    documented = {
        node.target.id: following.value.value
        for node, following in itertools.pairwise(body)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
    }
    assert set(documented) == {f.name for f in dataclasses.fields(GenerationConfig)}
    assert all("\n" not in doc for doc in documented.values())
