"""Text in, text out: batched translation of raw sentences with a trained model and tokenizer.

Sentences are encoded, sorted by length and packed into batches of at most ``batch_tokens``
padded source tokens (so similar lengths share a batch), decoded with the configured search,
and returned in the input order. Empty lines give empty outputs; over-long lines are truncated
to the model's position table. Both are counted in the returned report, never silently dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import yaml
from tqdm import tqdm

from odet.config import from_dict, parse_yaml
from odet.data import TokenizerPair, pad_tokens
from odet.generation import DecodePrecision, Gemm, GenerationConfig
from odet.inference.checkpoint import CONFIG_NAME, resolve_model_dir
from odet.models import CheckpointError, Seq2Seq
from odet.nn.onednn import OneDNNLinear, onednn_copy, onednn_supported
from odet.nn.precision import resolve_precision
from odet.nn.quantization import Int8Linear, int8_copy

__all__ = [
    "INT8_ALSO",
    "TranslationReport",
    "Translator",
    "generation_defaults",
    "inference_model",
    "load_model_and_tokenizers",
    "resolve_decode_precision",
    "resolve_gemm",
]


@dataclass
class TranslationReport:
    """What happened to the inputs: counts of empty and truncated lines."""

    sentences: int = 0
    empty: int = 0
    truncated: int = 0
    truncated_lines: list[int] = field(default_factory=list)
    """1-based positions in the input of the truncated lines."""
    max_positions: int = 0
    """The position table the truncated lines were cut to (source tokens + EOS)."""

    def notes(self) -> list[str]:
        """One line per reason some inputs were not decoded as given (none: ``[]``)."""
        notes = []
        if self.empty:
            notes.append(f"{self.empty} empty line(s) gave empty outputs")
        if self.truncated:
            more = "…" if self.truncated > 5 else ""
            notes.append(
                f"{self.truncated} over-long line(s) truncated to the model's "
                f"{self.max_positions} positions (lines {self.truncated_lines[:5]}{more})"
            )
        return notes


class Translator:
    """A model and its tokenizers, ready to turn sentences into sentences.

    Example:
        >>> translator = Translator.from_checkpoint("runs/multi30k-rk2")  # doctest: +SKIP
        >>> translator.translate(["A dog runs on the beach."])  # doctest: +SKIP
        ['Ein Hund läuft am Strand.']
    """

    def __init__(
        self, model: Seq2Seq, tokenizers: TokenizerPair, config: GenerationConfig | None = None
    ):
        self.model = model.eval()
        self.tokenizers = tokenizers
        self.config = config or GenerationConfig()
        self.report = TranslationReport()

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, which: str = "best", config: GenerationConfig | None = None
    ) -> Translator:
        """Load a model directory, or the best/last checkpoint of a training run."""
        return cls(*load_model_and_tokenizers(path, which), config)

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        """Source token ids with EOS, truncated to the position table (counted)."""
        limit = self.model.config.max_positions
        encoded = []
        for i, text in enumerate(sentences):
            ids = self.tokenizers.source.encode(text)
            if len(ids) + 1 > limit:
                ids = ids[: limit - 1]
                self.report.truncated += 1
                self.report.truncated_lines.append(i + 1)
            encoded.append([*ids, self.model.config.eos_id])
        return encoded

    @torch.no_grad()
    def translate(self, sentences: Sequence[str], *, progress: bool = False) -> list[str]:
        """Translate ``sentences`` (any order of lengths); outputs in the input order."""
        limit = self.model.config.max_positions
        self.report = TranslationReport(sentences=len(sentences), max_positions=limit)
        outputs = [""] * len(sentences)
        todo = [i for i, s in enumerate(sentences) if s.strip()]
        self.report.empty = len(sentences) - len(todo)
        if not todo:
            return outputs
        encoded = self.encode([sentences[i] for i in todo])
        self.report.truncated_lines = [todo[j - 1] + 1 for j in self.report.truncated_lines]
        batches = self._batches(encoded)
        self._check_min_len(encoded, batches, todo)
        strategy = self.config.make_strategy()
        model = self._inference_model()
        device = next(model.parameters()).device
        with tqdm(total=len(todo), desc="generating", unit="sent", disable=not progress) as bar:
            for rows in batches:
                src = pad_tokens([encoded[j] for j in rows]).to(device)
                nbest = model.search(
                    src,
                    strategy,
                    self._max_len(src.shape[1]),
                    min_len=self.config.min_len,
                    compile=self.config.compile,
                )
                for j, hyps in zip(rows, nbest):
                    tokens = hyps[0].tokens if hyps else []
                    outputs[todo[j]] = self.tokenizers.target.decode(tokens)
                bar.update(len(rows))
        return outputs

    def _batches(self, encoded: list[list[int]]) -> list[list[int]]:
        """Indices into ``encoded`` grouped by length, at most ``batch_tokens`` padded tokens
        per group (a longer sentence alone)."""
        order = sorted(range(len(encoded)), key=lambda j: len(encoded[j]))
        batches, start = [], 0
        while start < len(order):
            stop = start + 1
            while (
                stop < len(order)
                and (stop - start + 1) * len(encoded[order[stop]]) <= self.config.batch_tokens
            ):
                stop += 1
            batches.append(order[start:stop])
            start = stop
        return batches

    def _max_len(self, source_length: int) -> int:
        """The output length limit for a batch of padded source length ``source_length`` (EOS
        included), as the model's search applies it (capped by the position table)."""
        limit = int(self.config.max_len_a * source_length + self.config.max_len_b)
        return min(limit, self.model.config.max_positions - 1)

    def _check_min_len(
        self, encoded: list[list[int]], batches: list[list[int]], todo: list[int]
    ) -> None:
        """Refuse, before decoding anything, a ``min_len`` above some batch's length limit."""
        for rows in batches:
            longest = rows[-1]  # a batch is in order of length
            length = len(encoded[longest])
            if self.config.min_len > (limit := self._max_len(length)):
                line = todo[longest] + 1
                raise ValueError(
                    f"generation.min_len {self.config.min_len} exceeds the output length limit "
                    f"{limit} of input line {line} (max_len_a {self.config.max_len_a} x "
                    f"{length} source tokens + max_len_b {self.config.max_len_b}, at most "
                    f"max_positions - 1 = {self.model.config.max_positions - 1}): lower the "
                    "minimum or raise the limit"
                )

    def _inference_model(self) -> Seq2Seq:
        precision = resolve_decode_precision(self.config.precision, _device(self.model))
        gemm = resolve_gemm(self.model, precision, self.config.gemm, self.config.compile)
        return inference_model(self.model, precision, gemm)


