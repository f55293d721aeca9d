"""Model directories: ``config.json`` + ``model.safetensors``. No pickle anywhere.

Files are written with :func:`odet.io.atomic_write` (temporary name, fsync, rename), so a crash
never leaves a half-written file under the final name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from odet._version import __version__
from odet.io import atomic_write

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1

M = TypeVar("M", bound=nn.Module)


class CheckpointError(ValueError):
    """A model directory is missing, incomplete, corrupt or of another format version."""


def save_model_dir(
    model: nn.Module, config: dict[str, Any], path: str | Path, *, model_type: str
) -> Path:
    """Write ``model``'s weights and its config (with the format version) to directory ``path``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"cannot save to {path}: it exists and is not a directory")
    header = {
        "format_version": FORMAT_VERSION,
        "model_type": model_type,
        "odet_version": __version__,
        "config": config,
    }
    atomic_write(
        path / WEIGHTS_NAME, lambda tmp: save_model(model, str(tmp), metadata={"format": "pt"})
    )
    atomic_write(
        path / CONFIG_NAME, lambda tmp: tmp.write_text(json.dumps(header, indent=2) + "\n")
    )
    return path


def read_model_config(path: str | Path, *, model_type: str) -> dict[str, Any]:
    """The model config stored in directory ``path``, after checking format and type."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(
            f"not a model directory: {path} (expected {CONFIG_NAME} and {WEIGHTS_NAME} in it)"
        )
    config_file = path / CONFIG_NAME
    if not config_file.is_file():
        raise CheckpointError(f"{path} is not a model directory: {CONFIG_NAME} is missing")
    try:
        header = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_file} is corrupt: {err}") from None
    if not isinstance(header, dict) or "config" not in header:
        raise CheckpointError(f"{config_file} is not an odet model config (no 'config' entry)")
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{config_file} has format_version {version!r}; "
            f"this odet reads version {FORMAT_VERSION}"
        )
    if header.get("model_type") != model_type:
        raise CheckpointError(
            f"{path} holds a {header.get('model_type')!r} model, not {model_type!r}"
        )
    return header["config"]


def _check_shapes(model: nn.Module, weights: Path) -> None:
    """Refuse weights whose tensor shapes differ from the model its config builds: they belong
    to a model of another shape (a readable file, so not "corrupt")."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="pt") as handle:
            shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, RuntimeError):
        raise CheckpointError(
            f"{weights} is corrupt or unreadable (truncated, or not safetensors)"
        ) from None
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    differ = [k for k in expected if k in shapes and shapes[k] != expected[k]]
    if differ:
        key = differ[0]
        raise CheckpointError(
            f"{weights} holds the weights of another model shape than its config.json: {key} is "
            f"{list(shapes[key])}, the config builds {list(expected[key])} ({len(differ)} "
            "tensor(s) differ)"
        )


def _check_device(map_location: object) -> None:
    """Raise ``ValueError`` for a ``map_location`` that is not a usable device, before the
    weights are read (else the load's error reads as a corrupt file)."""
    try:
        torch.empty(0, device=map_location)  # type: ignore[call-overload]
    except (RuntimeError, TypeError, AssertionError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(
            f"map_location {map_location!r} is not a device this torch can use ({reason}); "
            "pass e.g. 'cpu', 'cuda' or 'cuda:1'"
        ) from None


def load_model_dir(
    path: str | Path,
    *,
    model_type: str,
    build: Callable[[dict[str, Any]], M],
    map_location: str | torch.device = "cpu",
) -> M:
    """Rebuild a model from its stored config with ``build`` and load its safetensors weights."""
    _check_device(map_location)
    path = Path(path)
    model = build(read_model_config(path, model_type=model_type))
    weights = path / WEIGHTS_NAME
    if not weights.is_file():
        raise CheckpointError(f"{path} is incomplete: {WEIGHTS_NAME} is missing")
    _check_shapes(model, weights)
    try:
        missing, unexpected = load_model(
            model, str(weights), strict=False, device=str(map_location)
        )
    except (SafetensorError, OSError, RuntimeError):
        raise CheckpointError(
            f"{weights} is corrupt or unreadable (truncated, or not safetensors)"
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"{weights} does not match the model config: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}"
        )
    return model.to(map_location)
