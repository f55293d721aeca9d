"""Readers for line-aligned parallel text and JSON Lines, and length filtering.

Policy for bad input: a reader never crashes on content. Empty lines (after stripping
surrounding whitespace) and lines that are not UTF-8 text (undecodable bytes, or a NUL byte, the
mark of binary data and of UTF-16/32) are skipped, counted as ``invalid_utf8``; in parallel text the
whole pair is skipped, so alignment is kept. JSON Lines records that are malformed, lack a field
or hold a non-string value are skipped too, unless ``strict=True``, which raises ``DataError`` at
the first one. Every skip is counted by reason in a ``ReadReport``, and each kept example keeps
its 1-based line number, so outputs can be matched back to the original file. Structural
problems (missing file, parallel files of different lengths, a file that starts with a UTF-16
or UTF-32 byte-order mark) always raise ``DataError``.

Files are read as plain text or gzip, detected from the gzip magic bytes rather than the suffix.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np

from odet.config import file_kind
from odet.data.checks import check_int, check_real, count_arrays

PathLike = str | os.PathLike[str]
SkipReason = Literal["empty", "invalid_utf8", "malformed_json", "missing_field", "not_a_string"]
DropReason = Literal[
    "source_too_short", "target_too_short", "source_too_long", "target_too_long", "ratio"
]

_GZIP_MAGIC = b"\x1f\x8b"
_WIDE_BOMS = {  # UTF-32 first: its little-endian mark starts with UTF-16's
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


class DataError(ValueError):
    """Input data that cannot be used as asked (missing file, misaligned or malformed input)."""


@dataclass(frozen=True)
class ReadReport:
    """What a reader did: lines read, examples kept, and lines skipped per reason."""

    paths: tuple[str, ...]
    lines: int
    kept: int
    empty: int = 0
    invalid_utf8: int = 0
    malformed_json: int = 0
    missing_field: int = 0
    not_a_string: int = 0
    beyond_limit: int = 0
    """Readable examples left out because only the first ``n`` were asked for (``head``)."""

    def __post_init__(self) -> None:
        counts = self.as_dict()
        negative = {name: value for name, value in counts.items() if value < 0}
        if negative:
            raise ValueError(f"ReadReport counts must be non-negative, got {negative}")
        if self.lines != self.kept + self.skipped:
            raise ValueError(
                f"ReadReport: lines={self.lines} != kept={self.kept} + skipped={self.skipped}"
            )

    @property
    def skipped(self) -> int:
        """Lines (or aligned line pairs) not kept, all reasons together."""
        return (
            self.empty
            + self.invalid_utf8
            + self.malformed_json
            + self.missing_field
            + self.not_a_string
            + self.beyond_limit
        )

    def as_dict(self) -> dict[str, int]:
        """The counts as a flat dict, for logging."""
        counts = asdict(self)
        del counts["paths"]
        return counts

    def reasons(self) -> str:
        """Why lines were skipped, in words: ``"3 blank, 1 not valid UTF-8"`` (``""`` if none)."""
        words = {
            "empty": "blank",
            "invalid_utf8": "not valid UTF-8",
            "malformed_json": "malformed JSON",
            "missing_field": "missing a field",
            "not_a_string": "a field not a string",
            "beyond_limit": "beyond the limit",
        }
        counts = self.as_dict()
        return ", ".join(f"{counts[k]} {w}" for k, w in words.items() if counts[k])

    def nothing_usable(self) -> str:
        """Why no line was kept: ``"is empty"`` or ``"has no usable line (3 blank)"``."""
        if self.lines == 0:
            return "is empty"
        return f"has no usable line ({self.reasons()} of {self.lines})"


@dataclass(frozen=True)
class TextPairs:
    """Source/target strings read from a corpus, their 1-based line numbers, and the report."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    line_numbers: tuple[int, ...]
    report: ReadReport

    def __post_init__(self) -> None:
        sizes = (len(self.source), len(self.target), len(self.line_numbers), self.report.kept)
        if len(set(sizes)) != 1:
            raise ValueError(
                f"TextPairs sizes disagree: source={sizes[0]}, target={sizes[1]}, "
                f"line_numbers={sizes[2]}, report.kept={sizes[3]}"
            )

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return zip(self.source, self.target, strict=True)

    def head(self, n: int) -> TextPairs:
        """The first ``n`` pairs; the report counts the rest as ``beyond_limit``."""
        check_int(n, "n", None)
        if n < 0:
            raise ValueError(f"head needs n >= 0, got {n}")
        if n >= len(self):
            return self
        report = replace(
            self.report,
            kept=n,
            beyond_limit=self.report.beyond_limit + len(self) - n,
        )
        return TextPairs(self.source[:n], self.target[:n], self.line_numbers[:n], report)