def resolve_decode_precision(
    precision: DecodePrecision, device: torch.device
) -> Literal["fp32", "bf16", "int8"]:
    """``precision`` with ``"auto"`` decided for ``device`` as ``train.precision: auto`` is:
    bf16 where it multiplies bf16 natively (:func:`odet.nn.has_native_bf16`), else fp32; an
    explicit bf16 where it is emulated warns as :func:`odet.nn.resolve_precision` does."""
    if precision == "int8":
        return precision
    return resolve_precision(precision, device)


INT8_ALSO: tuple[str, ...] = ("output_projection",)
"""Layers quantised by ``precision="int8"`` (and run by oneDNN under ``gemm="onednn"``) beside
attention and feed-forward (see ``results/multi30k/int8`` for the choice)."""


ONEDNN_MIN_WIDTH = 128
"""``generation.gemm: auto`` picks oneDNN from this model width on: narrower models decoded
slower with it than with PyTorch's GEMMs (``benchmarks/RESULTS.md``)."""


def resolve_gemm(
    model: Seq2Seq, precision: DecodePrecision, gemm: Gemm, compile: bool = False
) -> Gemm:
    """``"torch"`` or ``"onednn"``: ``gemm`` itself, or for ``"auto"`` oneDNN where it runs
    (an fp32 model at least :data:`ONEDNN_MIN_WIDTH` wide on the host, a PyTorch with
    oneDNN, decoded in fp32, not compiled), since
    there its packed GEMMs decode faster than PyTorch's default at every batch and beam size
    measured (``benchmarks/RESULTS.md``), and PyTorch elsewhere. A model that already is an
    int8 or oneDNN inference copy is decoded as it is."""
    if gemm != "auto":
        return gemm
    first = next(model.parameters())
    runs = (
        resolve_decode_precision(precision, first.device) == "fp32"
        and not compile
        and first.dtype == torch.float32
        and model.config.d_model >= ONEDNN_MIN_WIDTH
        and onednn_supported(first.device) is None
        and not any(isinstance(m, (Int8Linear, OneDNNLinear)) for m in model.modules())
    )
    return "onednn" if runs else "torch"


def inference_model(model: Seq2Seq, precision: DecodePrecision, gemm: Gemm = "torch") -> Seq2Seq:
    """``model`` at a decoding precision: itself (fp32), or a bf16, int8 or oneDNN-GEMM copy
    that leaves ``model`` untouched, since the trainer validates with the model it is
    training. ``gemm="auto"`` is resolved by :func:`resolve_gemm` (without compilation)."""
    precision = resolve_decode_precision(precision, _device(model))
    gemm = resolve_gemm(model, precision, gemm)
    if precision == "bf16" and _dtype(model) != torch.bfloat16:
        return copy.deepcopy(model).to(torch.bfloat16)
    if precision == "int8":
        return int8_copy(model, INT8_ALSO)
    if gemm == "onednn":
        return onednn_copy(model, INT8_ALSO)
    return model


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def load_model_and_tokenizers(
    path: str | Path, which: str = "best"
) -> tuple[Seq2Seq, TokenizerPair]:
    """The model and tokenizers of a model directory, or of the ``best``/``last`` checkpoint of
    a training run (:func:`~odet.inference.checkpoint.resolve_model_dir`)."""
    model_dir = resolve_model_dir(path, which, model_type="seq2seq")
    return Seq2Seq.from_pretrained(model_dir), TokenizerPair.load(model_dir)


def generation_defaults(path: str | Path, which: str = "best") -> GenerationConfig:
    """The ``generation`` section of the training config stored with a checkpoint (the search
    settings the model was validated with), or the library defaults when there is none."""
    config_file = resolve_model_dir(path, which) / CONFIG_NAME
    if not config_file.is_file():
        return GenerationConfig()
    try:
        data = parse_yaml(config_file.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{config_file} is corrupt: {type(err).__name__}") from None
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{config_file} is not a training config (a {type(data).__name__}, not a mapping)"
        )
    return from_dict(GenerationConfig, data.get("generation") or {}, where="generation")
