"""odet.config: YAML loading and the config checks catch what YAML itself lets through."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import pytest

from odet.config import (
    SEED_MAX,
    ConfigError,
    check_name,
    check_seed,
    check_types,
    load_yaml,
    parse_yaml,
)


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 0.1\n  warmup_updates: 4\n  lr: 0.2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"line 4.*duplicate key 'lr' \(first given at line 2\)"):
        load_yaml(path)


def test_keys_merged_from_an_anchor_may_be_overridden(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nvariant:\n  <<: *b\n  y: 3\n", encoding="utf-8")
    assert load_yaml(path)["variant"] == {"x": 1, "y": 3}


def test_the_same_key_in_different_mappings_is_fine(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: {lr: 1}\nb: {lr: 2}\n", encoding="utf-8")
    assert load_yaml(path) == {"a": {"lr": 1}, "b": {"lr": 2}}


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-3", 1e-3), ("-2E5", -2e5), ("3.2e+4", 3.2e4), ("1.0e-3", 1e-3), (".5", 0.5),
     ("2", 2), ("1_000", 1000), (".inf", float("inf")), ("1e3a", "1e3a"), ("x1e3", "x1e3"),
     ("rk2", "rk2")],
)  # fmt: skip
def test_exponent_floats_without_a_dot_are_numbers(text, value):
    assert parse_yaml(text) == value
    assert type(parse_yaml(text)) is type(value)


def test_a_config_file_may_write_a_rate_as_1e_3(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 1e-3\n  betas: [0.9, 98e-2]\n")
    assert load_yaml(path) == {"optim": {"lr": 1e-3, "betas": [0.9, 0.98]}}


@dataclasses.dataclass(frozen=True)
class _Settings:
    rate: float = 1.0
    pair: tuple[float, float] = (0.5, 0.5)
    cap: float | None = None
    files: tuple[str, ...] = ()
    mode: Literal["fast", "exact"] = "fast"
    maybe: Literal["left", "right"] | None = None

    def __post_init__(self) -> None:
        check_types(self)


@pytest.mark.parametrize(
    "values",
    [{"rate": math.inf}, {"rate": -math.inf}, {"rate": math.nan}, {"pair": (0.5, math.nan)},
     {"cap": math.inf}],
)  # fmt: skip
def test_no_float_setting_may_be_nan_or_infinite(values):
    with pytest.raises(ConfigError, match=r"_Settings\.\w+ = .*(inf|nan).* a finite number"):
        _Settings(**values)


def test_a_tuple_of_any_length_is_spelled_as_the_yaml_list_it_is_written_as():
    with pytest.raises(ConfigError, match=r"expected list\[str\]"):
        _Settings(files="a.txt")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [-1, SEED_MAX + 1, 2**70])
def test_a_seed_outside_what_every_generator_takes_is_refused(seed):
    with pytest.raises(ConfigError, match=rf"seed must lie in \[0, {SEED_MAX}\], got {seed}"):
        check_seed(seed, "seed")
    check_seed(SEED_MAX, "seed")


@pytest.mark.parametrize("name", ["", " ", ".", "..", "../x", "a/b", "a\\b", 3, None])
def test_a_name_that_is_not_one_plain_directory_name_is_refused(name):
    with pytest.raises(ConfigError, match="cannot name a directory"):
        check_name(name, "variant")
    check_name("rk2-gated.v2", "variant")


@pytest.mark.parametrize(
    ("values", "hint"),
    [({"mode": "exakt"}, " (did you mean 'exact'?)"),
     ({"maybe": "rigth"}, " (did you mean 'right'?)"),
     ({"mode": "zzz"}, ""), ({"mode": 3}, "")],
)  # fmt: skip
def test_a_misspelt_choice_names_the_nearest_one(values, hint):
    with pytest.raises(ConfigError) as error:
        _Settings(**values)
    assert str(error.value).endswith("'fast' | 'exact'" + hint) or str(error.value).endswith(
        "'left' | 'right' | None" + hint
    )
