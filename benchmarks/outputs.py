"""Where benchmark scripts may write: a ``.md`` report is a new file or one they wrote before.

A mistyped ``--out`` (a config, a system file, a directory) must fail before minutes of timing,
and never be overwritten.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import torch


def check_markdown_out(parser: argparse.ArgumentParser, out: str | Path) -> None:
    """``parser.error`` unless ``out`` names a Markdown (``.md``) file, new or a regular file."""
    path = Path(out)
    if path.suffix != ".md":
        parser.error(f"--out {path} must name a Markdown (.md) file")
    if path.exists() and not path.is_file():
        parser.error(f"--out {path} is not a file")


def write_markdown(out: Path, lines: list[str]) -> None:
    """Write a report's ``lines`` to ``out`` (checked by :func:`check_markdown_out`), making
    its folder, and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """A report's first words: the command that wrote it (``argv``, or the process's own
    arguments), when it started and with which torch."""
    args = shlex.join(sys.argv[1:] if argv is None else argv)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"`python -m {module} {args}` — started {started}, torch {torch.__version__}"
