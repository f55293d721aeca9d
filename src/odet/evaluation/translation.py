"""Corpus BLEU and chrF through sacrebleu, with typed results.

Two conventions are supported, and they give different numbers:

- **detokenized BLEU** (`corpus_bleu`, `corpus_chrf`): the standard, comparable score. Pass raw,
  detokenized text; sacrebleu tokenizes it (13a by default) and reports a signature.
- **tokenized BLEU** (`tokenized_bleu`): BLEU on text that is already tokenized (and, for
  Multi30k, lower-cased), with sacrebleu's ``tokenize='none'``. This is how most papers report
  Multi30k and WMT14 (``multi-bleu.perl``) numbers. `tokenize_13a_lower` brings raw text into a
  comparable form (13a tokenization + lower-casing) when the official tokenized references are
  not at hand; it is close to, not identical with, the Moses tokenization Multi30k used.

References are given **per example**: ``references[i]`` is one string or a sequence of strings
(the references of hypothesis ``i``); examples may have different numbers of references.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from odet.data.checks import check_int
from odet.evaluation.checks import check_not_empty, check_references, check_texts

__all__ = [
    "BLEUResult",
    "CHRFResult",
    "PairedBLEU",
    "corpus_bleu",
    "corpus_chrf",
    "paired_bleu_test",
    "tokenize_13a_lower",
    "tokenized_bleu",
]

BleuTokenizer = Literal["13a", "intl", "char", "none", "zh", "ja-mecab", "ko-mecab", "flores101"]
References = Sequence[str] | Sequence[Sequence[str]]


@dataclass(frozen=True)
class BLEUResult:
    """Corpus BLEU (0–100) with its components and sacrebleu signature."""

    score: float
    precisions: tuple[float, ...]  # modified n-gram precisions, 0–100, n = 1..4
    bp: float  # brevity penalty
    sys_len: int
    ref_len: int
    signature: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 100.0 + 1e-9:
            raise ValueError(f"BLEU score must lie in [0, 100], got {self.score}")
        if not 0.0 <= self.bp <= 1.0:
            raise ValueError(f"brevity penalty must lie in [0, 1], got {self.bp}")
        if self.sys_len < 0 or self.ref_len < 0:
            raise ValueError(f"lengths must be >= 0, got {self.sys_len}, {self.ref_len}")


@dataclass(frozen=True)
class CHRFResult:
    """Corpus chrF (or chrF++ when ``word_order > 0``), 0–100, with its sacrebleu signature."""

    score: float
    char_order: int
    word_order: int
    beta: int
    signature: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 100.0 + 1e-9:
            raise ValueError(f"chrF score must lie in [0, 100], got {self.score}")


def _reference_streams(hypotheses: Sequence[str], references: References) -> list[list[str | None]]:
    """Transpose per-example references into sacrebleu's reference streams (None pads)."""
    check_texts(hypotheses, "hypotheses")
    check_references(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} reference entries; "
            "references[i] must hold the reference(s) of hypotheses[i]"
        )
    check_not_empty(hypotheses)
    per_example = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    for i, refs in enumerate(per_example):
        if not refs:
            raise ValueError(f"example {i} has no reference")
    n_streams = max((len(refs) for refs in per_example), default=1)
    return [[refs[k] if k < len(refs) else None for refs in per_example] for k in range(n_streams)]


def corpus_bleu(
    hypotheses: Sequence[str],
    references: References,
    *,
    tokenize: BleuTokenizer = "13a",
    lowercase: bool = False,
) -> BLEUResult:
    """Corpus BLEU of detokenized ``hypotheses`` against per-example ``references``.

    With ``tokenize="none"`` the text is taken as already tokenized, and sacrebleu's warning
    about tokenized input is silenced.
    """
    _check_bleu_options(tokenize, lowercase)
    streams = _reference_streams(hypotheses, references)
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    out = metric.corpus_score(list(hypotheses), streams)
    return BLEUResult(
        score=float(out.score),
        precisions=tuple(float(p) for p in out.precisions),
        bp=float(out.bp),
        sys_len=int(out.sys_len),
        ref_len=int(out.ref_len),
        signature=str(metric.get_signature()),
    )


def _check_bleu_options(tokenize: object, lowercase: object) -> None:
    if tokenize not in get_args(BleuTokenizer):
        raise ValueError(f"tokenize={tokenize!r}; expected one of {get_args(BleuTokenizer)}")
    if not isinstance(lowercase, bool):
        raise TypeError(f"lowercase must be a bool, got {lowercase!r}")


