"""Training data for grammatical error correction: synthetic pairs from clean text, or M2 files.

No free GEC training corpus can be shipped (FCE, W&I+LOCNESS and NUCLE have restrictive
licences; JFLEG and CoNLL-14 are evaluation sets), so `build_gec_data` makes one: clean English
sentences are tokenized the way JFLEG and CoNLL-14 are (Penn Treebank: ``do n't``, ``it 's``,
punctuation split off) and corrupted by the seeded `odet.data.gec_noise.GECNoise`, giving
(corrupted → clean) pairs written as line-aligned ``train.src`` / ``train.tgt`` with a
``report.json``.

Clean text available offline, and what it is worth:

- **Multi30k English** (``train.en.gz``, 29k image captions): clean but narrow — short
  descriptive sentences ("A man in a blue shirt is standing on a ladder."), third person,
  present progressive.
- **DialogSum** (``*.jsonl[.gz]``): the summaries (third person, past and present tense;
  speaker tags such as ``#Person1#`` are replaced by first names) and the dialogue turns
  (first and second person, questions, opinions; the dialogues come from English-learning
  websites). The turns are the closest register to learner essays that is at hand.

Both differ from JFLEG, whose sources are learner essays (TOEFL-style argument, long sentences,
many misspellings, fluency rewrites): a model trained on these pairs learns the injected error
types on short everyday sentences, not the full range of learner errors. Expect gains over the
copy baseline from spelling, article, agreement and preposition fixes, far below systems trained
on real learner data. Users with FCE, W&I+LOCNESS or NUCLE convert their M2 files with
`m2_to_parallel` and train on those instead (or on both).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from nltk.tokenize import TreebankWordTokenizer

from odet.data.gec_noise import GECNoise, NoiseConfig, error_types_for
from odet.data.m2 import OutOfRange, read_m2_parallel
from odet.data.text import DataError, PathLike, read_jsonl_pairs, read_lines
from odet.io import check_output_dir, check_output_file, claim_output_dir

__all__ = [
    "JFLEG_NOISE",
    "CleanSourceReport",
    "GECDataReport",
    "M2ConversionReport",
    "build_gec_data",
    "clean_sentences",
    "english_words",
    "m2_to_parallel",
    "ptb_tokenize",
    "split_sentences",
    "substitute_words",
]

CleanKind = Literal["lines", "dialogsum"]

# GECNoise's defaults with more misspellings: JFLEG sources are rich in them ("siences",
# "tecnologies", "becouse"), and the default 2% per word leaves most sentences spelled right.
JFLEG_NOISE = NoiseConfig(typo=0.05)

_TREEBANK = TreebankWordTokenizer()
# DialogSum writes some contractions with spaced apostrophes: "I ' Ve", "don ' t".
_SPACED_APOSTROPHE = re.compile(r"(\w) ' (s|t|d|m|ll|ve|re)\b", re.IGNORECASE)
_SPEAKER_TAG = re.compile(r"#[^#\s]*#")
_TURN_TAG = re.compile(r"^#[^#\s]*#:\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(]?[A-Z0-9#])")
_ABBREVIATIONS = frozenset({"Mr.", "Mrs.", "Ms.", "Dr.", "St.", "Prof.", "Jr.", "Sr.", "vs."})
_NAMES = (
    "Anna", "Ben", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Jack", "Kate", "Linda",
    "Mark", "Nancy", "Paul", "Rose", "Sam", "Tom", "Lucy", "Peter", "Mary",
)  # fmt: skip


def ptb_tokenize(text: str) -> str:
    """Penn Treebank tokenization (NLTK's ``TreebankWordTokenizer``) with plain ``"`` quotes,
    the convention of JFLEG and CoNLL-14 (``I do n't know , " he said .``)."""
    tokens = _TREEBANK.tokenize(text)
    return " ".join('"' if t in ("``", "''") else t for t in tokens)


def split_sentences(text: str) -> list[str]:
    """Split at ``.``/``!``/``?`` followed by a capitalised word, except after a title
    (``Mr.``, ``Dr.`` ...).

    Written here because NLTK's Punkt splitter needs a model download, and DialogSum's clean,
    short sentences need no more than this rule.
    """
    pieces = _SENTENCE_END.split(text.strip())
    sentences: list[str] = []
    for piece in pieces:
        if sentences and sentences[-1].split()[-1] in _ABBREVIATIONS:
            sentences[-1] = f"{sentences[-1]} {piece}"
        elif piece:
            sentences.append(piece)
    return sentences


@dataclass(frozen=True)
class CleanSourceReport:
    """Sentences taken from one clean-text file (before filtering and de-duplication)."""

    path: str
    kind: CleanKind
    records: int
    skipped_records: int
    sentences: int


def clean_sentences(
    path: PathLike, *, seed: int = 0, dialogue_turns: bool = True
) -> tuple[list[str], CleanSourceReport]:
    """Untokenized clean sentences from one file, and what was read.

    ``*.jsonl`` / ``*.jsonl.gz`` files are DialogSum records: each summary is split into
    sentences with its speaker tags replaced by first names (drawn with ``seed``), and, with
    ``dialogue_turns``, each turn (tag removed, contractions repaired) too. Other files hold one
    sentence per line, plain or gzip (Multi30k's ``train.en.gz``).
    """
    name = Path(path).name
    if name.endswith((".jsonl", ".jsonl.gz")):
        pairs = read_jsonl_pairs(path, "dialogue", "summary")
        if not len(pairs):
            raise DataError(f"{path} {pairs.report.nothing_usable()}")
        rng = random.Random(seed)
        sentences: list[str] = []
        for dialogue, summary in pairs:
            sentences += split_sentences(_name_speakers(summary, rng))
            if dialogue_turns:
                for turn in dialogue.splitlines():
                    text = _SPACED_APOSTROPHE.sub(
                        lambda m: f"{m[1]}'{m[2].lower()}", _TURN_TAG.sub("", turn.strip())
                    )
                    sentences += split_sentences(text)
        report = CleanSourceReport(
            str(path), "dialogsum", pairs.report.lines, pairs.report.skipped, len(sentences)
        )
        return sentences, report
    lines = read_lines(path)
    if not len(lines):
        raise DataError(f"{path} {lines.report.nothing_usable()}")
    report = CleanSourceReport(
        str(path), "lines", lines.report.lines, lines.report.skipped, len(lines)
    )
    return list(lines.lines), report


def _name_speakers(text: str, rng: random.Random) -> str:
    """Replace each distinct speaker tag by a distinct first name."""
    tags = list(dict.fromkeys(_SPEAKER_TAG.findall(text)))
    names = dict(zip(tags, rng.sample(_NAMES, len(tags)), strict=True))
    return _SPEAKER_TAG.sub(lambda m: names[m[0]], text)


@dataclass(frozen=True)
class GECDataReport:
    """What `build_gec_data` wrote and why sentences were left out (also ``report.json``)."""

    source_file: str
    target_file: str
    inputs: tuple[CleanSourceReport, ...]
    seed: int
    copies: int
    noise: dict[str, float]
    min_words: int
    max_words: int
    candidates: int
    too_short: int
    too_long: int
    unusable: int  # left-over markup ("#PersonN#") or characters outside printable text
    duplicates: int
    sentences: int
    pairs: int
    unchanged: int
    errors: dict[str, int] = field(default_factory=dict)
    join: int = 1
    passages: int = 0  # training examples: sentences, or passages of up to `join` sentences
    substitute: float = 0.0
    vocabulary: int = 0  # size of the word list substitutes were drawn from
    substituted: int = 0  # words replaced (in source and target) by a vocabulary word

    def __post_init__(self) -> None:
        dropped = self.too_short + self.too_long + self.unusable + self.duplicates
        if self.candidates != self.sentences + dropped:
            raise ValueError(
                f"candidates={self.candidates} != sentences={self.sentences} + dropped={dropped}"
            )
        if self.pairs != self.passages * self.copies:
            raise ValueError(f"pairs={self.pairs} != passages={self.passages} × copies")
        if not 0 <= self.unchanged <= self.pairs:
            raise ValueError(f"unchanged={self.unchanged} must lie in [0, pairs={self.pairs}]")

    def message(self) -> str:
        errors = sum(self.errors.values())
        joined = (
            f" joined into {self.passages} passages of up to {self.join}" if self.join > 1 else ""
        )
        return (
            f"{self.pairs} pairs from {self.sentences} clean sentences{joined} × {self.copies} "
            f"(dropped: {self.too_short} < {self.min_words} words, {self.too_long} > "
            f"{self.max_words} words, {self.unusable} unusable, {self.duplicates} duplicates); "
            f"{self.unchanged} pairs left unchanged, {errors / max(self.pairs, 1):.2f} errors "
            f"per pair{self._substitution()}; written to {self.source_file} and "
            f"{self.target_file}"
        )

    def _substitution(self) -> str:
        if not self.substituted:
            return ""
        return f", {self.substituted} words replaced from a {self.vocabulary}-word list"


def build_gec_data(
    clean_files: Sequence[PathLike],
    out_dir: PathLike,
    *,
    noise_config: NoiseConfig = JFLEG_NOISE,
    seed: int = 1,
    copies: int = 1,
    min_words: int = 3,
    max_words: int = 60,
    dialogue_turns: bool = True,
    join: int = 1,
    vocabulary: Sequence[str] = (),
    substitute: float = 0.0,
) -> GECDataReport:
    """Write ``out_dir/train.src`` (corrupted) and ``out_dir/train.tgt`` (clean), line-aligned.

    Each clean sentence (see `clean_sentences`) is PTB-tokenized, kept if it has ``min_words``
    to ``max_words`` tokens and was not seen before. With ``join`` > 1, consecutive kept
    sentences (the turns of one dialogue stay together) form passages of 1 to ``join``
    sentences, the count drawn uniformly with ``seed``, a passage ending early rather than
    exceeding ``max_words``: learner text such as JFLEG's has long sentences (18.6 words on
    average, a tail past 40), and a model trained on short ones drops the end of long inputs.
    Each sentence or passage is then corrupted ``copies`` times by one
    ``GECNoise(noise_config, seed=seed)`` (different errors each time; some pairs come out
    unchanged, which teaches the model to leave correct text alone). With ``substitute`` > 0,
    before each corruption every content word (alphabetic, 4+ letters, not a word the noise
    has a rule for) is replaced, with that probability, by a word drawn uniformly from
    ``vocabulary``, on both sides of the pair: captions and dialogues have a small vocabulary,
    and a model that never saw essay words split into subword pieces mangles them when it
    should copy them, and cannot learn to spell them (see `english_words`). The same files,
    options and seed give byte-identical output. ``out_dir/report.json`` records every count.
    """
    if not clean_files:
        raise ValueError("build_gec_data needs at least one clean text file")
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    if join < 1:
        raise ValueError(f"join must be >= 1, got {join}")
    if not 0.0 <= substitute <= 1.0:
        raise ValueError(f"substitute must be a probability in [0, 1], got {substitute}")
    if isinstance(vocabulary, str) or not all(isinstance(w, str) and w for w in vocabulary):
        raise TypeError(
            "vocabulary must be a sequence of words (non-empty strings); a string would be "
            "drawn from letter by letter"
        )
    words = tuple(vocabulary)
    if substitute > 0 and not words:
        raise ValueError("substitute > 0 needs a vocabulary to draw the substitutes from")
    out = check_output_dir(out_dir, "--out", owned=_has_gec_report, command="prepare gec")
    inputs, tokenized = [], []
    for path in clean_files:
        sentences, report = clean_sentences(path, seed=seed, dialogue_turns=dialogue_turns)
        inputs.append(report)
        tokenized += [ptb_tokenize(s) for s in sentences]
    drops: Counter[str] = Counter()
    kept: list[str] = []
    seen: set[str] = set()
    for sentence in tokenized:
        n = len(sentence.split())
        if n < min_words:
            drops["too_short"] += 1
        elif n > max_words:
            drops["too_long"] += 1
        elif "#" in sentence or not sentence.isprintable():
            drops["unusable"] += 1
        elif sentence in seen:
            drops["duplicates"] += 1
        else:
            seen.add(sentence)
            kept.append(sentence)
    if not kept:
        raise DataError(
            f"no clean sentence of {min_words}-{max_words} words in {list(map(str, clean_files))}"
        )
    passages = _join_sentences(kept, join, max_words, seed) if join > 1 else kept
    noise = GECNoise(noise_config, seed=seed)
    substitutions = random.Random(f"gec-substitute-{seed}")
    sources, targets, unchanged, errors = [], [], 0, Counter[str]()
    substituted = 0
    for _ in range(copies):
        for passage in passages:
            sentence = passage
            if substitute > 0:
                sentence, count = substitute_words(passage, words, substitute, substitutions)
                substituted += count
            corruption = noise.corrupt(sentence)
            sources.append(corruption.text)
            targets.append(sentence)
            unchanged += not corruption.errors
            errors.update(corruption.types)
    claim_output_dir(out, "prepare gec")
    src_path, tgt_path = out / "train.src", out / "train.tgt"
    _write_lines(src_path, sources)
    _write_lines(tgt_path, targets)
    report = GECDataReport(
        source_file=str(src_path),
        target_file=str(tgt_path),
        inputs=tuple(inputs),
        seed=seed,
        copies=copies,
        noise=asdict(noise_config),
        min_words=min_words,
        max_words=max_words,
        candidates=len(tokenized),
        too_short=drops["too_short"],
        too_long=drops["too_long"],
        unusable=drops["unusable"],
        duplicates=drops["duplicates"],
        sentences=len(kept),
        pairs=len(sources),
        unchanged=unchanged,
        errors=dict(sorted(errors.items())),
        join=join,
        passages=len(passages),
        substitute=substitute,
        vocabulary=len(words) if substitute > 0 else 0,
        substituted=substituted,
    )
    (out / "report.json").write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    return report


def _has_gec_report(out: Path) -> bool:
    """Whether ``out`` holds the ``report.json`` of `build_gec_data` (the layout written before
    the output marker), not any file of that name."""
    try:
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    keys = {"source_file", "target_file", "inputs", "copies", "pairs", "noise"}
    return isinstance(report, dict) and keys <= report.keys()


def substitute_words(
    sentence: str, vocabulary: Sequence[str], rate: float, rng: random.Random
) -> tuple[str, int]:
    """Replace each content word of a tokenized ``sentence`` with probability ``rate`` by a
    word drawn uniformly from ``vocabulary`` (capitalisation kept); returns the new sentence
    and how many words were replaced. Content words are alphabetic, of 4+ letters, and not
    in the noise's word lists (articles, prepositions, confusions, verb and noun forms), so
    the error types keep their contexts."""
    tokens = sentence.split()
    count = 0
    for i, token in enumerate(tokens):
        if not _is_content_word(token) or rng.random() >= rate:
            continue
        word = rng.choice(vocabulary)
        tokens[i] = word[0].upper() + word[1:] if token[0].isupper() else word
        count += 1
    return " ".join(tokens), count


def _is_content_word(token: str) -> bool:
    return (
        len(token) >= 4
        and token.isascii()
        and token.isalpha()
        and set(error_types_for(token)) <= {"typo"}
    )


def english_words(n: int = 30_000, *, min_letters: int = 4) -> list[str]:
    """The ``n`` most frequent English words (by the `wordfreq` package's lists, which cover
    books, subtitles, news and the web) that are lower-case ASCII letters, at least
    ``min_letters`` long: the substitutes for `build_gec_data` (``substitute``)."""
    try:
        import wordfreq
    except ImportError as error:
        raise DataError(
            "vocabulary substitution needs the wordfreq package: pip install wordfreq"
        ) from error
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    words: list[str] = []
    for word in wordfreq.iter_wordlist("en"):
        if len(word) >= min_letters and word.isascii() and word.isalpha() and word.islower():
            words.append(word)
            if len(words) == n:
                break
    return words


def _join_sentences(sentences: list[str], join: int, max_words: int, seed: int) -> list[str]:
    """Consecutive ``sentences`` grouped into passages of 1 to ``join`` (uniform, seeded) that
    stay within ``max_words``."""
    rng = random.Random(f"gec-join-{seed}")
    passages, i = [], 0
    while i < len(sentences):
        wanted = rng.randint(1, join)
        group, words = [sentences[i]], len(sentences[i].split())
        i += 1
        while len(group) < wanted and i < len(sentences):
            n = len(sentences[i].split())
            if words + n > max_words:
                break
            group.append(sentences[i])
            words += n
            i += 1
        passages.append(" ".join(group))
    return passages


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


@dataclass(frozen=True)
class M2ConversionReport:
    """What `m2_to_parallel` wrote: sentences, annotators used, pairs and unchanged pairs."""

    source_file: str
    target_file: str
    sentences: int
    annotators: tuple[int, ...]
    pairs: int
    unchanged: int
    skipped_unchanged: int


def m2_to_parallel(
    m2_path: PathLike,
    out_prefix: PathLike,
    *,
    annotator: int | None = None,
    keep_unchanged: bool = True,
    out_of_range: OutOfRange = "raise",
) -> M2ConversionReport:
    """Write ``<out_prefix>.src`` / ``<out_prefix>.tgt`` from an M2 file (FCE, W&I, NUCLE ...).

    ``annotator=None`` writes one pair per sentence per annotator (the usual way to train on
    multiply-annotated data); an id selects that annotator only. ``keep_unchanged=False`` drops
    pairs whose correction equals the source. ``out_of_range`` is passed to
    ``odet.data.m2.read_m2`` (``"drop"`` ignores edits that run past their sentence, as the
    official M2 scorer does). An output that is the M2 file itself, a directory or odet's own
    file is refused before anything is read (``odet.io.check_output_file``).
    """
    for suffix in (".src", ".tgt"):
        check_output_file(f"{out_prefix}{suffix}", "out_prefix", (m2_path,))
    by_annotator = read_m2_parallel(m2_path, out_of_range=out_of_range)
    if not by_annotator:
        raise DataError(f"{m2_path} holds no M2 sentence (no 'S' line)")
    if annotator is not None and annotator not in by_annotator:
        raise ValueError(
            f"annotator {annotator} not in {m2_path}; it has annotators {sorted(by_annotator)}"
        )
    chosen = sorted(by_annotator) if annotator is None else [annotator]
    pairs = [pair for a in chosen for pair in by_annotator[a]]
    unchanged = sum(src == tgt for src, tgt in pairs)
    if not keep_unchanged:
        pairs = [(src, tgt) for src, tgt in pairs if src != tgt]
    prefix = str(out_prefix)
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    _write_lines(Path(f"{prefix}.src"), (src for src, _ in pairs))
    _write_lines(Path(f"{prefix}.tgt"), (tgt for _, tgt in pairs))
    return M2ConversionReport(
        source_file=f"{prefix}.src",
        target_file=f"{prefix}.tgt",
        sentences=len(by_annotator[chosen[0]]),
        annotators=tuple(chosen),
        pairs=len(pairs),
        unchanged=unchanged,
        skipped_unchanged=0 if keep_unchanged else unchanged,
    )
