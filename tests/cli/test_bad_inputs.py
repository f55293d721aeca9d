"""Every command, every class of bad input: one ``odet: error:`` line, exit status 2, no
traceback, nothing changed outside the command's own outputs, no training update made.

The table is ``CASES``: per command, per class (missing file, directory instead of a file, empty,
all-blank, invalid UTF-8, misaligned, bad config key/value/type, duplicate YAML key, foreign or
unwritable output, bad numeric flag, not a run, corrupt checkpoint, model of another shape).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.conftest import (
    TreeSnapshot,
    assert_one_line_user_error,
    checkpoint_of,
    cli_config,
    copy_checkpoint,
    lm_config,
    run_odet,
    write_yaml,
)


@dataclass
class Env:
    """One test's world: its tmp dir and the shared (read-only) fixtures."""

    tmp: Path
    data: Path
    run: Path
    lm: Path
    shared: Path | None

    def file(self, name: str, content: bytes | str) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return str(path)

    def dir(self, name: str, *files: str) -> str:
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        for f in files:
            (path / f).write_text("theirs\n", encoding="utf-8")
        return str(path)

    def bad(self, kind: str, name: str) -> str:
        """A file of one bad class named ``name``: missing, directory, empty, blank, latin1,
        utf16 (with its byte-order mark), nul (NUL bytes in every line: binary data)."""
        if kind == "missing":
            return str(self.tmp / name)
        if kind == "directory":
            return self.dir(name)
        content = {
            "empty": b"",
            "blank": b"\n  \n\t\n",
            "latin1": "caf\xe9\nna\xefve\n\xe0 la\n".encode("latin-1"),
            "utf16": "caf\xe9\nna\xefve\n\xe0 la\n".encode("utf-16"),
            "nul": b"caf\0e\nna\0ve\n\0a la\n",
        }[kind]
        return self.file(name, content)

    def text(self, name: str, lines: int = 3) -> str:
        return self.file(name, "".join(f"w{i} x y\n" for i in range(lines)))

    def config(self, name: str = "c.yaml", out: str = "out", **sections) -> str:
        return str(write_yaml(self.tmp / name, cli_config(self.data, self.tmp / out, **sections)))

    def lm_config(self, name: str = "lm.yaml", out: str = "lmout", **sections) -> str:
        (self.tmp / "lmtext.txt").write_text("to be or not to be.\n" * 30, encoding="utf-8")
        config = lm_config(self.tmp, self.tmp / out, **sections)
        config["data"].setdefault("text", "lmtext.txt")
        if config["data"]["text"] == "text.txt":
            config["data"]["text"] = "lmtext.txt"
        return str(write_yaml(self.tmp / name, config))

    def experiment(self, name: str = "e.yaml", **keys) -> str:
        data = {
            "base": self.config("base.yaml"),
            "output_dir": str(self.tmp / "exp"),
            "seeds": [1],
            "variants": {"euler": {}},
            **keys,
        }
        return str(write_yaml(self.tmp / name, data))

    def parity(self, name: str = "p.yaml", **keys) -> str:
        data = {
            "seed": 0,
            "seeds": [0],
            "task": {
                "train_size": 16,
                "val_size": 8,
                "test_per_length": 2,
                "max_length": 4,
                "test_max_length": 6,
            },
            "training": {"steps": 1, "batch_size": 8},
            "model": {"d_model": 16, "num_heads": 2, "ffn_dim": 16},
            "variants": [{"name": "euler-1", "model": {"encoder_method": "euler"}}],
        }
        for key, value in keys.items():
            data[key] = value
        return str(write_yaml(self.tmp / name, data))

    def m2(self, name: str = "gold.m2") -> str:
        return self.file(
            name, "S a cat sat .\nA 1 2|||R:NOUN|||dog|||REQUIRED|||-NONE-|||0\n\nS ok .\n\n"
        )

    def jsonl(self, name: str = "d.jsonl") -> str:
        rows = [
            {"dialogue": f"#P1#: hi {i}\n#P2#: ho", "summary": f"they greet {i}"} for i in (1, 2)
        ]
        return self.file(name, "".join(json.dumps(r) + "\n" for r in rows))

    def shape_mismatch(self) -> str:
        """A checkpoint whose weights are those of a model of another shape (checksums right)."""
        from dataclasses import replace

        from odet.models import Seq2Seq

        path = copy_checkpoint(self.run, self.tmp / "other-shape")
        model = Seq2Seq.from_pretrained(path)
        other = Seq2Seq(replace(model.config, ffn_dim=48))
        other.save_pretrained(self.tmp / "wider")
        shutil.copy(self.tmp / "wider" / "model.safetensors", path / "model.safetensors")
        shutil.rmtree(self.tmp / "wider")
        _refresh_checksums(path)
        return str(path)

    def truncated(self, weights: str = "model.safetensors") -> str:
        path = copy_checkpoint(self.run, self.tmp / "truncated")
        data = (path / weights).read_bytes()
        (path / weights).write_bytes(data[: len(data) // 2])
        return str(path)


def _refresh_checksums(path: Path) -> None:
    import hashlib

    sums = path / "checksums.json"
    if not sums.is_file():
        return
    table = json.loads(sums.read_text())
    files = table.get("files", table)
    for name in list(files):
        digest = hashlib.sha256((path / name).read_bytes()).hexdigest()
        if isinstance(files[name], dict):
            files[name]["sha256"] = digest
        else:
            files[name] = digest
    sums.write_text(json.dumps(table))


Argv = Callable[[Env], list[str]]


@dataclass(frozen=True)
class Case:
    """One bad input: how to build the command line, what its one-line message says, and which
    paths (relative to the test's tmp dir) the command may create before it refuses."""

    command: str
    kind: str
    argv: Argv
    message: str
    may_create: tuple[str, ...] = field(default=())
    stdin: bytes = b""

    @property
    def id(self) -> str:
        return f"{self.command}:{self.kind}"


MISSING = r"not found|does not exist|no such"
FILE_CLASSES = {
    "missing": MISSING,
    "directory": r"is a directory",
    "empty": r"is empty|no pairs left|no usable|nothing to|no M2 sentence|no line|no text",
    "blank": r"blank|no pairs left|no usable|nothing to|no M2 sentence|no line|no text",
    "latin1": r"UTF-8",
    "utf16": r"UTF-16",
    "nul": r"NUL|not UTF-8 text|not valid UTF-8|no usable",
}
CONFIG_FILE_CLASSES = {  # YAML is read by the config loader, not the data readers
    "empty": r"is empty|no settings|missing required|required",
    "blank": r"is empty|no settings|missing required|required",
    "utf16": r"not valid UTF-8",
    "nul": r"malformed YAML: unacceptable character #x0000",
}
INPUT_SLOTS: dict[str, tuple[str, Callable[[Env, str], list[str]], tuple[str, ...]]] = {
    # command, argv with the bad file, what it may create
    "train data.train source": (
        "train",
        lambda e, f: ["train", e.config(data={"train": [f, _twin(e, f)]})],
        (),
    ),
    "train data.valid target": (
        "train",
        lambda e, f: ["train", e.config(data={"valid": [_twin(e, f), f]})],
        (),
    ),
    "train data.test source": (
        "train",
        lambda e, f: ["train", e.config(data={"test": [f, _twin(e, f)]})],
        (),
    ),
    "train lm data.text": (
        "train",
        lambda e, f: ["train", e.lm_config(data={"text": f})],
        (),
    ),
    "train config": ("train", lambda e, f: ["train", f], ()),
    "generate --input": (
        "generate",
        lambda e, f: ["generate", str(e.run), "-i", f, "-o", str(e.tmp / "hyp.out")],
        (),
    ),
    "evaluate --hyp": ("evaluate", lambda e, f: ["evaluate", "--hyp", f, "--ref", e.text("r")], ()),
    "evaluate --ref": ("evaluate", lambda e, f: ["evaluate", "--hyp", e.text("h"), "--ref", f], ()),
    "evaluate --src": (
        "evaluate",
        lambda e, f: [
            "evaluate",
            "--metric",
            "gleu",
            "--hyp",
            e.text("h"),
            "--ref",
            e.text("r"),
            "--src",
            f,
        ],
        (),
    ),
    "evaluate --baseline": (
        "evaluate",
        lambda e, f: ["evaluate", "--hyp", e.text("h"), "--ref", e.text("r"), "--baseline", f],
        (),
    ),
    "evaluate m2 --ref": (
        "evaluate",
        lambda e, f: ["evaluate", "--metric", "m2", "--hyp", e.text("h", 2), "--ref", f],
        (),
    ),
    "prepare gec": ("prepare", lambda e, f: ["prepare", "gec", f, "--out", str(e.tmp / "gec")], ()),
    "prepare m2": ("prepare", lambda e, f: ["prepare", "m2", f, "--out", str(e.tmp / "m2/x")], ()),
    "prepare dialogsum": (
        "prepare",
        lambda e, f: ["prepare", "dialogsum", f, "--out", str(e.tmp / "ds/x")],
        (),
    ),
    "prepare lead": (
        "prepare",
        lambda e, f: ["prepare", "lead", f, "--out", str(e.tmp / "lead.txt")],
        (),
    ),
    "config show": ("config", lambda e, f: ["config", "show", f], ()),
    "experiment config": ("experiment", lambda e, f: ["experiment", f, "--no-progress"], ()),
    "parity config": (
        "parity",
        lambda e, f: ["parity", f, "--out", str(e.tmp / "par"), "--no-progress"],
        (),
    ),
}
CONFIG_SLOTS = {"train config", "config show", "experiment config", "parity config"}


def _file_cases() -> list[Case]:
    cases = []
    for slot, (command, argv, may_create) in INPUT_SLOTS.items():
        for kind, pattern in FILE_CLASSES.items():
            if slot in CONFIG_SLOTS:
                pattern = CONFIG_FILE_CLASSES.get(kind, pattern)
            name = re.sub(r"\W+", "_", slot) + f".{kind}"

            def build(e: Env, argv=argv, kind=kind, name=name) -> list[str]:
                return argv(e, e.bad(kind, name))

            cases.append(
                Case(
                    command,
                    f"{slot} {kind}",
                    build,
                    rf"(?=.*{re.escape(name)})(?=.*(?:{pattern}))",
                    may_create,
                )
            )
    return cases


def _twin(e: Env, path: str) -> str:
    """The other side of a parallel pair: a file of the same bad class as ``path``."""
    p = Path(path)
    if p.is_dir():
        return e.dir(f"{p.name}.other")
    if not p.exists():
        return str(e.data / "train.tgt")
    return e.file(f"{p.name}.other", p.read_bytes())


def _misaligned(e: Env) -> list[str]:
    return ["train", e.config(data={"train": ["train.src", e.text("short.tgt", 2)]})]


def _yaml(e: Env, text: str, name: str = "y.yaml") -> str:
    return e.file(name, text)


def _run_copy(e: Env) -> str:
    """A copy of the finished run inside the test's tmp dir (so its changes are watched)."""
    target = e.tmp / "runcopy"
    shutil.copytree(e.run, target)
    return str(target)


def _best_checkpoint(run: Path) -> Path:
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    return run / "checkpoints" / (index.get("best") or index["last"])


def _continuous_run(e: Env) -> str:
    """A copy of the run whose best checkpoint holds a continuous-encoder model of its widths
    (random weights, checksums right)."""
    from dataclasses import replace

    from odet.models import Seq2Seq

    run = e.tmp / "noderun"
    shutil.copytree(e.run, run)
    checkpoint = _best_checkpoint(run)
    config = Seq2Seq.from_pretrained(checkpoint).config
    Seq2Seq(replace(config, encoder_method="continuous")).save_pretrained(checkpoint)
    _refresh_checksums(checkpoint)
    return str(run)


def _other_valid_run(e: Env) -> str:
    """A copy of the run whose best checkpoint's training config validates on the train files."""
    import yaml

    run = e.tmp / "otherrun"
    shutil.copytree(e.run, run)
    checkpoint = _best_checkpoint(run)
    config = yaml.safe_load((checkpoint / "train_config.yaml").read_text())
    config["data"]["valid"] = ["train.src", "train.tgt"]
    (checkpoint / "train_config.yaml").write_text(yaml.safe_dump(config))
    _refresh_checksums(checkpoint)
    return str(run)


def _depth(e: Env, run: str, reference: str, *more: str) -> list[str]:
    out = str(e.tmp / "depth")
    return ["analyze", run, "--depth-against", reference, "--out", out, *more]


CR_ONLY = b"w1 x y\rw2 x y\rw3 x y\r"
"""Classic-Mac line endings: odet splits on \\n only, so this read as one line (one pair)."""

CASES: list[Case] = [
    *_file_cases(),
    Case(
        "train",
        "data.train with CR-only line endings (read as one pair)",
        lambda e: [
            "train",
            e.config(data={"train": [e.file("cr.src", CR_ONLY), e.file("cr.tgt", CR_ONLY)]}),
        ],
        r"cr\.src has CR-only \(classic Mac\) line endings",
        (),
    ),
    Case(
        "generate",
        "--input with CR-only line endings (translated as one line)",
        lambda e: ["generate", str(e.run), "-i", e.file("cr.txt", CR_ONLY), "-o", str(e.tmp / "h")],
        r"cr\.txt has CR-only",
    ),
    Case(
        "evaluate",
        "--hyp with CR-only line endings (one hypothesis)",
        lambda e: ["evaluate", "--hyp", e.file("cr.hyp", CR_ONLY), "--ref", e.text("r")],
        r"cr\.hyp has CR-only",
    ),
    # ------------------------------------------------------------------ train
    Case("train", "misaligned train", _misaligned, r"short\.tgt.*2"),
    Case(
        "train",
        "misaligned valid",
        lambda e: ["train", e.config(data={"valid": ["valid.src", e.text("v.tgt", 5)]})],
        r"v\.tgt",
        (),
    ),
    Case(
        "train",
        "misaligned test",
        lambda e: ["train", e.config(data={"test": [e.text("t.src", 4), "test.tgt"]})],
        r"t\.src",
        (),
    ),
    Case(
        "train",
        "unknown key",
        lambda e: ["train", e.config(model={"d_modle": 32})],
        r"d_modle.*did you mean 'd_model'",
    ),
    Case(
        "train",
        "bad value",
        lambda e: ["train", e.config(model={"d_model": 30})],
        r"divisible by num_heads",
    ),
    Case(
        "train",
        "wrong type",
        lambda e: ["train", e.config(train={"max_tokens": "many"})],
        r"max_tokens.*int",
    ),
    Case(
        "train",
        "bad choice",
        lambda e: ["train", e.config(model={"encoder_method": "rk7"})],
        r"encoder_method.*rk7.*(euler|rk2)",
    ),
    Case(
        "train",
        "duplicate yaml key",
        lambda e: ["train", _yaml(e, "seed: 1\nseed: 2\n")],
        r"duplicate key 'seed' \(first given at line 1\)",
    ),
    Case(
        "train",
        "malformed yaml",
        lambda e: ["train", _yaml(e, "data: {train: [a, b]\n")],
        r"malformed YAML at line",
    ),
    Case(
        "train",
        "top-level list",
        lambda e: ["train", _yaml(e, "- 1\n- 2\n")],
        r"mapping",
    ),
    Case("train", "bad --set", lambda e: ["train", e.config(), "--set", "seed"], r"key=value"),
    Case(
        "train",
        "unknown --set key",
        lambda e: ["train", e.config(), "--set", "optim.lrr=1"],
        r"did you mean 'lr'",
    ),
    Case(
        "train",
        "--set wrong type",
        lambda e: ["train", e.config(), "--set", "train.max_tokens=[1]"],
        r"max_tokens",
    ),
    Case(
        "train",
        "negative max_updates",
        lambda e: ["train", e.config(train={"max_updates": -1})],
        r"max_updates",
    ),
    Case(
        "train",
        "zero lr",
        lambda e: ["train", e.config(optim={"lr": 0.0})],
        r"lr",
    ),
    *[
        Case("train", kind, lambda e, sections=sections: ["train", e.config(**sections)], pattern)
        for kind, sections, pattern in [
            ("infinite lr", {"optim": {"lr": math.inf}}, r"lr = inf.*finite number"),
            ("NaN in betas", {"optim": {"betas": [0.9, math.nan]}}, r"betas = .*nan.*finite"),
            ("negative eps", {"optim": {"eps": -1e-8}}, r"optim\.eps must be > 0"),
            ("negative warmup_init_lr", {"optim": {"warmup_init_lr": -1.0}}, r"warmup_init_lr"),
            ("negative seed", {"seed": -1}, r"seed.*must (lie|be) in \[0, 4294967295\]"),
            ("seed beyond 2**32", {"seed": 2**32}, r"seed.*must (lie|be) in \[0, 4294967295\]"),
            ("an int beyond 64 bits", {"model": {"ffn_dim": 2**70}}, r"ffn_dim = \d+ .*64 bits"),
            (
                "more encoder layers than any model has",
                {"model": {"encoder_layers": 2**40}},
                r"encoder_layers must be at most 10000, got 1099511627776",
            ),
            (
                "weights beyond the machine's memory",
                {"model": {"d_model": 2**16, "num_heads": 1, "ffn_dim": 2**16}},
                r"out of memory \(\d+\.\d GiB requested for the model's [\d,]+ fp32 weights; "
                r"this machine has \d+\.\d GiB\): ask for less",
            ),
            (
                "d_model of 2**40 times the vocabulary",
                {"model": {"d_model": 2**40, "num_heads": 1}},
                r"out of memory \(\d+\.\d GiB requested for the model's",
            ),
            (
                "more threads than torch's pool takes",
                {"train": {"threads": 10**6}},
                r"train\.threads must lie in \[0, 1024\]",
            ),
            (
                "infinite generation temperature",
                {"generation": {"temperature": math.inf}},
                r"temperature = inf.*finite",
            ),
        ]
    ],
    Case(
        "train",
        "vocab_size beyond what the training text supports",
        lambda e: ["train", e.config(data={"vocab_size": 5000})],
        r"vocab_size=5000 is more than these texts support: at most \d+",
        (),
    ),
    Case(
        "train",
        "a user-defined symbol given twice",
        lambda e: ["train", e.config(data={"user_defined_symbols": ["#A#", "#A#"]})],
        r"user_defined_symbols lists \['#A#'\] more than once",
        (),
    ),
    Case(
        "train",
        "an empty user-defined symbol",
        lambda e: ["train", e.config(data={"user_defined_symbols": [""]})],
        r"user_defined_symbols holds '': each must be a non-empty str",
        (),
    ),
    Case(
        "train",
        "empty --output-dir",
        lambda e: ["train", e.config(), "--output-dir", ""],
        r"output_dir must name the run directory",
    ),
    Case(
        "train",
        "empty output_dir by --set",
        lambda e: ["train", e.config(), "--set", "output_dir="],
        r"output_dir must name the run directory",
    ),
    Case(
        "train",
        "into a language-model run",
        lambda e: ["train", e.config(out="lmcopy")] if _lm_copy(e) else [],
        r"lmcopy holds a language-model run, and this config trains a translation one",
    ),
    Case(
        "train",
        "lm into a translation run",
        lambda e: ["train", e.lm_config(out="runcopy")] if _run_copy(e) else [],
        r"runcopy holds a translation run, and this config trains a language-model one",
    ),
    Case(
        "train",
        "lm negative seed",
        lambda e: ["train", e.lm_config(seed=-3)],
        r"seed.*must (lie|be) in \[0, 4294967295\]",
    ),
    Case(
        "train",
        "data_dir missing",
        lambda e: ["train", e.config(data={"data_dir": str(e.tmp / "nowhere")})],
        r"nowhere",
        (),
    ),
    Case(
        "train",
        "data_dir is a file",
        lambda e: ["train", e.config(data={"data_dir": e.text("afile")})],
        r"afile",
        (),
    ),
    Case(
        "train",
        "output dir of the user's",
        lambda e: ["train", e.config(out="theirs")] if e.dir("theirs", "precious.txt") else [],
        r"theirs.*not an odet run",
    ),
    Case(
        "train",
        "output dir with a config.yaml of the user's",
        lambda e: ["train", e.config(out="theirs")] if e.dir("theirs", "config.yaml") else [],
        r"theirs.*not an odet run",
    ),
    Case(
        "train",
        "output dir is a file",
        lambda e: ["train", e.config(out="afile")] if e.text("afile") else [],
        r"afile.*not a directory",
    ),
    Case(
        "train",
        "output dir under a file",
        lambda e: ["train", e.config(out="afile/run")] if e.text("afile") else [],
        r"afile/run cannot be created: .*afile is a file, not a directory",
    ),
    Case(
        "train",
        "--output-dir under a file",
        lambda e: (
            ["train", e.config(), "--output-dir", str(e.tmp / "afile" / "run")]
            if e.text("afile")
            else []
        ),
        r"cannot be created: .*afile is a file, not a directory",
    ),
    Case(
        "train",
        "a bad value named once, not under its section's name again",
        lambda e: ["train", e.config(), "--set", "train.max_updates=-1"],
        r"^odet: error: train\.max_updates must be >= 0",
    ),
    Case(
        "train",
        "a --set key given twice",
        lambda e: ["train", e.config(), "--set", "seed=1", "--set", " seed =2"],
        r"--set seed is given twice \('seed=1' and ' seed =2'\)",
    ),
    Case(
        "train",
        "--output-dir and --set output_dir",
        lambda e: ["train", e.config(), "--output-dir", "a", "--set", "output_dir=b"],
        r"--output-dir and --set output_dir= both set output_dir",
    ),
    Case(
        "experiment",
        "a --set key given twice",
        lambda e: [
            "experiment",
            e.experiment(),
            "--set",
            "optim.lr=0.1",
            "--set",
            "optim.lr=0.2",
        ],
        r"--set optim\.lr is given twice",
    ),
    Case(
        "config",
        "show: a --set key given twice",
        lambda e: ["config", "show", e.config(), "--set", "seed=1", "--set", "seed=2"],
        r"--set seed is given twice",
    ),
    Case(
        "train",
        "resume with another model",
        lambda e: ["train", e.config(out="runcopy", model={"ffn_dim": 48})] if _run_copy(e) else [],
        r"model\.ffn_dim",
    ),
    Case(
        "train",
        "every pair filtered",
        lambda e: ["train", e.config(data={"max_source_tokens": 1, "max_target_tokens": 1})],
        r"length filter|max_source_tokens",
        (),
    ),
    Case(
        "train",
        "lm more threads than torch's pool takes",
        lambda e: ["train", e.lm_config(train={"threads": 100_000})],
        r"train\.threads must lie in \[0, 1024\]",
    ),
    Case(
        "train",
        "lm an int beyond 64 bits",
        lambda e: ["train", e.lm_config(model={"block_size": 2**70})],
        r"block_size = \d+ .*64 bits",
    ),
    Case(
        "train",
        "lm more layers than any model has",
        lambda e: ["train", e.lm_config(model={"layers": 2**40})],
        r"layers must be at most 10000",
    ),
    Case(
        "train",
        "lm weights beyond the machine's memory",
        lambda e: ["train", e.lm_config(model={"d_model": 2**20, "num_heads": 1})],
        r"out of memory \(\d+\.\d GiB requested for the model's [\d,]+ fp32 weights",
    ),
    Case(
        "train",
        "lm unknown key",
        lambda e: ["train", e.lm_config(model={"layerz": 1})],
        r"layerz",
    ),
    Case(
        "train",
        "lm bad value",
        lambda e: ["train", e.lm_config(data={"valid_fraction": 1.5})],
        r"valid_fraction",
    ),
    Case(
        "train",
        "lm text shorter than a block",
        lambda e: ["train", e.lm_config(data={"text": e.file("tiny.txt", "ab\n")})],
        r"tiny\.txt|block",
        (),
    ),
    # ------------------------------------------------------------------ generate
    Case(
        "generate",
        "missing model",
        lambda e: ["generate", str(e.tmp / "none"), "-i", e.text("in")],
        r"none",
    ),
    Case(
        "generate",
        "not a model",
        lambda e: ["generate", e.dir("notmodel"), "-i", e.text("in")],
        r"notmodel.*not a model",
    ),
    Case(
        "generate",
        "model is a file",
        lambda e: ["generate", e.text("afile"), "-i", e.text("in")],
        r"afile",
    ),
    Case(
        "generate",
        "corrupt config.json",
        lambda e: ["generate", _corrupt_config(e), "-i", e.text("in")],
        r"config\.json.*corrupt",
    ),
    Case(
        "generate",
        "a future checkpoint format",
        lambda e: ["generate", _future_format(e), "-i", e.text("in")],
        r"format_version 7",
    ),
    Case(
        "generate",
        "truncated weights",
        lambda e: ["generate", e.truncated(), "-i", e.text("in")],
        r"model\.safetensors.*(truncated|corrupt)",
    ),
    Case(
        "generate",
        "truncated tokenizer",
        lambda e: ["generate", e.truncated("tokenizer.model"), "-i", e.text("in")],
        r"tokenizer",
    ),
    Case(
        "generate",
        "weights of another shape",
        lambda e: ["generate", e.shape_mismatch(), "-i", e.text("in")],
        r"another model|shape",
    ),
    Case(
        "generate",
        "corrupt run index",
        lambda e: ["generate", _corrupt_index(e), "-i", e.text("in")],
        r"holds no checkpoint that verifies",
    ),
    *[
        Case(
            "generate",
            f"checksums.json {kind}",
            lambda e, table=table: ["generate", _checksums(e, table), "-i", e.text("in")],
            r"checksums\.json is corrupt: not a table of file name: SHA-256",
        )
        for kind, table in [
            ("a list", [1, 2]),
            ("a name outside the checkpoint", {"../config.json": "00"}),
        ]
    ],
    Case(
        "generate",
        "train_config.yaml not a mapping",
        lambda e: ["generate", _metadata(e, "train_config.yaml", "- 1\n"), "-i", e.text("in")],
        r"train_config\.yaml is not a training config \(a list, not a mapping\)",
    ),
    Case(
        "generate",
        "output is the input",
        lambda e: ["generate", str(e.run), "-i", e.text("in"), "-o", str(e.tmp / "in")],
        r"refusing to overwrite",
    ),
    *[
        Case(
            "generate",
            f"output onto {where}",
            lambda e, inside=inside: [
                "generate",
                _run_copy(e),
                "-i",
                e.text("in"),
                "-o",
                str(inside(Path(e.tmp / "runcopy"))),
            ],
            pattern,
        )
        for where, inside, pattern in [
            (
                "the weights it reads",
                lambda run: checkpoint_of(run) / "model.safetensors",
                r"model\.safetensors would write into the model checkpoint .*step_\d+; refusing",
            ),
            (
                "the run's checkpoint index",
                lambda run: run / "checkpoints" / "index.json",
                r"would write into checkpoints/ of the training run .*runcopy; refusing",
            ),
            (
                "the run's metrics",
                lambda run: run / "metrics.jsonl",
                r"would overwrite metrics\.jsonl of the training run .*runcopy; refusing",
            ),
            (
                "the run's tokenizer",
                lambda run: run / "tokenizer" / "tokenizer.model",
                r"would write into tokenizer/ of the training run",
            ),
        ]
    ],
    Case(
        "generate",
        "output is a directory",
        lambda e: ["generate", str(e.run), "-i", e.text("in"), "-o", e.dir("outdir")],
        r"outdir.*is a directory",
    ),
    Case(
        "generate",
        "output under a regular file",
        lambda e: ["generate", str(e.run), "-i", e.text("in"), "-o", str(e.tmp / "in" / "o")],
        r"in/o.*(cannot be written|not a directory)",
    ),
    *[
        Case(
            "generate",
            f"{flag} {value}",
            lambda e, flag=flag, value=value, extra=extra: [
                "generate",
                str(e.run),
                "-i",
                e.text("in"),
                *extra,
                flag,
                value,
            ],
            pattern,
        )
        for flag, value, extra, pattern in [
            ("--beam", "0", [], r"beam.*>= 1"),
            ("--beam", "-3", [], r"beam.*>= 1"),
            ("--top-p", "1.5", ["--strategy", "sample"], r"top.p.*\(0, 1\]"),
            ("--top-p", "0", ["--strategy", "sample"], r"top.p.*\(0, 1\]"),
            ("--temperature", "0", ["--strategy", "sample"], r"temperature.*> 0"),
            ("--temperature", "-1", ["--strategy", "sample"], r"temperature.*> 0"),
            ("--top-k", "-1", ["--strategy", "sample"], r"top.k.*>= 0"),
            ("--batch-tokens", "0", [], r"batch.tokens.*>= 16"),
            ("--max-len-a", "-1", [], r"max.len"),
            ("--max-len-b", "0", ["--max-len-a", "0"], r"max.len"),
            ("--min-len", "20", ["--max-len-a", "0", "--max-len-b", "5"], r"min.len"),
            (
                "--min-len",
                "60",
                ["--max-len-a", "1", "--max-len-b", "2"],
                r"min_len 60 exceeds the output length limit \d+ of input line \d",
            ),
            ("--min-len", "-1", [], r"min.len.*>= 0"),
            ("--no-repeat-ngram-size", "-2", [], r"no.repeat.ngram"),
            ("--seed", "-1", ["--strategy", "sample"], r"seed.*must (lie|be) in \[0, 4294967295\]"),
            (
                "--seed",
                str(2**64),
                ["--strategy", "sample"],
                r"seed.*must (lie|be) in \[0, 4294967295\]",
            ),
            ("--beam", "two", [], r"--beam.*invalid int.*two"),
            ("--strategy", "nucleus", [], r"--strategy.*nucleus.*beam"),
            ("--lenpen", "nan", [], r"(len.?pen|length_penalty).*finite"),
            ("--precision", "int8", ["--gemm", "onednn"], r"gemm onednn.*precision int8"),
            ("--gemm", "onednn", ["--compile"], r"gemm onednn.*compile"),
            ("--gemm", "mkl", [], r"--gemm.*mkl.*onednn"),
        ]
    ],
    # ------------------------------------------------------------------ sample
    Case(
        "sample", "missing run", lambda e: ["sample", str(e.tmp / "none"), "--prompt", "a"], r"none"
    ),
    Case(
        "sample",
        "not a run",
        lambda e: ["sample", e.dir("notrun"), "--prompt", "a"],
        r"notrun.*not a model",
    ),
    Case(
        "sample",
        "translation run, not a language model",
        lambda e: ["sample", str(e.run), "--prompt", "a"],
        r"not a language-model",
    ),
    Case(
        "sample",
        "truncated weights",
        lambda e: ["sample", _lm_truncated(e), "--prompt", "a"],
        r"model\.safetensors.*(truncated|corrupt)",
    ),
    *[
        Case(
            "sample",
            f"{flag} {value}",
            lambda e, flag=flag, value=value: ["sample", str(e.lm), "--prompt", "to", flag, value],
            pattern,
        )
        for flag, value, pattern in [
            ("--temperature", "0", r"temperature.*> 0"),
            ("--top-p", "1.5", r"top.p.*\(0, 1\]"),
            ("--top-p", "0", r"top.p.*\(0, 1\]"),
            ("--top-k", "0", r"top.k.*>= 1"),
            ("--max-new-tokens", "-1", r"max.new.tokens.*>= 0"),
            # more than any address space holds: an allocation failure is one line, not a bug
            ("--max-new-tokens", str(2**58), r"out of memory \(\d+\.\d GiB requested\)"),
            ("--max-new-tokens", str(2**61), r"out of memory \(a tensor larger than any"),
            ("--seed", "-1", r"seed.*must (lie|be) in \[0, 4294967295\]"),
            ("--seed", str(2**70), r"seed.*must (lie|be) in \[0, 4294967295\]"),
            ("--num-samples", "0", r"num.samples.*>= 1"),
            ("--num-samples", str(2**70), r"--num-samples: must be >= 1 and of at most 64 bits"),
        ]
    ],
    Case(
        "sample",
        "--max-new-tokens 2**63 - 1 (overflowed the sample's length: internal error)",
        lambda e: ["sample", str(e.lm), "--prompt", "to", "--max-new-tokens", str(2**63 - 1)],
        r"max_new_tokens=9223372036854775807 with a prompt of 2 tokens exceeds",
    ),
    Case(
        "sample",
        "prompt outside the vocabulary",
        lambda e: ["sample", str(e.lm), "--prompt", "☃ZQ", "--max-new-tokens", "2"],
        r"outside the model's 30-character vocabulary: 'Q', 'Z', '☃'",
    ),
    # ------------------------------------------------------------------ evaluate
    Case(
        "evaluate",
        "misaligned",
        lambda e: ["evaluate", "--hyp", e.text("h", 3), "--ref", e.text("r", 2)],
        r"line counts differ.*\bh\b.*3.*\br\b.*2",
    ),
    Case(
        "evaluate",
        "misaligned second reference",
        lambda e: ["evaluate", "--hyp", e.text("h"), "--ref", e.text("r"), e.text("r2", 5)],
        r"r2.*5",
    ),
    *[
        Case(
            "evaluate",
            f"{metric}{' '.join(extra)} over blank hypotheses and references",
            lambda e, metric=metric, extra=extra: [
                "evaluate",
                "--metric",
                metric,
                "--hyp",
                e.bad("blank", "h"),
                "--ref",
                e.bad("blank", "r"),
                *(["--src", e.bad("blank", "s")] if metric == "gleu" else []),
                *extra,
            ],
            r"blank|nothing to score",
        )
        for metric, extra in [
            ("bleu", []),
            ("bleu", ["--tokenized"]),
            ("chrf", []),
            ("rouge", []),
            ("gleu", []),
        ]
    ],
    Case(
        "evaluate",
        "baseline count",
        lambda e: [
            "evaluate",
            "--hyp",
            e.text("h"),
            e.text("h2"),
            "--baseline",
            e.text("b"),
            "--ref",
            e.text("r"),
        ],
        r"one file per --hyp file",
    ),
    Case(
        "evaluate",
        "gleu without --src",
        lambda e: ["evaluate", "--metric", "gleu", "--hyp", e.text("h"), "--ref", e.text("r")],
        r"needs --src",
    ),
    Case(
        "evaluate",
        "m2 with two references",
        lambda e: [
            "evaluate",
            "--metric",
            "m2",
            "--hyp",
            e.text("h", 2),
            "--ref",
            e.m2(),
            e.m2("g2.m2"),
        ],
        r"exactly one reference",
    ),
    Case(
        "evaluate",
        "m2 misaligned",
        lambda e: ["evaluate", "--metric", "m2", "--hyp", e.text("h", 5), "--ref", e.m2()],
        r"line counts differ",
    ),
    Case(
        "evaluate",
        "m2 reference is not M2",
        lambda e: ["evaluate", "--metric", "m2", "--hyp", e.text("h", 2), "--ref", e.text("r")],
        r"\br:1: expected an 'S '",
    ),
    Case(
        "evaluate",
        "unknown metric",
        lambda e: ["evaluate", "--metric", "ter", "--hyp", e.text("h"), "--ref", e.text("r")],
        r"--metric.*ter.*bleu",
    ),
    # ------------------------------------------------------------------ average
    *[
        Case(
            command,
            f"--out inside the run's {where}",
            lambda e, argv=argv, inside=inside: [*argv(e), "--out", inside(Path(_run_copy(e)))],
            rf"--out .* would write into {owner} .*; refusing",
            ("runcopy",),
        )
        for command, argv in [
            ("average", lambda e: ["average", str(e.run), "--last", "1"]),
            ("analyze", lambda e: ["analyze", str(e.run)]),
            ("prepare", lambda e: ["prepare", "gec", e.text("c", 5)]),
            ("demo", lambda e: ["demo", "--epochs", "1"]),
        ]
        for where, inside, owner in [
            (
                "checkpoints/",
                lambda run: str(run / "checkpoints" / "step_0000099"),
                "checkpoints/ of the training run",
            ),
            (
                "best checkpoint",
                lambda run: str(_best_checkpoint(run) / "out"),
                "the model checkpoint",
            ),
            (
                "tokenizer/",
                lambda run: str(run / "tokenizer" / "out"),
                "tokenizer/ of the training run",
            ),
        ]
    ],
    Case(
        "average",
        "into a kept checkpoint",
        lambda e: [
            "average",
            _run_copy(e),
            "--last",
            "1",
            "--out",
            str(checkpoint_of(e.tmp / "runcopy").parent / "step_0000002"),
        ],
        r"would write into checkpoints/ of the training run",
        ("runcopy",),
    ),
    Case(
        "average",
        "into the run",
        lambda e: ["average", _run_copy(e), "--last", "1", "--out", str(e.tmp / "runcopy")],
        r"exists and is not empty",
        ("runcopy",),
    ),
    Case(
        "average",
        "into a file",
        lambda e: ["average", str(e.run), "--last", "1", "--out", e.text("afile")],
        r"afile.*not a directory",
    ),
    Case(
        "average",
        "under a file",
        lambda e: ["average", str(e.run), "--last", "1", "--out", str(Path(e.text("afile")) / "x")],
        r"afile",
    ),
    Case(
        "average",
        "into a user's directory",
        lambda e: ["average", str(e.run), "--last", "1", "--out", e.dir("theirs", "keep.txt")],
        r"theirs.*exists and is not empty",
    ),
    Case(
        "average",
        "too few checkpoints",
        lambda e: ["average", str(e.run), "--last", "9", "--out", str(e.tmp / "avg")],
        r"fewer than --last 9",
    ),
    Case(
        "average",
        "--last 0",
        lambda e: ["average", str(e.run), "--last", "0", "--out", str(e.tmp / "avg")],
        r"--last.*>= 1",
    ),
    Case(
        "average",
        "--last -2",
        lambda e: ["average", str(e.run), "--last", "-2", "--out", str(e.tmp / "avg")],
        r"--last.*>= 1",
    ),
    Case(
        "average",
        "not a run",
        lambda e: ["average", e.dir("notrun"), "--out", str(e.tmp / "avg")],
        r"notrun.*not a training run",
    ),
    Case(
        "average",
        "missing run",
        lambda e: ["average", str(e.tmp / "none"), "--out", str(e.tmp / "avg")],
        r"none",
    ),
    Case(
        "average",
        "run is a file",
        lambda e: ["average", e.text("afile"), "--out", str(e.tmp / "avg")],
        r"afile",
    ),
    Case(
        "average",
        "truncated checkpoint",
        lambda e: ["average", _truncated_in_run(e), "--last", "2", "--out", str(e.tmp / "avg")],
        r"model\.safetensors.*(truncated|corrupt)",
        ("runcopy",),
    ),
    Case(
        "average",
        "checksums.json a list",
        lambda e: ["average", _checksums(e), "--last", "1", "--out", str(e.tmp / "avg")],
        r"checksums\.json is corrupt: not a table",
        ("runcopy",),
    ),
    Case(
        "average",
        "a language-model run",
        lambda e: ["average", str(e.lm), "--last", "1", "--out", str(e.tmp / "avg")],
        r"holds a 'causal_lm' model, not 'seq2seq'",
    ),
    # ------------------------------------------------------------------ data
    Case(
        "data",
        "missing local copy",
        lambda e: [
            "data",
            "jfleg",
            "--out",
            str(e.tmp / "d"),
            "--data-dir",
            str(e.tmp / "nowhere"),
            "--no-progress",
        ],
        r"nowhere",
    ),
    Case(
        "data",
        "local copy is a file",
        lambda e: [
            "data",
            "jfleg",
            "--out",
            str(e.tmp / "d"),
            "--data-dir",
            e.text("afile"),
            "--no-progress",
        ],
        r"afile",
    ),
    Case(
        "data",
        "local copy with wrong files",
        lambda e: [
            "data",
            "multi30k",
            "--out",
            str(e.tmp / "d"),
            "--data-dir",
            _fake_multi30k(e),
            "--no-progress",
        ],
        r"fake|checksum",
    ),
    Case(
        "data",
        "--out is a file",
        lambda e: [
            "data",
            "jfleg",
            "--out",
            e.text("afile"),
            "--data-dir",
            _jfleg(e),
            "--no-progress",
        ],
        r"afile",
    ),
    Case(
        "data",
        "--out holds a user's file of a dataset file's name",
        lambda e: [
            "data",
            "jfleg",
            "--out",
            e.dir("mine", "dev.src", "notes.txt"),
            "--data-dir",
            _jfleg(e),
            "--no-progress",
        ],
        r"mine/dev\.src exists and is not jfleg's dev\.src",
    ),
    Case(
        "data",
        "missing local copy, with the progress bar on",
        lambda e: ["data", "jfleg", "--out", str(e.tmp / "d"), "--data-dir", str(e.tmp / "no")],
        r"--data-dir .*no is not a directory",
    ),
    Case(
        "data",
        "unknown dataset",
        lambda e: ["data", "wmt99"],
        r"wmt99.*multi30k",
    ),
    # ------------------------------------------------------------------ demo
    Case(
        "demo",
        "--epochs 0",
        lambda e: ["demo", "--out", str(e.tmp / "demo"), "--epochs", "0"],
        r"--epochs.*>= 1",
    ),
    Case(
        "demo",
        "--epochs -1",
        lambda e: ["demo", "--out", str(e.tmp / "demo"), "--epochs", "-1"],
        r"--epochs.*>= 1",
    ),
    Case(
        "demo",
        "--out is a user's directory",
        lambda e: ["demo", "--out", e.dir("theirs", "results.md"), "--no-progress"],
        r"theirs",
    ),
    Case(
        "demo",
        "--out is a file",
        lambda e: ["demo", "--out", e.text("afile"), "--no-progress"],
        r"afile",
    ),
    Case(
        "demo",
        "--out under a file",
        lambda e: ["demo", "--out", str(Path(e.text("afile")) / "demo"), "--no-progress"],
        r"afile",
    ),
    Case("demo", "unknown task", lambda e: ["demo", "--task", "dance"], r"--task.*dance.*copy"),
    Case(
        "demo",
        "--out holds the demo of another task (its finished runs were reported as this one)",
        lambda e: (
            [
                "demo",
                "--task",
                "translate",
                "--out",
                str(Path(e.file("d/.odet-output", '{"command": "demo"}')).parent),
                "--no-progress",
            ]
            if e.file("d/data/TASK", "copy\n")
            else []
        ),
        r"holds the demo of task 'copy'.*as task 'translate'",
    ),
    Case(
        "parity",
        "--out holds another command's output (both write results.md, config.yaml)",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            str(Path(e.file("x/.odet-output", '{"command": "experiment"}')).parent),
        ],
        r"holds the output of odet experiment, not of odet parity",
    ),
    # ------------------------------------------------------------------ experiment
    Case(
        "experiment",
        "unknown key",
        lambda e: ["experiment", e.experiment(variantz={}), "--no-progress"],
        r"variantz.*did you mean 'variants'",
    ),
    Case(
        "experiment",
        "no variants",
        lambda e: ["experiment", e.experiment(variants={}), "--no-progress"],
        r"variants",
    ),
    Case(
        "experiment",
        "variant with a bad key",
        lambda e: [
            "experiment",
            e.experiment(variants={"a": {}, "b": {"model.d_modle": 3}}),
            "--no-progress",
        ],
        r"d_modle",
    ),
    Case(
        "experiment",
        "variant with a bad value",
        lambda e: [
            "experiment",
            e.experiment(variants={"a": {}, "b": {"model.d_model": 30}}),
            "--no-progress",
        ],
        r"divisible",
    ),
    Case(
        "experiment",
        "wrong type",
        lambda e: ["experiment", e.experiment(seeds="one"), "--no-progress"],
        r"seeds",
    ),
    Case(
        "experiment",
        "a seed twice",
        lambda e: ["experiment", e.experiment(seeds=[1, 1]), "--no-progress"],
        r"seeds must be distinct, got \[1, 1\]",
    ),
    Case(
        "experiment",
        "negative seed",
        lambda e: ["experiment", e.experiment(seeds=[1, -2]), "--no-progress"],
        r"seed.*must (lie|be) in \[0, 4294967295\]",
    ),
    *[
        Case(
            "experiment",
            f"variant named {name!r}",
            lambda e, name=name: [
                "experiment",
                e.experiment(variants={"euler": {}, name: {}}),
                "--no-progress",
            ],
            r"cannot name a directory",
        )
        for name in ("../escaped", "a/b", "..", "")
    ],
    *[
        Case(
            "experiment",
            f"{where} sets {key}",
            lambda e, keys=keys, argv=argv: [
                "experiment",
                e.experiment(**keys),
                *argv,
                "--no-progress",
            ],
            rf"{re.escape(where)} sets '{key}', which the experiment sets for every run",
        )
        for where, key, keys, argv in [
            ("experiment.variants.euler", "seed", {"variants": {"euler": {"seed": 5}}}, []),
            ("experiment.variants.euler", " seed", {"variants": {"euler": {" seed": 5}}}, []),
            (
                "experiment.variants.euler",
                "output_dir",
                {"variants": {"euler": {"output_dir": "elsewhere"}}},
                [],
            ),
            ("experiment.overrides (--set)", "seed", {"overrides": ["seed=4"]}, []),
            ("experiment.overrides (--set)", "output_dir", {}, ["--set", "output_dir=x"]),
        ]
    ],
    Case(
        "experiment",
        "negative average_last",
        lambda e: ["experiment", e.experiment(average_last=-1), "--no-progress"],
        r"average_last.*>= 0",
    ),
    Case(
        "experiment",
        "average_last above keep_last",
        lambda e: ["experiment", e.experiment(average_last=99), "--no-progress"],
        r"average_last=99 averages more checkpoints than variant .* keeps \(train\.keep_last",
    ),
    Case(
        "experiment",
        "missing base",
        lambda e: ["experiment", e.experiment(base=str(e.tmp / "nobase.yaml")), "--no-progress"],
        r"nobase",
    ),
    Case(
        "experiment",
        "duplicate yaml key",
        lambda e: ["experiment", _yaml(e, "base: a.yaml\nbase: b.yaml\n"), "--no-progress"],
        r"duplicate key 'base'",
    ),
    Case(
        "experiment",
        "unknown --variants",
        lambda e: ["experiment", e.experiment(), "--variants", "rk9", "--no-progress"],
        r"rk9.*euler",
    ),
    Case(
        "experiment",
        "unknown --seeds",
        lambda e: ["experiment", e.experiment(), "--seeds", "7", "--no-progress"],
        r"7.*\[1\]",
    ),
    Case(
        "experiment",
        "missing test data",
        lambda e: [
            "experiment",
            e.experiment(overrides=[f"data.test=[{e.tmp / 'no.src'}, x]"]),
            "--no-progress",
        ],
        r"no\.src",
        ("exp",),
    ),
    Case(
        "experiment",
        "output_dir of the user's",
        lambda e: [
            "experiment",
            e.experiment(output_dir=e.dir("theirs", "results.md")),
            "--no-progress",
        ],
        r"theirs",
    ),
    Case(
        "experiment",
        "output_dir under a file",
        lambda e: [
            "experiment",
            e.experiment(output_dir=str(Path(e.text("afile")) / "x")),
            "--no-progress",
        ],
        r"afile",
    ),
    # ------------------------------------------------------------------ parity
    Case(
        "parity",
        "unknown key",
        lambda e: ["parity", e.parity(trainin={}), "--out", str(e.tmp / "par"), "--no-progress"],
        r"trainin",
    ),
    Case(
        "parity",
        "wrong type",
        lambda e: ["parity", e.parity(seeds="x"), "--out", str(e.tmp / "par"), "--no-progress"],
        r"seeds",
    ),
    Case(
        "parity",
        "variant with a bad model key",
        lambda e: [
            "parity",
            e.parity(
                variants=[
                    {"name": "a", "model": {}},
                    {"name": "b", "model": {"encoder_methd": "rk4"}},
                ]
            ),
            "--out",
            str(e.tmp / "par"),
            "--no-progress",
        ],
        r"encoder_methd",
    ),
    Case(
        "parity",
        "variant with a bad model value",
        lambda e: [
            "parity",
            e.parity(
                variants=[
                    {"name": "a", "model": {}},
                    {"name": "b", "model": {"encoder_method": "rk9"}},
                ]
            ),
            "--out",
            str(e.tmp / "par"),
            "--no-progress",
        ],
        r"rk9",
    ),
    Case(
        "parity",
        "variant beyond the machine's memory",
        lambda e: [
            "parity",
            e.parity(
                variants=[
                    {"name": "a", "model": {}},
                    {"name": "b", "model": {"encoder_layers": 9000, "d_model": 4096}},
                ]
            ),
            "--out",
            str(e.tmp / "par"),
            "--no-progress",
        ],
        r"out of memory \(\d+\.\d GiB requested for the model's [\d,]+ fp32 weights",
    ),
    Case(
        "parity",
        "variant named with a path",
        lambda e: [
            "parity",
            e.parity(variants=[{"name": "../escaped", "model": {}}]),
            "--out",
            str(e.tmp / "par"),
            "--no-progress",
        ],
        r"'\.\./escaped' cannot name a directory",
    ),
    Case(
        "parity",
        "negative seed",
        lambda e: ["parity", e.parity(seeds=[-1]), "--out", str(e.tmp / "par"), "--no-progress"],
        r"seed.*must (lie|be) in \[0, 4294967295\]",
    ),
    Case(
        "parity",
        "unknown --variants",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            str(e.tmp / "par"),
            "--variants",
            "zz",
            "--no-progress",
        ],
        r"zz",
    ),
    Case(
        "parity",
        "unknown --seeds",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            str(e.tmp / "par"),
            "--seeds",
            "9",
            "--no-progress",
        ],
        r"seed 9",
    ),
    Case(
        "parity",
        "--out of the user's",
        lambda e: ["parity", e.parity(), "--out", e.dir("theirs", "results.md"), "--no-progress"],
        r"theirs",
    ),
    Case(
        "parity",
        "--out is a file",
        lambda e: ["parity", e.parity(), "--out", e.text("afile"), "--no-progress"],
        r"afile",
    ),
    Case(
        "parity",
        "--out under a file",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            str(Path(e.text("afile")) / "p"),
            "--no-progress",
        ],
        r"afile",
    ),
    Case(
        "parity",
        "duplicate yaml key",
        lambda e: ["parity", _yaml(e, "seed: 0\nseed: 1\n"), "--out", str(e.tmp / "par")],
        r"duplicate key 'seed' \(first given at line 1\)",
    ),
    # ------------------------------------------------------------------ analyze
    Case(
        "analyze",
        "missing run",
        lambda e: ["analyze", str(e.tmp / "none"), "--out", str(e.tmp / "an")],
        r"none",
    ),
    Case(
        "analyze",
        "not a run",
        lambda e: ["analyze", e.dir("notrun"), "--out", str(e.tmp / "an")],
        r"notrun",
    ),
    Case(
        "analyze",
        "second run missing (nothing written for the first)",
        lambda e: ["analyze", str(e.run), str(e.tmp / "none"), "--out", str(e.tmp / "an")],
        r"none",
    ),
    Case(
        "analyze",
        "a language-model run",
        lambda e: ["analyze", str(e.lm), "--out", str(e.tmp / "an")],
        r"holds a 'causal_lm' model, not 'seq2seq'",
    ),
    Case(
        "analyze",
        "--out of the user's",
        lambda e: ["analyze", str(e.run), "--out", e.dir("theirs", "analysis.json")],
        r"theirs",
    ),
    Case(
        "analyze",
        "--out is a file",
        lambda e: ["analyze", str(e.run), "--out", e.text("afile")],
        r"afile",
    ),
    Case(
        "analyze",
        "--out under a file",
        lambda e: ["analyze", str(e.run), "--out", str(Path(e.text("afile")) / "x")],
        r"afile",
    ),
    Case(
        "analyze",
        "one run twice (was one entry of analysis.json)",
        lambda e: ["analyze", str(e.run), f"{e.run}/", "--out", str(e.tmp / "an")],
        r"are the same checkpoint .*; give it once",
    ),
    Case(
        "analyze",
        "a coefficients record of another layout in metrics.jsonl",
        lambda e: ["analyze", _foreign_coefficients(e), "--out", str(e.tmp / "an")],
        r"metrics\.jsonl: the coefficients record of step 5 does not fit the model",
    ),
    Case(
        "analyze",
        "--sentences 0",
        lambda e: ["analyze", str(e.run), "--out", str(e.tmp / "an"), "--sentences", "0"],
        r"--sentences.*>= 1",
    ),
    Case(
        "analyze",
        "truncated checkpoint",
        lambda e: ["analyze", _truncated_in_run(e, "best"), "--out", str(e.tmp / "an")],
        r"model\.safetensors.*(truncated|corrupt)",
        ("runcopy",),
    ),
    Case(
        "analyze",
        "--depth-against: the run's encoder is not continuous",
        lambda e: _depth(e, str(e.run), str(e.run), "--split", "valid"),
        r"'euler' encoder, whose depth is the same for every sentence",
    ),
    Case(
        "analyze",
        "--depth-against: missing run",
        lambda e: _depth(e, str(e.tmp / "none"), str(e.run)),
        r"none",
    ),
    Case(
        "analyze",
        "--depth-against: missing reference",
        lambda e: _depth(e, _continuous_run(e), str(e.tmp / "none"), "--split", "valid"),
        r"none",
    ),
    Case(
        "analyze",
        "--depth-against: a language-model reference",
        lambda e: _depth(e, _continuous_run(e), str(e.lm), "--split", "valid"),
        r"holds a 'causal_lm' model, not 'seq2seq'",
    ),
    Case(
        "analyze",
        "--depth-against: the split has no files",
        lambda e: _depth(e, _continuous_run(e), str(e.run)),
        r"names no data\.test files; try --split valid",
    ),
    Case(
        "analyze",
        "--depth-against: the reference reads other files",
        lambda e: _depth(e, _continuous_run(e), _other_valid_run(e), "--split", "valid"),
        r"reads data\.valid from .*train\.src.*other sentences",
    ),
    Case(
        "analyze",
        "--depth-against --split train",
        lambda e: _depth(e, str(e.run), str(e.run), "--split", "train"),
        r"--split: invalid choice: 'train'",
    ),
    Case(
        "analyze",
        "--depth-against --limit 0",
        lambda e: _depth(e, str(e.run), str(e.run), "--limit", "0"),
        r"--limit.*>= 1",
    ),
    Case(
        "analyze",
        "--depth-against --batch-tokens 0",
        lambda e: _depth(e, str(e.run), str(e.run), "--batch-tokens", "0"),
        r"--batch-tokens.*>= 1",
    ),
    Case(
        "analyze",
        "--depth-against with two runs",
        lambda e: [
            "analyze",
            str(e.run),
            str(e.run),
            "--depth-against",
            str(e.run),
            "--out",
            str(e.tmp / "depth"),
        ],
        r"--depth-against takes one run \(the continuous-encoder one\), got 2",
    ),
    Case(
        "analyze",
        "--depth-against with --sentences",
        lambda e: _depth(e, str(e.run), str(e.run), "--sentences", "8"),
        r"--sentences is for the probe report; with --depth-against use --limit",
    ),
    Case(
        "analyze",
        "--split without --depth-against",
        lambda e: ["analyze", str(e.run), "--out", str(e.tmp / "an"), "--split", "valid"],
        r"--split is an option of --depth-against",
    ),
    Case(
        "analyze",
        "--no-progress without --depth-against (the probe report has no bar)",
        lambda e: ["analyze", str(e.run), "--out", str(e.tmp / "an"), "--no-progress"],
        r"--no-progress is an option of --depth-against",
    ),
    Case(
        "analyze",
        "--depth-against --out of the user's",
        lambda e: [*_depth(e, str(e.run), str(e.run))[:4], "--out", e.dir("theirs", "depth.json")],
        r"theirs",
    ),
    # ------------------------------------------------------------------ prepare
    Case(
        "prepare",
        "gec --copies 0",
        lambda e: ["prepare", "gec", e.text("c"), "--out", str(e.tmp / "gec"), "--copies", "0"],
        r"--copies.*>= 1",
    ),
    Case(
        "prepare",
        "gec --join 0",
        lambda e: ["prepare", "gec", e.text("c"), "--out", str(e.tmp / "gec"), "--join", "0"],
        r"--join.*>= 1",
    ),
    Case(
        "prepare",
        "gec --substitute 1.5",
        lambda e: [
            "prepare",
            "gec",
            e.text("c"),
            "--out",
            str(e.tmp / "gec"),
            "--substitute",
            "1.5",
        ],
        r"--substitute.*\[0, 1\]",
    ),
    Case(
        "prepare",
        "gec --vocabulary 0",
        lambda e: [
            "prepare",
            "gec",
            e.text("c"),
            "--out",
            str(e.tmp / "gec"),
            "--substitute",
            "0.5",
            "--vocabulary",
            "0",
        ],
        r"--vocabulary.*>= 1",
    ),
    Case(
        "prepare",
        "gec --out of the user's with a report.json (was taken for odet's and overwritten)",
        lambda e: [
            "prepare",
            "gec",
            e.text("c", 5),
            "--out",
            e.dir("theirs", "train.src", "report.json"),
        ],
        r"theirs exists, is not empty and was not written by odet",
    ),
    *[
        Case(
            "parity",
            f"test sequences longer than the model's positions ({why})",
            lambda e, keys=keys: ["parity", e.parity(**keys), "--out", str(e.tmp / "pp")],
            r"model\.max_positions=\d+ is below task\.test_max_length=\d+",
        )
        for why, keys in [
            (
                "failed after training",
                {"model": {"d_model": 16, "num_heads": 2, "ffn_dim": 16, "max_positions": 5}},
            ),
            (
                "2**40: hung drawing the test set",
                {
                    "task": {
                        "train_size": 16,
                        "val_size": 8,
                        "test_per_length": 2,
                        "max_length": 4,
                        "test_max_length": 2**40,
                    }
                },
            ),
        ]
    ],
    Case(
        "parity",
        "--out of the user's with a runs/ (was taken for odet's and overwritten)",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            e.dir("proj/runs", "notes.txt") and e.dir("proj", "results.md"),
        ],
        r"proj exists, is not empty and was not written by odet",
    ),
    Case(
        "prepare",
        "gec --out of the user's",
        lambda e: ["prepare", "gec", e.text("c"), "--out", e.dir("theirs", "train.src")],
        r"theirs",
    ),
    Case(
        "prepare",
        "gec --out is a file",
        lambda e: ["prepare", "gec", e.text("c"), "--out", e.text("afile")],
        r"afile",
    ),
    Case(
        "prepare",
        "gec no sentence long enough",
        lambda e: ["prepare", "gec", e.file("short.txt", "a b\n"), "--out", str(e.tmp / "gec")],
        r"short\.txt",
    ),
    Case(
        "prepare",
        "lead --n 0",
        lambda e: ["prepare", "lead", e.jsonl(), "--out", str(e.tmp / "lead.txt"), "--n", "0"],
        r"--n.*>= 1",
    ),
    Case(
        "prepare",
        "lead --out is the input",
        lambda e: ["prepare", "lead", e.jsonl(), "--out", str(e.tmp / "d.jsonl")],
        r"d\.jsonl.*input",
    ),
    Case(
        "prepare",
        "lead --out into a checkpoint",
        lambda e: [
            "prepare",
            "lead",
            e.jsonl(),
            "--out",
            str(checkpoint_of(Path(_run_copy(e))) / "config.json"),
        ],
        r"config\.json would write into the model checkpoint",
    ),
    Case(
        "prepare",
        "lead --out is a directory",
        lambda e: ["prepare", "lead", e.jsonl(), "--out", e.dir("outdir")],
        r"outdir.*is a directory",
    ),
    Case(
        "prepare",
        "lead --out under a file",
        lambda e: ["prepare", "lead", e.jsonl(), "--out", str(Path(e.text("afile")) / "x")],
        r"afile",
    ),
    Case(
        "prepare",
        "lead two inputs",
        lambda e: ["prepare", "lead", e.jsonl(), e.jsonl("e.jsonl"), "--out", str(e.tmp / "l")],
        r"one input",
    ),
    Case(
        "prepare",
        "m2 unknown annotator",
        lambda e: ["prepare", "m2", e.m2(), "--out", str(e.tmp / "m2/x"), "--annotator", "4"],
        r"annotator 4",
    ),
    Case(
        "prepare",
        "m2 overlapping edits",
        lambda e: [
            "prepare",
            "m2",
            e.file(
                "ov.m2",
                "S a b c\nA 0 2|||R|||x|||REQUIRED|||-NONE-|||0\n"
                "A 1 3|||R|||y|||REQUIRED|||-NONE-|||0\n",
            ),
            "--out",
            str(e.tmp / "m2/x"),
        ],
        r"ov\.m2, sentence 1 .*overlaps",
    ),
    Case(
        "prepare",
        "m2 --out is the input",
        lambda e: ["prepare", "m2", e.m2("x.src"), "--out", str(e.tmp / "x")],
        r"x\.src.*input",
    ),
    Case(
        "prepare",
        "m2 --out under a file",
        lambda e: ["prepare", "m2", e.m2(), "--out", str(Path(e.text("afile")) / "x")],
        r"afile",
    ),
    Case(
        "prepare",
        "dialogsum --out is the input",
        lambda e: ["prepare", "dialogsum", e.jsonl("x.dialogue"), "--out", str(e.tmp / "x")],
        r"x\.dialogue.*input",
    ),
    Case(
        "prepare",
        "dialogsum JSON nested beyond Python's recursion limit",
        lambda e: [
            "prepare",
            "dialogsum",
            e.file("deep.jsonl", "[" * 100_000 + "\n"),
            "--out",
            str(e.tmp / "x"),
        ],
        r"deep\.jsonl.*(malformed|no usable)",
    ),
    Case(
        "train",
        "jsonl data nested beyond Python's recursion limit",
        lambda e: [
            "train",
            e.config(
                data={
                    "format": "jsonl",
                    "train": [e.file("deep.jsonl", "[" * 100_000 + "\n")],
                    "valid": [],
                    "test": [],
                }
            ),
        ],
        r"deep\.jsonl.*malformed",
        (),
    ),
    Case(
        "prepare",
        "dialogsum no usable record",
        lambda e: [
            "prepare",
            "dialogsum",
            e.file("d.jsonl", '{"a": 1}\n[2]\nnot json\n'),
            "--out",
            str(e.tmp / "x"),
        ],
        r"d\.jsonl.*(missing_field|no usable)",
    ),
    # ------------------------------------------------------------------ config
    Case(
        "config", "show without a config", lambda e: ["config", "show"], r"needs a training config"
    ),
    Case(
        "config",
        "show unknown key",
        lambda e: ["config", "show", e.config(model={"d_modle": 32})],
        r"did you mean 'd_model'",
    ),
    Case(
        "config",
        "show bad --set",
        lambda e: ["config", "show", e.config(), "--set", "model.encoder_method=rk9"],
        r"rk9",
    ),
    Case(
        "config",
        "docs --out is a directory",
        lambda e: ["config", "docs", "--out", e.dir("outdir")],
        r"outdir.*is a directory",
    ),
    Case(
        "config",
        "docs --out onto a run's config",
        lambda e: ["config", "docs", "--out", str(Path(_run_copy(e)) / "config.yaml")],
        r"would overwrite config\.yaml of the training run",
    ),
    Case(
        "config",
        "docs --out under a file",
        lambda e: ["config", "docs", "--out", str(Path(e.text("afile")) / "x.md")],
        r"afile",
    ),
    Case(
        "config",
        "docs --check of an out-of-date file",
        lambda e: ["config", "docs", "--out", e.text("ref.md"), "--check"],
        r"ref\.md.*out of date",
    ),
    Case(
        "config",
        "docs --out onto a file that is not a reference",
        lambda e: ["config", "docs", "--out", e.text("README.md")],
        r"README\.md exists and is not a configuration reference",
    ),
    Case(
        "config",
        "docs --check without --out",
        lambda e: ["config", "docs", "--check"],
        r"--check.*--out",
    ),
    # ------------------------------------------------------------------ a flag without effect
    *[
        Case(
            "generate",
            f"{' '.join(flags)} (no effect)",
            lambda e, flags=flags: ["generate", str(e.run), "-i", e.text("in"), *flags],
            pattern,
        )
        for flags, pattern in [
            (
                ["--strategy", "beam", "--top-p", "0.9"],
                r"--top-p applies to --strategy sample only; it has no effect with --strategy "
                r"beam$",
            ),
            (
                ["--strategy", "greedy", "--temperature", "0.5"],
                r"--temperature .*--strategy greedy",
            ),
            (["--strategy", "greedy", "--seed", "3"], r"--seed applies to --strategy sample"),
            (
                ["--top-k", "5"],
                r"--top-k applies to --strategy sample only; it has no effect with --strategy "
                r"beam \(the model's default; choose another with --strategy\)",
            ),
            (
                ["--strategy", "sample", "--beam", "4"],
                r"--beam applies to --strategy beam only; it has no effect with --strategy sample",
            ),
            (["--strategy", "greedy", "--lenpen", "0.6"], r"--lenpen applies to --strategy beam"),
            (
                ["--strategy", "sample", "--no-repeat-ngram-size", "3"],
                r"--no-repeat-ngram-size applies to --strategy beam",
            ),
        ]
    ],
    Case(
        "generate",
        "--checkpoint of a checkpoint (no effect)",
        lambda e: [
            "generate",
            str(checkpoint_of(e.run)),
            "-i",
            e.text("in"),
            "--checkpoint",
            "last",
        ],
        r"--checkpoint applies to a run directory only; .*step_\d+, which is itself a checkpoint",
    ),
    Case(
        "sample",
        "--which of a checkpoint (no effect)",
        lambda e: ["sample", str(checkpoint_of(e.lm)), "--prompt", "to", "--which", "best"],
        r"--which applies to a run directory only; .*which is itself a checkpoint",
    ),
    *[
        Case(
            "evaluate",
            f"{' '.join(flags)} (no effect)",
            lambda e, flags=flags: [
                "evaluate",
                "--hyp",
                e.text("h"),
                "--ref",
                e.text("r"),
                *[e.text(f) if f == "s" else f for f in flags],
            ],
            pattern,
        )
        for flags, pattern in [
            (
                ["--metric", "chrf", "--tokenized"],
                r"--tokenized applies to --metric bleu only; it has no effect with --metric chrf",
            ),
            (["--metric", "rouge", "--lowercase"], r"--lowercase applies to --metric bleu"),
            (
                ["--src", "s"],
                r"--src applies to --metric gleu only; it has no effect with --metric bleu",
            ),
            (["--metric", "chrf", "--src", "s"], r"--src applies to --metric gleu"),
            (
                ["--tokenized", "--lowercase"],
                r"--lowercase .*no effect with --tokenized, which lower-cases already",
            ),
        ]
    ],
    *[
        Case(
            "prepare",
            f"{task} {' '.join(flags)} (no effect)",
            lambda e, task=task, flags=flags: [
                "prepare",
                task,
                {"gec": e.text("c"), "m2": e.m2(), "dialogsum": e.jsonl(), "lead": e.jsonl()}[task],
                "--out",
                str(e.tmp / "p" / "x"),
                *flags,
            ],
            pattern,
        )
        for task, flags, pattern in [
            (
                "m2",
                ["--copies", "2"],
                r"--copies applies to odet prepare gec only; it has no effect with odet prepare m2",
            ),
            ("m2", ["--unit", "turns"], r"--unit applies to odet prepare lead .*prepare m2"),
            ("gec", ["--annotator", "1"], r"--annotator applies to odet prepare m2 .*prepare gec"),
            ("gec", ["--n", "5"], r"--n applies to odet prepare lead"),
            ("lead", ["--seed", "3"], r"--seed applies to odet prepare gec .*prepare lead"),
            ("dialogsum", ["--join", "2"], r"--join applies to odet prepare gec .*dialogsum"),
            (
                "gec",
                ["--vocabulary", "100"],
                r"--vocabulary applies with --substitute above 0 only",
            ),
            (
                "gec",
                ["--substitute", "0", "--vocabulary", "100"],
                r"--vocabulary applies with --substitute above 0 only",
            ),
        ]
    ],
    *[
        Case("data", f"{' '.join(flags)} (no effect)", lambda e, f=flags: ["data", *f], pat)
        for flags, pat in [
            (["list", "--out", "d"], r"--out applies to odet data NAME .*with odet data list"),
            (["list", "--data-dir", "d"], r"--data-dir applies to odet data NAME"),
        ]
    ],
    *[
        Case("config", f"{' '.join(flags)} (no effect)", lambda e, f=flags: ["config", *f], pat)
        for flags, pat in [
            (
                ["show", "configs/multi30k/euler.yaml", "--out", "x.md"],
                r"--out applies to odet config docs only; it has no effect with odet config show",
            ),
            (["show", "configs/multi30k/euler.yaml", "--check"], r"--check applies to .*docs"),
            (["docs", "configs/multi30k/euler.yaml"], r"CONFIG applies to odet config show"),
            (["docs", "--set", "seed=2"], r"--set applies to odet config show"),
        ]
    ],
    Case(
        "parity",
        "--trace without a continuous variant (no effect)",
        lambda e: [
            "parity",
            e.parity(),
            "--out",
            str(e.tmp / "par"),
            "--trace",
            str(e.tmp / "trace"),
            "--no-progress",
        ],
        r"--trace applies to continuous-encoder variants only; .*\['euler-1'\]",
    ),
    # ------------------------------------------------------------------ not what it says
    *[
        Case(
            command,
            f"{slot} a FIFO",
            lambda e, argv=argv: argv(e, _fifo(e, "pipe.yaml")),
            r"pipe\.yaml is a named pipe \(FIFO\), not a regular file",
        )
        for slot, (command, argv, _) in INPUT_SLOTS.items()
        if slot in CONFIG_SLOTS or slot == "generate --input"
    ],
    Case(
        "sample",
        "stdin prompt not UTF-8",
        lambda e: ["sample", str(e.lm), "--max-new-tokens", "2"],
        r"stdin \(the prompt\) is not valid UTF-8 \(line 2, byte 3\)$",
        stdin=b"to be\nor \xff not",
    ),
    Case(
        "prepare",
        "lead --unit turns without speaker tags",
        lambda e: [
            "prepare",
            "lead",
            e.file("plain.jsonl", '{"dialogue": "hi there", "summary": "a greeting"}\n'),
            "--out",
            str(e.tmp / "lead.txt"),
            "--unit",
            "turns",
        ],
        r"plain\.jsonl: no dialogue has a speaker tag .*use --unit words",
    ),
    # ------------------------------------------------------------------ parser
    Case("odet", "unknown command", lambda e: ["fly"], r"fly"),
    Case("odet", "no command", lambda e: [], r"required: COMMAND"),
    Case("train", "unknown flag", lambda e: ["train", e.config(), "--fast"], r"--fast"),
]