def tokenized_bleu(hypotheses: Sequence[str], references: References) -> BLEUResult:
    """BLEU on already tokenized text, split on whitespace only (``tokenize='none'``).

    Equals ``multi-bleu.perl`` on the same text; the inputs are taken as they are (lower-case
    them beforehand, or use `tokenize_13a_lower`, to report "tokenized lower-cased BLEU").
    """
    return corpus_bleu(hypotheses, references, tokenize="none")


def corpus_chrf(
    hypotheses: Sequence[str],
    references: References,
    *,
    char_order: int = 6,
    word_order: int = 0,
    beta: int = 2,
) -> CHRFResult:
    """Corpus chrF (``word_order=2`` gives chrF++) of ``hypotheses`` against ``references``."""
    for name, value in {"char_order": char_order, "word_order": word_order, "beta": beta}.items():
        check_int(value, name, None)
    if char_order < 1 or word_order < 0 or beta < 1:
        raise ValueError(
            f"need char_order >= 1, word_order >= 0, beta >= 1; "
            f"got {char_order}, {word_order}, {beta}"
        )
    streams = _reference_streams(hypotheses, references)
    metric = CHRF(char_order=char_order, word_order=word_order, beta=beta)
    out = metric.corpus_score(list(hypotheses), streams)
    return CHRFResult(
        score=float(out.score),
        char_order=char_order,
        word_order=word_order,
        beta=beta,
        signature=str(metric.get_signature()),
    )


@dataclass(frozen=True)
class PairedBLEU:
    """Two systems' corpus BLEU on the same test set, with a paired significance test.

    ``p_value`` is the chance, were the two systems equally good, of a BLEU difference at least
    as large as the observed one. It measures test-set sampling noise only, not the variance
    between training seeds.
    """

    baseline: float
    system: float
    p_value: float
    system_ci: float  # half-width of the system's 95 % bootstrap interval
    method: Literal["ar", "bs"]
    trials: int

    @property
    def delta(self) -> float:
        return self.system - self.baseline


def paired_bleu_test(
    baseline: Sequence[str],
    system: Sequence[str],
    references: References,
    *,
    tokenize: BleuTokenizer = "13a",
    lowercase: bool = False,
    method: Literal["ar", "bs"] = "ar",
    trials: int = 0,
) -> PairedBLEU:
    """Is ``system``'s BLEU different from ``baseline``'s on these sentences?

    Delegates to sacrebleu's ``PairedTest`` (``sacrebleu --paired-ar`` / ``--paired-bs``):
    ``"ar"`` is approximate randomization (Riezler & Maxwell, 2005; 10,000 trials by default),
    ``"bs"`` paired bootstrap resampling (Koehn, 2004; 1,000 resamples). Both use sacrebleu's
    fixed seed (``SACREBLEU_SEED``, 12345 by default), so results are reproducible. sacrebleu
    counts only trials whose difference *exceeds* the observed one, which underestimates ``p``
    when just a few sentences differ (one differing sentence gives ``1 / (trials + 1)``);
    equal scores (e.g. identical outputs) are given ``p = 1``.
    """
    check_texts(baseline, "baseline")
    check_texts(system, "system")
    if len(baseline) != len(system):
        raise ValueError(
            f"the systems must translate the same sentences: got {len(baseline)} baseline and "
            f"{len(system)} system hypotheses"
        )
    if method not in ("ar", "bs"):
        raise ValueError(f"method must be 'ar' or 'bs', got {method!r}")
    check_int(trials, "trials", None)
    if trials < 0:
        raise ValueError(f"trials must be >= 0 (0: sacrebleu's default), got {trials}")
    _check_bleu_options(tokenize, lowercase)
    streams = _reference_streams(baseline, references)
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))],
        {"BLEU": metric},
        references=streams,
        test_type=method,
        n_samples=trials,
        n_ar_confidence=0,
    )
    _, scores = test()
    base, other = next(v for k, v in scores.items() if k != "System")
    # sacrebleu counts only trials *above* the observed difference, so equal scores (identical
    # outputs, or two systems at 0 BLEU) would get p = 1 / (trials + 1); no difference at all
    # is no evidence of one.
    equal = list(baseline) == list(system) or float(base.score) == float(other.score)
    return PairedBLEU(
        baseline=float(base.score),
        system=float(other.score),
        p_value=1.0 if equal else float(other.p_value),
        system_ci=float(other.ci),
        method=method,
        trials=test.n_samples,
    )


_TOKENIZER_13A = Tokenizer13a()


def tokenize_13a_lower(text: str) -> str:
    """Lower-case ``text`` and tokenize it with sacrebleu's 13a (mteval-v13a) tokenizer."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return _TOKENIZER_13A(text.strip()).lower()
