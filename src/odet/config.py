"""Typed configuration: dataclasses checked against their annotations, loaded from dicts/YAML.

Every config class in odet is a dataclass whose ``__post_init__`` calls ``check_types(self)``
and then checks its own value ranges. ``from_dict`` rejects unknown keys (suggesting the nearest
valid one), so a typo in a YAML file is an error, never a silently ignored option.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key and what is allowed."""


T = TypeVar("T")


def describe_type(tp: Any) -> str:
    """A readable spelling of a type annotation: ``'fp32' | 'bf16'``, ``int | None``,
    ``list[str]`` for a tuple of any length (written as a YAML list), ..."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(v) for v in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(describe_type(a) for a in typing.get_args(tp))
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"list[{describe_type(args[0])}]"  # any length: a YAML list
    if origin in (tuple, list):
        return f"{origin.__name__}[{', '.join(describe_type(a) for a in args)}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if origin is Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        if not isinstance(value, origin):
            return False
        args = typing.get_args(tp)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        if origin is list:
            return all(_matches(v, args[0]) for v in value) if args else True
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args))
    if origin is dict:
        return isinstance(value, dict)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


INT_MAX = 2**63 - 1
"""The largest integer setting: torch, NumPy and the tokenizers take 64-bit integers."""


def _out_of_range(value: Any) -> bool:
    """Whether ``value`` is, or is a tuple/list holding, an int beyond 64 bits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return not -INT_MAX - 1 <= value <= INT_MAX
    return isinstance(value, tuple | list) and any(_out_of_range(v) for v in value)


def _non_finite(value: Any) -> bool:
    """Whether ``value`` is, or is a tuple/list holding, a NaN or infinite float."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, tuple | list) and any(_non_finite(v) for v in value)


def _suggest_choice(value: Any, tp: Any) -> str:
    """`` (did you mean 'x'?)`` when ``tp`` names string choices and ``value`` is close to one."""

    def choices(t: Any) -> list[str]:
        if typing.get_origin(t) is Literal:
            return [a for a in typing.get_args(t) if isinstance(a, str)]
        if typing.get_origin(t) in (Union, types.UnionType):
            return [c for a in typing.get_args(t) for c in choices(a)]
        return []

    return suggest(value, choices(tp)) if isinstance(value, str) else ""


def check_types(obj: Any) -> None:
    """Raise ``ConfigError`` if a field of dataclass ``obj`` does not match its annotation.

    Ints are accepted (and converted) where floats are expected; bools are never ints; a float
    (alone or in a tuple or list) must be finite: no setting means NaN or infinity; an int must
    fit in 64 bits (no setting is larger, and torch cannot take it).
    """
    hints = typing.get_type_hints(type(obj))
    name = type(obj).__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        tp = hints[f.name]
        if not _matches(value, tp):
            raise ConfigError(
                f"{name}.{f.name} = {value!r} ({type(value).__name__}) is invalid; "
                f"expected {describe_type(tp)}{_suggest_choice(value, tp)}"
            )
        if tp is not Any and _non_finite(value):
            raise ConfigError(f"{name}.{f.name} = {value!r} is invalid; expected a finite number")
        if tp is not Any and _out_of_range(value):
            raise ConfigError(
                f"{name}.{f.name} = {value!r} is invalid; expected an int of at most 64 bits "
                "(|value| < 2**63)"
            )
        if tp is float and isinstance(value, int):
            object.__setattr__(obj, f.name, float(value))


def check(condition: bool, message: str) -> None:
    """Raise ``ConfigError(message)`` unless ``condition``."""
    if not condition:
        raise ConfigError(message)


SEED_MAX = 2**32 - 1
"""The largest seed: every random generator odet seeds (torch, NumPy, Python) takes
``[0, SEED_MAX]``."""


def check_seed(seed: int, key: str) -> None:
    """Raise ``ConfigError`` unless ``seed`` (the value of ``key``) lies in ``[0, SEED_MAX]``."""
    check(0 <= seed <= SEED_MAX, f"{key} must lie in [0, {SEED_MAX}], got {seed}")


MAX_THREADS = 1024
"""The most CPU threads a setting may ask for: more than any CPU odet runs on has; far more
crashes torch's thread pool (a segmentation fault at 10**6)."""


def check_threads(threads: int, key: str) -> None:
    """Raise ``ConfigError`` unless ``threads`` (the value of ``key``) lies in
    ``[0, MAX_THREADS]`` (0: torch's default)."""
    check(
        0 <= threads <= MAX_THREADS,
        f"{key} must lie in [0, {MAX_THREADS}] (0: torch's default), got {threads}",
    )


def check_name(name: object, key: str) -> None:
    """Raise ``ConfigError`` unless ``name`` (the value of ``key``) can name a directory inside
    another: a non-empty string, no path separator, not ``.`` or ``..``."""
    check(
        isinstance(name, str)
        and bool(name.strip())
        and name not in (".", "..")
        and not set(name) & {"/", "\\", "\0"},
        f"{key} {name!r} cannot name a directory: use a plain name (no '/', not '.' or '..')",
    )


def suggest(key: str, valid: typing.Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid key, or ``""``."""
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def require_mapping(data: object, where: str) -> None:
    """Raise ``ConfigError`` unless ``data`` is a mapping (a config read from YAML or JSON)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")


def from_dict(cls: type[T], data: Mapping[str, Any], *, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys are errors with a suggestion.

    Nested dataclass fields are built recursively from nested mappings.
    """
    require_mapping(data, where or cls.__name__)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(f"unknown config key {path!r}{suggest(str(key), fields)}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
            value = from_dict(tp, value, where=path)  # type: ignore[arg-type]
        elif typing.get_origin(tp) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or cls.__name__}: missing required key(s) {missing}")
    try:
        return cls(**kwargs)
    except ConfigError as err:
        message = str(err)
        named = message.startswith((f"{where}.", f"{where}:", f"{where} "))
        raise ConfigError(f"{where}: {message}" if where and not named else message) from None


def to_dict(obj: Any) -> dict[str, Any]:
    """A plain, JSON/YAML-serialisable dict of a (nested) config dataclass."""
    return _plain(dataclasses.asdict(obj))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class YAMLLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads ``1e-3`` as a float, as YAML 1.2 and Python do (YAML 1.1,
    PyYAML's default, wants ``1.0e-3`` and makes ``1e-3`` a string), so a learning rate written
    the usual way is a number in configs and ``--set`` overrides alike."""


YAMLLoader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
YAMLLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """``text`` parsed as YAML by :class:`YAMLLoader` (``1e-3`` is a float)."""
    return yaml.load(text, Loader=YAMLLoader)


class _UniqueKeyLoader(YAMLLoader):
    """``yaml.SafeLoader`` that rejects a key given twice in one mapping (YAML's default keeps
    the last value silently); keys merged in with ``<<: *anchor`` may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given at line {first})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def file_kind(path: Path) -> str:
    """What a path that exists but is not a regular file or directory is, for messages: "a named
    pipe (FIFO)", "a socket", "a character device" …"""
    import stat

    mode = path.stat().st_mode
    kinds = {
        stat.S_ISFIFO: "a named pipe (FIFO)",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "a special file")


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file, malformed YAML or a key given twice in one mapping
    is a ``ConfigError``."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory, not a file")
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"config file {path} is {file_kind(path)}, not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise ConfigError(f"config file {path} is empty: no settings")
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    except yaml.YAMLError as err:
        where, problem = "", str(err)
        if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
            mark = err.problem_mark
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
            problem = err.problem or problem
        raise ConfigError(f"{path}: malformed YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(f"config file {path} is empty: no settings (only comments)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data
