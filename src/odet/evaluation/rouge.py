"""Corpus ROUGE-1/2/L with Google's ``rouge-score`` package (the ROUGE-1.5.5 reimplementation).

Conventions (those of most summarization papers that use ``rouge-score``):

- Tokenization is ``rouge-score``'s default: lower-case, non-alphanumeric characters replaced by
  spaces, Porter stemming on by default (``use_stemmer=True``, like ROUGE-1.5.5's ``-m``).
  It is meant for English.
- With several references per example, each ROUGE type is scored against every reference and the
  reference with the **highest F1 for that type** is kept (precision and recall come from that same
  reference): ``RougeScorer.score_multi``. This is ROUGE-1.5.5's ``-f B`` (best reference) rule,
  the usual one in neural summarization; ROUGE-1.5.5's default ``-f A`` averages instead.
- Corpus scores are plain means of the per-example precision, recall and F1 (macro average), ×100.
- ``rouge_lsum`` is summary-level ROUGE-L: sentences must be separated by newlines in both texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rouge_score.rouge_scorer import RougeScorer

from odet.evaluation.checks import check_references, check_texts

__all__ = ["RougeResult", "RougeScore", "corpus_rouge"]

_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@dataclass(frozen=True)
class RougeScore:
    """Corpus-average precision, recall and F1 of one ROUGE type, each in [0, 100]."""

    precision: float
    recall: float
    f1: float

    def __post_init__(self) -> None:
        values = {"precision": self.precision, "recall": self.recall, "f1": self.f1}
        for name, value in values.items():
            if not 0.0 <= value <= 100.0 + 1e-9:
                raise ValueError(f"ROUGE {name} must lie in [0, 100], got {value}")


@dataclass(frozen=True)
class RougeResult:
    """ROUGE-1, ROUGE-2, ROUGE-L and summary-level ROUGE-Lsum averaged over a corpus."""

    rouge1: RougeScore
    rouge2: RougeScore
    rouge_l: RougeScore
    rouge_lsum: RougeScore
    num_examples: int
    use_stemmer: bool

    def __post_init__(self) -> None:
        if self.num_examples < 1:
            raise ValueError(f"num_examples must be >= 1, got {self.num_examples}")


def corpus_rouge(
    predictions: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    *,
    use_stemmer: bool = True,
) -> RougeResult:
    """Score ``predictions[i]`` against ``references[i]`` (one string or several) and average.

    Raises ``ValueError`` when the counts differ, the corpus is empty, or an example has no
    reference.
    """
    check_texts(predictions, "predictions")
    check_references(references)
    if not isinstance(use_stemmer, bool):
        raise TypeError(f"use_stemmer must be a bool, got {use_stemmer!r}")
    if len(predictions) != len(references):
        raise ValueError(
            f"got {len(predictions)} predictions but {len(references)} reference entries"
        )
    if not predictions:
        raise ValueError("cannot compute ROUGE on an empty corpus")
    scorer = RougeScorer(list(_TYPES), use_stemmer=use_stemmer)
    sums = {t: [0.0, 0.0, 0.0] for t in _TYPES}
    for i, (prediction, refs) in enumerate(zip(predictions, references, strict=True)):
        targets = [refs] if isinstance(refs, str) else list(refs)
        if not targets:
            raise ValueError(f"example {i} has no reference")
        scores = scorer.score_multi(targets, prediction)
        for t in _TYPES:
            sums[t][0] += scores[t].precision
            sums[t][1] += scores[t].recall
            sums[t][2] += scores[t].fmeasure
    n = len(predictions)

    def mean(t: str) -> RougeScore:
        p, r, f = (100.0 * s / n for s in sums[t])
        return RougeScore(precision=p, recall=r, f1=f)

    return RougeResult(
        rouge1=mean("rouge1"),
        rouge2=mean("rouge2"),
        rouge_l=mean("rougeL"),
        rouge_lsum=mean("rougeLsum"),
        num_examples=n,
        use_stemmer=use_stemmer,
    )
