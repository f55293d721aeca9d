"""DialogSum dialogue summarization: one-line dialogues, input reports and LEAD baselines.

A DialogSum record holds a ``dialogue`` whose turns are separated by newlines, each turn opening
with a speaker tag (``#Person1#: Hello ...``), and a third-person ``summary`` that names the
speakers by the same tags (``#Person2# has trouble breathing.``). odet keeps the tags as the
turn breaks: declared as SentencePiece ``user_defined_symbols`` (``SPEAKER_TAGS``) each becomes
one atomic token, so every turn starts with a token that says who speaks, and the summary can
copy it. A dialogue therefore fits on one line (`flatten_dialogue`), which is what
``odet generate`` reads; the tokenizer's ``nmt_nfkc`` normalisation folds the newlines of the
JSON value to spaces, so training on the JSON Lines file and decoding the flattened lines give
the same token ids.

`read_dialogsum` reads a split through ``odet.data.read_jsonl_pairs`` (malformed JSON, missing
fields, non-string values and empty dialogues or summaries are skipped and counted) and adds
length counts: how many dialogues exceed a word budget, i.e. will be truncated by
``data.truncate_source``. `truncation_report` gives the exact count in subword tokens.

`Lead` is the extractive baseline, the dialogue counterpart of LEAD-3 in news summarization:
the first ``n`` words or turns of the dialogue.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from odet.data.text import DataError, PathLike, ReadReport, TextPairs, read_jsonl_pairs
from odet.data.tokenizer import Tokenizer
from odet.evaluation.rouge import corpus_rouge
from odet.io import check_output_file

__all__ = [
    "SPEAKER_TAGS",
    "DialogSumData",
    "DialogSumReport",
    "Lead",
    "LeadScore",
    "TruncationReport",
    "flatten_dialogue",
    "read_dialogsum",
    "score_leads",
    "truncation_report",
    "write_dialogsum_lines",
]

# DialogSum's train split uses #Person1# ... #Person7#; dev uses 1-4.
SPEAKER_TAGS: tuple[str, ...] = tuple(f"#Person{k}#" for k in range(1, 8))
LeadUnit = Literal["words", "turns"]
DEFAULT_LONG_WORDS = 300


def flatten_dialogue(dialogue: str) -> str:
    """The dialogue on one line: whitespace runs (turn breaks included) become one space.

    The speaker tag that opens every turn keeps the turn break visible to the model.
    """
    return " ".join(dialogue.split())


@dataclass(frozen=True)
class DialogSumReport:
    """What `read_dialogsum` found: the reader's counts plus dialogue and summary lengths.

    ``long_dialogues`` counts kept dialogues of more than ``long_words`` words: with
    ``data.truncate_source`` they lose their end (use `truncation_report` for subword counts).
    """

    read: ReadReport
    long_words: int
    long_dialogues: int
    longest_dialogue_words: int
    mean_dialogue_words: float
    mean_summary_words: float

    def __post_init__(self) -> None:
        if self.long_words < 1:
            raise ValueError(f"long_words must be >= 1, got {self.long_words}")
        if not 0 <= self.long_dialogues <= self.read.kept:
            raise ValueError(
                f"long_dialogues={self.long_dialogues} must lie in [0, kept={self.read.kept}]"
            )

    def message(self) -> str:
        """One line for a log: kept, skipped by reason, and long dialogues."""
        counts = self.read.as_dict()
        skipped = [
            f"{counts[k]} {k.replace('_', ' ')}"
            for k in ("empty", "invalid_utf8", "malformed_json", "missing_field", "not_a_string")
            if counts[k]
        ]
        text = f"{self.read.paths[0]}: kept {self.read.kept} of {self.read.lines} lines"
        if skipped:
            text += f" (skipped: {', '.join(skipped)})"
        return (
            f"{text}; {self.long_dialogues} dialogue(s) longer than {self.long_words} words "
            f"(longest {self.longest_dialogue_words}); mean dialogue "
            f"{self.mean_dialogue_words:.1f} words, mean summary {self.mean_summary_words:.1f}"
        )

    def as_dict(self) -> dict[str, object]:
        """Flat counts, for JSON."""
        return {
            **self.read.as_dict(),
            "long_words": self.long_words,
            "long_dialogues": self.long_dialogues,
            "longest_dialogue_words": self.longest_dialogue_words,
            "mean_dialogue_words": round(self.mean_dialogue_words, 2),
            "mean_summary_words": round(self.mean_summary_words, 2),
        }


@dataclass(frozen=True)
class DialogSumData:
    """One-line dialogues and their summaries (``pairs.source`` / ``pairs.target``)."""

    pairs: TextPairs
    report: DialogSumReport

    @property
    def dialogues(self) -> tuple[str, ...]:
        return self.pairs.source

    @property
    def summaries(self) -> tuple[str, ...]:
        return self.pairs.target


def read_dialogsum(
    path: PathLike,
    *,
    long_words: int = DEFAULT_LONG_WORDS,
    source_field: str = "dialogue",
    target_field: str = "summary",
    strict: bool = False,
) -> DialogSumData:
    """Read a DialogSum JSON Lines file (plain or gzip) into one-line dialogues and summaries.

    Bad records are skipped and counted (``strict=True`` raises ``DataError`` at the first);
    a file with no usable record raises ``DataError`` naming the counts.
    """
    raw = read_jsonl_pairs(path, source_field, target_field, strict=strict)
    if not len(raw):
        raise DataError(
            f"{path} has no usable {source_field!r}/{target_field!r} record "
            f"({raw.report.reasons() or 'the file is empty'})"
        )
    dialogues = tuple(flatten_dialogue(d) for d in raw.source)
    summaries = tuple(flatten_dialogue(s) for s in raw.target)
    words = [len(d.split()) for d in dialogues]
    report = DialogSumReport(
        read=raw.report,
        long_words=long_words,
        long_dialogues=sum(w > long_words for w in words),
        longest_dialogue_words=max(words),
        mean_dialogue_words=statistics.fmean(words),
        mean_summary_words=statistics.fmean(len(s.split()) for s in summaries),
    )
    pairs = TextPairs(dialogues, summaries, raw.line_numbers, raw.report)
    return DialogSumData(pairs, report)


def write_dialogsum_lines(
    path: PathLike, out_prefix: PathLike, *, long_words: int = DEFAULT_LONG_WORDS
) -> DialogSumReport:
    """Write ``<out_prefix>.dialogue`` and ``<out_prefix>.summary``, one example per line.

    These are what ``odet generate -i`` and ``odet evaluate --ref`` read; skipped records are
    left out of both files (the report counts them), so the two stay line-aligned. An output
    that is the input, a directory or odet's own file is refused before anything is read.
    """
    for suffix in (".dialogue", ".summary"):
        check_output_file(f"{out_prefix}{suffix}", "out_prefix", (path,))
    data = read_dialogsum(path, long_words=long_words)
    prefix = Path(out_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for suffix, lines in ((".dialogue", data.dialogues), (".summary", data.summaries)):
        Path(f"{prefix}{suffix}").write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return data.report


@dataclass(frozen=True)
class TruncationReport:
    """Subword lengths of sources against a truncation limit (``data.truncate_source``)."""

    limit: int
    total: int
    truncated: int
    longest: int
    mean_tokens: float
    dropped_fraction: float  # share of all source tokens cut off

    def __post_init__(self) -> None:
        if self.limit < 1 or self.total < 1:
            raise ValueError(f"need limit >= 1 and total >= 1, got {self.limit}, {self.total}")
        if not 0 <= self.truncated <= self.total:
            raise ValueError(f"truncated={self.truncated} must lie in [0, total={self.total}]")

    def message(self) -> str:
        return (
            f"{self.truncated} of {self.total} sources longer than {self.limit} tokens "
            f"(longest {self.longest}, mean {self.mean_tokens:.1f}); truncation drops "
            f"{100 * self.dropped_fraction:.1f}% of source tokens"
        )


def truncation_report(sources: Sequence[str], tokenizer: Tokenizer, limit: int) -> TruncationReport:
    """How many ``sources`` exceed ``limit`` subword tokens, and how much truncation removes."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if not sources:
        raise ValueError("truncation_report needs at least one source")
    lengths = [len(ids) for ids in tokenizer.encode_batch(list(sources))]
    total_tokens = sum(lengths)
    return TruncationReport(
        limit=limit,
        total=len(lengths),
        truncated=sum(n > limit for n in lengths),
        longest=max(lengths),
        mean_tokens=total_tokens / len(lengths),
        dropped_fraction=sum(max(n - limit, 0) for n in lengths) / max(total_tokens, 1),
    )


