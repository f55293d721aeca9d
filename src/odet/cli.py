"""``odet <command>``: a dispatch table of plain functions over the library.

User errors (a bad config, a missing or corrupt file, bad input) end with one line on stderr,
``odet: error: ...``, and exit status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import traceback
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from odet.config import INT_MAX, SEED_MAX
from odet.runtime import keep_freed_memory

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TRAINING_FAILED = 1
EXIT_INTERNAL_ERROR = 70
RUN = "(default: the run's generation section)"
"""How ``odet generate``'s search flags default: to what the run was validated with."""
PREPARE_DEFAULTS: dict[str, object] = {
    "seed": 1,
    "copies": 1,
    "join": 1,
    "substitute": 0.0,
    "vocabulary": 30_000,
    "n": 23,
    "unit": "words",
}
"""``odet prepare``'s defaults, applied after the check that every flag given applies to the
task (the parser's defaults are ``None`` so that a flag given can be told from a default)."""
PREPARE_FLAGS: dict[str, tuple[str, ...]] = {
    "gec": ("seed", "copies", "join", "substitute", "vocabulary"),
    "m2": ("annotator",),
    "dialogsum": (),
    "lead": ("n", "unit"),
}
"""The flags of each ``odet prepare`` task (by ``dest``); any other given is refused."""
SEARCH_FLAGS: dict[str, tuple[str, ...]] = {
    "beam": ("beam", "lenpen", "no_repeat_ngram_size"),
    "sample": ("temperature", "top_k", "top_p", "seed"),
}
"""``odet generate``'s flags that only one strategy reads (by ``dest``): greedy reads none of
them, and one hypothesis per sentence makes the length penalty moot outside beam search."""
DATA_OUT = "data"
"""``odet data NAME``'s output directory when ``--out`` is not given."""
DATA_CHOICES = ["list", "dialogsum", "jfleg", "multi30k", "tinyshakespeare"]
"""``odet data NAME``: ``list`` and every dataset of ``odet.data.DATASETS`` (a test keeps them in
step; the parser does not import the data package)."""


# ---------------------------------------------------------------------------- commands
def cmd_train(args: argparse.Namespace) -> int:
    from odet.training import train
    from odet.training.lm_config import LMTrainConfig, load_any_config

    config = load_any_config(args.config, _overrides(args.set, output_dir=args.output_dir))
    from odet.training.run_dir import check_output_dir

    check_output_dir(Path(config.output_dir), config.to_dict())
    progress = False if args.no_progress else None
    if isinstance(config, LMTrainConfig):
        from odet.training.lm import train_lm

        lm = train_lm(config, progress=progress)
        if lm.already_complete:
            return _say_complete(lm.output_dir, lm.steps)
        print(f"trained {lm.steps} updates ({lm.elapsed_seconds:.0f}s)")
        print(f"valid loss: {lm.valid_loss:.4f} nats per token ({lm.valid_tokens} tokens)")
        print(f"run directory: {lm.output_dir}")
        return 0
    result = train(config, progress=progress)
    if result.already_complete:
        return _say_complete(result.output_dir, result.steps)
    print(f"trained {result.steps} updates ({result.epochs} epochs, {result.elapsed_seconds:.0f}s)")
    if result.best_metric is not None:
        print(
            f"best valid {config.train.best_metric}: {result.best_metric:.2f} "
            f"({result.best_checkpoint})"
        )
    if result.test:
        print("test: " + ", ".join(f"{k} {v:.2f}" for k, v in result.test.items()))
    print(f"run directory: {result.output_dir}")
    return 0


def _say_complete(run: Path, steps: int) -> int:
    print(f"{run} is already complete ({steps} updates; see its summary.json); nothing to do")
    return 0


def _overrides(sets: list[str] | None, **flags: str | None) -> list[str]:
    """The ``--set KEY=VALUE`` overrides, with the flags that set a key themselves (``output_dir``
    from ``--output-dir``, kept verbatim, not read as YAML) after them; a key given twice is an
    error rather than the last value winning unseen."""
    overrides = list(sets or [])
    given: dict[str, str] = {}
    for text in overrides:
        key = ".".join(part.strip() for part in text.partition("=")[0].split("."))
        if key in given and "=" in text:
            raise ValueError(
                f"--set {key} is given twice ({given[key]!r} and {text!r}); give it once"
            )
        given[key] = text
    for key, value in flags.items():
        if value is None:
            continue
        if key in given:
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{flag} and --set {key}= both set {key}; give one of them")
        overrides.append(f"{key}={json.dumps(value)}")
    return overrides


