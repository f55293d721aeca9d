"""odet.config: YAML loading catches what YAML itself lets through."""

from __future__ import annotations

import pytest

from odet.config import ConfigError, load_yaml, parse_yaml


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
