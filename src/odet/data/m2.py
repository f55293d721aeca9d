"""Reader for M2 files, the annotation format of CoNLL-2013/14, NUCLE, FCE and W&I+LOCNESS.

An M2 file is a sequence of blocks separated by blank lines. Each block is one ``S`` line (the
space-tokenized source sentence) followed by zero or more ``A`` lines, one per edit::

    S This are a sentence .
    A 1 2|||R:VERB:SVA|||is|||REQUIRED|||-NONE-|||0
    A 3 3|||M:ADJ|||short||long|||REQUIRED|||-NONE-|||1

``A start end|||type|||correction|||required|||comment|||annotator``: ``start``/``end`` are token
offsets into the source (``start == end`` is an insertion), the correction replaces the span
(``-NONE-`` or an empty field deletes it; ``||`` separates alternative corrections), and a type
``noop`` (span ``-1 -1``) says that the annotator made no change to the sentence.

`read_m2` parses a file into typed `M2Sentence` blocks; `read_m2_parallel` turns them into
(source, corrected) sentence pairs per annotator, e.g. to train a GEC model on FCE or W&I M2 data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

logger = logging.getLogger(__name__)

__all__ = [
    "M2Edit",
    "M2FormatError",
    "M2Sentence",
    "apply_edits",
    "parse_m2",
    "read_m2",
    "read_m2_parallel",
]

NOOP_TYPE = "noop"
OutOfRange = Literal["raise", "clip", "drop"]
_OUT_OF_RANGE: tuple[str, ...] = get_args(OutOfRange)
_NONE = "-NONE-"


class M2FormatError(ValueError):
    """A malformed M2 line; the message names the file and the 1-based line number."""

    def __init__(self, source: str, line_number: int, message: str) -> None:
        super().__init__(f"{source}:{line_number}: {message}")
        self.source = source
        self.line_number = line_number


@dataclass(frozen=True)
class M2Edit:
    """One ``A`` line: replace source tokens ``[start, end)`` by ``corrections[0]``.

    ``corrections`` holds the alternatives (``''`` is a deletion); a ``noop`` edit has
    ``start == end == -1`` and no corrections.
    """

    start: int
    end: int
    type: str
    corrections: tuple[str, ...]
    annotator: int
    required: str = "REQUIRED"
    comment: str = _NONE

    def __post_init__(self) -> None:
        if self.is_noop:
            return
        if not 0 <= self.start <= self.end:
            raise ValueError(f"edit span needs 0 <= start <= end, got ({self.start}, {self.end})")
        if not self.corrections:
            raise ValueError("a non-noop edit needs at least one correction ('' deletes)")

    @property
    def is_noop(self) -> bool:
        """True for the annotator's "no change in this sentence" marker."""
        return self.type == NOOP_TYPE or self.start == -1


@dataclass(frozen=True)
class M2Sentence:
    """One M2 block: the tokenized source and every annotator's edits (noop markers included)."""

    source: str
    edits: tuple[M2Edit, ...]

    @property
    def tokens(self) -> list[str]:
        return self.source.split()

    @property
    def annotators(self) -> tuple[int, ...]:
        """Annotator ids present in this block, sorted (``(0,)`` when it has no ``A`` line)."""
        ids = sorted({edit.annotator for edit in self.edits})
        return tuple(ids) if ids else (0,)

    def edits_of(self, annotator: int) -> tuple[M2Edit, ...]:
        """The real (non-noop) edits of ``annotator``, in file order."""
        return tuple(e for e in self.edits if e.annotator == annotator and not e.is_noop)

    def corrected(self, annotator: int) -> str:
        """The source with ``annotator``'s edits applied (first alternative of each edit)."""
        return " ".join(apply_edits(self.tokens, self.edits_of(annotator)))


def apply_edits(tokens: Sequence[str], edits: Iterable[M2Edit]) -> list[str]:
    """Apply edits to ``tokens`` right to left so earlier offsets stay valid.

    Edits are applied in decreasing ``(start, end)`` order, later file lines first on ties, so an
    insertion at ``i`` followed in the file by a replacement of token ``i`` ends up before the
    replaced token, as the annotator wrote it. Raises ``ValueError`` on overlapping spans or spans
    beyond the sentence.
    """
    out = list(tokens)
    ordered = sorted(
        ((e.start, e.end, k, e) for k, e in enumerate(edits) if not e.is_noop),
        key=lambda item: item[:3],
        reverse=True,
    )
    left_bound = len(out)
    for start, end, _, edit in ordered:
        if end > left_bound:
            raise ValueError(
                f"edit span ({start}, {end}) overlaps a later edit or exceeds the sentence "
                f"of {len(tokens)} tokens"
            )
        out[start:end] = edit.corrections[0].split()
        left_bound = start
    return out