def _refuse_unused(given: dict[str, object], applies: str, mode: str) -> None:
    """Refuse a flag given explicitly (not ``None``/``False``) that does nothing in ``mode``: a
    setting silently ignored hides a mistake. ``applies`` says where it does act."""
    for flag, value in given.items():
        if value is not None and value is not False:
            raise ValueError(f"{flag} applies {applies} only; it has no effect {mode}")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def cmd_generate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from odet.inference import Translator, generation_defaults, resolve_model_dir
    from odet.inference.checkpoint import is_model_dir

    if args.checkpoint is not None and is_model_dir(args.model):
        raise ValueError(
            f"--checkpoint applies to a run directory only; it has no effect with {args.model}, "
            "which is itself a checkpoint"
        )

    flags = {
        "strategy": args.strategy,
        "beam_size": args.beam,
        "length_penalty": args.lenpen,
        "max_len_a": args.max_len_a,
        "max_len_b": args.max_len_b,
        "min_len": args.min_len,
        "no_repeat_ngram_size": args.no_repeat_ngram_size,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
        "batch_tokens": args.batch_tokens,
        "precision": args.precision,
        "compile": args.compile,
        "gemm": args.gemm,
    }
    if args.output is not None:
        from odet.io import check_output_file

        inputs = (args.input,) if args.input not in (None, "-") else ()
        check_output_file(args.output, "--output", inputs)
    from_file = args.input not in (None, "-")
    lines, invalid = _read_input(args.input) if from_file else ([], 0)
    # once: it verifies the checksums
    model_dir = resolve_model_dir(args.model, args.checkpoint or "best", model_type="seq2seq")
    defaults = generation_defaults(model_dir)
    _check_search_flags(args, defaults.strategy)
    config = replace(defaults, **{k: v for k, v in flags.items() if v is not None})
    translator = Translator.from_checkpoint(model_dir, config=config)
    if config.compile:
        from odet.training.compile import check_compilable

        origin = "--compile" if args.compile else "the model's generation.compile"
        off = "drop --compile" if args.compile else "pass --no-compile"
        check_compilable(next(translator.model.parameters()).device, origin, off)
    if config.precision == "auto":
        from odet.inference import resolve_decode_precision

        device = next(translator.model.parameters()).device
        chosen = resolve_decode_precision("auto", device)
        origin = "--precision auto" if args.precision else "the model's generation.precision auto"
        print(
            f"odet: decoding in {chosen} ({origin}: bf16 where the {device.type} has bf16 "
            "matrix units; --precision fp32 to decode in fp32)",
            file=sys.stderr,
        )
    if not from_file:  # stdin is read once the model is known to load
        lines, invalid = _read_input(args.input)
    with _output(args.output) as tmp:
        progress = not args.no_progress and args.output is not None
        text = "".join(o + "\n" for o in translator.translate(lines, progress=progress))
        if tmp is None:
            sys.stdout.write(text)
        else:
            tmp.write_text(text, encoding="utf-8")
    notes = translator.report.notes()
    if invalid:
        notes.append(f"{invalid} line(s) not UTF-8 text (bad or NUL bytes replaced)")
    for note in notes:
        print(f"odet: warning: {note}", file=sys.stderr)
    return 0


def _check_search_flags(args: argparse.Namespace, default: str) -> None:
    """Refuse the search flags that the strategy chosen (``--strategy``, else the model's
    ``default``) does not read."""
    strategy = args.strategy or default
    mode = f"with --strategy {strategy}"
    if args.strategy is None:
        mode += " (the model's default; choose another with --strategy)"
    for applies, dests in SEARCH_FLAGS.items():
        if applies != strategy:
            given = {_flag(d): vars(args)[d] for d in dests}
            _refuse_unused(given, f"to --strategy {applies}", mode)


@contextmanager
def _output(path: str | None) -> Iterator[Path | None]:
    """``None`` for stdout; else a temporary file beside ``path``, created before decoding (an
    output that cannot be written fails first) and renamed over ``path`` at the end."""
    if path is None:
        yield None
        return
    from odet.io import atomic_output

    with ExitStack() as stack:
        try:
            tmp = stack.enter_context(atomic_output(path))
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise ValueError(
                f"--output {path} cannot be written ({reason}); nothing was decoded"
            ) from None
        yield tmp


