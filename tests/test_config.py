"""odet.config: YAML loading catches what YAML itself lets through."""

from __future__ import annotations

import pytest

from odet.config import ConfigError, load_yaml


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
