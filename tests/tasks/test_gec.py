"""GEC task data: PTB tokenization, clean sentences, the seeded synthetic builder, M2 → text."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from odet.data import DataError, read_parallel_text
from odet.data.gec_noise import NoiseConfig
from odet.io import OUTPUT_MARKER, OutputPathError
from odet.tasks.gec import (
    build_gec_data,
    clean_sentences,
    english_words,
    m2_to_parallel,
    ptb_tokenize,
    split_sentences,
    substitute_words,
)

NO_NOISE = NoiseConfig(**dict.fromkeys(NoiseConfig.__dataclass_fields__, 0.0))
CAPTIONS = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs are playing in the snow.",
    "A man in a blue shirt is standing on a ladder.",  # duplicate
    "Hi.",  # too short
    "The children were going to the school with their friends, weren't they?",
]


def _captions(tmp_path: Path) -> Path:
    path = tmp_path / "clean.en.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join([*CAPTIONS, ""]) + "\n")
    return path


def test_ptb_tokenize_matches_the_jfleg_convention() -> None:
    assert ptb_tokenize('I don\'t know, "he said".') == 'I do n\'t know , " he said " .'
    assert ptb_tokenize("It's Anna's car (a red one)!") == "It 's Anna 's car ( a red one ) !"


def test_split_sentences_keeps_titles_with_their_names() -> None:
    text = "Mr. Smith came home. He was tired! Did Dr. Lee call? #Person1# did."
    assert split_sentences(text) == [
        "Mr. Smith came home.",
        "He was tired!",
        "Did Dr. Lee call?",
        "#Person1# did.",
    ]
    assert split_sentences("  ") == []


def test_dialogsum_clean_sentences_name_speakers_and_repair_contractions(tmp_path: Path) -> None:
    path = tmp_path / "dialogsum.train.jsonl"
    record = {
        "dialogue": "#Person1#: I ' Ve seen it. Is it good?\n#Person2#: It ' s fine.",
        "summary": "#Person1# asks #Person2# about a film. #Person2# likes #Person1#'s taste.",
    }
    path.write_text(json.dumps(record) + "\n{broken\n", encoding="utf-8")

    sentences, report = clean_sentences(path, seed=3)

    first, second, *turns = sentences
    speaker1, speaker2 = first.split()[0], first.split()[2]
    assert speaker1 != speaker2 and "#" not in first + second
    assert second == f"{speaker2} likes {speaker1}'s taste."
    assert turns == ["I've seen it.", "Is it good?", "It's fine."]
    assert (report.kind, report.records, report.skipped_records, report.sentences) == (
        "dialogsum",
        2,
        1,
        5,
    )
    summaries_only, _ = clean_sentences(path, seed=3, dialogue_turns=False)
    assert summaries_only == [first, second]


def test_zero_noise_gives_identical_pairs_and_exact_counts(tmp_path: Path) -> None:
    report = build_gec_data([_captions(tmp_path)], tmp_path / "gec", noise_config=NO_NOISE)

    pairs = read_parallel_text(tmp_path / "gec" / "train.src", tmp_path / "gec" / "train.tgt")
    assert (
        pairs.source
        == pairs.target
        == (
            "A man in a blue shirt is standing on a ladder .",
            "Two dogs are playing in the snow .",
            "The children were going to the school with their friends , were n't they ?",
        )
    )
    assert (report.candidates, report.too_short, report.duplicates, report.sentences) == (
        5,
        1,
        1,
        3,
    )
    assert (report.pairs, report.unchanged, report.errors) == (3, 3, {})
    assert report.inputs[0].records == 6 and report.inputs[0].skipped_records == 1  # blank line
    saved = json.loads((tmp_path / "gec" / "report.json").read_text(encoding="utf-8"))
    assert saved["pairs"] == 3 and saved["noise"]["typo"] == 0.0


def test_builder_is_seeded_aligned_and_copies_corrupt_independently(tmp_path: Path) -> None:
    clean = _captions(tmp_path)
    noisy = NoiseConfig(typo=0.5, article=0.9, preposition=0.9)
    first = build_gec_data([clean], tmp_path / "a", noise_config=noisy, seed=7, copies=3)
    build_gec_data([clean], tmp_path / "b", noise_config=noisy, seed=7, copies=3)
    build_gec_data([clean], tmp_path / "c", noise_config=noisy, seed=8, copies=3)

    corrupted = {d: (tmp_path / d / "train.src").read_bytes() for d in "abc"}
    assert corrupted["a"] == corrupted["b"] != corrupted["c"]
    pairs = read_parallel_text(tmp_path / "a" / "train.src", tmp_path / "a" / "train.tgt")
    assert len(pairs) == first.pairs == 3 * first.sentences == 9
    assert pairs.target[:3] == pairs.target[3:6] == pairs.target[6:]
    assert len(set(pairs.source)) > 3  # each copy draws its own errors
    changed = sum(s != t for s, t in pairs)
    assert changed == first.pairs - first.unchanged > 0
    assert sum(first.errors.values()) >= changed


def _passages(directory: Path) -> tuple[str, ...]:
    return read_parallel_text(directory / "train.src", directory / "train.tgt").target


def test_join_groups_consecutive_sentences_into_bounded_seeded_passages(tmp_path: Path) -> None:
    clean = tmp_path / "clean.txt"
    lines = [f"The cat number {i} sat on {'the ' * (i % 4)}mat." for i in range(40)]
    clean.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    options = dict(noise_config=NO_NOISE, max_words=40)
    singles = build_gec_data([clean], tmp_path / "one", **options)
    report = build_gec_data([clean], tmp_path / "three", join=3, seed=4, **options)

    sentences, passages = _passages(tmp_path / "one"), _passages(tmp_path / "three")
    assert singles.sentences == report.sentences == len(sentences) == 40
    assert " ".join(passages) == " ".join(sentences)  # in order, nothing lost
    counts = [p.count(" .") for p in passages]
    assert set(counts) == {1, 2, 3} and sum(counts) == 40
    assert (report.join, report.passages, report.pairs) == (3, len(passages), len(passages))
    assert "40 clean sentences joined into" in report.message()
    build_gec_data([clean], tmp_path / "again", join=3, seed=4, **options)
    assert _passages(tmp_path / "again") == passages

    bounded = build_gec_data([clean], tmp_path / "bounded", join=3, seed=4, max_words=20)
    capped = _passages(tmp_path / "bounded")
    assert all(len(p.split()) <= 20 for p in capped) and bounded.passages > report.passages
    assert " ".join(capped) == " ".join(sentences)


def test_builder_rejects_bad_arguments_and_unusable_input(tmp_path: Path) -> None:
    clean = _captions(tmp_path)
    with pytest.raises(ValueError, match="join must be >= 1, got 0"):
        build_gec_data([clean], tmp_path / "x", join=0)
    with pytest.raises(ValueError, match="copies must be >= 1, got 0"):
        build_gec_data([clean], tmp_path / "x", copies=0)
    with pytest.raises(ValueError, match="min_words <= max_words, got 5, 2"):
        build_gec_data([clean], tmp_path / "x", min_words=5, max_words=2)
    with pytest.raises(ValueError, match="at least one clean text file"):
        build_gec_data([], tmp_path / "x")
    with pytest.raises(DataError, match="no clean sentence of 40-60 words"):
        build_gec_data([clean], tmp_path / "x", min_words=40)
    with pytest.raises(DataError, match="data file not found"):
        build_gec_data([tmp_path / "missing.txt"], tmp_path / "x")


def test_substitution_replaces_only_content_words_keeping_case() -> None:
    sentence = "The Children were going to school , were n't they ? Bridges sell apples ."
    replaced, count = substitute_words(sentence, ["zebra"], 1.0, random.Random(0))
    # 4+ letters, alphabetic, and no rule of the noise: Children and school (noun number),
    # were (agreement), going (verb form) stay, so the noise keeps its contexts.
    assert replaced == "The Children were going to school , were n't zebra ? Zebra zebra zebra ."
    assert count == 4
    assert substitute_words(sentence, ["zebra"], 0.0, random.Random(0)) == (sentence, 0)
    draws = [substitute_words(sentence, ["ab", "cd"], 0.5, random.Random(s)) for s in range(50)]
    assert {count for _, count in draws} == {0, 1, 2, 3, 4}


def test_builder_substitutes_the_same_words_on_both_sides_seeded(tmp_path: Path) -> None:
    clean = _captions(tmp_path)
    words = ["zebra", "quantum", "harbour"]
    options = dict(noise_config=NO_NOISE, vocabulary=words, substitute=0.6, copies=4, seed=2)
    report = build_gec_data([clean], tmp_path / "a", **options)
    build_gec_data([clean], tmp_path / "b", **options)

    pairs = read_parallel_text(tmp_path / "a" / "train.src", tmp_path / "a" / "train.tgt")
    assert all(s == t for s, t in pairs)  # no noise: the substitutes are on both sides
    assert len(set(pairs.target)) > report.passages  # each copy draws its own substitutes
    originals = {w for line in CAPTIONS for w in ptb_tokenize(line).split()}
    new = {w.lower() for t in pairs.target for w in t.split()} - {w.lower() for w in originals}
    assert new and new <= set(words)
    assert report.substituted > 0 and (report.substitute, report.vocabulary) == (0.6, 3)
    assert f"{report.substituted} words replaced from a 3-word list" in report.message()
    assert (tmp_path / "a" / "train.tgt").read_bytes() == (
        tmp_path / "b" / "train.tgt"
    ).read_bytes()
    with pytest.raises(ValueError, match="needs a vocabulary"):
        build_gec_data([clean], tmp_path / "x", substitute=0.1)
    with pytest.raises(ValueError, match=r"substitute must be a probability in \[0, 1\], got 2"):
        build_gec_data([clean], tmp_path / "x", vocabulary=words, substitute=2)


def test_english_words_are_frequent_lower_case_words_of_four_letters_or_more() -> None:
    words = english_words(2000)
    assert len(words) == len(set(words)) == 2000
    assert all(w.isascii() and w.isalpha() and w.islower() and len(w) >= 4 for w in words)
    assert {"because", "people", "think"} <= set(words)
    assert english_words(10) == words[:10]
    with pytest.raises(ValueError, match="n must be >= 1"):
        english_words(0)


M2_TEXT = """S He go to school yesterday .
A 1 2|||R:VERB:TENSE|||went|||REQUIRED|||-NONE-|||0
A 1 2|||R:VERB:TENSE|||goes|||REQUIRED|||-NONE-|||1