@dataclass(frozen=True)
class TextLines:
    """Monolingual lines, their 1-based line numbers, and the report."""

    lines: tuple[str, ...]
    line_numbers: tuple[int, ...]
    report: ReadReport

    def __len__(self) -> int:
        return len(self.lines)


def check_input_file(path: PathLike, what: str = "file") -> Path:
    """``path`` if it is a readable regular file; else a ``DataError`` saying what it is
    (not found, a directory, not a regular file, unreadable), naming ``what`` and the path."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{what} {path} is a directory, not a file")
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    if not path.is_file():
        raise DataError(f"{what} {path} is {file_kind(path)}, not a regular file")
    if not os.access(path, os.R_OK):
        raise DataError(f"{what} {path} cannot be read (permission denied)")
    return path


def open_binary(path: PathLike, what: str = "data file") -> BinaryIO:
    """Open ``path`` for binary reading, transparently decompressing gzip.

    Raises ``DataError`` naming the path when it does not exist or is not a file.
    """
    path = check_input_file(path, what)
    with path.open("rb") as probe:
        compressed = probe.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if compressed else path.open("rb")  # type: ignore[return-value]


def read_binary(path: PathLike, what: str = "data file") -> bytes:
    """The bytes of a plain or gzip file; a missing, unreadable or corrupt (truncated gzip)
    file is a ``DataError`` naming ``what`` and the path."""
    with open_binary(path, what) as handle:
        try:
            data = handle.read()
        except (EOFError, OSError, zlib.error):
            raise DataError(f"{what} {path} cannot be read (corrupt or truncated gzip)") from None
    check_not_wide(data, f"{what} {path}")
    return data


def check_not_wide(head: bytes, name: str) -> None:
    """A ``DataError`` naming ``name`` when ``head`` (the first bytes of an input) starts with a
    UTF-16 or UTF-32 byte-order mark: odet reads UTF-8, and such text read as UTF-8 is garbage
    with a NUL byte in every character."""
    for mark, encoding in _WIDE_BOMS.items():
        if head.startswith(mark):
            raise DataError(
                f"{name} is {encoding} text (it starts with a {encoding} byte-order mark); odet "
                f"reads UTF-8: convert it first (iconv -f {encoding} -t UTF-8)"
            )


def check_line_endings(data: bytes, name: str) -> None:
    """A ``DataError`` naming ``name`` when ``data``, a whole input, has no newline but a
    carriage return before its end: classic-Mac (CR-only) line endings, which odet does not
    split on (a lone ``\\r`` stays inside its line), so the file would read as one line."""
    if b"\n" not in data and b"\r" in data.rstrip(b"\r"):
        raise DataError(
            f"{name} has CR-only (classic Mac) line endings, which odet does not split on: it "
            "would read as one line; convert it first (tr '\\r' '\\n' < IN > OUT)"
        )


def _raw_lines(handle: BinaryIO, path: PathLike) -> Iterator[bytes]:
    """Lines of a binary stream split on ``\\n`` only, without the line terminator; a corrupt or
    truncated gzip stream, one that starts with a UTF-16/32 byte-order mark, or one line with
    CR-only line endings inside (``check_line_endings``) is a ``DataError`` naming ``path``."""
    try:
        for number, line in enumerate(handle):
            if number == 0:
                check_not_wide(line, str(path))
                if not line.endswith(b"\n"):  # the whole stream
                    check_line_endings(line, str(path))
            yield line.rstrip(b"\n")
    except (EOFError, OSError, zlib.error):
        raise DataError(f"{path} cannot be read (corrupt or truncated gzip)") from None


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a whole file as the corpus readers count them: split on ``\\n`` only, so a
    lone ``\\r``, form feed or U+2028 stays inside its line (and line ``i`` of an output matches
    line ``i`` of its input); the ``\\r`` of a CRLF ending and a leading UTF-8 BOM are dropped;
    a final newline ends the last line."""
    lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line.removesuffix(b"\r") for line in lines]


def decode_line(raw: bytes) -> str:
    """The text of one line by strict UTF-8 decoding; a NUL byte, which marks binary data or
    UTF-16/32 text rather than UTF-8 text, raises ``UnicodeDecodeError`` as an undecodable
    byte does (with ``reason`` ``NUL_REASON`` and ``start`` where it is)."""
    text = raw.decode("utf-8")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise UnicodeDecodeError("utf-8", raw, nul, nul + 1, NUL_REASON)
    return text


NUL_REASON = "a NUL byte: binary data, or UTF-16/32 text"


