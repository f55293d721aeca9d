"""Corpus BLEU / chrF wrappers: hand-computed scores, reference handling and conventions."""

from __future__ import annotations

import logging
import math

import pytest

from odet.evaluation import (
    corpus_bleu,
    corpus_chrf,
    paired_bleu_test,
    tokenize_13a_lower,
    tokenized_bleu,
)


def test_bleu_matches_hand_computed_ngram_precisions() -> None:
    # hyp "the cat sat on the mat" vs ref "the cat sat on a mat" (6 tokens each, BP = 1):
    # 1-grams 5/6 (second "the" unmatched), 2-grams 3/5 (the cat, cat sat, sat on),
    # 3-grams 2/4 (the cat sat, cat sat on), 4-grams 1/3 (the cat sat on).
    result = corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert result.precisions == pytest.approx([500 / 6, 60.0, 50.0, 100 / 3])
    assert result.bp == 1.0
    assert (result.sys_len, result.ref_len) == (6, 6)
    assert result.score == pytest.approx(100 * (1 / 12) ** 0.25)


def test_bleu_brevity_penalty_for_short_hypothesis() -> None:
    # All precisions are 1; c = 4, r = 6 -> BP = exp(1 - 6/4).
    result = corpus_bleu(["the cat sat on"], ["the cat sat on the mat"])
    assert result.bp == pytest.approx(math.exp(-0.5))
    assert result.score == pytest.approx(100 * math.exp(-0.5))


def test_bleu_multiple_references_take_the_matching_one() -> None:
    hyps = ["the cat sat on a mat", "a dog runs in the park"]
    refs = [["the cat sat on the mat", "the cat sat on a mat"], ["a dog runs in the park"]]
    result = corpus_bleu(hyps, refs)
    assert result.score == pytest.approx(100.0)
    assert "nrefs:var" in result.signature or "nrefs:2" in result.signature


def test_bleu_signature_names_tokenizer_and_reference_count() -> None:
    result = corpus_bleu(["a b c d"], [["a b c d", "a b c e"]])
    assert "tok:13a" in result.signature
    assert "nrefs:2" in result.signature


def test_mismatched_hypothesis_and_reference_counts_raise() -> None:
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference"):
        corpus_bleu(["a b", "c d"], ["a b"])
    with pytest.raises(ValueError, match="hypotheses"):
        corpus_chrf(["a b"], ["a b", "c d"])


def test_example_without_reference_raises() -> None:
    with pytest.raises(ValueError, match="example 1 has no reference"):
        corpus_bleu(["a b c d", "e f g h"], [["a b c d"], []])


def test_tokenized_bleu_splits_on_whitespace_only() -> None:
    # 13a splits "d," into "d ,"; tokenize='none' keeps "d," as one token that matches nothing.
    assert corpus_bleu(["a b c d,"], ["a b c d ,"]).score == pytest.approx(100.0)
    result = tokenized_bleu(["a b c d,"], ["a b c d ,"])
    assert "tok:none" in result.signature
    assert result.score < 100.0
    assert result.precisions[0] == pytest.approx(75.0)


def test_tokenize_13a_lower_splits_punctuation_and_lowercases() -> None:
    assert tokenize_13a_lower("A man, in a Blue shirt.") == "a man , in a blue shirt ."


def test_chrf_hand_computed_on_characters() -> None:
    # "abc" vs "abd", beta = 1: char 1-grams P = R = 2/3, char 2-grams {ab, bc} vs {ab, bd}
    # P = R = 1/2; sacrebleu averages P and R over orders before the F-score -> 7/12.
    assert corpus_chrf(["abc"], ["abd"], char_order=1, beta=1).score == pytest.approx(200 / 3)
    assert corpus_chrf(["abc"], ["abd"], char_order=2, beta=1).score == pytest.approx(700 / 12)


def test_chrf_plus_plus_is_named_in_signature() -> None:
    result = corpus_chrf(["the cat sat"], ["the cat sat"], word_order=2)
    assert result.score == pytest.approx(100.0)
    assert "nw:2" in result.signature


def test_chrf_rejects_bad_orders() -> None:
    with pytest.raises(ValueError, match="char_order"):
        corpus_chrf(["a"], ["a"], char_order=0)


def test_tokenized_bleu_does_not_warn_on_tokenized_input(caplog: pytest.LogCaptureFixture) -> None:
    lines = ["a man is here ."] * 100
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        corpus_bleu(lines, lines)
        assert "detokenize" in caplog.text  # sacrebleu's own check, on the detokenized path
        caplog.clear()
        tokenized_bleu(lines, lines)
    assert caplog.text == ""


def _paired_corpus() -> tuple[list[str], list[str], list[str]]:
    """40 references, a system that reproduces them and one that gets a word wrong in each."""
    refs = [f"the cat number {i} sat on mat {i % 7} today" for i in range(40)]
    good = list(refs)
    bad = [r.replace("sat", "stood") for r in refs]
    return refs, good, bad


