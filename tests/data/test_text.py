from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from odet.data import (
    DataError,
    FilterReport,
    LengthFilter,
    ReadReport,
    read_jsonl_pairs,
    read_lines,
    read_parallel_text,
)
from odet.data.text import split_lines


def write(path: Path, data: bytes, *, compress: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_parallel_text_reads_plain_and_gzip_sides_stripped(tmp_path: Path) -> None:
    src = write(tmp_path / "a.en", b"Hello world .\r\n  Two  \n")
    tgt = write(tmp_path / "a.de.gz", "Hallo Welt .\nZwei\u00e4 \n".encode(), compress=True)
    pairs = read_parallel_text(src, tgt)
    assert list(pairs) == [("Hello world .", "Hallo Welt ."), ("Two", "Zwei\u00e4")]
    assert pairs.line_numbers == (1, 2)
    assert pairs.report.as_dict() == {
        "lines": 2,
        "kept": 2,
        "empty": 0,
        "invalid_utf8": 0,
        "malformed_json": 0,
        "missing_field": 0,
        "not_a_string": 0,
        "beyond_limit": 0,
    }


def test_gzip_is_detected_by_content_not_suffix(tmp_path: Path) -> None:
    path = write(tmp_path / "plain-name.txt", b"one\ntwo\n", compress=True)
    assert read_lines(path).lines == ("one", "two")


def test_parallel_text_skips_whole_pair_on_empty_or_invalid_utf8_side(tmp_path: Path) -> None:
    src = write(tmp_path / "s", b"a\n\nc\nd\xff\ne\n   \n")
    tgt = write(tmp_path / "t", b"A\nB\n\nD\nE\nF\n")
    pairs = read_parallel_text(src, tgt)
    assert list(pairs) == [("a", "A"), ("e", "E")]
    assert pairs.line_numbers == (1, 5)
    report = pairs.report
    assert (report.lines, report.kept, report.empty, report.invalid_utf8) == (6, 2, 3, 1)
    assert report.skipped == 4
    assert report.paths == (str(src), str(tgt))


def test_head_keeps_the_first_pairs_and_counts_the_rest_as_beyond_limit(tmp_path: Path) -> None:
    src = write(tmp_path / "s", b"a\n\nc\nd\ne\n")
    tgt = write(tmp_path / "t", b"A\nB\nC\nD\nE\n")
    pairs = read_parallel_text(src, tgt)
    head = pairs.head(2)
    assert list(head) == [("a", "A"), ("c", "C")]
    assert head.line_numbers == (1, 3)
    assert (head.report.lines, head.report.kept, head.report.empty) == (5, 2, 1)
    assert (head.report.beyond_limit, head.report.skipped) == (2, 3)
    assert pairs.head(10) is pairs
    with pytest.raises(ValueError, match="n >= 0"):
        pairs.head(-1)


def test_utf8_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = write(tmp_path / "bom", "\ufeffhello\nworld\n".encode())
    assert read_lines(path).lines == ("hello", "world")


@pytest.mark.parametrize(("src_lines", "tgt_lines"), [(3, 5), (5, 3)])
def test_line_count_mismatch_names_both_files_and_counts(
    tmp_path: Path, src_lines: int, tgt_lines: int
) -> None:
    src = write(tmp_path / "x.src", b"s\n" * src_lines)
    tgt = write(tmp_path / "x.tgt", b"t\n" * tgt_lines, compress=True)
    message = f"{src} has {src_lines} lines but {tgt} has {tgt_lines}"
    with pytest.raises(DataError, match=message):
        read_parallel_text(src, tgt)


def test_missing_file_is_a_data_error_naming_the_path(tmp_path: Path) -> None:
    present = write(tmp_path / "present", b"x\n")
    with pytest.raises(DataError, match="data file not found: .*absent"):
        read_parallel_text(present, tmp_path / "absent")
    assert issubclass(DataError, ValueError)


def test_read_lines_skips_empty_and_invalid_lines_and_keeps_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "mono", b"first\n\n\xc3\x28\nlast")
    lines = read_lines(path)
    assert lines.lines == ("first", "last")
    assert lines.line_numbers == (1, 4)
    assert (lines.report.empty, lines.report.invalid_utf8) == (1, 1)


def test_a_line_with_a_nul_byte_is_not_text_and_is_skipped(tmp_path: Path) -> None:
    src = write(tmp_path / "s", b"one\nt\0w\0o\nthree\n")
    tgt = write(tmp_path / "t", b"uno\ndos\ntres\n")
    pairs = read_parallel_text(src, tgt)
    assert list(pairs) == [("one", "uno"), ("three", "tres")]
    assert pairs.report.invalid_utf8 == 1
    assert read_lines(src).lines == ("one", "three")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("compress", [False, True])