def _parse_edit(body: str, where: str, line_number: int) -> M2Edit:
    fields = body.split("|||")
    if len(fields) != 6:
        raise M2FormatError(
            where, line_number, f"an A line needs 6 '|||'-separated fields, got {len(fields)}"
        )
    span, etype, correction, required, comment, annotator = fields
    try:
        start, end = (int(x) for x in span.split())
    except ValueError:
        raise M2FormatError(
            where, line_number, f"edit span must be two integers 'start end', got {span!r}"
        ) from None
    try:
        annotator_id = int(annotator)
    except ValueError:
        raise M2FormatError(
            where, line_number, f"annotator id must be an integer, got {annotator!r}"
        ) from None
    if etype == NOOP_TYPE or start == -1:
        return M2Edit(-1, -1, etype, (), annotator_id, required, comment)
    if not 0 <= start <= end:
        raise M2FormatError(where, line_number, f"bad edit span {start} {end} (need 0<=start<=end)")
    corrections = tuple("" if c == _NONE else c.strip() for c in correction.split("||"))
    return M2Edit(start, end, etype, corrections, annotator_id, required, comment)


def parse_m2(
    text: str, *, source_name: str = "<string>", out_of_range: OutOfRange = "raise"
) -> list[M2Sentence]:
    """Parse M2 text into blocks; ``source_name`` is used in error messages.

    ``out_of_range`` decides what happens to an edit whose span runs past the end of its sentence
    (a malformed line, but some converter outputs have them, e.g. JFLEG's unofficial
    ``dev.ref.m2`` has 19): ``"raise"`` an `M2FormatError`, ``"clip"`` the span to the sentence end
    (what applying it with Python slicing does), or ``"drop"`` the edit (what the official M2
    scorer does; the annotator still counts as present in the block, through a ``noop`` marker).
    """
    if out_of_range not in _OUT_OF_RANGE:
        raise ValueError(f"out_of_range must be one of {_OUT_OF_RANGE}, got {out_of_range!r}")
    sentences: list[M2Sentence] = []
    source: str | None = None
    edits: list[M2Edit] = []
    outside: list[int] = []  # line numbers of the spans dropped or clipped

    def flush() -> None:
        nonlocal source, edits
        if source is not None:
            sentences.append(M2Sentence(source, tuple(edits)))
        source, edits = None, []

    # "\n" only: str.splitlines would also end a line at U+2028, \x1c or \x85 inside a sentence
    for line_number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            flush()
        elif line.startswith("S ") or line == "S":
            if source is not None:
                raise M2FormatError(
                    source_name, line_number, "second S line in a block (blocks need a blank line)"
                )
            source = " ".join(line[2:].split())
        elif line.startswith("A "):
            if source is None:
                raise M2FormatError(source_name, line_number, "A line before any S line")
            edit = _parse_edit(line[2:], source_name, line_number)
            n_tokens = len(source.split())
            if not edit.is_noop and edit.end > n_tokens:
                if out_of_range != "raise":
                    outside.append(line_number)
                if out_of_range == "drop":  # the annotator stays present, without this edit
                    edits.append(M2Edit(-1, -1, NOOP_TYPE, (), edit.annotator))
                    continue
                if out_of_range == "clip":
                    edits.append(replace(edit, start=min(edit.start, n_tokens), end=n_tokens))
                    continue
                raise M2FormatError(
                    source_name,
                    line_number,
                    f"edit span {edit.start} {edit.end} exceeds the {n_tokens}-token sentence",
                )
            edits.append(edit)
        else:
            raise M2FormatError(
                source_name, line_number, f"expected an 'S ', 'A ' or blank line, got {line[:40]!r}"
            )
    flush()
    if outside:
        done = "dropped, as the official M2 scorer does" if out_of_range == "drop" else "clipped"
        logger.warning(
            "%s:%d: edit span past the end of its sentence %s (%d such edit(s), lines %s)",
            source_name,
            outside[0],
            done,
            len(outside),
            ", ".join(map(str, outside[:10])) + (", …" if len(outside) > 10 else ""),
        )
    return sentences


def read_m2(path: str | Path, *, out_of_range: OutOfRange = "raise") -> list[M2Sentence]:
    """Read an M2 file (UTF-8, plain or gzip); see `parse_m2` for ``out_of_range``."""
    from odet.data.text import NUL_REASON, DataError, read_binary

    try:
        text = read_binary(path, "M2 file").decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"M2 file {path} is not valid UTF-8 (byte {err.start})") from None
    if (nul := text.find("\0")) >= 0:
        line = text.count("\n", 0, nul) + 1
        raise DataError(f"M2 file {path} is not UTF-8 text (line {line} holds {NUL_REASON})")
    if not text.strip():
        raise DataError(f"M2 file {path} holds no M2 sentence: it is empty")
    return parse_m2(text, source_name=str(path), out_of_range=out_of_range)


def read_m2_parallel(
    path: str | Path, *, out_of_range: OutOfRange = "raise"
) -> dict[int, list[tuple[str, str]]]:
    """(source, corrected) sentence pairs per annotator id.

    A sentence that an annotator did not annotate (no edit and no noop from that id, in a file
    with several annotators) counts as left unchanged by that annotator.
    """
    from odet.data.text import DataError

    sentences = read_m2(path, out_of_range=out_of_range)
    ids = sorted({a for s in sentences for a in s.annotators})
    pairs: dict[int, list[tuple[str, str]]] = {a: [] for a in ids}
    for number, sentence in enumerate(sentences, start=1):
        for a in ids:
            try:
                pairs[a].append((sentence.source, sentence.corrected(a)))
            except ValueError as err:
                raise DataError(
                    f"M2 file {path}, sentence {number} ({sentence.source[:40]!r}), "
                    f"annotator {a}: {err}"
                ) from None
    return pairs