def _read_input(path: str | None) -> tuple[list[str], int]:
    """The lines to translate (lines that are not UTF-8 text replaced and counted); an input
    with no line to translate (empty, only blank or undecodable lines, or UTF-16/32) is a
    ``DataError``."""
    from odet.data.text import (
        DataError,
        check_line_endings,
        check_not_wide,
        decode_line,
        read_binary,
        split_lines,
    )

    name = "stdin" if path in (None, "-") else f"--input {path}"
    raw = _stdin_bytes() if path in (None, "-") else read_binary(path, "--input")
    check_not_wide(raw, name)
    check_line_endings(raw, name)
    lines, invalid = [], 0
    for line in split_lines(raw):
        try:
            lines.append(decode_line(line))
        except UnicodeDecodeError:
            lines.append(line.decode("utf-8", errors="replace").replace("\0", "\ufffd"))
            invalid += 1
    if not lines:
        raise DataError(f"{name} is empty: there is nothing to translate")
    if invalid == len(lines):
        raise DataError(f"{name} is not UTF-8 text (no line decodes): nothing to translate")
    if not any(line.strip() for line in lines):
        raise DataError(f"{name} has only blank lines: there is nothing to translate")
    return lines, invalid


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from odet.inference.checkpoint import is_model_dir
    from odet.training.lm import load_lm

    if args.which is not None and is_model_dir(args.checkpoint):
        raise ValueError(
            f"--which applies to a run directory only; it has no effect with {args.checkpoint}, "
            "which is itself a checkpoint"
        )
    model, vocab = load_lm(args.checkpoint, args.which or "last")
    if args.compile:
        from odet.training.compile import check_compilable

        check_compilable(next(model.parameters()).device, "--compile", "drop --compile")
    prompt = args.prompt if args.prompt is not None else _read_prompt()
    ids = vocab.encode(prompt) or vocab.encode("\n" if "\n" in vocab.chars else vocab.chars[0])
    prompt_ids = torch.tensor([ids] * args.num_samples, dtype=torch.long)
    model.eval()
    out = model.generate(
        prompt_ids,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        compile=args.compile,
    )
    for i, row in enumerate(out.tolist()):
        if i:
            print("\n" + "-" * 40)
        print(vocab.decode(row[len(ids) :]) if not prompt else vocab.decode(row), end="")
    print()
    return 0


def _stdin_bytes() -> bytes:
    """All of stdin as bytes; a text stream without a byte buffer (a notebook's, a test's
    ``StringIO``) is encoded back to UTF-8."""
    buffer = getattr(sys.stdin, "buffer", None)
    return buffer.read() if buffer is not None else sys.stdin.read().encode("utf-8")


def _read_prompt() -> str:
    """``odet sample``'s prompt from stdin; bytes that are not UTF-8 are a ``DataError`` naming
    the line and byte, as for every other input."""
    from odet.data.text import DataError

    raw = _stdin_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        byte = err.start - (raw.rfind(b"\n", 0, err.start) + 1)
        raise DataError(
            f"stdin (the prompt) is not valid UTF-8 (line {line}, byte {byte})"
        ) from None


