"""Where benchmark scripts may write: a ``.md`` report is a new file or one they wrote before.

A mistyped ``--out`` (a config, a system file, a directory) must fail before minutes of timing,
and never be overwritten.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def check_markdown_out(parser: argparse.ArgumentParser, out: str | Path) -> None:
    """``parser.error`` unless ``out`` names a Markdown (``.md``) file, new or a regular file."""
    path = Path(out)
    if path.suffix != ".md":
        parser.error(f"--out {path} must name a Markdown (.md) file")
    if path.exists() and not path.is_file():
        parser.error(f"--out {path} is not a file")