def not_text_message(name: str, err: UnicodeDecodeError, line: int) -> str:
    """Why line ``line`` of input ``name`` is not UTF-8 text, from ``decode_line``'s error."""
    if err.reason == NUL_REASON:
        return f"{name} is not UTF-8 text (line {line}, byte {err.start} is {NUL_REASON})"
    return f"{name} is not valid UTF-8 (line {line}, byte {err.start})"


def _decode(raw: bytes, first: bool) -> str | None:
    """``decode_line`` (BOM dropped on the first line), or None when it is not UTF-8 text."""
    try:
        text = decode_line(raw)
    except UnicodeDecodeError:
        return None
    return text.removeprefix("\ufeff") if first else text


def read_lines(path: PathLike) -> TextLines:
    """Read non-empty, stripped UTF-8 lines of a plain or gzip text file."""
    kept: list[str] = []
    numbers: list[int] = []
    skipped: Counter[str] = Counter()
    total = 0
    with open_binary(path) as handle:
        for total, raw in enumerate(_raw_lines(handle, path), start=1):
            text = _decode(raw, total == 1)
            if text is None:
                skipped["invalid_utf8"] += 1
            elif not text.strip():
                skipped["empty"] += 1
            else:
                kept.append(text.strip())
                numbers.append(total)
    report = ReadReport(paths=(str(path),), lines=total, kept=len(kept), **skipped)
    return TextLines(tuple(kept), tuple(numbers), report)


def read_parallel_text(source_path: PathLike, target_path: PathLike) -> TextPairs:
    """Read two line-aligned text files (plain or gzip) into stripped string pairs.

    A pair is skipped when either side is empty or not valid UTF-8 (counted in the report).
    Files with different line counts raise ``DataError`` naming both files and both counts.
    """
    sources: list[str] = []
    targets: list[str] = []
    numbers: list[int] = []
    skipped: Counter[str] = Counter()
    counts = [0, 0]
    with open_binary(source_path) as src_handle, open_binary(target_path) as tgt_handle:
        lines = zip_longest(
            _raw_lines(src_handle, source_path), _raw_lines(tgt_handle, target_path)
        )
        for src_raw, tgt_raw in lines:
            counts[0] += src_raw is not None
            counts[1] += tgt_raw is not None
            if src_raw is None or tgt_raw is None:
                continue  # only counting what is left of the longer file
            number = counts[0]
            src = _decode(src_raw, number == 1)
            tgt = _decode(tgt_raw, number == 1)
            if src is None or tgt is None:
                skipped["invalid_utf8"] += 1
            elif not src.strip() or not tgt.strip():
                skipped["empty"] += 1
            else:
                sources.append(src.strip())
                targets.append(tgt.strip())
                numbers.append(number)
    if counts[0] != counts[1]:
        sides = ((source_path, counts[0], target_path, counts[1]),
                 (target_path, counts[1], source_path, counts[0]))  # fmt: skip
        for empty, n, other, m in sides:
            if n == 0:
                raise DataError(f"{empty} is empty but {other} has {m} lines")
        raise DataError(
            f"parallel files are not line-aligned: {source_path} has {counts[0]} lines "
            f"but {target_path} has {counts[1]}"
        )
    total = counts[0]
    report = ReadReport(
        paths=(str(source_path), str(target_path)), lines=total, kept=len(sources), **skipped
    )
    return TextPairs(tuple(sources), tuple(targets), tuple(numbers), report)


def read_jsonl_pairs(
    path: PathLike, source_field: str, target_field: str, *, strict: bool = False
) -> TextPairs:
    """Read ``(record[source_field], record[target_field])`` pairs from a JSON Lines file.

    Blank lines and invalid UTF-8 are always skipped. Malformed JSON, a record that is not an
    object or lacks a field, and a non-string field value are skipped and counted, or raise
    ``DataError`` (file, line number, reason) when ``strict``. Values are stripped; a pair with
    an empty side is skipped as ``empty``.
    """
    sources: list[str] = []
    targets: list[str] = []
    numbers: list[int] = []
    skipped: Counter[str] = Counter()
    total = 0
    with open_binary(path) as handle:
        for total, raw in enumerate(_raw_lines(handle, path), start=1):
            text = _decode(raw, total == 1)
            if text is None:
                skipped["invalid_utf8"] += 1
                continue
            if not text.strip():
                skipped["empty"] += 1
                continue
            pair, reason = _parse_record(text, source_field, target_field)
            if reason is not None:
                if strict:
                    raise DataError(f"{path}, line {total}: {reason}")
                skipped[reason.split(":", 1)[0]] += 1
                continue
            src, tgt = pair
            if not src or not tgt:
                skipped["empty"] += 1
                continue
            sources.append(src)
            targets.append(tgt)
            numbers.append(total)
    report = ReadReport(paths=(str(path),), lines=total, kept=len(sources), **skipped)
    return TextPairs(tuple(sources), tuple(targets), tuple(numbers), report)


