"""Corpus ROUGE wrapper: hand-computed n-gram and LCS overlaps, stemming, references, averages."""

from __future__ import annotations

import pytest

from odet.evaluation import corpus_rouge


def test_rouge_matches_hand_counts() -> None:
    # pred "the cat sat on the mat", ref "the cat is on the mat" (6 tokens each):
    # unigrams overlap the x2, cat, on, mat = 5 -> 5/6; bigrams the cat, on the, the mat = 3 -> 3/5;
    # LCS "the cat on the mat" = 5 -> 5/6.
    result = corpus_rouge(["the cat sat on the mat"], ["the cat is on the mat"])
    assert result.rouge1.f1 == pytest.approx(500 / 6)
    assert result.rouge2.precision == pytest.approx(60.0)
    assert result.rouge2.recall == pytest.approx(60.0)
    assert result.rouge_l.f1 == pytest.approx(500 / 6)
    assert result.num_examples == 1


def test_rouge_precision_and_recall_differ_with_lengths() -> None:
    # pred "the cat" (2 tokens) inside ref "the cat sat down" (4): P = 1, R = 1/2, F = 2/3.
    result = corpus_rouge(["the cat"], ["the cat sat down"])
    assert result.rouge1.precision == pytest.approx(100.0)
    assert result.rouge1.recall == pytest.approx(50.0)
    assert result.rouge1.f1 == pytest.approx(200 / 3)


def test_stemming_is_on_by_default() -> None:
    # Porter stemming maps "cats" -> "cat" and "running" -> "run".
    assert corpus_rouge(["cats running"], ["cat run"]).rouge1.f1 == pytest.approx(100.0)
    assert corpus_rouge(["cats running"], ["cat run"], use_stemmer=False).rouge1.f1 == 0.0


def test_multiple_references_keep_the_best_per_type() -> None:
    single = corpus_rouge(["the cat sat on the mat"], ["the cat is on the mat"])
    multi = corpus_rouge(
        ["the cat sat on the mat"], [["a dog barked loudly", "the cat is on the mat"]]
    )
    assert multi.rouge1 == single.rouge1
    assert multi.rouge2 == single.rouge2


def test_corpus_score_is_the_mean_over_examples() -> None:
    result = corpus_rouge(["the cat sat", "dogs bark"], ["the cat sat", "birds sing"])
    assert result.rouge1.f1 == pytest.approx(50.0)
    assert result.num_examples == 2


def test_mismatched_counts_and_empty_corpus_raise() -> None:
    with pytest.raises(ValueError, match="2 predictions but 1 reference"):
        corpus_rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty corpus"):
        corpus_rouge([], [])
    with pytest.raises(ValueError, match="example 0 has no reference"):
        corpus_rouge(["a"], [[]])


@pytest.mark.parametrize(
    ("predictions", "references", "error", "message"),
    [
        ([None], ["a"], TypeError, r"predictions\[0\] must be a string, got NoneType"),
        (["a"], [None], TypeError, r"references\[0\] must be a string or a sequence"),
        (["a"], [["a", 1]], TypeError, r"references\[0\]\[1\] must be a string, got int"),
    ],
)
def test_entries_that_are_not_strings_are_named(predictions, references, error, message) -> None:
    with pytest.raises(error, match=message):
        corpus_rouge(predictions, references)


def test_use_stemmer_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="use_stemmer must be a bool, got 'no'"):
        corpus_rouge(["a"], ["a"], use_stemmer="no")  # type: ignore[arg-type]
