"""M2 reader: parsing, applying edits per annotator, error messages, and JFLEG's dev.ref.m2."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from odet.data.m2 import M2Edit, M2FormatError, apply_edits, parse_m2, read_m2, read_m2_parallel
from odet.data.text import DataError

TEXT = """S He go to school yesterday .
A 1 2|||R:VERB:TENSE|||went|||REQUIRED|||-NONE-|||0
A 3 3|||M:DET|||the|||REQUIRED|||-NONE-|||0
A 1 2|||R:VERB:TENSE|||has gone||went|||REQUIRED|||-NONE-|||1
A 4 5|||U:ADV|||-NONE-|||REQUIRED|||-NONE-|||1

S This is fine .
A -1 -1|||noop|||-NONE-|||REQUIRED|||-NONE-|||0
"""


def test_parse_reads_sources_spans_types_and_alternatives() -> None:
    first, second = parse_m2(TEXT)
    assert first.tokens == ["He", "go", "to", "school", "yesterday", "."]
    assert first.annotators == (0, 1)
    assert first.edits[0] == M2Edit(1, 2, "R:VERB:TENSE", ("went",), 0)
    assert first.edits[2].corrections == ("has gone", "went")
    assert first.edits[3].corrections == ("",)  # -NONE- deletes
    assert second.edits[0].is_noop
    assert second.edits_of(0) == ()


def test_corrected_applies_each_annotators_edits() -> None:
    first, second = parse_m2(TEXT)
    assert first.corrected(0) == "He went to the school yesterday ."
    assert first.corrected(1) == "He has gone to school ."
    assert second.corrected(0) == "This is fine ."


def test_insertion_before_a_replaced_token_keeps_file_order() -> None:
    # JFLEG-converter style: insertion at 6 then replacement of token 6 -> "be alive".
    edits = [M2Edit(6, 6, "M", ("be",), 0), M2Edit(6, 7, "R", ("alive",), 0)]
    tokens = ["we", "can", "not", "live", "if", "we", "could"]
    assert " ".join(apply_edits(tokens, edits)) == "we can not live if we be alive"


def test_overlapping_edits_raise() -> None:
    edits = [M2Edit(0, 2, "R", ("x",), 0), M2Edit(1, 3, "R", ("y",), 0)]
    with pytest.raises(ValueError, match="overlaps"):
        apply_edits(["a", "b", "c"], edits)


def test_block_without_edits_counts_as_annotator_0_unchanged() -> None:
    (sentence,) = parse_m2("S Nothing to do .\n")
    assert sentence.annotators == (0,)
    assert sentence.corrected(0) == "Nothing to do ."


def test_read_m2_parallel_gives_pairs_per_annotator(tmp_path: Path) -> None:
    path = tmp_path / "toy.m2"
    path.write_text(TEXT, encoding="utf-8")
    pairs = read_m2_parallel(path)
    assert sorted(pairs) == [0, 1]
    assert pairs[0] == [
        ("He go to school yesterday .", "He went to the school yesterday ."),
        ("This is fine .", "This is fine ."),
    ]
    assert pairs[1][0][1] == "He has gone to school ."
    assert pairs[1][1] == ("This is fine .", "This is fine .")  # not annotated by 1


def test_a_gzip_m2_file_reads_as_its_text(tmp_path: Path) -> None:
    path = tmp_path / "toy.m2.gz"
    path.write_bytes(gzip.compress(TEXT.encode()))
    assert read_m2(path) == parse_m2(TEXT)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("S a b\nA 0 1|||R|||x|||REQUIRED|||0\n", 2, "6 '|||'-separated fields"),
        ("A 0 1|||R|||x|||REQUIRED|||-NONE-|||0\n", 1, "A line before any S line"),
        ("S a b\nA 0 x|||R|||x|||REQUIRED|||-NONE-|||0\n", 2, "two integers"),
        ("S a b\nA 0 1|||R|||x|||REQUIRED|||-NONE-|||zero\n", 2, "annotator id"),
        ("S a b\nA 2 1|||R|||x|||REQUIRED|||-NONE-|||0\n", 2, "bad edit span"),
        ("S a b\nA 1 3|||R|||x|||REQUIRED|||-NONE-|||0\n", 2, "exceeds the 2-token"),
        ("S a b\n\nS c d\nB what\n", 4, "expected an 'S ', 'A ' or blank line"),
        ("S a b\nS c d\n", 2, "second S line"),
    ],
)
def test_malformed_lines_name_file_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(M2FormatError, match=message) as info:
        parse_m2(text, source_name="toy.m2")
    assert str(info.value).startswith(f"toy.m2:{line}: ")
    assert info.value.line_number == line


def test_out_of_range_edits_can_be_clipped_or_dropped() -> None:
    text = "S a b\nA 3 3|||M|||c|||REQUIRED|||-NONE-|||0\n"
    (clipped,) = parse_m2(text, out_of_range="clip")
    assert clipped.corrected(0) == "a b c"
    (dropped,) = parse_m2(text, out_of_range="drop")
    assert dropped.corrected(0) == "a b"
    assert dropped.annotators == (0,)
    with pytest.raises(ValueError, match="out_of_range must be one of"):
        parse_m2(text, out_of_range="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize(("how", "done"), [("drop", "dropped"), ("clip", "clipped")])
def test_an_edit_past_its_sentence_is_never_dropped_or_clipped_in_silence(how, done, caplog):
    text = (
        "S a b\nA 3 3|||M|||c|||REQUIRED|||-NONE-|||0\n\n"
        "S c\nA 0 1|||R|||d|||REQUIRED|||-NONE-|||0\nA 1 4|||R|||e|||REQUIRED|||-NONE-|||1\n"
    )
    with caplog.at_level("WARNING", logger="odet.data.m2"):
        parse_m2(text, source_name="gold.m2", out_of_range=how)
    (record,) = caplog.records
    assert record.getMessage() == (
        f"gold.m2:2: edit span past the end of its sentence {done}"
        + (", as the official M2 scorer does" if how == "drop" else "")
        + " (2 such edit(s), lines 2, 6)"
    )
    caplog.clear()
    parse_m2("S a b\nA 2 2|||M|||c|||REQUIRED|||-NONE-|||0\n", out_of_range=how)
    assert not caplog.records


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"S a\n\nS b\0c\n", r"bad\.m2 is not UTF-8 text \(line 3 holds a NUL byte"),
        ("S a\n".encode("utf-16"), r"bad\.m2 is UTF-16 text"),
    ],
)
def test_an_m2_file_that_is_not_utf_8_text_is_named(tmp_path: Path, data: bytes, message: str):
    path = tmp_path / "bad.m2"
    path.write_bytes(data)
    with pytest.raises(DataError, match=message):
        read_m2(path)


def test_overlapping_edits_in_a_file_name_the_file_sentence_and_annotator(tmp_path: Path):
    path = tmp_path / "overlap.m2"
    path.write_text(
        "S ok .\n\nS a b c\nA 0 2|||R|||x|||REQUIRED|||-NONE-|||1\n"
        "A 1 3|||R|||y|||REQUIRED|||-NONE-|||1\n",
        encoding="utf-8",
    )
    with pytest.raises(
        DataError, match=r"overlap\.m2, sentence 2 \('a b c'\), annotator 1: edit span"
    ):
        read_m2_parallel(path)


def test_read_m2_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.m2"
    path.write_text("S a\nA 0 1|||R|||x\n", encoding="utf-8")
    with pytest.raises(M2FormatError, match=r"bad\.m2:2: "):
        read_m2(path)


def test_jfleg_dev_m2_edits_reproduce_the_references(shared_data: Path) -> None:
    # The unofficial JFLEG M2 (m2converter) ignores case-only edits and "can not"/"cannot"
    # splits, so only part of the lines match exactly; case-insensitively almost all do.
    root = shared_data / "jfleg"
    sentences = read_m2(root / "dev.ref.m2", out_of_range="clip")
    sources = (root / "dev.src").read_text(encoding="utf-8").splitlines()
    assert [s.tokens for s in sentences] == [line.split() for line in sources]
    exact, caseless = [], []
    for k in range(4):
        refs = (root / f"dev.ref{k}").read_text(encoding="utf-8").splitlines()
        fixed = [s.corrected(k) for s in sentences]
        exact.append(sum(f.split() == r.split() for f, r in zip(fixed, refs, strict=True)))
        caseless.append(
            sum(f.lower().split() == r.lower().split() for f, r in zip(fixed, refs, strict=True))
        )
    assert exact == [582, 582, 612, 605]
    assert caseless == [726, 727, 729, 727]


def test_only_newline_ends_a_line_so_unicode_separators_stay_in_their_sentence() -> None:
    block = "S a\u2028b \x85 c\x1c .\r\nA 0 1|||R:X|||x|||REQUIRED|||-NONE-|||0\r\n\n"
    (sentence,) = parse_m2(block)  # splitlines would make 4 lines of the S line: no A after S
    assert sentence.edits == (M2Edit(0, 1, "R:X", ("x",), 0),)
    with pytest.raises(M2FormatError, match=r"<string>:5:"):  # the separators shift no line
        parse_m2(block + "S d .\nA 9 9|||M|||y\n")
