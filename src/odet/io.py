"""Durable atomic file writes, shared by every layer that writes files (models, tokenizers, data).

A file is written under a temporary name beside its target, fsynced, renamed over the target and
the directory fsynced, so after a crash the target is absent, its previous content or complete —
never a partial file — and a completed write survives a power loss.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PathLike = str | os.PathLike[str]


def fsync_dir(path: PathLike) -> None:
    """Flush a directory's entries (a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_output(path: PathLike) -> Iterator[Path]:
    """A temporary file beside ``path``, created on entry (so a target that cannot be written
    fails before any work is done), fsynced and renamed over ``path`` on a clean exit and
    removed otherwise.

    ``path``'s parent directories are created. The written file is world-readable (0o644).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o644)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def atomic_write(path: PathLike, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, fsync it, then rename it over
    (:func:`atomic_output`); the temporary file is removed when ``write`` or the rename fails."""
    with atomic_output(path) as tmp:
        write(tmp)


def write_bytes_atomic(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` with :func:`atomic_write`."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


OUTPUT_MARKER = ".odet-output"
"""The file odet writes into an output directory it creates (JSON: command, version, time), so a
rerun may write there again while a user's own directory is refused."""


class OutputPathError(ValueError):
    """An output path odet refuses before any work: a user's file or directory, one of the
    command's inputs, or a path that cannot be created."""


def blocking_file(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists and is not a directory (so ``path`` cannot be
    created), or ``None``."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


RUN_FILES = frozenset(
    {".odet-run", OUTPUT_MARKER, "config.yaml", "metrics.jsonl", "summary.json", "train.log"}
)
"""The files of a training run (``training.run_dir``) that resuming and reading it need."""


def _odet_owned(path: Path) -> str | None:
    """What writing ``path`` would do to odet's files: write into a saved model or
    checkpoint (a directory with ``checksums.json``, or ``config.json`` and
    ``model.safetensors``), inside a run's ``checkpoints/`` or ``tokenizer/``, or one of a run's
    own ``RUN_FILES``; else ``None``."""
    path = path.resolve()
    parent = path.parent
    if (parent / ".odet-run").is_file() and path.name in RUN_FILES:
        return f"overwrite {path.name} of the training run {parent}"
    for directory in path.parents:
        if (directory / "checksums.json").is_file() or (
            (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()
        ):
            return f"write into the model checkpoint {directory}"
        if directory.name in ("checkpoints", "tokenizer") and (
            (directory.parent / ".odet-run").is_file() or (directory / "index.json").is_file()
        ):
            return f"write into {directory.name}/ of the training run {directory.parent}"
    return None


def check_output_file(path: PathLike, flag: str, inputs: tuple[PathLike, ...] = ()) -> Path:
    """Refuse an output file that is a directory, one of ``inputs``, lies under a regular file,
    or lies in a model checkpoint or a run's bookkeeping (``_odet_owned``); another existing file
    is overwritten (atomically) as asked. Nothing is written."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{flag} {path} is a directory; give a file name")
    blocking = blocking_file(path)
    if blocking is not None:
        raise OutputPathError(
            f"{flag} {path} cannot be created: {blocking} is a file, not a directory"
        )
    for source in inputs:
        if Path(source).exists() and path.resolve() == Path(source).resolve():
            raise OutputPathError(f"{flag} {path} is an input file; refusing to overwrite it")
    check_not_odet_owned(path, flag)
    return path


def check_not_odet_owned(path: PathLike, flag: str) -> None:
    """Refuse an output ``path`` (file or directory) whose writing would change odet's own files:
    a model checkpoint, a run's ``checkpoints/`` or ``tokenizer/``, a run's bookkeeping."""
    owner = _odet_owned(Path(path))
    if owner is not None:
        raise OutputPathError(f"{flag} {path} would {owner}; refusing (give a path outside it)")


def check_output_dir(
    path: PathLike,
    flag: str,
    *,
    owned: Callable[[Path], bool] | None = None,
    command: str | None = None,
) -> Path:
    """Refuse an output directory that is a file, lies under a file, lies in a model checkpoint
    or a run's ``checkpoints/`` or ``tokenizer/`` (``_odet_owned``), exists with content
    odet did not write (no ``OUTPUT_MARKER``, and not ``owned(path)``, the layout odet wrote
    before the marker), or holds the output of another odet ``command`` than the one given
    (both would write e.g. ``results.md``). Nothing is written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{flag} {path} exists and is not a directory; choose a new one")
    blocking = blocking_file(path)
    if blocking is not None:
        raise OutputPathError(
            f"{flag} {path} cannot be created: {blocking} is a file, not a directory"
        )
    check_not_odet_owned(path, flag)
    if not path.is_dir() or not any(path.iterdir()):
        return path
    marker = path / OUTPUT_MARKER
    if marker.is_file():
        other = marker_command(marker)
        if command is not None and other is not None and other != command:
            raise OutputPathError(
                f"{flag} {path} holds the output of odet {other}, not of odet {command}; choose "
                "a new directory (nothing was written)"
            )
        return path
    if owned is not None and owned(path):
        return path
    raise OutputPathError(
        f"{flag} {path} exists, is not empty and was not written by odet (no {OUTPUT_MARKER}); "
        "choose a new directory (nothing was written)"
    )


def marker_command(marker: Path) -> str | None:
    """The command an ``OUTPUT_MARKER`` names (``None`` when it cannot be read)."""
    import json

    try:
        info = json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return None
    command = info.get("command") if isinstance(info, dict) else None
    return command if isinstance(command, str) else None


def claim_output_dir(path: PathLike, command: str) -> Path:
    """Create ``path`` and write ``OUTPUT_MARKER`` into it (once)."""
    import json
    from datetime import UTC, datetime

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    marker = path / OUTPUT_MARKER
    if not marker.is_file():
        info = {"command": command, "created": datetime.now(UTC).isoformat()}
        write_bytes_atomic(marker, (json.dumps(info) + "\n").encode("utf-8"))
    return path