def test_paired_bleu_test_scores_are_corpus_bleu() -> None:
    refs, good, bad = _paired_corpus()
    out = paired_bleu_test(bad, good, refs, trials=200)
    assert out.baseline == pytest.approx(corpus_bleu(bad, refs).score)
    assert out.system == pytest.approx(100.0)
    assert out.delta == pytest.approx(out.system - out.baseline)
    assert (out.method, out.trials) == ("ar", 200)


@pytest.mark.parametrize("method", ["ar", "bs"])
def test_paired_bleu_test_finds_a_consistent_difference_significant(method: str) -> None:
    refs, good, bad = _paired_corpus()
    assert paired_bleu_test(bad, good, refs, method=method, trials=500).p_value < 0.01


def test_paired_bleu_test_of_equally_good_systems_is_not_significant() -> None:
    refs, good, bad = _paired_corpus()
    odd_wrong = [g if i % 2 else b for i, (g, b) in enumerate(zip(good, bad))]
    even_wrong = [b if i % 2 else g for i, (g, b) in enumerate(zip(good, bad))]
    assert paired_bleu_test(odd_wrong, list(odd_wrong), refs, trials=200).p_value == 1.0
    different_but_as_good = paired_bleu_test(odd_wrong, even_wrong, refs, trials=500)
    assert different_but_as_good.delta == pytest.approx(0.0)
    assert different_but_as_good.p_value > 0.5


def test_paired_bleu_test_approximate_randomization_is_symmetric() -> None:
    refs, good, bad = _paired_corpus()
    half = [g if i % 3 else b for i, (g, b) in enumerate(zip(good, bad))]
    forward = paired_bleu_test(bad, half, refs, trials=300)
    backward = paired_bleu_test(half, bad, refs, trials=300)
    assert forward.p_value == pytest.approx(backward.p_value)
    assert forward.delta == pytest.approx(-backward.delta)


def test_paired_bleu_test_rejects_bad_input() -> None:
    refs, good, bad = _paired_corpus()
    with pytest.raises(ValueError, match="same sentences"):
        paired_bleu_test(good, bad[:-1], refs)
    with pytest.raises(ValueError, match="method"):
        paired_bleu_test(good, bad, refs, method="t-test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="trials"):
        paired_bleu_test(good, bad, refs, trials=-1)


def test_paired_bleu_test_of_two_systems_at_zero_bleu_is_p_one() -> None:
    refs, _, _ = _paired_corpus()
    nonsense_a = ["xx yy"] * len(refs)
    nonsense_b = ["zz"] * len(refs)
    out = paired_bleu_test(nonsense_a, nonsense_b, refs, trials=200)
    assert (out.baseline, out.system, out.delta) == (0.0, 0.0, 0.0)
    assert out.p_value == 1.0  # sacrebleu alone says 1 / (trials + 1)


@pytest.mark.parametrize(
    "score",
    [
        lambda h, r: corpus_bleu(h, r),
        lambda h, r: corpus_chrf(h, r),
        lambda h, r: paired_bleu_test(h, h, r),
    ],
    ids=["bleu", "chrf", "paired"],
)
def test_an_empty_corpus_is_a_value_error_not_an_index_error(score) -> None:
    with pytest.raises(ValueError, match="cannot score an empty corpus"):
        score([], [])


@pytest.mark.parametrize(
    ("hypotheses", "references", "message"),
    [
        ([None, "a"], ["a", "b"], r"hypotheses\[0\] must be a string, got NoneType"),
        ([b"a", "b"], ["a", "b"], r"hypotheses\[0\] must be a string, got bytes"),
        (["a", "b"], ["a", None], r"references\[1\] must be a string or a sequence of strings"),
        (["a", "b"], [["a", 3], ["b"]], r"references\[0\]\[1\] must be a string, got int"),
        ((h for h in ["a"]), ["a"], "hypotheses must be a sequence"),
    ],
)
def test_entries_that_are_not_strings_are_named(hypotheses, references, message) -> None:
    with pytest.raises(TypeError, match=message):
        corpus_bleu(hypotheses, references)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: corpus_bleu(["a"], ["a"], tokenize="moses"), ValueError, "tokenize='moses'"),
        (lambda: corpus_bleu(["a"], ["a"], lowercase="no"), TypeError, "lowercase must be a bool"),
        (lambda: corpus_chrf(["a"], ["a"], beta=math.nan), TypeError, "beta must be an int"),
        (lambda: corpus_chrf(["a"], ["a"], char_order=2.5), TypeError, "char_order must be an int"),
        (
            lambda: paired_bleu_test(["a"], ["b"], ["a"], trials=math.nan),
            TypeError,
            "trials must be an int, got nan",
        ),
        (lambda: tokenize_13a_lower(None), TypeError, "text must be a string, got NoneType"),
    ],
)
def test_bad_options_are_named_not_ignored(call, error, message) -> None:
    """A NaN ``trials`` ran sacrebleu's default 10,000; an unknown tokenizer was a KeyError."""
    with pytest.raises(error, match=message):
        call()