def test_a_utf_16_or_32_file_is_refused_by_every_reader(
    tmp_path: Path, encoding: str, compress: bool
) -> None:
    """Read as UTF-8 such a file kept every line but the first, as garbage with NUL bytes."""
    text = '{"s": "one", "t": "uno"}\n{"s": "two", "t": "dos"}\n'
    data = ("\ufeff" if encoding == "utf-16-be" else "") + text
    path = write(tmp_path / "wide", data.encode(encoding), compress=compress)
    plain = write(tmp_path / "plain", text.encode())
    name = encoding[:6].upper()
    message = rf"wide is {name} text \(it starts with a {name} byte-order mark\)"
    with pytest.raises(DataError, match=message):
        read_lines(path)
    with pytest.raises(DataError, match=message):
        read_parallel_text(plain, path)
    with pytest.raises(DataError, match=message):
        read_jsonl_pairs(path, "s", "t")


def jsonl_file(tmp_path: Path) -> Path:
    records = [
        json.dumps({"dialogue": "#Person1#: Hi.\n#Person2#: Hello.", "summary": " Greeting. "}),
        "{not json",
        json.dumps({"dialogue": "only one field"}),
        json.dumps({"dialogue": "x", "summary": 3}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"dialogue": "  ", "summary": "empty source"}),
        json.dumps({"dialogue": "ok", "summary": "fine", "extra": 1}),
    ]
    data = "\n".join(records).encode() + b"\n\xff\xfe\n"
    return write(tmp_path / "d.jsonl", data)


def test_jsonl_pairs_counts_every_skip_reason(tmp_path: Path) -> None:
    pairs = read_jsonl_pairs(jsonl_file(tmp_path), "dialogue", "summary")
    assert list(pairs) == [
        ("#Person1#: Hi.\n#Person2#: Hello.", "Greeting."),
        ("ok", "fine"),
    ]
    assert pairs.line_numbers == (1, 8)
    report = pairs.report
    assert (report.malformed_json, report.missing_field, report.not_a_string) == (1, 2, 1)
    assert (report.empty, report.invalid_utf8, report.lines, report.kept) == (2, 1, 9, 2)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([b'{"s": "a", "t": "b"}', b"{oops"], r"line 2: malformed_json"),
        ([b'{"s": "a"}'], r"line 1: missing_field: no field 't' \(fields: \['s'\]\)"),
        ([b'{"s": "a", "t": null}'], r"line 1: not_a_string: field 't' is NoneType"),
        ([b"[1, 2]"], r"line 1: missing_field: record is a JSON list"),
    ],
)
def test_strict_jsonl_raises_with_line_and_reason(
    tmp_path: Path, lines: list[bytes], message: str
) -> None:
    path = write(tmp_path / "strict.jsonl", b"\n".join(lines))
    with pytest.raises(DataError, match=f"strict.jsonl, {message}"):
        read_jsonl_pairs(path, "s", "t", strict=True)


def test_json_nested_beyond_the_recursion_limit_is_malformed_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path / "deep.jsonl", b"[" * 100_000 + b'\n{"s": "a", "t": "b"}\n')
    pairs = read_jsonl_pairs(path, "s", "t")
    assert list(pairs) == [("a", "b")]
    assert pairs.report.malformed_json == 1
    with pytest.raises(DataError, match="line 1: malformed_json: nested too deeply"):
        read_jsonl_pairs(path, "s", "t", strict=True)


def test_strict_jsonl_still_skips_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.jsonl", b'\n{"s": "a", "t": "b"}\n\n')
    pairs = read_jsonl_pairs(path, "s", "t", strict=True)
    assert list(pairs) == [("a", "b")]
    assert pairs.report.empty == 2


def test_real_multi30k_validation_is_aligned(shared_data: Path) -> None:
    root = shared_data / "multi30k"
    pairs = read_parallel_text(root / "val.en.gz", root / "val.de.gz")
    assert (len(pairs), pairs.report.skipped) == (1014, 0)
    assert pairs.source[0].startswith("A group of men")


def test_real_dialogsum_dev_reads_every_record(shared_data: Path) -> None:
    pairs = read_jsonl_pairs(
        shared_data / "dialogsum" / "dialogsum.dev.jsonl", "dialogue", "summary", strict=True
    )
    assert len(pairs) == 500
    assert pairs.source[0].startswith("#Person1#: Hello, how are you doing today?\n#Person2#:")


def test_real_jfleg_source_has_754_sentences(shared_data: Path) -> None:
    lines = read_lines(shared_data / "jfleg" / "dev.src")
    assert (len(lines), lines.report.lines) == (754, 754)
    assert not lines.lines[0].endswith(" ")