@dataclass(frozen=True)
class Lead:
    """The first ``n`` words or turns of a one-line dialogue, as an extractive summary.

    With ``speaker_tags=False`` the ``#PersonK#:`` tags are removed first (ROUGE's tokenizer
    reads a tag as the word ``personk``, which the summaries also use, so tags earn points).
    """

    n: int
    unit: LeadUnit = "words"
    speaker_tags: bool = True

    def __post_init__(self) -> None:
        if self.unit not in get_args(LeadUnit):
            raise ValueError(f"Lead.unit must be one of {get_args(LeadUnit)}, got {self.unit!r}")
        if self.n < 1:
            raise ValueError(f"Lead.n must be >= 1, got {self.n}")

    @property
    def name(self) -> str:
        tags = "" if self.speaker_tags else ", no tags"
        return f"lead-{self.n} {self.unit}{tags}"

    def __call__(self, dialogue: str) -> str:
        words = dialogue.split()
        if self.unit == "turns":
            starts = [i for i, w in enumerate(words) if _is_turn_start(w)] or [0]
            stop = starts[self.n] if self.n < len(starts) else len(words)
            words = words[:stop]
        if not self.speaker_tags:
            words = [w for w in words if not _is_turn_start(w)]
        return " ".join(words if self.unit == "turns" else words[: self.n])


def has_turns(dialogue: str) -> bool:
    """Whether ``dialogue`` holds a speaker tag to count turns by (LEAD's ``"turns"`` unit reads
    a dialogue without one as a single turn, i.e. copies it whole)."""
    return any(_is_turn_start(w) for w in dialogue.split())


def _is_turn_start(word: str) -> bool:
    """``#Person1#:`` and the like (any ``#...#:`` word, as DialogSum's tags vary in case)."""
    return len(word) > 3 and word.startswith("#") and word.endswith("#:")


@dataclass(frozen=True)
class LeadScore:
    """Corpus ROUGE-1/2/L F1 (×100, stemmed, rouge-score) of one LEAD variant."""

    lead: Lead
    rouge1: float
    rouge2: float
    rouge_l: float

    @property
    def mean(self) -> float:
        return (self.rouge1 + self.rouge2 + self.rouge_l) / 3


def score_leads(
    dialogues: Sequence[str], references: Sequence[str], leads: Sequence[Lead]
) -> list[LeadScore]:
    """ROUGE of each LEAD variant on one-line ``dialogues`` against one reference each."""
    scores = []
    for lead in leads:
        result = corpus_rouge([lead(d) for d in dialogues], list(references))
        scores.append(LeadScore(lead, result.rouge1.f1, result.rouge2.f1, result.rouge_l.f1))
    return scores
