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
from typing import Literal

import torch
from tqdm import tqdm

from odet.config import check, check_types
from odet.data import EOS_ID, TokenizerPair, pad_tokens
from odet.generation.strategies import BeamSearch, Greedy, Sampling, SearchStrategy
from odet.models import Seq2Seq


@dataclass(frozen=True)
class GenerationConfig:
    """Search settings (``max_len = max_len_a · source_length + max_len_b``).

    ``precision="bf16"`` decodes with a bfloat16 copy of the model (scores are summed in fp32):
    1.4× (d256) to 2.6× (d512) faster on this AVX-512-BF16 CPU, with the same translations up to
    near-ties (benchmarks/RESULTS.md, results/multi30k/decode-precision/).
    """

    strategy: Literal["beam", "greedy", "sample"] = "beam"
    beam_size: int = 5
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    min_len: int = 0
    no_repeat_ngram_size: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    batch_tokens: int = 4096
    precision: Literal["fp32", "bf16"] = "fp32"

    def __post_init__(self) -> None:
        check_types(self)
        check(self.beam_size >= 1, "generation.beam_size must be >= 1")
        check(self.max_len_a >= 0 and self.max_len_b >= 0, "generation.max_len_a/b must be >= 0")
        check(self.min_len >= 0, "generation.min_len must be >= 0")
        check(self.no_repeat_ngram_size >= 0, "generation.no_repeat_ngram_size must be >= 0")
        check(self.batch_tokens >= 16, "generation.batch_tokens must be >= 16")
        check(self.temperature > 0, "generation.temperature must be > 0")
        check(0 < self.top_p <= 1, "generation.top_p must lie in (0, 1]")
        check(self.top_k >= 0, "generation.top_k must be >= 0")

    def make_strategy(self) -> SearchStrategy:
        if self.strategy == "sample":
            return Sampling(
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                length_penalty=self.length_penalty,
                generator=torch.Generator().manual_seed(self.seed),
            )
        if self.strategy == "greedy" or (self.beam_size == 1 and not self.no_repeat_ngram_size):
            return Greedy(length_penalty=self.length_penalty)
        return BeamSearch(
            beam_size=self.beam_size,
            length_penalty=self.length_penalty,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
        )


@dataclass
class TranslationReport:
    """What happened to the inputs: counts of empty and truncated lines."""

    sentences: int = 0
    empty: int = 0
    truncated: int = 0
    truncated_lines: list[int] = field(default_factory=list)


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
        cls, path: str, which: str = "best", config: GenerationConfig | None = None
    ) -> Translator:
        """Load a model directory, or the best/last checkpoint of a training run."""
        from odet.training.checkpoint import resolve_model_dir

        model_dir = resolve_model_dir(path, which)
        return cls(Seq2Seq.from_pretrained(model_dir), TokenizerPair.load(model_dir), config)

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
            encoded.append([*ids, EOS_ID])
        return encoded

    @torch.no_grad()
    def translate(self, sentences: Sequence[str], *, progress: bool = False) -> list[str]:
        """Translate ``sentences`` (any order of lengths); outputs in the input order."""
        self.report = TranslationReport(sentences=len(sentences))
        outputs = [""] * len(sentences)
        todo = [i for i, s in enumerate(sentences) if s.strip()]
        self.report.empty = len(sentences) - len(todo)
        if not todo:
            return outputs
        encoded = self.encode([sentences[i] for i in todo])
        order = sorted(range(len(todo)), key=lambda j: len(encoded[j]))
        strategy = self.config.make_strategy()
        model = self._inference_model()
        device = next(model.parameters()).device
        with tqdm(total=len(todo), desc="generating", unit="sent", disable=not progress) as bar:
            start = 0
            while start < len(order):
                stop = start + 1
                while (
                    stop < len(order)
                    and (stop - start + 1) * len(encoded[order[stop]]) <= self.config.batch_tokens
                ):
                    stop += 1
                rows = order[start:stop]
                src = pad_tokens([encoded[j] for j in rows]).to(device)
                max_len = int(self.config.max_len_a * src.shape[1] + self.config.max_len_b)
                nbest = model.search(src, strategy, max_len, min_len=self.config.min_len)
                for j, hyps in zip(rows, nbest):
                    tokens = hyps[0].tokens if hyps else []
                    outputs[todo[j]] = self.tokenizers.target.decode(tokens)
                bar.update(len(rows))
                start = stop
        return outputs

    def _inference_model(self) -> Seq2Seq:
        """The model in the configured precision; a bf16 copy leaves ``self.model`` untouched,
        since the trainer validates with the model it is training."""
        if self.config.precision == "bf16" and _dtype(self.model) != torch.bfloat16:
            return copy.deepcopy(self.model).to(torch.bfloat16)
        return self.model


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def generation_defaults(path: str, which: str = "best") -> GenerationConfig:
    """The ``generation`` section of the training config stored with a checkpoint (the search
    settings the model was validated with), or the library defaults when there is none."""
    import yaml

    from odet.config import from_dict
    from odet.training.checkpoint import resolve_model_dir

    config_file = resolve_model_dir(path, which) / "train_config.yaml"
    if not config_file.is_file():
        return GenerationConfig()
    data = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    return from_dict(GenerationConfig, data.get("generation") or {}, where="generation")
