from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import zipfile
from functools import partial
from pathlib import Path

import pytest

from odet.data.download import (
    DATASETS,
    ChecksumError,
    DataFile,
    DatasetSpec,
    DownloadError,
    fetch_url,
    prepare_dataset,
    prepare_dialogsum,
    prepare_jfleg,
    prepare_multi30k,
)
from odet.data.text import DataError
from odet.io import OUTPUT_MARKER, marker_command

PINNED_COMMITS = {
    "multi30k": ["a3d2e0d26b56f3846f66a952536ffed4e401d05a"],
    "jfleg": ["ee06ff806a208aba815ac45313f4e750a48330a5"],
    "dialogsum": [
        "848cc8c05e0a04def79326539de827f1b28786a0",
        "9a79c6b7a768020c97b44e955312dd68172c34f4",
    ],
    "tinyshakespeare": ["6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e"],
}


def files_in(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def release_zip(jsonl: bytes) -> bytes:
    """A stand-in for DialogSum's first release zip: one Python dict literal per line."""
    literals = "".join(repr(json.loads(line)) + "\n" for line in jsonl.splitlines())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as bundle:
        bundle.writestr("DialogSum_Data/dialogsum.train.jsonl", literals)
        bundle.writestr("__MACOSX/DialogSum_Data/._dialogsum.train.jsonl", b"\x00")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def remote(shared_data: Path) -> dict[str, dict[str, bytes]]:
    """What each pinned URL serves, rebuilt from the shared copies, per dataset."""
    return {name: remote_from_shared(name, shared_data) for name in DATASETS}


def remote_from_shared(name: str, shared_data: Path) -> dict[str, bytes]:
    served = {}
    for file in DATASETS[name].files:
        stored = (shared_data / name / file.path).read_bytes()
        if file.source == "copy":
            served[file.url] = stored
        elif file.source == "gzip":
            served[file.url] = gzip.decompress(stored)
        else:
            served[file.url] = release_zip(gzip.decompress(stored))
    return served


def test_registry_lists_the_four_datasets_at_pinned_commits() -> None:
    assert sorted(DATASETS) == ["dialogsum", "jfleg", "multi30k", "tinyshakespeare"]
    for name, spec in DATASETS.items():
        assert spec.name == name and spec.licence and spec.citation
        for file in spec.files:
            assert any(commit in file.url for commit in PINNED_COMMITS[name]), file.url
    assert len(DATASETS["multi30k"].files) == 12
    assert len(DATASETS["jfleg"].files) == 7


@pytest.mark.parametrize(
    ("name", "prepare"),
    [
        ("multi30k", prepare_multi30k),
        ("jfleg", prepare_jfleg),
        ("dialogsum", prepare_dialogsum),
        ("tinyshakespeare", partial(prepare_dataset, "tinyshakespeare")),
    ],
)
def test_prepare_from_data_dir_copies_verified_files(
    shared_data: Path, tmp_path: Path, name: str, prepare: object
) -> None:
    paths = prepare(tmp_path / "out", shared_data / name, progress=False)  # type: ignore[operator]
    assert [p.relative_to(tmp_path / "out").as_posix() for p in paths] == [
        file.path for file in DATASETS[name].files
    ]
    for path, file in zip(paths, DATASETS[name].files, strict=True):
        assert path.read_bytes() == (shared_data / name / file.path).read_bytes()


def test_shared_hashes_are_the_sha256_of_the_published_content(shared_data: Path) -> None:
    for file in DATASETS["multi30k"].files:
        stored = (shared_data / "multi30k" / file.path).read_bytes()
        content = stored if file.source == "copy" else gzip.decompress(stored)
        assert hashlib.sha256(content).hexdigest() == file.sha256, file.path


def copy_dataset(shared_data: Path, name: str, destination: Path) -> Path:
    shutil.copytree(shared_data / name, destination)
    for path in destination.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    destination.chmod(0o755)
    return destination


def test_corrupted_local_copy_raises_checksum_error_and_writes_nothing(
    shared_data: Path, tmp_path: Path
) -> None:
    local = copy_dataset(shared_data, "jfleg", tmp_path / "jfleg")
    text = (local / "dev.ref2").read_bytes()
    (local / "dev.ref2").write_bytes(text.replace(b"the", b"teh", 1))
    out = tmp_path / "out"
    with pytest.raises(ChecksumError, match=r"checksum mismatch for dev.ref2 from .*dev.ref2: "):
        prepare_jfleg(out, local, progress=False)
    assert not out.exists() or files_in(out) == []


def test_corrupted_gzip_content_is_detected_after_decompression(
    shared_data: Path, tmp_path: Path
) -> None:
    local = copy_dataset(shared_data, "multi30k", tmp_path / "m30k")
    target = local / "tok" / "val.lc.norm.tok.de.gz"
    target.write_bytes(gzip.compress(gzip.decompress(target.read_bytes()) + b"extra line\n"))
    with pytest.raises(ChecksumError, match="tok/val.lc.norm.tok.de.gz"):
        prepare_multi30k(tmp_path / "out", local, progress=False)
    assert not (tmp_path / "out").exists()


def test_local_file_that_is_not_gzip_is_a_checksum_error(shared_data: Path, tmp_path: Path) -> None:
    local = copy_dataset(shared_data, "dialogsum", tmp_path / "ds")
    (local / "dialogsum.train.jsonl.gz").write_bytes(b"plain text, not gzip")
    with pytest.raises(ChecksumError, match="is not valid gzip"):
        prepare_dialogsum(tmp_path / "out", local, progress=False)


def test_missing_local_file_is_a_data_error_with_its_path(
    shared_data: Path, tmp_path: Path
) -> None:
    local = copy_dataset(shared_data, "jfleg", tmp_path / "jfleg")
    (local / "dev.ref.m2").unlink()
    with pytest.raises(DataError, match=r"dev.ref.m2 not found in data_dir: .*jfleg/dev.ref.m2"):
        prepare_jfleg(tmp_path / "out", local, progress=False)


def test_download_path_verifies_and_stores_every_file(
    shared_data: Path, tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    for name in DATASETS:
        served = remote[name]
        requested: list[str] = []

        def fetch(url: str, served: dict[str, bytes] = served, log: list[str] = requested) -> bytes:
            log.append(url)
            return served[url]

        paths = prepare_dataset(name, tmp_path / name, fetch=fetch, progress=False)
        assert sorted(requested) == sorted(served)
        for path, file in zip(paths, DATASETS[name].files, strict=True):
            expected = (shared_data / name / file.path).read_bytes()
            if file.source == "copy":
                assert path.read_bytes() == expected
            else:
                assert gzip.decompress(path.read_bytes()) == gzip.decompress(expected)


def test_dialogsum_release_conversion_yields_the_shared_jsonl(
    tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    prepare_dialogsum(tmp_path, fetch=remote["dialogsum"].__getitem__, progress=False)
    with gzip.open(tmp_path / "dialogsum.train.jsonl.gz", "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    assert len(records) == 12460
    assert records[0]["fname"] == "train_0"
    assert list(records[-1]) == ["fname", "dialogue", "summary", "topic"]


def test_tampered_download_raises_and_leaves_no_files(
    tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    served = dict(remote["multi30k"])
    last = DATASETS["multi30k"].files[-1].url
    served[last] = served[last].replace(b"a", b"b", 1)
    with pytest.raises(ChecksumError, match=f"test_2016_flickr.lc.norm.tok.de.gz from {last}"):
        prepare_multi30k(tmp_path / "out", fetch=served.__getitem__, progress=False)
    assert not (tmp_path / "out").exists()


def test_network_failure_midway_leaves_no_files(
    tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    served = remote["jfleg"]
    failing = DATASETS["jfleg"].files[3].url

    def fetch(url: str) -> bytes:
        if url == failing:
            raise DownloadError(f"could not download {url}: connection reset")
        return served[url]

    with pytest.raises(DownloadError, match="connection reset"):
        prepare_jfleg(tmp_path / "out", fetch=fetch, progress=False)
    assert not (tmp_path / "out").exists()


def test_verified_existing_files_are_kept_and_corrupted_ones_replaced(
    shared_data: Path, tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    out = tmp_path / "out"
    prepare_jfleg(out, shared_data / "jfleg", progress=False)
    (out / "dev.ref0").write_bytes(b"stale")
    served = remote["jfleg"]
    requested: list[str] = []

    def fetch(url: str) -> bytes:
        requested.append(url)
        return served[url]

    prepare_jfleg(out, fetch=fetch, progress=False)
    assert requested == [DATASETS["jfleg"].files[2].url]
    assert (out / "dev.ref0").read_bytes() == (shared_data / "jfleg" / "dev.ref0").read_bytes()


def test_release_zip_without_the_train_member_is_rejected(
    tmp_path: Path, remote: dict[str, dict[str, bytes]]
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("DialogSum_Data/dialogsum.dev.jsonl", "{}\n")
    served = {**remote["dialogsum"], DATASETS["dialogsum"].files[1].url: buffer.getvalue()}
    with pytest.raises(ChecksumError, match=r"expected one dialogsum.train.jsonl in .*archive: "):
        prepare_dialogsum(tmp_path / "out", fetch=served.__getitem__, progress=False)
    assert not (tmp_path / "out").exists()


def test_fetch_url_reads_a_url_and_wraps_failures(tmp_path: Path) -> None:
    source = tmp_path / "payload.bin"
    source.write_bytes(b"\x00\x01payload" * 1000)
    assert fetch_url(source.as_uri(), progress=False) == source.read_bytes()
    with pytest.raises(DownloadError, match=r"could not download file://.*missing.bin"):
        fetch_url((tmp_path / "missing.bin").as_uri(), progress=False)


def test_unknown_dataset_names_the_available_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown dataset 'wmt14'; available: \['dialogsum'"):
        prepare_dataset("wmt14", tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "../escape"}, "relative path inside out_dir"),
        ({"url": "http://example.org/x"}, "https URL"),
        ({"sha256": "ABC"}, "64 lowercase hex digits"),
        ({"source": "tar"}, "source='tar'; expected one of"),
        ({"source": "gzip"}, "stored gzip-compressed"),
    ],
)
def test_data_file_spec_is_validated(kwargs: dict[str, str], message: str) -> None:
    fields = {"path": "a.txt", "url": "https://example.org/a.txt", "sha256": "0" * 64, **kwargs}
    with pytest.raises(ValueError, match=message):
        DataFile(**fields)  # type: ignore[arg-type]


def test_dataset_spec_rejects_duplicate_paths() -> None:
    file = DataFile("a.txt", "https://example.org/a.txt", "0" * 64)
    with pytest.raises(ValueError, match="lists a path twice"):
        DatasetSpec("x", "d", "l", "c", (file, file))


def test_a_users_file_of_a_dataset_files_name_is_never_overwritten(
    shared_data: Path, tmp_path: Path
) -> None:
    local = copy_dataset(shared_data, "jfleg", tmp_path / "jfleg")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "dev.src").write_text("my own sentences\n")
    with pytest.raises(DataError, match=r"dev\.src exists and is not jfleg's dev\.src"):
        prepare_jfleg(mine, local, progress=False)
    assert files_in(mine) == ["dev.src"] and (mine / "dev.src").read_text() == "my own sentences\n"


def test_a_damaged_file_in_a_folder_odet_data_made_is_repaired(
    shared_data: Path, tmp_path: Path
) -> None:
    local = copy_dataset(shared_data, "jfleg", tmp_path / "jfleg")
    out = tmp_path / "out"
    prepare_jfleg(out, local, progress=False)
    assert marker_command(out / OUTPUT_MARKER) == "data"
    (out / "dev.ref1").write_text("cut short")
    prepare_jfleg(out, local, progress=False)
    assert (out / "dev.ref1").read_bytes() == (local / "dev.ref1").read_bytes()


def test_a_missing_data_dir_is_refused_before_any_file_is_looked_at(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"--data-dir .*nowhere is not a directory"):
        prepare_jfleg(tmp_path / "out", tmp_path / "nowhere", progress=False)
    assert not (tmp_path / "out").exists()
