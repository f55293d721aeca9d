"""Evaluation metrics: BLEU/chrF (sacrebleu), ROUGE (rouge-score), GEC (GLEU, MaxMatch F0.5),
and paired significance tests: approximate randomization over test sentences
(``paired_bleu_test``) and the t-test across seeds (``paired_t_test``)."""

from odet.evaluation.gec import GLEUResult, M2Result, corpus_gleu, m2_score, sentence_gleu
from odet.evaluation.rouge import RougeResult, RougeScore, corpus_rouge
from odet.evaluation.statistics import PairedTTest, paired_t_test
from odet.evaluation.translation import (
    BLEUResult,
    CHRFResult,
    PairedBLEU,
    corpus_bleu,
    corpus_chrf,
    paired_bleu_test,
    tokenize_13a_lower,
    tokenized_bleu,
)

__all__ = [
    "BLEUResult",
    "CHRFResult",
    "GLEUResult",
    "M2Result",
    "PairedBLEU",
    "PairedTTest",
    "RougeResult",
    "RougeScore",
    "corpus_bleu",
    "corpus_chrf",
    "corpus_gleu",
    "corpus_rouge",
    "m2_score",
    "paired_bleu_test",
    "paired_t_test",
    "sentence_gleu",
    "tokenize_13a_lower",
    "tokenized_bleu",
]