def cmd_evaluate(args: argparse.Namespace) -> int:
    from odet.evaluation.files import evaluate_files

    mode = f"with --metric {args.metric}"
    if args.metric != "bleu":
        given = {"--tokenized": args.tokenized, "--lowercase": args.lowercase}
        _refuse_unused(given, "to --metric bleu", mode)
    if args.metric != "gleu":
        _refuse_unused({"--src": args.src}, "to --metric gleu", mode)
    if args.tokenized:
        _refuse_unused(
            {"--lowercase": args.lowercase},
            "to untokenized BLEU",
            "with --tokenized, which lower-cases already",
        )
    result = evaluate_files(
        args.metric,
        args.hyp,
        args.ref,
        source=args.src,
        tokenized=args.tokenized,
        lowercase=args.lowercase,
        baseline=args.baseline,
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(result["text"])
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from odet.training.average import average_checkpoints

    out = average_checkpoints(args.run, args.last, args.out)
    print(f"averaged the last {args.last} checkpoints of {args.run} into {out}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from odet.data import DATASETS, prepare_dataset

    if args.name == "list":
        given = {"--out": args.out, "--data-dir": args.data_dir}
        _refuse_unused(given, "to odet data NAME (a dataset)", "with odet data list")
        for name, spec in DATASETS.items():
            print(f"{name:10s} {spec.description}\n{'':10s} licence: {spec.licence}")
        return 0
    out = DATA_OUT if args.out is None else args.out
    files = prepare_dataset(args.name, out, args.data_dir, progress=not args.no_progress)
    print(f"{args.name}: {len(files)} file(s) verified in {out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from odet.demo import run_demo

    run_demo(args.out, task=args.task, epochs=args.epochs, progress=not args.no_progress)
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    from odet.experiments.config import load_experiment
    from odet.experiments.runner import (
        experiment_status,
        export_experiment,
        run_experiment,
        status_table,
    )

    config = load_experiment(args.config, _overrides(args.set))
    if args.status is not None:
        exported = Path(args.status) if args.status else None
        statuses = experiment_status(config, exported, variants=args.variants, seeds=args.seeds)
        print(status_table(statuses, exported))
        return 0
    if args.export is not None:
        report = export_experiment(config, args.export, variants=args.variants, seeds=args.seeds)
        print(report.read_text(encoding="utf-8"))
        return 0
    run_experiment(config, progress=not args.no_progress, variants=args.variants, seeds=args.seeds)
    print((Path(config.output_dir) / "results.md").read_text(encoding="utf-8"))
    return 0


def cmd_parity(args: argparse.Namespace) -> int:
    from odet.experiments.parity import run_parity

    results = run_parity(
        args.config,
        args.out,
        progress=not args.no_progress,
        seeds=args.seeds,
        variants=args.variants,
        trace_dir=args.trace,
    )
    print((results.out_dir / "results.md").read_text(encoding="utf-8"))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    if args.depth_against is not None:
        return _analyze_depth(args)
    depth_flags = {
        "--split": args.split,
        "--limit": args.limit,
        "--batch-tokens": args.batch_tokens,
        "--no-progress": args.no_progress or None,
    }
    for flag, value in depth_flags.items():
        if value is not None:
            raise ValueError(f"{flag} is an option of --depth-against, which was not given")
    from odet.analysis import analyze_runs

    sentences = 64 if args.sentences is None else args.sentences
    report = analyze_runs(args.runs, args.out, sentences=sentences)
    for name, entry in report.items():
        if "encoder" in entry["update_sizes"]:
            sizes = ", ".join(f"{v:.2f}" for v in entry["update_sizes"]["encoder"])
            print(f"{name}: encoder block update sizes {sizes}")
        else:
            print(f"{name}: {entry['encoder_method']} encoder, no blocks to measure")
        for stack, rows in entry["gates"].items():
            gates = [
                f"block {i + 1}: mean {g['mean']:.3f}, saturated {g['saturated']:.0%}"
                for i, g in enumerate(rows)
                if g is not None
            ]
            if gates:
                print(f"{name}: {stack} gates: " + "; ".join(gates))
        for key, rows in entry["coefficients"].items():
            if key.endswith("_layers"):
                weights = " ".join(f"{w:.2f}" for w in rows[-1])
                stack = key.removesuffix("_layers")
                print(f"{name}: {stack} DLCL output weights (embedding, blocks 1…): {weights}")
    print(f"plots and analysis.json in {args.out}")
    return 0


def _analyze_depth(args: argparse.Namespace) -> int:
    """``odet analyze RUN --depth-against REFERENCE``: NFE against length and difficulty."""
    from odet.analysis.depth import DEFAULT_BATCH_TOKENS, analyze_depth

    if len(args.runs) != 1:
        raise ValueError(
            f"--depth-against takes one run (the continuous-encoder one), got {len(args.runs)}"
        )
    if args.sentences is not None:
        raise ValueError("--sentences is for the probe report; with --depth-against use --limit")
    report = analyze_depth(
        args.runs[0],
        args.depth_against,
        args.out,
        split=args.split or "test",
        limit=args.limit,
        batch_tokens=args.batch_tokens or DEFAULT_BATCH_TOKENS,
        progress=not args.no_progress,
    )
    rho = report.correlations()

    def say(value: float | None) -> str:
        return "undefined" if value is None else f"{value:+.3f}"

    nfe = report.nfe
    print(
        f"{len(report)} {report.split} sentences: NFE mean {nfe.mean():.1f}, std {nfe.std():.1f}, "
        f"min {nfe.min()}, max {nfe.max()}"
    )
    print(
        f"Spearman: NFE vs source length {say(rho['nfe_vs_source_tokens'])}, "
        f"vs reference loss {say(rho['nfe_vs_reference_loss'])}, "
        f"given length {say(rho['nfe_vs_reference_loss_given_length'])}"
    )
    print(f"depth.csv, depth.json, nfe_vs_length.png and nfe_vs_difficulty.png in {args.out}")
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from odet.io import check_output_file
    from odet.tasks.gec import build_gec_data, english_words, m2_to_parallel
    from odet.tasks.summarization import Lead, read_dialogsum, write_dialogsum_lines

    for task, dests in PREPARE_FLAGS.items():
        if task != args.task:
            given = {_flag(d): vars(args)[d] for d in dests if d not in PREPARE_FLAGS[args.task]}
            _refuse_unused(given, f"to odet prepare {task}", f"with odet prepare {args.task}")
    if args.task == "gec" and not args.substitute:
        _refuse_unused({"--vocabulary": args.vocabulary}, "with --substitute above 0", "without it")
    for dest, default in PREPARE_DEFAULTS.items():
        if vars(args)[dest] is None:
            vars(args)[dest] = default
    if args.task != "gec" and len(args.inputs) != 1:
        raise ValueError(
            f"odet prepare {args.task} takes one input file, got {len(args.inputs)}: {args.inputs}"
        )
    suffixes = {"m2": (".src", ".tgt"), "dialogsum": (".dialogue", ".summary"), "lead": ("",)}
    for suffix in suffixes.get(args.task, ()):
        check_output_file(f"{args.out}{suffix}", "--out", tuple(args.inputs))
    if args.task == "gec":
        vocabulary = english_words(args.vocabulary) if args.substitute > 0 else ()
        report = build_gec_data(
            args.inputs,
            args.out,
            seed=args.seed,
            copies=args.copies,
            join=args.join,
            vocabulary=vocabulary,
            substitute=args.substitute,
        )
        print(report.message())
    elif args.task == "m2":
        print(
            m2_to_parallel(args.inputs[0], args.out, annotator=args.annotator, out_of_range="drop")
        )
    elif args.task == "dialogsum":
        print(write_dialogsum_lines(args.inputs[0], args.out).message())
    else:
        lead = Lead(args.n, args.unit)
        dialogues = read_dialogsum(args.inputs[0]).dialogues
        if args.unit == "turns":
            _check_turns(args.inputs[0], dialogues)
        Path(args.out).write_text("".join(lead(d) + "\n" for d in dialogues), encoding="utf-8")
        print(
            f"wrote the LEAD-{args.n} {args.unit} baseline of {len(dialogues)} dialogues to "
            f"{args.out}"
        )
    return 0


def _check_turns(path: str, dialogues: Sequence[str]) -> None:
    """``--unit turns`` needs speaker tags: with none anywhere LEAD would copy every dialogue
    whole (refused); dialogues without one are copied whole, which a warning counts."""
    from odet.tasks.summarization import has_turns

    untagged = sum(not has_turns(d) for d in dialogues)
    if untagged == len(dialogues):
        raise ValueError(
            f"{path}: no dialogue has a speaker tag ('#Person1#: ...') to count turns by; "
            "use --unit words"
        )
    if untagged:
        print(
            f"odet: warning: {path}: {untagged} of {len(dialogues)} dialogues have no speaker "
            "tag; their LEAD is the whole dialogue",
            file=sys.stderr,
        )


def cmd_config(args: argparse.Namespace) -> int:
    from odet.reference import configuration_reference, resolved_config_yaml

    given = (
        {"--out": args.out, "--check": args.check}
        if args.action == "show"
        else {"CONFIG": args.config, "--set": args.set}
    )
    other = "docs" if args.action == "show" else "show"
    _refuse_unused(given, f"to odet config {other}", f"with odet config {args.action}")
    if args.action == "show":
        if not args.config:
            raise ValueError("odet config show needs a training config (YAML)")
        print(resolved_config_yaml(args.config, _overrides(args.set)), end="")
        return 0
    if args.check and args.out is None:
        raise ValueError("odet config docs --check needs --out FILE (the reference to check)")
    text = configuration_reference()
    if args.out is None:
        print(text, end="")
        return 0
    from odet.io import check_output_file

    out = check_output_file(args.out, "--out")
    if args.check:
        current = out.read_text(encoding="utf-8") if out.is_file() else ""
        if current != text:
            raise ValueError(f"{out} is out of date: run odet config docs --out {out}")
        return 0
    if out.is_file() and not _is_configuration_reference(out, text):
        raise ValueError(
            f"--out {out} exists and is not a configuration reference written by odet config "
            "docs; refusing to overwrite it (give a new file, or remove it first)"
        )
    from odet.io import write_bytes_atomic

    write_bytes_atomic(out, text.encode("utf-8"))
    print(f"wrote {out}")
    return 0


def _is_configuration_reference(path: Path, text: str) -> bool:
    """Whether ``path`` opens as ``text`` does (its heading and generated-by line: a reference
    odet wrote, perhaps an older one), so that regenerating it loses nothing."""
    opening = "\n".join(text.split("\n", 3)[:3]).split(" — ")[0].encode("utf-8")
    with path.open("rb") as f:
        return f.read(len(opening) + 8).replace(b"\r\n", b"\n").startswith(opening)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": cmd_train,
    "generate": cmd_generate,
    "sample": cmd_sample,
    "evaluate": cmd_evaluate,
    "average": cmd_average,
    "data": cmd_data,
    "demo": cmd_demo,
    "experiment": cmd_experiment,
    "parity": cmd_parity,
    "analyze": cmd_analyze,
    "prepare": cmd_prepare,
    "config": cmd_config,
}


# ---------------------------------------------------------------------------- arguments
class _Parser(argparse.ArgumentParser):
    """An argument error is one line, ``odet: error: ...``, and exit status 2, like every
    other user error (argparse would print the usage first)."""

    def error(self, message: str) -> typing.NoReturn:
        command = self.prog.removeprefix("odet").strip()
        hint = f"; see odet {command} --help" if command else "; see odet --help"
        self.exit(EXIT_USER_ERROR, f"odet: error: {message}{hint}\n")


def _at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low`` (and ``<= high`` when given; always of at most 64
    bits, which is all torch takes)."""
    interval = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {interval}, got {value}")
        if value > INT_MAX:
            raise argparse.ArgumentTypeError(
                f"must be {interval} and of at most 64 bits (< 2**63), got {value}"
            )
        return value

    parse.__name__ = f"int {interval}"
    return parse


def _real(low: float, high: float, *, low_open: bool, high_open: bool) -> Callable[[str], float]:
    """An argparse type: a finite number in the interval from ``low`` to ``high``."""
    if math.isinf(low) and math.isinf(high):
        interval = "a finite number"
    elif math.isinf(high):
        interval = f"{'>' if low_open else '>='} {low:g}"
    else:
        interval = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
        below = value <= low if low_open else value < low
        above = value >= high if high_open else value > high
        if not math.isfinite(value) or below or above:
            raise argparse.ArgumentTypeError(f"must be {interval}, got {text}")
        return value

    parse.__name__ = f"number {interval}"
    return parse


POSITIVE = _real(0.0, math.inf, low_open=True, high_open=True)
PROBABILITY = _real(0.0, 1.0, low_open=True, high_open=False)
FRACTION = _real(0.0, 1.0, low_open=False, high_open=False)
NON_NEGATIVE = _real(0.0, math.inf, low_open=False, high_open=True)
FINITE = _real(-math.inf, math.inf, low_open=True, high_open=True)
SEED = _at_least(0, SEED_MAX)


class _HelpWithDefaults(argparse.HelpFormatter):
    """``--help`` lines end with the flag's default, where it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if (
            text is None
            or "%(default)" in text
            or default in (None, False, argparse.SUPPRESS)
            or (isinstance(default, list | tuple) and not default)
            or action.option_strings == []
        ):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="odet", description="ODE Transformers: train, generate, evaluate.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train (or resume) a model from a YAML config")
    p.add_argument("config", help="training config (YAML)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set model.encoder_method=rk2",
    )
    p.add_argument("--output-dir", help="shorthand for --set output_dir=DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser(
        "generate",
        help="translate lines of text with a trained model (search settings default to the "
        "run's generation section; flags override them)",
    )
    p.add_argument("model", help="a checkpoint directory or a training run directory")
    p.add_argument("--input", "-i", help="input file (default: stdin)")
    p.add_argument("--output", "-o", help="output file (default: stdout)")
    p.add_argument(
        "--checkpoint",
        choices=["best", "last"],
        help="which checkpoint of a run directory (default: best)",
    )
    p.add_argument(
        "--strategy",
        choices=["beam", "greedy", "sample"],
        help=f"search strategy {RUN}",
    )
    p.add_argument("--beam", type=_at_least(1), help=f"beam: beam size {RUN}")
    p.add_argument("--lenpen", type=FINITE, help=f"beam: length penalty {RUN}")
    p.add_argument(
        "--max-len-a", type=NON_NEGATIVE, help=f"max length = a · source length + b {RUN}"
    )
    p.add_argument("--max-len-b", type=_at_least(0), help=f"see --max-len-a {RUN}")
    p.add_argument(
        "--min-len",
        type=_at_least(0),
        help=f"fewest tokens before EOS {RUN}",
    )
    p.add_argument(
        "--no-repeat-ngram-size",
        type=_at_least(0),
        help=f"beam: ban repeated n-grams of this size {RUN}",
    )
    p.add_argument(
        "--temperature",
        type=POSITIVE,
        help=f"sample: softmax temperature {RUN}",
    )
    p.add_argument(
        "--top-k",
        type=_at_least(0),
        help=f"sample: keep the k best tokens {RUN}",
    )
    p.add_argument(
        "--top-p",
        type=PROBABILITY,
        help=f"sample: keep the smallest set of mass p {RUN}",
    )
    p.add_argument("--seed", type=SEED, help=f"sample: random seed {RUN}")
    p.add_argument(
        "--batch-tokens",
        type=_at_least(16),
        help=f"source tokens per batch {RUN}",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "int8", "auto"],
        help="bf16: a bf16 copy of the model, faster where the CPU or GPU has bf16 units; "
        "int8: a copy with int8 linear layers, CPU only; auto: bf16 where the device has bf16 "
        "units, else fp32 (speeds and BLEU: benchmarks/RESULTS.md) "
        f"{RUN}",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"run the decoder steps under torch.compile (compiles once per process) {RUN}",
    )
    p.add_argument(
        "--gemm",
        choices=["auto", "torch", "onednn"],
        help="who multiplies the fp32 linear layers: onednn (its packed GEMMs, faster on CPUs "
        "than PyTorch's default, benchmarks/RESULTS.md), torch, or auto: onednn where it runs "
        f"and pays (CPU, fp32, d_model >= 128, not compiled), else torch {RUN}",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("sample", help="sample text from a trained language model")
    p.add_argument("checkpoint", help="a language-model checkpoint or run directory")
    p.add_argument("--prompt", help="the text to continue (default: stdin; empty: none)")
    p.add_argument("--max-new-tokens", type=_at_least(0), default=500, help="characters to sample")
    p.add_argument("--temperature", type=POSITIVE, default=1.0, help="softmax temperature (> 0)")
    p.add_argument(
        "--top-k", type=_at_least(1), default=None, help="keep only the k most likely tokens"
    )
    p.add_argument(
        "--top-p", type=PROBABILITY, default=None, help="keep the smallest set of tokens of mass p"
    )
    p.add_argument("--seed", type=SEED, default=None, help="seed of the sampling (reproducible)")
    p.add_argument("--num-samples", type=_at_least(1), default=1, help="independent samples")
    p.add_argument(
        "--which", choices=["best", "last"], help="checkpoint of a run directory (default: last)"
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the one-token step (pays for long samples: compiling takes seconds)",
    )

    p = sub.add_parser("evaluate", help="score hypotheses against references")
    p.add_argument(
        "--metric", choices=["bleu", "chrf", "rouge", "gleu", "m2"], default="bleu", help="metric"
    )
    p.add_argument(
        "--hyp",
        required=True,
        nargs="+",
        help="hypotheses, one per line; several files (BLEU only, e.g. one per seed) are scored "
        "as one corpus, each against the references",
    )
    p.add_argument(
        "--baseline",
        nargs="+",
        help="BLEU only: the baseline's hypotheses, one file per --hyp file; adds a paired "
        "approximate-randomization test of the difference",
    )
    p.add_argument(
        "--ref",
        required=True,
        nargs="+",
        help="reference file(s), line-aligned (an M2 file for --metric m2)",
    )
    p.add_argument("--src", help="GLEU only: source file (GLEU needs it)")
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="BLEU only: BLEU on lower-cased 13a-tokenized text (published Multi30k numbers)",
    )
    p.add_argument(
        "--lowercase", action="store_true", help="BLEU only: case-insensitive (not --tokenized)"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = sub.add_parser("average", help="average the weights of the last N checkpoints")
    p.add_argument("run", help="training run directory (or its checkpoints/ directory)")
    p.add_argument("--last", type=_at_least(1), default=5, help="average the newest N checkpoints")
    p.add_argument("--out", required=True, help="directory for the averaged model")

    p = sub.add_parser("data", help="download and verify a dataset ('list' to see them)")
    p.add_argument("name", choices=DATA_CHOICES, help="a dataset, or list to see them")
    p.add_argument("--out", help=f"output directory (default: {DATA_OUT})")
    p.add_argument("--data-dir", help="copy from this local directory instead of downloading")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("demo", help="the end-to-end demo: Euler vs RK2 on a synthetic task")
    p.add_argument("--out", default="runs/demo", help="output directory")
    p.add_argument(
        "--task",
        default="translate",
        choices=["copy", "reverse", "sort", "translate"],
        help="the synthetic task",
    )
    p.add_argument("--epochs", type=_at_least(1), default=10, help="epochs per model")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("experiment", help="train variants x seeds of a recipe; table + plots")
    p.add_argument("config", help="experiment config (YAML), e.g. configs/experiments/*.yaml")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="an override for every run, e.g. --set data.data_dir=PATH",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        metavar="NAME",
        help="only these variants: to train, --export or --status (default: all)",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=SEED,
        metavar="SEED",
        help="only these seeds: to train, --export or --status (default: all)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--status",
        nargs="?",
        const="",
        metavar="DIR",
        help="train nothing: which runs are finished, in progress (updates done) or not "
        "started; with DIR, also which ones an --export into DIR holds",
    )
    only.add_argument(
        "--export",
        metavar="DIR",
        help="train nothing: copy the finished runs' result files (no checkpoints) into "
        "DIR/<variant>-seed<k>/ and write the report there over every run DIR holds (what a "
        "repository commits; --variants/--seeds choose the runs copied)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser(
        "analyze",
        help="per-block update sizes and learned coefficients; with --depth-against, a "
        "continuous encoder's NFE against source length and difficulty",
    )
    p.add_argument("runs", nargs="+", help="training run directories (compared in the plots)")
    p.add_argument(
        "--out",
        required=True,
        help="directory for analysis.json and the plots (with --depth-against: the depth files)",
    )
    p.add_argument(
        "--sentences", type=_at_least(1), help="validation sentences to use (default: 64)"
    )
    p.add_argument(
        "--depth-against",
        metavar="REFERENCE",
        help="instead: NFE per sentence of the one continuous-encoder run against source length "
        "and against REFERENCE's per-sentence loss (its Euler twin, same data); writes "
        "depth.csv, depth.json, nfe_vs_length.png and nfe_vs_difficulty.png",
    )
    p.add_argument(
        "--split", choices=["test", "valid"], help="--depth-against: the split (default: test)"
    )
    p.add_argument(
        "--limit", type=_at_least(1), help="--depth-against: the first N pairs (default: all)"
    )
    p.add_argument(
        "--batch-tokens",
        type=_at_least(1),
        help="--depth-against: source tokens per batch (default: 4096; 1: one sentence at a time)",
    )
    p.add_argument("--no-progress", action="store_true", help="--depth-against: no progress bars")

    p = sub.add_parser("prepare", help="task data: GEC pairs, M2 -> text, DialogSum lines, LEAD")
    p.add_argument("task", choices=["gec", "m2", "dialogsum", "lead"], help="what to prepare")
    p.add_argument("inputs", nargs="+", help="input file(s)")
    p.add_argument("--out", required=True, help="output directory, prefix or file")
    default = {k: f" (default: {v})" for k, v in PREPARE_DEFAULTS.items()}
    p.add_argument("--seed", type=SEED, help="gec: noise seed" + default["seed"])
    p.add_argument(
        "--copies", type=_at_least(1), help="gec: corrupted copies per sentence" + default["copies"]
    )
    p.add_argument(
        "--join",
        type=_at_least(1),
        help="gec: up to this many consecutive sentences per pair" + default["join"],
    )
    p.add_argument(
        "--substitute",
        type=FRACTION,
        help="gec: probability of replacing a content word by a frequent English word (wordfreq)"
        + default["substitute"],
    )
    p.add_argument(
        "--vocabulary",
        type=_at_least(1),
        help="gec: how many words --substitute draws from" + default["vocabulary"],
    )
    p.add_argument("--annotator", type=int, help="m2: one annotator (default: all)")
    p.add_argument("--n", type=_at_least(1), help="lead: how many words or turns" + default["n"])
    p.add_argument(
        "--unit", choices=["words", "turns"], help="lead: count words or turns" + default["unit"]
    )

    p = sub.add_parser(
        "config", help="'show CONFIG': the resolved config with defaults; 'docs': the reference"
    )
    p.add_argument("action", choices=["show", "docs"], help="show a config, or write the reference")
    p.add_argument("config", nargs="?", help="show: a training config (YAML)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="show: an override")
    p.add_argument("--out", help="docs: write the Markdown reference to this file")
    p.add_argument("--check", action="store_true", help="docs: fail if --out is out of date")

    p = sub.add_parser("parity", help="the N-ODE Transformer's parity experiment")
    p.add_argument("config", help="parity config (YAML), e.g. configs/parity/quick.yaml")
    p.add_argument("--out", required=True, help="directory for the tables and plots")
    p.add_argument("--seeds", type=SEED, nargs="+", help="train only these of the config's seeds")
    p.add_argument("--variants", nargs="+", help="train only these variants (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--trace",
        metavar="DIR",
        help="per-step solver/field/gradient trace (JSONL) of each continuous run trained now",
    )
    for command in sub.choices.values():
        command.formatter_class = _HelpWithDefaults
    return parser


def _out_of_memory(err: BaseException) -> str | None:
    """One line for an allocation that failed (host or device memory), else None: what was
    asked is too large for this machine, a setting to lower rather than a bug in odet."""
    from odet.models.size import ModelTooLargeError

    text = str(err)
    if isinstance(err, ModelTooLargeError):
        detail = f" ({err.detail})"
    elif isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        detail = ""
    elif isinstance(err, RuntimeError) and "Storage size calculation overflowed" in text:
        detail = " (a tensor larger than any address space requested)"
    elif isinstance(err, RuntimeError) and "can't allocate memory" in text:
        found = re.search(r"allocate (\d+) bytes", text)
        detail = f" ({int(found.group(1)) / 2**30:.1f} GiB requested)" if found else ""
    else:
        return None
    return (
        f"out of memory{detail}: ask for less (fewer samples, beams or new tokens, a smaller "
        "batch or model)"
    )


def _user_errors() -> tuple[type[BaseException], ...]:
    from odet.config import ConfigError
    from odet.data import DataError
    from odet.models import CheckpointError

    return (ConfigError, DataError, CheckpointError, ValueError, OSError)


def _numerical_failures() -> tuple[type[Exception], ...]:
    """Failures of the model's numbers: training that keeps going non-finite, an ODE solve
    that does not reach ``t1`` (imported when an error is being handled)."""
    from odet.ode import SolverError

    return (FloatingPointError, SolverError)


class _EachMessageOnce(logging.Filter):
    """Let each distinct message of a logger through once per process."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


QUIETED_ONCE = ("sacrebleu",)
"""Libraries whose warnings repeat at every call (sacrebleu's "tokenized period" warning at
every validation on tokenized data): the console shows each of their messages once."""


def _quiet_repeated_warnings() -> None:
    for name in QUIETED_ONCE:
        log = logging.getLogger(name)
        if not any(isinstance(f, _EachMessageOnce) for f in log.filters):
            log.addFilter(_EachMessageOnce())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.command == "train" else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    _quiet_repeated_warnings()
    keep_freed_memory()
    if args.debug:
        return COMMANDS[args.command](args)
    from odet.training import TrainingInterruptedError

    try:
        return COMMANDS[args.command](args)
    except TrainingInterruptedError as err:
        print(f"odet: {err}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("odet: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _numerical_failures() as err:  # the model's numbers, not a bug nor the input
        print(f"odet: error: {err}", file=sys.stderr)
        return EXIT_TRAINING_FAILED
    except _user_errors() as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if isinstance(err, OSError) and err.strerror:  # the reason and file, not "[Errno N]"
            message = f"{err.strerror}: {err.filename}" if err.filename else err.strerror
        elif isinstance(err, OSError) and err.filename and str(err.filename) not in message:
            message = f"{message}: {err.filename}"
        print(f"odet: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as err:  # not a user error: a bug, reported with its traceback
        if (message := _out_of_memory(err)) is not None:
            print(f"odet: error: {message}", file=sys.stderr)
            return EXIT_USER_ERROR
        traceback.print_exc()
        print(
            f"odet: internal error (a bug in odet, not in your input): {type(err).__name__}; "
            "please report it with the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
