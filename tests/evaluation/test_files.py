from pathlib import Path

import pytest

from odet.data.text import DataError
from odet.evaluation import paired_bleu_test, tokenize_13a_lower, tokenized_bleu
from odet.evaluation.files import evaluate_files

REFS = [f"A dog runs across field {i}." for i in range(40)]


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    """Reference file and two "seeds" of a baseline and of a system (system is better)."""
    ref = _write(tmp_path / "ref", REFS)
    paths = {"ref": ref}
    for name, every in (("base1", 2), ("base2", 3), ("sys1", 5), ("sys2", 7)):
        lines = [r.replace("runs", "walks") if i % every == 0 else r for i, r in enumerate(REFS)]
        paths[name] = _write(tmp_path / name, lines)
    return paths


def test_several_hypothesis_files_are_scored_as_one_corpus(files):
    joined = evaluate_files("bleu", [files["sys1"], files["sys2"]], [files["ref"]], tokenized=True)
    lines = [
        tokenize_13a_lower(line)
        for name in ("sys1", "sys2")
        for line in Path(files[name]).read_text().splitlines()
    ]
    refs = [tokenize_13a_lower(r) for r in REFS] * 2
    assert joined["score"] == pytest.approx(tokenized_bleu(lines, refs).score)
    assert "2 files joined" in joined["text"]


def test_baseline_adds_the_paired_test_of_the_difference(files):
    result = evaluate_files(
        "bleu", [files["sys1"]], [files["ref"]], baseline=[files["base1"]], tokenized=True
    )
    base = [tokenize_13a_lower(line) for line in Path(files["base1"]).read_text().splitlines()]
    system = [tokenize_13a_lower(line) for line in Path(files["sys1"]).read_text().splitlines()]
    direct = paired_bleu_test(base, system, [tokenize_13a_lower(r) for r in REFS], tokenize="none")
    assert result["delta"] == pytest.approx(direct.delta) and result["delta"] > 0
    assert result["p_value"] == pytest.approx(direct.p_value)
    assert result["score"] - result["baseline_score"] == pytest.approx(result["delta"])
    assert f"difference {direct.delta:+.2f}" in result["text"]


def test_baseline_pairs_each_hypothesis_file_with_its_own(files):
    pooled = evaluate_files(
        "bleu",
        [files["sys1"], files["sys2"]],
        [files["ref"]],
        baseline=[files["base1"], files["base2"]],
    )
    swapped = evaluate_files(
        "bleu",
        [files["sys1"], files["sys2"]],
        [files["ref"]],
        baseline=[files["base2"], files["base1"]],
    )
    assert pooled["delta"] == pytest.approx(swapped["delta"])  # same corpora, other pairing
    assert pooled["p_value"] != swapped["p_value"]
    same = evaluate_files("bleu", [files["sys1"]], [files["ref"]], baseline=[files["sys1"]])
    assert same["delta"] == 0 and same["p_value"] == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": "bleu", "hyp": ["sys1", "sys2"], "baseline": ["base1"]}, "one file per --hyp"),
        ({"metric": "rouge", "hyp": ["sys1"], "baseline": ["base1"]}, "--metric bleu only"),
        ({"metric": "chrf", "hyp": ["sys1", "sys2"]}, "--metric bleu only"),
        ({"metric": "bleu", "hyp": ["sys1", "short"]}, "short has 2 lines"),
    ],
)
def test_bad_combinations_name_the_problem(files, tmp_path, kwargs, message):
    files["short"] = _write(tmp_path / "short", REFS[:2])
    hyp = [files[name] for name in kwargs["hyp"]]
    baseline = [files[name] for name in kwargs.get("baseline", [])] or None
    with pytest.raises(DataError, match=message):
        evaluate_files(kwargs["metric"], hyp, [files["ref"]], baseline=baseline)


@pytest.mark.parametrize("metric", ["bleu", "chrf", "rouge", "gleu", "m2"])
@pytest.mark.parametrize("tokenized", [False, True])
def test_an_empty_hypothesis_file_is_a_one_line_data_error(tmp_path, metric, tokenized):
    empty = _write(tmp_path / "hyp", [])
    (tmp_path / "hyp").write_text("", encoding="utf-8")
    ref = _write(tmp_path / "ref", [])
    (tmp_path / "ref").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"hyp is empty: there is nothing to score"):
        evaluate_files(metric, empty, [ref], source=ref, tokenized=tokenized)


