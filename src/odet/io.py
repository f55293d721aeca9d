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
