"""Random bytes into the config loader and the data readers: typed errors, never a crash."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odet.config import ConfigError
from odet.data import DataError, read_jsonl_pairs, read_lines, read_parallel_text
from odet.data.m2 import M2FormatError, parse_m2
from odet.training import load_train_config

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
YAMLISH = st.one_of(
    st.binary(max_size=300),
    st.text(alphabet="abdeilmnoprstuvx_:{}[]-,.0123456789 \n\t'\"#&*!|>%@", max_size=300).map(
        str.encode
    ),
)


def _file(data: bytes) -> Path:
    with tempfile.NamedTemporaryFile(delete=False, suffix=".bin") as handle:
        handle.write(data)
    return Path(handle.name)


@FUZZ
@given(YAMLISH)
def test_config_loader_raises_only_config_errors(data):
    path = _file(data)
    try:
        load_train_config(path)
    except ConfigError:
        pass
    finally:
        path.unlink()


@FUZZ
@given(
    st.one_of(st.binary(max_size=400), st.just(b"\x1f\x8b\x08\x00garbage")),
    st.binary(max_size=400),
)
def test_parallel_text_reader_raises_only_data_errors(source, target):
    src, tgt = _file(source), _file(target)
    try:
        pairs = read_parallel_text(src, tgt)
        assert len(pairs.source) == len(pairs.target)
    except DataError:
        pass
    finally:
        src.unlink()
        tgt.unlink()


@FUZZ
@given(st.one_of(st.binary(max_size=400), st.text(max_size=300).map(str.encode)))
def test_jsonl_reader_and_line_reader_raise_only_data_errors(data):
    path = _file(data)
    try:
        with contextlib.suppress(DataError):
            read_jsonl_pairs(path, "dialogue", "summary")
        with contextlib.suppress(DataError):
            read_lines(path)
    finally:
        path.unlink()


@FUZZ
@given(st.text(alphabet="SA |0123456789-_noptxyz\n", max_size=300))
def test_m2_parser_raises_only_format_errors(text):
    with contextlib.suppress(M2FormatError):
        parse_m2(text, source_name="fuzz.m2")
