"""DialogSum task: one-line dialogues, bad-record counts, truncation counts and LEAD baselines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odet.data import DataError, Tokenizer
from odet.io import OutputPathError
from odet.tasks.summarization import (
    SPEAKER_TAGS,
    Lead,
    flatten_dialogue,
    read_dialogsum,
    score_leads,
    truncation_report,
    write_dialogsum_lines,
)

DIALOGUE = "#Person1#: Hello, how are you?\n#Person2#:  I'm fine.\n#Person1#: Good.  Bye."
ONE_LINE = "#Person1#: Hello, how are you? #Person2#: I'm fine. #Person1#: Good. Bye."


def _record(dialogue: str, summary: str) -> str:
    return json.dumps({"fname": "x", "dialogue": dialogue, "summary": summary})


def test_flatten_dialogue_joins_turns_on_one_line_keeping_speaker_tags() -> None:
    assert flatten_dialogue(DIALOGUE) == ONE_LINE
    assert flatten_dialogue("  #Person1#: a\r\n\n#Person2#: b \n") == "#Person1#: a #Person2#: b"


def test_read_dialogsum_skips_and_counts_bad_records_and_long_dialogues(tmp_path: Path) -> None:
    path = tmp_path / "split.jsonl"
    lines = [
        _record(DIALOGUE, "#Person1# greets #Person2#."),
        '{"dialogue": "#Person1#: cut off',  # malformed JSON
        json.dumps({"dialogue": DIALOGUE}),  # no summary
        _record(DIALOGUE, "   "),  # empty summary
        json.dumps({"dialogue": DIALOGUE, "summary": 3}),  # not a string
        "",  # blank line
        _record("#Person1#: " + "word " * 20, "A long one."),  # 21 words > 12
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    data = read_dialogsum(path, long_words=12)

    assert data.dialogues == (ONE_LINE, "#Person1#: " + " ".join(["word"] * 20))
    assert data.summaries == ("#Person1# greets #Person2#.", "A long one.")
    assert data.pairs.line_numbers == (1, 7)
    counts = data.report.as_dict()
    assert (counts["lines"], counts["kept"]) == (7, 2)
    assert (counts["malformed_json"], counts["missing_field"], counts["not_a_string"]) == (1, 1, 1)
    assert counts["empty"] == 2
    assert (counts["long_dialogues"], counts["longest_dialogue_words"]) == (1, 21)
    assert counts["mean_dialogue_words"] == pytest.approx((11 + 21) / 2)
    message = data.report.message()
    for part in ("kept 2 of 7", "1 malformed json", "1 missing field", "2 empty", "1 dialogue(s)"):
        assert part in message


def test_read_dialogsum_strict_names_the_line_and_an_unusable_file_is_an_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(_record(DIALOGUE, "ok") + "\nnot json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: malformed_json"):
        read_dialogsum(path, strict=True)
    path.write_text("not json\n" + json.dumps({"dialogue": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="no usable 'dialogue'/'summary' record"):
        read_dialogsum(path)


def test_write_dialogsum_lines_refuses_an_output_that_is_its_input(tmp_path: Path) -> None:
    path = tmp_path / "dev.summary"
    path.write_text(_record(DIALOGUE, "First.") + "\n", encoding="utf-8")
    before = path.read_text(encoding="utf-8")
    with pytest.raises(OutputPathError, match="is an input file"):
        write_dialogsum_lines(path, tmp_path / "dev")
    assert path.read_text(encoding="utf-8") == before


def test_write_dialogsum_lines_keeps_dialogues_and_summaries_aligned(tmp_path: Path) -> None:
    path = tmp_path / "split.jsonl"
    path.write_text(
        "\n".join([_record(DIALOGUE, "First."), "{oops", _record("#Person2#: Hi.", "Second.")]),
        encoding="utf-8",
    )
    report = write_dialogsum_lines(path, tmp_path / "out" / "dev")
    dialogue = (tmp_path / "out" / "dev.dialogue").read_text(encoding="utf-8")
    summary = (tmp_path / "out" / "dev.summary").read_text(encoding="utf-8")
    assert dialogue == f"{ONE_LINE}\n#Person2#: Hi.\n"
    assert summary == "First.\nSecond.\n"
    assert (report.read.kept, report.read.malformed_json) == (2, 1)


def test_tokenizer_sees_the_same_ids_for_the_json_dialogue_and_its_flattened_line() -> None:
    texts = [DIALOGUE, "#Person2# says hello to #Person1#.", "#Person3#: How are you doing?"] * 20
    tokenizer = Tokenizer.train(texts, vocab_size=60, user_defined_symbols=SPEAKER_TAGS)
    assert tokenizer.encode(DIALOGUE) == tokenizer.encode(flatten_dialogue(DIALOGUE))
    assert "#Person2#" in tokenizer.pieces(DIALOGUE)


class _FixedLengths:
    """A stand-in tokenizer whose sources encode to the given numbers of tokens."""

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[5] * int(text) for text in texts]


def test_truncation_report_counts_sources_over_the_limit_and_dropped_tokens() -> None:
    report = truncation_report(["2", "5", "10"], _FixedLengths(), limit=4)  # type: ignore[arg-type]
    assert (report.total, report.truncated, report.longest) == (3, 2, 10)
    assert report.mean_tokens == pytest.approx(17 / 3)
    assert report.dropped_fraction == pytest.approx((1 + 6) / 17)
    assert report.message().startswith("2 of 3 sources longer than 4 tokens")
    with pytest.raises(ValueError, match="limit must be >= 1"):
        truncation_report(["2"], _FixedLengths(), limit=0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lead", "expected"),
    [
        (Lead(4), "#Person1#: Hello, how are"),
        (Lead(4, speaker_tags=False), "Hello, how are you?"),
        (Lead(1, "turns"), "#Person1#: Hello, how are you?"),
        (Lead(2, "turns"), "#Person1#: Hello, how are you? #Person2#: I'm fine."),
        (Lead(2, "turns", speaker_tags=False), "Hello, how are you? I'm fine."),
        (Lead(9, "turns"), ONE_LINE),
        (Lead(100), ONE_LINE),
    ],
)
def test_lead_takes_the_first_words_or_turns(lead: Lead, expected: str) -> None:
    assert lead(ONE_LINE) == expected


def test_lead_rejects_bad_settings_naming_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"Lead.unit must be one of \('words', 'turns'\)"):
        Lead(3, "sentences")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Lead.n must be >= 1, got 0"):
        Lead(0)
    assert Lead(2, "turns", speaker_tags=False).name == "lead-2 turns, no tags"


def test_score_leads_hand_computed_rouge() -> None:
    # "a b c d" vs "a b x y": R1 P = R = 2/4; R2 1/3 each; LCS 2 of 4.
    (score,) = score_leads(["#P1#: a b c d"], ["a b x y"], [Lead(4, speaker_tags=False)])
    assert (score.rouge1, score.rouge2, score.rouge_l) == pytest.approx((50.0, 100 / 3, 50.0))
    assert score.mean == pytest.approx((50 + 100 / 3 + 50) / 3)


def test_dialogsum_dev_report_and_lead_baseline_match_the_results_table(shared_data: Path) -> None:
    data = read_dialogsum(shared_data / "dialogsum" / "dialogsum.dev.jsonl")
    assert (data.report.read.kept, data.report.read.skipped) == (500, 0)
    assert (data.report.long_dialogues, data.report.longest_dialogue_words) == (11, 472)
    (score,) = score_leads(data.dialogues, data.summaries, [Lead(23)])
    # results/dialogsum/README.md: lead-23 words (K = mean train summary length).
    assert (round(score.rouge1, 2), round(score.rouge2, 2), round(score.rouge_l, 2)) == (
        28.46,
        7.66,
        22.56,
    )
