"""Scoring files: what ``odet evaluate`` runs. Line counts are checked and named in errors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odet.data.m2 import read_m2
from odet.data.text import (
    DataError,
    PathLike,
    check_input_file,
    check_line_endings,
    decode_line,
    not_text_message,
    read_binary,
    read_lines,
    split_lines,
)
from odet.evaluation.gec import corpus_gleu, m2_score
from odet.evaluation.rouge import corpus_rouge
from odet.evaluation.translation import (
    corpus_bleu,
    corpus_chrf,
    paired_bleu_test,
    tokenize_13a_lower,
    tokenized_bleu,
)

METRICS = ("bleu", "chrf", "rouge", "gleu", "m2")


def read_all_lines(path: str | Path, what: str = "file") -> list[str]:
    """Every line of a (plain or gzip) file, empty ones included: hypotheses stay aligned
    (lines as :func:`~odet.data.text.split_lines` counts them)."""
    path = check_input_file(path, what)
    raw = read_binary(path, what)
    check_line_endings(raw, f"{what} {path}")
    lines = []
    for number, line in enumerate(split_lines(raw), start=1):
        try:
            lines.append(decode_line(line))
        except UnicodeDecodeError as err:
            raise DataError(not_text_message(f"{what} {path}", err, number)) from None
    return lines


def read_scored_lines(path: str | Path, what: str) -> list[str]:
    """``read_all_lines``, refused when there is nothing to score: an empty file, or one whose
    every line is blank (``what`` names the flag in the message)."""
    lines = read_all_lines(path, what)
    if not lines:
        raise DataError(f"{what} {path} is empty: there is nothing to score")
    if not any(line.strip() for line in lines):
        raise DataError(f"{what} {path} has only blank lines: there is nothing to score")
    return lines


def _aligned(hyp_path: str, hyps: list[str], others: dict[str, list[str]]) -> None:
    for path, lines in others.items():
        if len(lines) != len(hyps):
            raise DataError(
                f"line counts differ: {hyp_path} has {len(hyps)} lines but {path} has {len(lines)}"
            )


def _paths(value: object, name: str) -> list[str]:
    """One path (a string or ``os.PathLike``) or a sequence of them, as a list of strings."""
    if isinstance(value, str | os.PathLike):
        return [os.fspath(value)]
    if not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a path or a list of paths, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str | os.PathLike):
            raise TypeError(f"{name}[{i}] must be a path, got {type(item).__name__}")
    return [os.fspath(item) for item in value]


def evaluate_files(
    metric: str,
    hyp: PathLike | Sequence[PathLike],
    refs: PathLike | Sequence[PathLike],
    *,
    source: PathLike | None = None,
    tokenized: bool = False,
    lowercase: bool = False,
    baseline: PathLike | Sequence[PathLike] | None = None,
) -> dict[str, Any]:
    """Score a hypothesis file against reference file(s); returns numbers and a text summary.

    Each file argument is a path (``str`` or ``os.PathLike``) or a list of them. BLEU only:
    several hypothesis files (e.g. one per training seed) are scored as one corpus,
    each against the same references, and ``baseline`` files (one per hypothesis file, in the
    same order) add a paired approximate-randomization test of the difference.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {list(METRICS)}")
    hyp_paths = _paths(hyp, "hyp")
    refs = _paths(refs, "refs")
    baseline = None if baseline is None else _paths(baseline, "baseline")
    if source is not None and not isinstance(source, str | os.PathLike):
        raise TypeError(f"source must be a path, got {type(source).__name__}")
    source = None if source is None else os.fspath(source)
    if not hyp_paths:
        raise DataError("no hypothesis file given")
    if not refs:
        raise DataError("no reference file given")
    twice = sorted({r for r in refs if refs.count(r) > 1})
    if twice:
        raise DataError(
            f"--ref names {', '.join(twice)} more than once: each reference counts once, so "
            "give every reference file once"
        )
    if (len(hyp_paths) > 1 or baseline) and metric != "bleu":
        raise DataError("several --hyp files and --baseline are for --metric bleu only")
    if baseline is not None and len(baseline) != len(hyp_paths):
        raise DataError(
            f"--baseline needs one file per --hyp file: got {len(baseline)} for {len(hyp_paths)}"
        )
    hyp = hyp_paths[0]
    hyps = read_scored_lines(hyp, "--hyp")
    if metric == "m2":
        if len(refs) != 1:
            raise DataError("--metric m2 takes exactly one reference: the gold M2 file")
        gold = read_m2(refs[0], out_of_range="drop")
        _aligned(hyp, hyps, {refs[0]: ["" for _ in gold]})
        m2 = m2_score(hyps, gold)
        return {
            "metric": "m2",
            "precision": m2.precision,
            "recall": m2.recall,
            "f0.5": m2.f_score,
            "text": f"M2 P {m2.precision:.2f} R {m2.recall:.2f} F{m2.beta:g} {m2.f_score:.2f}",
        }
    ref_lines = {path: read_scored_lines(path, "--ref") for path in refs}
    _aligned(hyp, hyps, ref_lines)
    references = [list(group) for group in zip(*ref_lines.values())]
    if metric == "bleu":
        return _bleu(hyp_paths, references, ref_lines, baseline or [], tokenized, lowercase)
    if metric == "chrf":
        chrf = corpus_chrf(hyps, references)
        return {
            "metric": "chrf",
            "score": chrf.score,
            "signature": chrf.signature,
            "text": f"chrF = {chrf.score:.2f} ({chrf.signature})",
        }
    if metric == "rouge":
        rouge = corpus_rouge(hyps, references)
        scores = {"rouge1": rouge.rouge1.f1, "rouge2": rouge.rouge2.f1, "rougeL": rouge.rouge_l.f1}
        return {
            "metric": "rouge",
            **scores,
            "text": "ROUGE-1/2/L F1 = " + " / ".join(f"{v:.2f}" for v in scores.values()),
        }
    if source is None:
        raise DataError("--metric gleu needs --src (the uncorrected source sentences)")
    sources = read_scored_lines(source, "--src")
    _aligned(hyp, hyps, {source: sources})
    gleu = corpus_gleu(sources, hyps, references)
    return {
        "metric": "gleu",
        "score": gleu.score,
        "std": gleu.std,
        "text": f"GLEU = {gleu.score:.2f} (± {gleu.std:.2f}, {len(refs)} reference(s))",
    }