@pytest.mark.parametrize(
    "hypotheses",
    [
        b"\xef\xbb\xbfthe cat sat on the mat .\nhello world again and again\n",
        b"the cat sat on the mat .\r\nhello world again and again\r\n",
    ],
    ids=["utf-8 BOM", "CRLF"],
)
@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_a_bom_or_crlf_line_ends_do_not_change_the_score(tmp_path, hypotheses, metric):
    ref = _write(tmp_path / "ref", ["the cat sat on the mat .", "hello world again and again"])
    (tmp_path / "hyp").write_bytes(hypotheses)
    assert evaluate_files(metric, str(tmp_path / "hyp"), [ref])["score"] == pytest.approx(100.0)


def test_lines_are_split_on_newlines_only_as_odet_generate_writes_them(tmp_path):
    """A form feed or U+2028 inside a reference line is not a line break: the files stay
    aligned line for line."""
    ref = tmp_path / "ref"
    ref.write_text("the cat\u2028sat here\nhello\x0cworld again\n", encoding="utf-8")
    hyp = _write(tmp_path / "hyp", ["the cat\u2028sat here", "hello\x0cworld again"])
    assert evaluate_files("chrf", hyp, [str(ref)])["score"] == pytest.approx(100.0)


def test_invalid_utf_8_is_reported_with_its_line(tmp_path):
    (tmp_path / "hyp").write_bytes(b"fine\nbad \xff here\n")
    ref = _write(tmp_path / "ref", ["fine", "bad here"])
    with pytest.raises(DataError, match=r"hyp is not valid UTF-8 \(line 2, byte 4\)"):
        evaluate_files("bleu", str(tmp_path / "hyp"), [ref])


def test_a_nul_byte_is_not_text_and_is_reported_with_its_line(tmp_path):
    """UTF-16 without a byte-order mark decodes as 'UTF-8' with a NUL in every character: it
    was scored as garbage."""
    (tmp_path / "hyp").write_bytes("fine\nbad here\n".encode("utf-16-le"))
    ref = _write(tmp_path / "ref", ["fine", "bad here"])
    with pytest.raises(DataError, match=r"hyp is not UTF-8 text \(line 1, byte 1 is a NUL byte"):
        evaluate_files("chrf", str(tmp_path / "hyp"), [ref])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_utf_16_or_32_with_its_byte_order_mark_is_named(tmp_path, encoding):
    (tmp_path / "hyp").write_bytes("fine\nbad here\n".encode(encoding))
    ref = _write(tmp_path / "ref", ["fine", "bad here"])
    name = encoding.upper()
    with pytest.raises(DataError, match=rf"hyp is {name} text .*iconv -f {name} -t UTF-8"):
        evaluate_files("bleu", str(tmp_path / "hyp"), [ref])


def test_one_path_may_be_a_str_or_a_path_for_every_file_argument(files):
    """A ``Path`` hypothesis was a TypeError; a ``str`` reference was read letter by letter
    (``--ref / is a directory``); a ``str`` baseline counted its letters as files."""
    expected = evaluate_files("bleu", [files["sys1"]], [files["ref"]], baseline=[files["base1"]])
    for hyp, ref, base in [
        (files["sys1"], files["ref"], files["base1"]),
        (Path(files["sys1"]), Path(files["ref"]), Path(files["base1"])),
        ([Path(files["sys1"])], [Path(files["ref"])], [Path(files["base1"])]),
    ]:
        assert evaluate_files("bleu", hyp, ref, baseline=base) == expected
    gleu = evaluate_files("gleu", files["sys1"], files["ref"], source=Path(files["base1"]))
    assert gleu["score"] > 0


def test_a_reference_file_given_twice_is_refused_not_counted_once(files):
    """GLEU said '2 reference(s)' and scored against one: the repeat was silently dropped."""
    with pytest.raises(DataError, match=r"--ref names .*ref.* more than once"):
        evaluate_files("gleu", files["sys1"], [files["ref"]] * 2, source=files["base1"])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"refs": []}, DataError, "no reference file given"),
        ({"refs": [3]}, TypeError, r"refs\[0\] must be a path, got int"),
        ({"refs": None}, TypeError, "refs must be a path or a list of paths, got NoneType"),
        ({"source": ["a", "b"]}, TypeError, "source must be a path, got list"),
    ],
)
def test_missing_or_wrongly_typed_file_arguments_are_named(files, kwargs, error, message):
    options = {"metric": "gleu", "hyp": files["sys1"], "refs": [files["ref"]], **kwargs}
    options.setdefault("source", files["base1"])
    with pytest.raises(error, match=message):
        evaluate_files(**options)
