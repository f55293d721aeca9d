"""Synthetic GEC noise: determinism, each error type's effect, identity at zero, measured rates."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from odet.data.gec_noise import Corruption, GECNoise, NoiseConfig, error_types_for

SENTENCES = [
    "Their house is bigger than its garden .",
    "A man in a blue shirt is standing on the ladder .",
    "She goes to school with her friends every day .",
    "The children went to the park and played with a ball .",
]


def _corrupt(kind: str, sentence: str, seed: int = 0) -> Corruption:
    return GECNoise(NoiseConfig.only(kind, 1.0), seed=seed).corrupt(sentence)  # type: ignore[arg-type]


def test_same_seed_gives_same_corruptions() -> None:
    config = NoiseConfig(typo=0.2, deletion=0.1, insertion=0.1, swap=0.1)
    first = [GECNoise(config, seed=7).corrupt(s) for s in SENTENCES]
    again = [GECNoise(config, seed=7).corrupt(s) for s in SENTENCES]
    assert first == again
    runs = {tuple(GECNoise(config, seed=seed)(s) for s in SENTENCES) for seed in range(5)}
    assert len(runs) > 1


def test_zero_probabilities_leave_sentences_unchanged() -> None:
    noise = GECNoise(NoiseConfig(**dict.fromkeys(NoiseConfig.__dataclass_fields__, 0.0)), seed=3)
    for sentence in SENTENCES:
        result = noise.corrupt(sentence)
        assert result.text == sentence
        assert result.errors == ()


def test_confusion_swaps_commonly_confused_words_and_keeps_case() -> None:
    result = _corrupt("confusion", "Their house is bigger than its garden .")
    tokens = result.text.split()
    assert result.text.startswith(("There ", "They 're "))
    assert "then" in tokens and "than" not in tokens
    assert "it 's garden" in result.text
    assert result.types == ("confusion", "confusion", "confusion")


def test_article_errors_replace_or_drop_articles() -> None:
    result = _corrupt("article", "the cat sat on a mat .")
    assert [e.original for e in result.errors] == ["the", "a"]
    for error in result.errors:
        assert error.replacement in {"a", "an", "the", ""} - {error.original}
    first, second = (e.replacement for e in result.errors)
    assert result.text.split() == [w for w in (first, "cat", "sat", "on", second, "mat", ".") if w]


def test_preposition_errors_use_another_preposition() -> None:
    result = _corrupt("preposition", "he sat on the chair .")
    (error,) = result.errors
    assert error.original == "on"
    assert error.replacement != "on"
    assert result.text == f"he sat {error.replacement} the chair ."


def test_agreement_errors_flip_person_and_number_of_the_verb() -> None:
    assert _corrupt("agreement", "she is happy and he goes home .").text == (
        "she are happy and he go home ."
    )


def test_verb_form_errors_use_another_form_of_the_same_verb() -> None:
    (error,) = _corrupt("verb_form", "yesterday he went home .").errors
    assert error.original == "went"
    assert error.replacement in {"go", "goes", "gone", "going"}


def test_noun_number_errors_flip_singular_and_plural() -> None:
    assert _corrupt("noun_number", "the child has two books .").text == (
        "the children has two book ."
    )


def _one_character_edit(a: str, b: str) -> bool:
    if len(b) == len(a) - 1:  # deletion
        return any(a[:i] + a[i + 1 :] == b for i in range(len(a)))
    if len(b) == len(a) + 1:  # doubled character
        return any(a[: i + 1] + a[i:] == b for i in range(len(a)))
    diff = [i for i in range(len(a)) if a[i] != b[i]] if len(a) == len(b) else []
    swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
    return len(diff) == 1 or (swapped and a[diff[1]] == b[diff[0]])


def test_typos_are_single_character_edits() -> None:
    for seed in range(30):
        result = _corrupt("typo", "elephant", seed=seed)
        assert result.types == ("typo",)
        assert _one_character_edit("elephant", result.text), result.text


def test_word_deletion_insertion_and_swap() -> None:
    # Deletion at p = 1 removes every word but the last one standing.
    assert _corrupt("deletion", "w x y z").text == "z"
    inserted = _corrupt("insertion", "w x y").text.split()
    assert inserted[::2] == ["w", "x", "y"]
    assert len(inserted) == 6
    assert _corrupt("swap", "w x y z").text == "x w z y"


def test_error_types_for_lists_word_level_candidates() -> None:
    assert error_types_for("the") == ("article", "typo")
    assert error_types_for("goes") == ("agreement", "verb_form", "typo")
    assert error_types_for(".") == ()


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="NoiseConfig.article must be a probability"):
        NoiseConfig(article=1.5)
    with pytest.raises(ValueError, match="unknown error type 'tense'"):
        NoiseConfig.only("tense", 0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kind", ["article", "preposition", "agreement", "verb_form", "noun_number", "typo", "deletion"]
)
def test_rates_match_configuration_on_multi30k(shared_data: Path, kind: str) -> None:
    path = shared_data / "multi30k" / "tok" / "train.lc.norm.tok.en.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        sentences = [next(f).strip() for _ in range(1000)]
    noise = GECNoise(NoiseConfig.only(kind, 0.3), seed=11)  # type: ignore[arg-type]
    fired = sum(noise.corrupt(s).types.count(kind) for s in sentences)
    if kind == "deletion":
        eligible = sum(len(s.split()) for s in sentences)
    else:
        eligible = sum(kind in error_types_for(t) for s in sentences for t in s.split())
    assert eligible >= 500
    # Binomial(eligible, 0.3): allow 4 standard deviations.
    assert fired / eligible == pytest.approx(0.3, abs=4 * math.sqrt(0.21 / eligible))


def test_confusion_and_insertion_rates_on_crafted_sentences() -> None:
    sentences = ["their dog is quieter than its brother and then sleeps ."] * 300
    for kind, per_sentence in (("confusion", 4), ("insertion", 11)):
        noise = GECNoise(NoiseConfig.only(kind, 0.2), seed=5)  # type: ignore[arg-type]
        fired = sum(noise.corrupt(s).types.count(kind) for s in sentences)
        eligible = per_sentence * len(sentences)
        assert fired / eligible == pytest.approx(0.2, abs=4 * math.sqrt(0.16 / eligible))
