"""One entry point for corpus metrics by name: the trainer's validation and ``odet evaluate``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from odet.evaluation.gec import corpus_gleu
from odet.evaluation.rouge import corpus_rouge
from odet.evaluation.translation import corpus_bleu, corpus_chrf

TextMetric = Literal["bleu", "chrf", "rouge", "gleu"]
TEXT_METRICS: tuple[TextMetric, ...] = ("bleu", "chrf", "rouge", "gleu")


def score_text(
    metric: TextMetric,
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    sources: Sequence[str] | None = None,
) -> dict[str, float]:
    """Corpus scores (0–100, higher is better); the headline value is under ``metric``.

    ``references[i]`` lists the reference(s) of ``hypotheses[i]``. For ``rouge`` the headline
    is the mean of ROUGE-1/2/L F1 (each also returned); ``gleu`` needs the ``sources``.
    """
    if metric == "bleu":
        return {"bleu": corpus_bleu(hypotheses, references).score}
    if metric == "chrf":
        return {"chrf": corpus_chrf(hypotheses, references).score}
    if metric == "rouge":
        r = corpus_rouge(hypotheses, references)
        parts = {"rouge1": r.rouge1.f1, "rouge2": r.rouge2.f1, "rougeL": r.rouge_l.f1}
        return {"rouge": sum(parts.values()) / 3, **parts}
    if metric == "gleu":
        if sources is None:
            raise ValueError("GLEU needs the source sentences")
        return {"gleu": corpus_gleu(sources, hypotheses, references).score}
    raise ValueError(f"unknown metric {metric!r}; choose one of {list(TEXT_METRICS)}")