def _fifo(e: Env, name: str) -> str:
    """A named pipe (FIFO) at ``name``: opening it for reading would wait for a writer."""
    import os

    path = e.tmp / name
    os.mkfifo(path)
    return str(path)


def _lm_copy(e: Env) -> str:
    """A copy of the finished language-model run inside the test's tmp dir."""
    target = e.tmp / "lmcopy"
    shutil.copytree(e.lm, target)
    return str(target)


def _corrupt_config(e: Env) -> str:
    path = copy_checkpoint(e.run, e.tmp / "corrupt")
    (path / "config.json").write_text("{not json")
    return str(path)


def _future_format(e: Env) -> str:
    path = copy_checkpoint(e.run, e.tmp / "future")
    header = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**header, "format_version": 7}))
    return str(path)


def _corrupt_index(e: Env) -> str:
    run = Path(_run_copy(e))
    (run / "checkpoints" / "index.json").write_text('{"checkpoints": [')
    for child in (run / "checkpoints").iterdir():
        if child.is_dir():
            shutil.rmtree(child)
    return str(run)


def _checksums(e: Env, table: object = (1, 2)) -> str:
    """A copy of the run whose last checkpoint's ``checksums.json`` is ``table`` (valid JSON)."""
    run = Path(_run_copy(e))
    (checkpoint_of(run) / "checksums.json").write_text(json.dumps(table))
    return str(run)


