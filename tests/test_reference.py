"""The configuration reference is generated from the code and kept in step with it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from odet.cli import main
from odet.reference import configuration_reference, field_docs, resolved_config_yaml
from odet.training.config import TrainConfig, load_train_config

ROOT = Path(__file__).resolve().parents[1]


def test_docs_configuration_md_is_up_to_date():
    current = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert current == configuration_reference(), "run: odet config docs --out docs/configuration.md"


@dataclass(frozen=True)
class _Documented:
    """A config.

    Attributes:
        b: Meaning of b,
            over two lines.
    """

    a: int = 1
    """Meaning of a."""
    b: str = "x"
    c: float = 0.5


def test_field_docs_reads_attribute_docstrings_and_an_attributes_section():
    assert field_docs(_Documented) == {"a": "Meaning of a.", "b": "Meaning of b, over two lines."}


def test_config_show_prints_every_default_and_loads_back_as_the_same_config(tmp_path, capsys):
    path = ROOT / "configs" / "multi30k" / "euler.yaml"
    assert main(["config", "show", str(path), "--set", "optim.lr=0.003"]) == 0
    shown = capsys.readouterr().out
    assert shown == resolved_config_yaml(str(path), ["optim.lr=0.003"])
    data = yaml.safe_load(shown)
    assert data["optim"]["lr"] == 0.003 and "norm_eps" in data["model"]
    resolved = TrainConfig.from_dict(data)
    original = load_train_config(path, ["optim.lr=0.003"])
    assert resolved.model_config(8000) == original.model_config(8000)
    assert (resolved.data, resolved.optim, resolved.train) == (
        original.data,
        original.optim,
        original.train,
    )


def test_config_docs_check_fails_on_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n", encoding="utf-8")
    assert main(["config", "docs", "--out", str(stale), "--check"]) == 2
    assert "is out of date" in capsys.readouterr().err
    assert stale.read_text(encoding="utf-8") == "old\n"


def test_every_key_of_the_reference_has_a_meaning():
    from odet.reference import undocumented

    assert undocumented() == []


def test_config_docs_out_replaces_an_older_reference_but_no_other_file(tmp_path, capsys):
    from odet.reference import configuration_reference

    text = configuration_reference()
    older = tmp_path / "configuration.md"
    older.write_bytes(text.split("## ")[0].replace("\n", "\r\n").encode() + b"## Gone\r\n")
    assert main(["config", "docs", "--out", str(older)]) == 0
    assert older.read_text(encoding="utf-8") == text
    notes = tmp_path / "notes.md"
    notes.write_text("# Configuration reference\n\nmy own notes\n", encoding="utf-8")
    assert main(["config", "docs", "--out", str(notes)]) == 2
    assert "not a configuration reference" in capsys.readouterr().err
    assert notes.read_text(encoding="utf-8") == "# Configuration reference\n\nmy own notes\n"