def test_length_filter_drops_each_pair_under_its_first_failing_check() -> None:
    src = np.array([0, 5, 3, 50, 4, 12, 6, 2])
    tgt = np.array([4, 0, 3, 45, 60, 3, 6, 0])
    keep, report = LengthFilter(max_source_tokens=40, max_target_tokens=50, max_ratio=3.0).apply(
        src, tgt
    )
    assert keep.tolist() == [False, False, True, False, False, False, True, False]
    assert report == FilterReport(
        total=8,
        kept=2,
        source_too_short=1,
        target_too_short=2,
        source_too_long=1,
        target_too_long=1,
        ratio=1,
    )
    assert report.dropped == 6


def test_length_filter_ratio_is_symmetric_and_inclusive() -> None:
    keep, report = LengthFilter(max_ratio=2.0).apply([2, 4, 2, 5], [4, 2, 5, 2])
    assert keep.tolist() == [True, True, False, False]
    assert report.ratio == 2


def test_length_filter_zero_maximum_is_a_real_bound() -> None:
    keep, report = LengthFilter(min_source_tokens=0, max_source_tokens=0).apply([0, 1], [1, 1])
    assert keep.tolist() == [True, False]
    assert report.source_too_long == 1


def test_default_length_filter_only_drops_empty_sides() -> None:
    keep, report = LengthFilter().apply([1, 0, 900], [700, 2, 1])
    assert keep.tolist() == [True, False, True]
    assert report.source_too_short == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_source_tokens": -1}, "min_source_tokens=-1"),
        ({"min_target_tokens": 5, "max_target_tokens": 4}, "max_target_tokens=4 must be >="),
        ({"max_ratio": 0.5}, "max_ratio=0.5 must be >= 1"),
    ],
)
def test_length_filter_rejects_invalid_bounds(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LengthFilter(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_ratio": float("nan")}, ValueError, "max_ratio must be a number, got NaN"),
        ({"max_ratio": "2"}, TypeError, "max_ratio must be a number, got '2'"),
        ({"min_source_tokens": 1.5}, TypeError, "min_source_tokens must be an int, got 1.5"),
        ({"max_target_tokens": float("nan")}, TypeError, "max_target_tokens must be an int"),
        ({"min_target_tokens": True}, TypeError, "min_target_tokens must be an int, got True"),
    ],
)
def test_length_filter_refuses_nan_and_non_integer_bounds(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    """A NaN ``max_ratio`` or minimum compared False everywhere: every pair was kept."""
    with pytest.raises(error, match=message):
        LengthFilter(**kwargs)  # type: ignore[arg-type]


def test_length_filter_refuses_lengths_that_are_not_counts() -> None:
    with pytest.raises(TypeError, match="lengths must be integers, got float64"):
        LengthFilter().apply(np.array([0.5, 2.7]), np.array([1, 1]))
    with pytest.raises(ValueError, match="lengths must be >= 0, got -1"):
        LengthFilter(min_source_tokens=0).apply(np.array([-1, 2]), np.array([1, 1]))


def test_head_takes_an_int(tmp_path: Path) -> None:
    pairs = read_parallel_text(write(tmp_path / "s", b"a\nb\n"), write(tmp_path / "t", b"A\nB\n"))
    with pytest.raises(TypeError, match="n must be an int, got 1.5"):
        pairs.head(1.5)  # type: ignore[arg-type]


def test_length_filter_rejects_mismatched_arrays() -> None:
    with pytest.raises(ValueError, match="equal in shape"):
        LengthFilter().apply([1, 2], [1])


def test_reports_reject_inconsistent_counts() -> None:
    with pytest.raises(ValueError, match="lines=3 != kept=1 \\+ skipped=1"):
        ReadReport(paths=("x",), lines=3, kept=1, empty=1)
    with pytest.raises(ValueError, match="total=3 != kept=1 \\+ dropped=0"):
        FilterReport(total=3, kept=1)


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"", []),
        (b"\n", [b""]),
        (b"a\nb", [b"a", b"b"]),
        (b"a\r\nb\r\n", [b"a", b"b"]),
        (b"\xef\xbb\xbfa\nb\n", [b"a", b"b"]),
        (b"a\rb\nc\x0cd\n", [b"a\rb", b"c\x0cd"]),
        ("x\u2028y\u0085z\n".encode(), ["x\u2028y\u0085z".encode()]),
        (b"a\n\n", [b"a", b""]),
    ],
)
def test_split_lines_counts_lines_as_the_corpus_readers_do(data: bytes, lines: list[bytes]):
    assert split_lines(data) == lines


def test_split_lines_and_the_parallel_reader_agree_on_line_numbers(tmp_path: Path) -> None:
    data = "one\rstill one\nx\u2028y\n\xef\nlast\r\n".encode()
    pairs = read_parallel_text(write(tmp_path / "s", data), write(tmp_path / "t", data))
    assert pairs.report.lines == len(split_lines(data)) == 4