def _metadata(e: Env, name: str, text: str) -> str:
    """A copy of the run's last checkpoint with ``name`` replaced by ``text`` (checksums
    right)."""
    path = copy_checkpoint(e.run, e.tmp / "meta")
    (path / name).write_text(text)
    _refresh_checksums(path)
    return str(path)


def _truncated_in_run(e: Env, which: str = "last") -> str:
    run = Path(_run_copy(e))
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    weights = run / "checkpoints" / (index.get(which) or index["last"]) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return str(run)


def _foreign_coefficients(e: Env) -> str:
    """A copy of the run whose metrics log ends with a coefficients record of no block."""
    run = Path(_run_copy(e))
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"event": "coefficients", "step": 5, "encoder": []}) + "\n")
    return str(run)


def _lm_truncated(e: Env) -> str:
    target = e.tmp / "lmcopy"
    shutil.copytree(e.lm, target)
    for weights in target.rglob("model.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])
    return str(target)


def _jfleg(e: Env) -> str:
    if e.shared is None or not (e.shared / "jfleg").is_dir():
        pytest.skip("shared jfleg data not found")
    return str(e.shared / "jfleg")


def _fake_multi30k(e: Env) -> str:
    from odet.data import DATASETS

    root = e.tmp / "fake"
    for spec in DATASETS["multi30k"].files:
        (root / spec.path).parent.mkdir(parents=True, exist_ok=True)
        (root / spec.path).write_bytes(b"fake\n")
    return str(root)


@pytest.fixture
def env(tmp_path: Path, cli_data: Path, cli_run: Path, lm_run: Path) -> Env:
    from tests.conftest import REPO_ROOT

    shared = REPO_ROOT.parent / "shared" / "data"
    return Env(tmp_path / "w", cli_data, cli_run, lm_run, shared if shared.is_dir() else None)


def _updates_made(root: Path) -> list[str]:
    """Signs that training took an update under ``root``: a checkpoint or a train event."""
    signs = [str(p) for p in root.rglob("checkpoints") if p.is_dir()]
    for metrics in root.rglob("metrics.jsonl"):
        text = metrics.read_text(encoding="utf-8")
        if '"event": "train"' in text or '"event":"train"' in text:
            signs.append(str(metrics))
    return signs


@pytest.mark.parametrize(
    "argv",
    [
        lambda e: ["train", e.config(data={"train": [e.bad("missing", "m.src"), "train.tgt"]})],
        lambda e: ["train", e.lm_config(data={"text": e.bad("directory", "d")})],
        lambda e: ["train", e.config(), "--set", "optim.lrr=1"],
        lambda e: ["train", e.config(out="afile/run")] if e.text("afile") else [],
    ],
    ids=["missing data file", "lm text a directory", "unknown key", "output dir under a file"],
)
def test_a_start_refused_before_work_prints_only_the_error(argv: Argv, env: Env) -> None:
    # a process of its own: in pytest's, the root logger has handlers and INFO records of the
    # CLI's logging set-up never reach stderr
    import subprocess
    import sys

    env.tmp.mkdir()
    command = [sys.executable, "-m", "odet.cli", *argv(env), "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("odet: error:"), done.stderr
    assert not [name for name in ("out", "lmout") if (env.tmp / name).exists()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, env: Env, capsys) -> None:
    env.tmp.mkdir()
    argv = case.argv(env)
    before = TreeSnapshot.take([env.tmp, env.data, env.run, env.lm])
    before_updates = set(_updates_made(env.tmp))
    outcome = run_odet(argv, capsys, case.stdin)
    assert_one_line_user_error(outcome, case.message)
    before.assert_only([env.tmp / p for p in case.may_create])
    assert set(_updates_made(env.tmp)) == before_updates, "a training update was made"


def test_the_table_covers_every_command_and_each_input_class() -> None:
    from odet.cli import COMMANDS

    commands = {case.command for case in CASES}
    assert set(COMMANDS) <= commands
    for slot in INPUT_SLOTS:
        kinds = {c.kind.removeprefix(f"{slot} ") for c in CASES if c.kind.startswith(f"{slot} ")}
        assert set(FILE_CLASSES) <= kinds, slot
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