def _parse_record(
    text: str, source_field: str, target_field: str
) -> tuple[tuple[str, str], None] | tuple[None, str]:
    """The stripped pair of one JSON line, or ``(None, "<reason>: <detail>")``."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"malformed_json: {error}"
    except RecursionError:
        return None, "malformed_json: nested too deeply to parse"
    if not isinstance(record, dict):
        return None, f"missing_field: record is a JSON {type(record).__name__}, not an object"
    values = []
    for name in (source_field, target_field):
        if name not in record:
            return None, f"missing_field: no field {name!r} (fields: {sorted(record)})"
        if not isinstance(record[name], str):
            return None, f"not_a_string: field {name!r} is {type(record[name]).__name__}"
        values.append(record[name].strip())
    return (values[0], values[1]), None


@dataclass(frozen=True)
class FilterReport:
    """Pairs kept and dropped by a ``LengthFilter``; each dropped pair counts once, under the
    first failing check in the order of the fields below."""

    total: int
    kept: int
    source_too_short: int = 0
    target_too_short: int = 0
    source_too_long: int = 0
    target_too_long: int = 0
    ratio: int = 0

    def __post_init__(self) -> None:
        if min(self.as_dict().values()) < 0:
            raise ValueError(f"FilterReport counts must be non-negative, got {self.as_dict()}")
        if self.total != self.kept + self.dropped:
            raise ValueError(
                f"FilterReport: total={self.total} != kept={self.kept} + dropped={self.dropped}"
            )

    @property
    def dropped(self) -> int:
        """Pairs removed, all reasons together."""
        return (
            self.source_too_short
            + self.target_too_short
            + self.source_too_long
            + self.target_too_long
            + self.ratio
        )

    def as_dict(self) -> dict[str, int]:
        """The counts as a flat dict, for logging."""
        return asdict(self)


@dataclass(frozen=True)
class LengthFilter:
    """Keep pairs whose token counts (specials excluded) lie in ``[min, max]`` on each side and
    whose length ratio ``max(s, t) / max(min(s, t), 1)`` is at most ``max_ratio``.

    ``None`` disables a bound. The default drops only pairs with an empty side.
    """

    min_source_tokens: int = 1
    min_target_tokens: int = 1
    max_source_tokens: int | None = None
    max_target_tokens: int | None = None
    max_ratio: float | None = None

    def __post_init__(self) -> None:
        bounds = {
            "source": (self.min_source_tokens, self.max_source_tokens),
            "target": (self.min_target_tokens, self.max_target_tokens),
        }
        for side, (low, high) in bounds.items():
            check_int(low, f"min_{side}_tokens", 0)
            if low < 0:
                raise ValueError(f"min_{side}_tokens={low} must be >= 0")
            if high is not None:
                check_int(high, f"max_{side}_tokens", 0)
            if high is not None and high < low:
                raise ValueError(f"max_{side}_tokens={high} must be >= min_{side}_tokens={low}")
        if self.max_ratio is not None and check_real(self.max_ratio, "max_ratio") < 1.0:
            raise ValueError(f"max_ratio={self.max_ratio} must be >= 1 (or None)")

    def apply(
        self, source_lengths: np.ndarray, target_lengths: np.ndarray
    ) -> tuple[np.ndarray, FilterReport]:
        """Boolean keep-mask ``(N,)`` for pairs of token counts ``(N,)``, and the report."""
        src, tgt = count_arrays(source_lengths, target_lengths, "length")
        no_limit = np.iinfo(np.int64).max
        max_src = no_limit if self.max_source_tokens is None else self.max_source_tokens
        max_tgt = no_limit if self.max_target_tokens is None else self.max_target_tokens
        max_ratio = np.inf if self.max_ratio is None else self.max_ratio
        ratio = np.maximum(src, tgt) / np.maximum(np.minimum(src, tgt), 1)
        checks: dict[DropReason, np.ndarray] = {
            "source_too_short": src < self.min_source_tokens,
            "target_too_short": tgt < self.min_target_tokens,
            "source_too_long": src > max_src,
            "target_too_long": tgt > max_tgt,
            "ratio": ratio > max_ratio,
        }
        keep = np.ones(src.shape, dtype=bool)
        counts: dict[str, int] = {}
        for reason, failed in checks.items():
            counts[reason] = int(np.count_nonzero(keep & failed))
            keep &= ~failed
        return keep, FilterReport(total=len(src), kept=int(keep.sum()), **counts)