S This is fine .
A -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||0
A -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||1
"""


@pytest.mark.parametrize("vocabulary", ["word", ["ok", ""], ["ok", 3]])
def test_build_gec_data_refuses_a_vocabulary_that_is_not_words(tmp_path: Path, vocabulary) -> None:
    """``vocabulary="word"`` substituted single letters ('w', 'o', ...) without a word."""
    clean = tmp_path / "clean.txt"
    clean.write_text("a dog runs across the green field .\n", encoding="utf-8")
    with pytest.raises(TypeError, match="vocabulary must be a sequence of words"):
        build_gec_data([clean], tmp_path / "out", vocabulary=vocabulary, substitute=0.5)
    assert not (tmp_path / "out").exists()


def test_m2_to_parallel_refuses_an_output_that_is_its_input(tmp_path: Path) -> None:
    """``out_prefix`` ``train`` for ``train.src`` given as the M2 file overwrote it."""
    m2 = tmp_path / "train.src"
    m2.write_text(M2_TEXT, encoding="utf-8")
    with pytest.raises(OutputPathError, match="is an input file"):
        m2_to_parallel(m2, tmp_path / "train")
    assert m2.read_text(encoding="utf-8") == M2_TEXT


def test_m2_to_parallel_writes_one_pair_per_sentence_and_annotator(tmp_path: Path) -> None:
    m2 = tmp_path / "train.m2"
    m2.write_text(M2_TEXT, encoding="utf-8")

    report = m2_to_parallel(m2, tmp_path / "out" / "fce")

    assert (tmp_path / "out" / "fce.src").read_text(encoding="utf-8").splitlines() == [
        "He go to school yesterday .",
        "This is fine .",
        "He go to school yesterday .",
        "This is fine .",
    ]
    assert (tmp_path / "out" / "fce.tgt").read_text(encoding="utf-8").splitlines() == [
        "He went to school yesterday .",
        "This is fine .",
        "He goes to school yesterday .",
        "This is fine .",
    ]
    assert (report.sentences, report.annotators, report.pairs, report.unchanged) == (
        2,
        (0, 1),
        4,
        2,
    )
    one = m2_to_parallel(m2, tmp_path / "one", annotator=1, keep_unchanged=False)
    assert (tmp_path / "one.tgt").read_text(encoding="utf-8") == "He goes to school yesterday .\n"
    assert (one.pairs, one.skipped_unchanged) == (1, 1)


def test_m2_to_parallel_errors_name_the_problem(tmp_path: Path) -> None:
    m2 = tmp_path / "train.m2"
    m2.write_text(M2_TEXT, encoding="utf-8")
    with pytest.raises(ValueError, match=r"annotator 4 not in .*annotators \[0, 1\]"):
        m2_to_parallel(m2, tmp_path / "x", annotator=4)
    empty = tmp_path / "empty.m2"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no M2 sentence"):
        m2_to_parallel(empty, tmp_path / "x")


def test_jfleg_m2_converts_to_the_dev_sources(shared_data: Path, tmp_path: Path) -> None:
    jfleg = shared_data / "jfleg"
    report = m2_to_parallel(
        jfleg / "dev.ref.m2", tmp_path / "jfleg", annotator=0, out_of_range="drop"
    )
    sources = (tmp_path / "jfleg.src").read_text(encoding="utf-8").splitlines()
    expected = [" ".join(line.split()) for line in (jfleg / "dev.src").read_text().splitlines()]
    assert (report.sentences, report.pairs) == (754, 754)
    assert sources == expected


def test_build_gec_data_rewrites_its_own_output_of_before_the_marker_only(tmp_path):
    clean = tmp_path / "clean.txt"
    clean.write_text("The cat sat on the mat today .\nA dog ran in the park now .\n")
    build_gec_data([clean], tmp_path / "gec")
    (tmp_path / "gec" / OUTPUT_MARKER).unlink()
    build_gec_data([clean], tmp_path / "gec")  # the layout odet wrote before the marker
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "report.json").write_text('{"mine": 1}')
    (theirs / "train.src").write_text("precious\n")
    with pytest.raises(ValueError, match=r"theirs exists, is not empty and was not written"):
        build_gec_data([clean], theirs)
    assert (theirs / "train.src").read_text() == "precious\n"
