"""Generation, model-agnostic: search strategies split from the decoding loop.

Nothing here knows a model: models implement the decoder protocol and build on this package
(``Seq2Seq.generate``); text in, text out with a trained model is :mod:`odet.inference`.

- :mod:`~odet.generation.decoder` — :class:`IncrementalDecoder`, the protocol a model implements
  (``step(prefix) -> (N, V) log-probs`` and ``reorder(index, rows_per_source)``).
- :mod:`~odet.generation.strategies` — :class:`Greedy`, :class:`BeamSearch`, :class:`Sampling`
  and :func:`make_strategy`, the one builder of a strategy from settings: each strategy turns
  masked log-probabilities into ranked candidates.
- :mod:`~odet.generation.loop` — :func:`generate`: constraints, finished hypotheses, shrinking
  the batch and reordering the decoder, shared by every strategy.
- :mod:`~odet.generation.config` — :class:`GenerationConfig`, decoding settings as a config.

Example::

    hyps = generate(decoder, batch_size=B, strategy=BeamSearch(beam_size=4, length_penalty=0.6),
                    bos_id=2, eos_id=3, pad_id=0, max_len=128)
    best_tokens = [nbest[0].tokens for nbest in hyps]
"""

from odet.generation.config import (
    DECODE_PRECISIONS,
    GEMMS,
    DecodePrecision,
    Gemm,
    GenerationConfig,
)
from odet.generation.decoder import IncrementalDecoder
from odet.generation.loop import Hypothesis, generate
from odet.generation.strategies import (
    STRATEGIES,
    BeamSearch,
    Greedy,
    Sampling,
    SearchStrategy,
    Selection,
    StrategyName,
    ban_repeated_ngrams,
    length_normalise,
    make_strategy,
)

__all__ = [
    "DECODE_PRECISIONS",
    "GEMMS",
    "STRATEGIES",
    "BeamSearch",
    "DecodePrecision",
    "Gemm",
    "GenerationConfig",
    "Greedy",
    "Hypothesis",
    "IncrementalDecoder",
    "Sampling",
    "SearchStrategy",
    "Selection",
    "StrategyName",
    "ban_repeated_ngrams",
    "generate",
    "length_normalise",
    "make_strategy",
]
