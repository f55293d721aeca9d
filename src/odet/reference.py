"""The configuration reference, generated from the config dataclasses themselves.

``docs/configuration.md`` is ``configuration_reference()``; a test fails when the file is out of
date, so the reference a user reads is the code's. A field's meaning is its attribute docstring
(the string literal right below the field) or, failing that, its entry in an ``Attributes:``
section of the class docstring.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import typing
from collections.abc import Iterator
from typing import Any

from odet.config import describe_type
from odet.models import CausalLMConfig, Seq2SeqConfig
from odet.training.config import _FROM_TOKENIZER, DataConfig, LoopConfig, OptimConfig, TrainConfig
from odet.training.lm_config import LMDataConfig, LMLoopConfig, LMOptimConfig, LMTrainConfig

SECTIONS: tuple[tuple[str, type, str], ...] = (
    ("data", DataConfig, "Where the data is and how it becomes token ids."),
    (
        "model",
        Seq2SeqConfig,
        "The model (`Seq2SeqConfig`); sizes of vocabularies and special "
        "ids come from the tokenizer.",
    ),
    ("optim", OptimConfig, "The optimiser, the learning-rate schedule and the loss."),
    ("train", LoopConfig, "The training loop: batches, stopping, precision, checkpoints."),
)
LM_SECTIONS: tuple[tuple[str, type, str], ...] = (
    ("data", LMDataConfig, "One text file, its split, vocabulary and windows."),
    (
        "model",
        CausalLMConfig,
        "The model (`CausalLMConfig`); `vocab_size` comes from the vocabulary.",
    ),
    ("optim", LMOptimConfig, "AdamW, warmup and cosine decay, clipping."),
    ("train", LMLoopConfig, "The training loop: length, estimates, precision, checkpoints."),
)


def field_docs(cls: type) -> dict[str, str]:
    """``{field: one-line meaning}`` from attribute docstrings or an ``Attributes:`` section."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        docs |= _attributes_section(inspect.getdoc(klass) or "")
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = _first_sentence(following.value.value)
    return docs


def _attributes_section(doc: str) -> dict[str, str]:
    docs: dict[str, str] = {}
    lines = doc.splitlines()
    if "Attributes:" not in (line.strip() for line in lines):
        return docs
    start = [line.strip() for line in lines].index("Attributes:") + 1
    name = None
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            break
        head, sep, rest = stripped.partition(":")
        if sep and " " not in head.split("(")[0].strip():
            name = head.split("(")[0].strip()
            docs[name] = rest.strip()
        elif name is not None:
            docs[name] = f"{docs[name]} {stripped}".strip()
    return {k: _first_sentence(v) for k, v in docs.items()}


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return text.replace("|", "\\|")


def _type_cell(tp: Any) -> str:
    return describe_type(tp).replace("|", "\\|")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "required"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def _rows(cls: type, prefix: str, skip: tuple[str, ...] = ()) -> Iterator[str]:
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    nested: list[tuple[str, type]] = []
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name.startswith("_"):
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            nested.append((f.name, tp))  # type: ignore[arg-type]
            continue
        meaning = docs.get(f.name, "")
        yield f"| `{prefix}{f.name}` | {_type_cell(tp)} | {_default(f)} | {meaning} |"
    for name, tp in nested:
        yield from _rows(tp, f"{prefix}{name}.")


def configuration_reference() -> str:
    """The Markdown of ``docs/configuration.md``."""
    top = TrainConfig
    lines = [
        "# Configuration reference",
        "",
        "Generated from the config dataclasses by `odet config docs` — do not edit by hand. "
        "Every key of an `odet train` YAML file, its type (allowed values), default and "
        "meaning. Unknown keys and bad values are one-line errors before any work starts; "
        "`odet config show CONFIG` prints a config with every default filled in.",
        "",
        "## Top level",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += _top_rows(top)
    generation = typing.get_type_hints(top)["generation"]
    for name, cls, about in (*SECTIONS, ("generation", generation, "Decoding settings.")):
        skip = _FROM_TOKENIZER if cls is Seq2SeqConfig else ()
        lines += ["", f"## `{name}`", "", about, "", "| key | type | default | meaning |"]
        lines += ["|---|---|---|---|", *_rows(cls, f"{name}.", skip)]
    lines += [
        "",
        "# Language models (`task: lm`)",
        "",
        "A config with `task: lm` trains a `CausalLM` on one text (`odet.training.lm`); its "
        "sections are these.",
        "",
        "## Top level (`task: lm`)",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        *_top_rows(LMTrainConfig),
    ]
    for name, cls, about in LM_SECTIONS:
        skip = ("vocab_size",) if cls is CausalLMConfig else ()
        lines += ["", f"## `{name}` (`task: lm`)", "", about, ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        lines += _rows(cls, f"{name}.", skip)
    return "\n".join(lines) + "\n"


def _top_rows(top: type) -> list[str]:
    docs = field_docs(top)
    rows = []
    for f in dataclasses.fields(top):
        tp = typing.get_type_hints(top)[f.name]
        if dataclasses.is_dataclass(tp) or f.name == "model":
            continue
        rows.append(f"| `{f.name}` | {_type_cell(tp)} | {_default(f)} | {docs.get(f.name, '')} |")
    return rows


def undocumented() -> list[str]:
    """Keys of the reference without a meaning (a test keeps this empty)."""
    return [line.split("`")[1] for line in configuration_reference().splitlines()
            if line.startswith("| `") and line.rstrip().endswith("|  |")]  # fmt: skip


def resolved_config_yaml(path: str, overrides: list[str] | None = None) -> str:
    """A training config as ``odet train`` will run it: every section with its defaults, the
    ``model`` section as the full ``Seq2SeqConfig`` (less what the tokenizer sets)."""
    import yaml

    from odet.training.lm_config import load_any_config

    config = load_any_config(path, overrides)
    data = config.to_dict()
    if isinstance(config, LMTrainConfig):
        model = config.model_config(vocab_size=1).to_dict()
        data["model"] = {k: v for k, v in model.items() if k != "vocab_size"}
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    model = config.model_config(vocab_size=max(64, config.data.vocab_size)).to_dict()
    data["model"] = {k: v for k, v in model.items() if k not in _FROM_TOKENIZER}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
