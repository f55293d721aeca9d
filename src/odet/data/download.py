"""Fetch the project's public datasets at pinned commits and verify them by SHA-256.

Each dataset is a ``DatasetSpec`` in ``DATASETS``. ``prepare_dataset(name, out_dir)`` downloads
every file from the dataset's GitHub repository at a pinned commit; with ``data_dir=`` it copies
from a local directory laid out like ``out_dir`` instead (e.g. ``shared/data/multi30k``). Either
way every file is verified before anything is written, and each file is written atomically, so a
checksum mismatch or a network failure leaves ``out_dir`` without new or partial files. Files
already present in ``out_dir`` with the right content are kept without fetching.

What the hash covers depends on ``DataFile.source``:

- ``"copy"``: the file is stored exactly as published; the hash is of its bytes.
- ``"gzip"``: published as plain text, stored gzip-compressed; the hash is of the plain text.
- ``"dialogsum-release-zip"``: DialogSum's train split, taken from the first public release zip,
  whose lines are Python dict literals; they are parsed with ``ast.literal_eval``, re-written as
  JSON Lines and stored gzip-compressed. The hash is of that JSON Lines text. The zip itself has
  no pinned hash (it could not be fetched where the hashes were computed); the JSON hash is the
  stronger check anyway, since it pins every record.

The expected hashes were computed from the byte-for-byte copies in the project's shared data
directory (for ``gzip``/zip sources: from their decompressed content).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import http.client
import io
import json
import re
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Literal, get_args

from tqdm.auto import tqdm

from odet.data.text import DataError, PathLike
from odet.io import (
    OUTPUT_MARKER,
    blocking_file,
    claim_output_dir,
    marker_command,
    write_bytes_atomic,
)

Source = Literal["copy", "gzip", "dialogsum-release-zip"]
Fetcher = Callable[[str], bytes]

_SHA256 = re.compile(r"[0-9a-f]{64}")


class DownloadError(DataError):
    """A file could not be fetched (network failure, HTTP error, truncated transfer)."""


class ChecksumError(DataError):
    """A fetched or local file does not have the expected content."""


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: where it goes, where it comes from, and its content hash."""

    path: str
    url: str
    sha256: str
    source: Source = "copy"

    def __post_init__(self) -> None:
        relative = PurePosixPath(self.path)
        if relative.is_absolute() or ".." in relative.parts or not self.path:
            raise ValueError(f"DataFile.path must be a relative path inside out_dir: {self.path!r}")
        if not self.url.startswith("https://"):
            raise ValueError(f"DataFile.url must be an https URL, got {self.url!r}")
        if not _SHA256.fullmatch(self.sha256):
            raise ValueError(f"DataFile.sha256 must be 64 lowercase hex digits: {self.sha256!r}")
        if self.source not in get_args(Source):
            raise ValueError(f"DataFile.source={self.source!r}; expected one of {get_args(Source)}")
        if self.source != "copy" and not self.path.endswith(".gz"):
            raise ValueError(f"{self.source!r} files are stored gzip-compressed: {self.path!r}")


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset's files at pinned commits, with what it is and its licence terms."""

    name: str
    description: str
    licence: str
    citation: str
    files: tuple[DataFile, ...]

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError(f"dataset {self.name!r} lists no files")
        paths = [file.path for file in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError(f"dataset {self.name!r} lists a path twice: {sorted(paths)}")


def _github(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_MULTI30K = ("multi30k/dataset", "a3d2e0d26b56f3846f66a952536ffed4e401d05a")
_JFLEG = ("keisks/jfleg", "ee06ff806a208aba815ac45313f4e750a48330a5")
_DIALOGSUM_HEAD = ("cylnlp/dialogsum", "848cc8c05e0a04def79326539de827f1b28786a0")
_DIALOGSUM_RELEASE = ("cylnlp/dialogsum", "9a79c6b7a768020c97b44e955312dd68172c34f4")
_CHAR_RNN = ("karpathy/char-rnn", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e")

_MULTI30K_RAW = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
}
_MULTI30K_TOK = {
    "train.lc.norm.tok.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    "train.lc.norm.tok.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "test_2016_flickr.lc.norm.tok.en": (
        "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2"
    ),
    "test_2016_flickr.lc.norm.tok.de": (
        "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4"
    ),
}
_JFLEG_DEV = {
    "dev/dev.src": "4a0e8b86d18a1058460ff0a592dac1ba68986d135256efbd27e997ac43f295f8",
    "dev/dev.spellchecked.src": "640be7de18ba338d411d55b6e6db2053db8fa165ba8536b047a6b5381361de97",
    "dev/dev.ref0": "adea6287c6e2240b7777e63cd56f8e228e742bbfb42c5152bc0bd2bc91f4e53e",
    "dev/dev.ref1": "d40d56ec7468ddab03fdcca97065ab3f9d391d749dbc7097b7c777a19ce4242e",
    "dev/dev.ref2": "b070691d633e0c4143d96ba21299ae71cb126086517d2970df47420842067793",
    "dev/dev.ref3": "9187fd834693fa77d07957991282d32d61ff84a207c25cbfab318c871bacdbc4",
    "EACL_exp/m2converter/dev.ref.m2": (
        "90897f24336a0952c89ea4d135b6e1d9050aa9e36a8949fb76201d2d5493a109"
    ),
}

DATASETS: dict[str, DatasetSpec] = {
    "tinyshakespeare": DatasetSpec(
        name="tinyshakespeare",
        description=(
            "Tiny Shakespeare (1,115,394 characters of Shakespeare's plays, 65 distinct): "
            "character-level language modelling; the usual split is the first 90 % of the "
            "characters for training and the last 10 % for validation (nanoGPT)."
        ),
        licence="The text is public domain; the char-rnn repository is MIT-licensed.",
        citation="Karpathy 2015, char-rnn (data/tinyshakespeare/input.txt)",
        files=(
            DataFile(
                "input.txt",
                _github(*_CHAR_RNN, "data/tinyshakespeare/input.txt"),
                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            ),
        ),
    ),
    "multi30k": DatasetSpec(
        name="multi30k",
        description=(
            "Multi30K Task 1 English-German image captions: train 29,000 / val 1,014 / "
            "test_2016_flickr 1,000 pairs; raw text at the top level, the official lower-cased "
            "Moses-tokenized text (on which published BLEU is computed) under tok/."
        ),
        licence=(
            "No licence file; the README allows non-commercial research and educational use "
            "(partly derived from Flickr30K)."
        ),
        citation="Elliott et al. 2016, Multi30K: Multilingual English-German Image Descriptions",
        files=tuple(
            DataFile(name, _github(*_MULTI30K, f"data/task1/raw/{name}"), digest)
            for name, digest in _MULTI30K_RAW.items()
        )
        + tuple(
            DataFile(
                f"tok/{name}.gz", _github(*_MULTI30K, f"data/task1/tok/{name}"), digest, "gzip"
            )
            for name, digest in _MULTI30K_TOK.items()
        ),
    ),
    "jfleg": DatasetSpec(
        name="jfleg",
        description=(
            "JFLEG dev set (grammatical error correction, fluency edits): 754 learner sentences, "
            "a spell-checked variant, four human corrections, and an unofficial M2 rendering."
        ),
        licence="CC BY-NC-SA 4.0",
        citation="Napoles, Sakaguchi & Tetreault, EACL 2017 (E17-2037)",
        files=tuple(
            DataFile(PurePosixPath(path).name, _github(*_JFLEG, path), digest)
            for path, digest in _JFLEG_DEV.items()
        ),
    ),
    "dialogsum": DatasetSpec(
        name="dialogsum",
        description=(
            "DialogSum dialogue summarization, JSON Lines with fname/dialogue/summary/topic: "
            "dev 500 (final release) and train 12,460 (first public release, converted from "
            "Python dict literals to JSON; a few quotation marks differ from the final release)."
        ),
        licence="CC BY-NC-SA 4.0; dialogue copyright belongs to the users who created them",
        citation="Chen, Liu, Chen & Zhang, Findings of ACL 2021 (2021.findings-acl.449)",
        files=(
            DataFile(
                "dialogsum.dev.jsonl",
                _github(*_DIALOGSUM_HEAD, "DialogSum_Data/dialogsum.dev.jsonl"),
                "436721e0a3571eef7072964f80e042fb151d8c6178db1a688ce8f803bbf0a13f",
            ),
            DataFile(
                "dialogsum.train.jsonl.gz",
                _github(*_DIALOGSUM_RELEASE, "DialogSum_Data.zip"),
                "d223076c574192da82e8e56847b255e627196e2e7def9ed2b193cfb8e4940cba",
                "dialogsum-release-zip",
            ),
        ),
    ),
}


def fetch_url(url: str, *, timeout: float = 60.0, progress: bool = True) -> bytes:
    """Download ``url`` into memory; any failure raises ``DownloadError`` naming the URL."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            expected = int(response.headers.get("Content-Length") or 0) or None
            chunks: list[bytes] = []
            name = url.rsplit("/", 1)[-1]
            with tqdm(
                total=expected, unit="B", unit_scale=True, desc=name, disable=not progress
            ) as bar:
                while chunk := response.read(1 << 16):
                    chunks.append(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        raise DownloadError(f"could not download {url}: {error}") from error
    data = b"".join(chunks)
    if expected is not None and len(data) != expected:
        raise DownloadError(f"truncated download of {url}: got {len(data)} of {expected} bytes")
    return data


def prepare_dataset(
    name: str,
    out_dir: PathLike,
    data_dir: PathLike | None = None,
    *,
    fetch: Fetcher | None = None,
    progress: bool = True,
) -> list[Path]:
    """Download (or copy from ``data_dir``) and verify dataset ``name`` into ``out_dir``.

    Returns the paths of its files in ``out_dir``. ``fetch(url) -> bytes`` replaces the HTTP
    download (default ``fetch_url``). Raises ``ChecksumError`` on a content mismatch,
    ``DownloadError`` when fetching fails, and ``DataError`` for a file missing in ``data_dir``;
    in all these cases nothing is written.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {sorted(DATASETS)}")
    spec = DATASETS[name]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} exists and is not a directory; choose a new one")
    if (blocking := blocking_file(out)) is not None:
        raise DataError(f"--out {out} cannot be created: {blocking} is a file, not a directory")
    if data_dir is not None:
        if not Path(data_dir).is_dir():
            raise DataError(f"--data-dir {data_dir} is not a directory")
        for file in spec.files:
            if not (Path(data_dir) / file.path).is_file():
                raise DataError(f"{file.path} not found in data_dir: {Path(data_dir) / file.path}")
    ours = marker_command(out / OUTPUT_MARKER) == "data"
    fresh = not out.exists() or not any(out.iterdir())
    fetch = fetch or partial(fetch_url, progress=progress)
    pending: dict[Path, bytes] = {}
    for file in tqdm(spec.files, desc=name, unit="file", disable=not progress):
        target = out / file.path
        if target.is_file() and _is_valid(file, target.read_bytes()):
            continue
        if target.exists() and not ours:
            raise DataError(
                f"{target} exists and is not {name}'s {file.path} (its content differs), in a "
                f"folder odet data did not make (no {OUTPUT_MARKER}); move it away or choose "
                "another --out (nothing was written)"
            )
        if data_dir is None:
            pending[target] = _stored_from_download(file, fetch(file.url))
        else:
            pending[target] = _stored_from_local(file, Path(data_dir) / file.path)
    for target, stored in pending.items():
        write_bytes_atomic(target, stored)
    if fresh:
        claim_output_dir(out, "data")
    return [out / file.path for file in spec.files]


def prepare_multi30k(
    out_dir: PathLike,
    data_dir: PathLike | None = None,
    *,
    fetch: Fetcher | None = None,
    progress: bool = True,
) -> list[Path]:
    """``prepare_dataset("multi30k", ...)``: raw and official tokenized Multi30K En-De."""
    return prepare_dataset("multi30k", out_dir, data_dir, fetch=fetch, progress=progress)


def prepare_jfleg(
    out_dir: PathLike,
    data_dir: PathLike | None = None,
    *,
    fetch: Fetcher | None = None,
    progress: bool = True,
) -> list[Path]:
    """``prepare_dataset("jfleg", ...)``: the JFLEG dev set with its four references."""
    return prepare_dataset("jfleg", out_dir, data_dir, fetch=fetch, progress=progress)


def prepare_dialogsum(
    out_dir: PathLike,
    data_dir: PathLike | None = None,
    *,
    fetch: Fetcher | None = None,
    progress: bool = True,
) -> list[Path]:
    """``prepare_dataset("dialogsum", ...)``: DialogSum dev and train."""
    return prepare_dataset("dialogsum", out_dir, data_dir, fetch=fetch, progress=progress)


def _verify(file: DataFile, content: bytes, origin: str) -> None:
    actual = hashlib.sha256(content).hexdigest()
    if actual != file.sha256:
        raise ChecksumError(
            f"checksum mismatch for {file.path} from {origin}: expected sha256 {file.sha256}, "
            f"got {actual}"
        )


def _content_of_stored(file: DataFile, stored: bytes, origin: str) -> bytes:
    """The hashed content of a file as stored in ``out_dir`` / ``data_dir``."""
    if file.source == "copy":
        return stored
    try:
        return gzip.decompress(stored)
    except (OSError, EOFError, zlib.error) as error:
        raise ChecksumError(f"{file.path} from {origin} is not valid gzip: {error}") from error


def _is_valid(file: DataFile, stored: bytes) -> bool:
    try:
        _verify(file, _content_of_stored(file, stored, "out_dir"), "out_dir")
    except ChecksumError:
        return False
    return True


def _stored_from_local(file: DataFile, path: Path) -> bytes:
    stored = path.read_bytes()
    _verify(file, _content_of_stored(file, stored, str(path)), str(path))
    return stored


def _stored_from_download(file: DataFile, payload: bytes) -> bytes:
    content = payload
    if file.source == "dialogsum-release-zip":
        content = _dialogsum_release_to_jsonl(payload, file.url)
    _verify(file, content, file.url)
    return content if file.source == "copy" else gzip.compress(content, compresslevel=6, mtime=0)


def _dialogsum_release_to_jsonl(archive: bytes, url: str) -> bytes:
    """Extract ``dialogsum.train.jsonl`` from the release zip and turn its Python dict literals
    into JSON Lines (``json.dumps(record, ensure_ascii=False)``, one per line)."""
    member_name = "dialogsum.train.jsonl"
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as bundle:
            members = [
                info.filename
                for info in bundle.infolist()
                if PurePosixPath(info.filename).name == member_name
                and not info.filename.startswith("__MACOSX/")
            ]
            if len(members) != 1:
                listing = sorted(bundle.namelist())
                raise ChecksumError(
                    f"expected one {member_name} in {url}, found {members}; archive: {listing}"
                )
            text = bundle.read(members[0]).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise ChecksumError(f"{url} is not the expected DialogSum release zip: {error}") from error
    lines = []
    # split on "\n" only: str.splitlines would also split inside strings holding U+2028 etc.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = ast.literal_eval(line.strip())
        except (ValueError, SyntaxError) as error:
            raise ChecksumError(f"{url}:{members[0]} line {number}: not a dict literal") from error
        if not isinstance(record, dict):
            raise ChecksumError(f"{url}:{members[0]} line {number}: not a dict literal")
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    return "".join(lines).encode("utf-8")