def _joined(
    paths: Sequence[str], ref_lines: dict[str, list[str]], what: str = "--hyp"
) -> list[str]:
    lines: list[str] = []
    for path in paths:
        hyps = read_scored_lines(path, what)
        _aligned(path, hyps, ref_lines)
        lines += hyps
    return lines


def _bleu(
    hyp_paths: Sequence[str],
    references: list[list[str]],
    ref_lines: dict[str, list[str]],
    baseline_paths: Sequence[str],
    tokenized: bool,
    lowercase: bool,
) -> dict[str, Any]:
    """BLEU of the joined hypothesis files, with a paired test against the joined baselines."""
    hyps = _joined(hyp_paths, ref_lines)
    refs = references * len(hyp_paths)
    if tokenized:
        hyps = [tokenize_13a_lower(h) for h in hyps]
        refs = [[tokenize_13a_lower(r) for r in group] for group in refs]
        result = tokenized_bleu(hyps, refs)
        label = "tokenized lower-cased BLEU"
    else:
        result = corpus_bleu(hyps, refs, lowercase=lowercase)
        label = "BLEU"
    joined = f" of {len(hyp_paths)} files joined" if len(hyp_paths) > 1 else ""
    out: dict[str, Any] = {
        "metric": "bleu",
        "score": result.score,
        "signature": result.signature,
        "text": f"{label}{joined} = {result.score:.2f} ({result.signature})",
    }
    if baseline_paths:
        base = _joined(baseline_paths, ref_lines, "--baseline")
        if tokenized:
            base = [tokenize_13a_lower(b) for b in base]
        test = paired_bleu_test(
            base, hyps, refs, tokenize="none" if tokenized else "13a", lowercase=lowercase
        )
        out |= {"baseline_score": test.baseline, "delta": test.delta, "p_value": test.p_value}
        out["text"] += (
            f"\nbaseline = {test.baseline:.2f}; difference {test.delta:+.2f}, p = "
            f"{test.p_value:.2g} (paired approximate randomization, {test.trials} trials)"
        )
    return out


__all__ = ["METRICS", "evaluate_files", "read_all_lines", "read_lines"]
