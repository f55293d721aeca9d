"""Search strategies: how the next tokens are chosen, separate from the decoding loop.

The loop (:mod:`odet.generation.loop`) organises the rows it decodes into *groups*: a group is
the set of ``K`` rows (:attr:`SearchStrategy.rows_per_group`) that compete for the same output,
and each source sentence owns :attr:`SearchStrategy.groups_per_sentence` independent groups. Beam
search uses one group of ``beam_size`` rows per sentence; greedy search one group of one row;
sampling ``num_return`` groups of one row each (independent samples).

At every step the loop hands a strategy the log-probabilities ``(G, K, V)`` of the ``G`` active
groups, the running log-probabilities ``(G, K)`` and the prefixes ``(G, K, t)``, already masked
for the loop's own constraints (min/max length, PAD/BOS). The strategy answers with a
:class:`Selection`: ``M ≥ K`` candidates per group, best first, each a ``(origin row, token)``
pair with its log-probability. The loop then does everything that does not depend on the
strategy: it finalises the EOS candidates ranked among the first ``K``, keeps the first ``K``
other candidates as the next rows, asks :meth:`SearchStrategy.is_done` whether a group is
finished, and calls ``decoder.reorder``. Strategies are therefore small, stateless (except for
a sampler's random generator) and unit-testable on tensors alone, and a new strategy needs no
change to the loop (the same split as fairseq's search and sequence generator).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = [
    "STRATEGIES",
    "BeamSearch",
    "Greedy",
    "Sampling",
    "SearchStrategy",
    "Selection",
    "StrategyName",
    "ban_repeated_ngrams",
    "length_normalise",
    "make_strategy",
]


def length_normalise(log_prob: float, length: int, length_penalty: float) -> float:
    """Ranking score ``log_prob / length ** length_penalty`` (fairseq's convention).

    ``length`` counts the generated tokens *and* the final EOS, so it is at least 1 and the
    empty hypothesis is well defined. ``length_penalty`` 0 ranks by total log-probability;
    larger values favour longer hypotheses.
    """
    if length < 1:
        raise ValueError(f"length must be >= 1 (it counts EOS), got {length}")
    return log_prob / length**length_penalty


def ban_repeated_ngrams(log_probs: Tensor, prefix: Tensor, n: int) -> Tensor:
    """Set to ``-inf`` every token that would complete an ``n``-gram already in its row.

    ``log_probs`` is ``(N, V)`` and ``prefix`` ``(N, t)``; returns a new ``(N, V)`` tensor. The
    n-grams are all windows of the prefix, which is then extended by the last ``n − 1`` tokens
    plus the candidate token (vectorised over rows and windows; BOS occurs only at position 0,
    so including it never bans anything spurious).
    """
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    t = prefix.size(1)
    if t < n:
        return log_probs
    windows = prefix.unfold(1, n, 1)  # (N, t - n + 1, n)
    context = prefix[:, t - n + 1 :]  # (N, n - 1)
    matches = (windows[:, :, :-1] == context.unsqueeze(1)).all(dim=-1)  # (N, t - n + 1)
    counts = torch.zeros(log_probs.shape, dtype=torch.long, device=log_probs.device)
    counts.scatter_add_(1, windows[:, :, -1], matches.long())
    return log_probs.masked_fill(counts > 0, -math.inf)


@dataclass(frozen=True)
class Selection:
    """The candidates a strategy proposes for each of ``G`` groups, best first.

    ``tokens``: ``(G, M)`` next tokens; ``origins``: ``(G, M)`` index of the row (within the
    group) each candidate extends; ``log_probs``: ``(G, M)`` log-probability of the token under
    the masked model distribution (``-inf`` for a banned token), which the loop adds to the
    origin's running score.
    """

    tokens: Tensor
    origins: Tensor
    log_probs: Tensor

    def __post_init__(self) -> None:
        shape = self.tokens.shape
        if self.tokens.dim() != 2 or self.origins.shape != shape or self.log_probs.shape != shape:
            raise ValueError(
                "Selection tensors must all be (G, M); got tokens "
                f"{tuple(self.tokens.shape)}, origins {tuple(self.origins.shape)}, "
                f"log_probs {tuple(self.log_probs.shape)}"
            )


class SearchStrategy(ABC):
    """Chooses candidate continuations for groups of rows; see the module docstring.

    Subclasses are frozen dataclasses with the two fields below.
    """

    length_penalty: float
    """Exponent of the length normalisation of the ranking score (:func:`length_normalise`)."""
    num_return: int
    """Length of the n-best list returned per source sentence (at most)."""

    @property
    @abstractmethod
    def rows_per_group(self) -> int:
        """``K``: rows kept alive per group after every step."""

    @property
    @abstractmethod
    def groups_per_sentence(self) -> int:
        """Independent groups decoded for each source sentence."""

    @abstractmethod
    def select(self, log_probs: Tensor, scores: Tensor, prefixes: Tensor) -> Selection:
        """Propose candidates for each group.

        ``log_probs``: ``(G, K_in, V)``; ``scores``: ``(G, K_in)`` running log-probabilities;
        ``prefixes``: ``(G, K_in, t)``. ``K_in`` is 1 at the first step and ``K`` afterwards.
        The result must hold ``M ≥ K`` candidates per group with at least ``K`` non-EOS among
        them, unless a group's EOS candidates in the first ``K`` ranks finish it.
        """

    @abstractmethod
    def is_done(
        self, finished: Sequence[float], best_live_log_prob: float, live_length: int, max_len: int
    ) -> bool:
        """Whether a group can stop.

        ``finished``: ranking scores of its finished hypotheses, best first;
        ``best_live_log_prob``: the highest running log-probability of its live rows, which hold
        ``live_length`` generated tokens and may grow to ``max_len`` (plus EOS).
        """

    def score(self, log_prob: float, length: int) -> float:
        """Ranking score of a finished hypothesis of ``length`` tokens including EOS."""
        return length_normalise(log_prob, length, self.length_penalty)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


SEED_LIMIT = 2**64 - 1
"""The largest seed a ``torch.Generator`` takes."""


def check_generator_seed(seed: object) -> int:
    """``seed`` if it is an int in ``[0, 2**64 − 1]`` (what ``torch.Generator.manual_seed``
    takes; it wraps negative seeds and fails on larger ones with an overflow), else a
    ``ValueError``. A seed passed in code; configs' seeds are narrower
    (:func:`odet.config.check_seed`: NumPy and Python are seeded from them too)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_LIMIT:
        raise ValueError(f"seed must be an integer in [0, 2**64 - 1], got {seed!r}")
    return seed


def check_flag(name: str, value: object) -> None:
    """Raise ``TypeError`` unless ``value`` is True or False (a string such as ``"no"`` is
    truthy and would silently mean True)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _check_finite(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class Greedy(SearchStrategy):
    """Arg-max decoding: one row per sentence, finished at its first EOS."""

    length_penalty: float = 1.0
    num_return: int = field(default=1, init=False)

    def __post_init__(self) -> None:
        _check_finite("length_penalty", self.length_penalty)

    @property
    def rows_per_group(self) -> int:
        return 1

    @property
    def groups_per_sentence(self) -> int:
        return 1

    def select(self, log_probs: Tensor, scores: Tensor, prefixes: Tensor) -> Selection:
        best, tokens = _top_continuations(log_probs, log_probs.new_zeros(log_probs.shape[:2]), 1)
        return Selection(tokens=tokens, origins=torch.zeros_like(tokens), log_probs=best)

    def is_done(
        self, finished: Sequence[float], best_live_log_prob: float, live_length: int, max_len: int
    ) -> bool:
        return len(finished) >= 1


@dataclass(frozen=True)
class BeamSearch(SearchStrategy):
    """Beam search over ``beam_size`` rows per sentence, batched over sentences.

    Each step ranks the ``2 · beam_size`` best continuations of all beams by running
    log-probability; EOS candidates among the first ``beam_size`` ranks become finished
    hypotheses (ranked by :func:`length_normalise`), the best ``beam_size`` others the next
    beams. With ``early_stopping=True`` (fairseq, HF) a sentence stops once it has
    ``beam_size`` finished hypotheses. With ``False`` it stops only when no live beam can still
    beat its ``num_return``-th best finished hypothesis — an exact bound, since log-probabilities
    only fall as a beam grows and the length term is monotone in the final length, which lies
    between the next step and ``max_len`` + 1.
    ``no_repeat_ngram_size`` > 0 bans any token that would repeat an n-gram of the hypothesis.
    """

    beam_size: int
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    num_return: int = 1
    early_stopping: bool = True

    def __post_init__(self) -> None:
        _check_int("beam_size", self.beam_size, 1)
        _check_finite("length_penalty", self.length_penalty)
        _check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        _check_int("num_return", self.num_return, 1)
        if self.num_return > self.beam_size:
            raise ValueError(
                f"num_return must be <= beam_size ({self.beam_size}), got {self.num_return}"
            )
        if not isinstance(self.early_stopping, bool):
            raise ValueError(f"early_stopping must be True or False, got {self.early_stopping!r}")

    @property
    def rows_per_group(self) -> int:
        return self.beam_size

    @property
    def groups_per_sentence(self) -> int:
        return 1

    def select(self, log_probs: Tensor, scores: Tensor, prefixes: Tensor) -> Selection:
        G, K_in, V = log_probs.shape
        if K_in * (V - 1) < self.beam_size:
            raise ValueError(
                f"beam_size {self.beam_size} needs a vocabulary of at least "
                f"{self.beam_size + 1} tokens, got {V}"
            )
        if self.no_repeat_ngram_size > 0:
            flat = ban_repeated_ngrams(
                log_probs.reshape(G * K_in, V),
                prefixes.reshape(G * K_in, -1),
                self.no_repeat_ngram_size,
            )
            log_probs = flat.view(G, K_in, V)
        M = min(2 * self.beam_size, K_in * V)
        _, flat = _top_continuations(log_probs, scores, M)
        return Selection(
            tokens=flat % V,
            origins=flat // V,
            log_probs=log_probs.reshape(G, K_in * V).gather(1, flat),
        )

    def is_done(
        self, finished: Sequence[float], best_live_log_prob: float, live_length: int, max_len: int
    ) -> bool:
        if self.early_stopping:
            return len(finished) >= self.beam_size
        if len(finished) < self.num_return:
            return False
        return (
            self._best_reachable(best_live_log_prob, live_length, max_len)
            <= finished[self.num_return - 1]
        )

    def _best_reachable(self, log_prob: float, live_length: int, max_len: int) -> float:
        """Upper bound on the score of any hypothesis extending a live beam (log_prob ≤ 0)."""
        length = max_len + 1 if self.length_penalty > 0 else live_length + 1
        return length_normalise(log_prob, length, self.length_penalty)


_CHUNK = 16
"""Tokens per chunk in :func:`_top_continuations`' first pass."""


def _top_continuations(log_probs: Tensor, scores: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """The ``m`` best running scores ``scores[g, k] + log_probs[g, k, v]`` of each group, sorted.

    ``log_probs``: ``(G, K, V)``; ``scores``: ``(G, K)``. Returns the sums ``(G, m)`` and their
    indices into the flattened ``K · V`` continuations. The same as a top-k over every sum, to
    the order of exact ties, without writing the ``K · V`` sums: the vocabulary is cut into
    strided chunks of :data:`_CHUNK` tokens, a chunk's best sum is its row's score plus the
    chunk's maximum (rounding is monotone), and the ``m`` best sums lie in the ``m`` chunks
    with the best maxima (plus the tokens past the last whole chunk), so only those are ranked.
    A max-reduction is much cheaper per value than ``torch.topk``'s partial sort, so the two
    passes beat one top-k (``benchmarks/RESULTS.md``, "Quiet machine after the beam's ranking").
    """
    G, K, V = log_probs.shape
    n = V // _CHUNK  # chunk j of a row holds tokens j, j + n, j + 2n, ...
    if n < m:
        total = (scores.unsqueeze(-1) + log_probs).view(G, K * V)
        return total.topk(m, dim=-1)
    head = log_probs[..., : n * _CHUNK].reshape(G, K, _CHUNK, n)
    best = (head.amax(2) + scores.unsqueeze(-1)).view(G, K * n)
    chunk = best.topk(m, dim=-1).indices  # (G, m) as row · n + j
    offsets = torch.arange(0, n * _CHUNK, n, device=log_probs.device)
    flat = ((chunk // n * V + chunk % n).unsqueeze(-1) + offsets).view(G, m * _CHUNK)
    if n * _CHUNK < V:
        tail = torch.arange(n * _CHUNK, V, device=log_probs.device)
        tail = (torch.arange(K, device=log_probs.device).unsqueeze(-1) * V + tail).view(1, -1)
        flat = torch.cat([flat, tail.expand(G, -1)], dim=1)
    total = scores.gather(1, flat // V) + log_probs.reshape(G, K * V).gather(1, flat)
    top = total.topk(m, dim=-1)
    return top.values, flat.gather(1, top.indices)


@dataclass(frozen=True)
class Sampling(SearchStrategy):
    """Ancestral sampling with temperature, top-k and nucleus (top-p) truncation.

    Each of the ``num_return`` samples per sentence is an independent group of one row. The
    token is drawn from ``softmax(log_probs / temperature)`` restricted to the ``top_k`` most
    likely tokens (0: no limit) and to the smallest set whose probability reaches ``top_p``;
    the hypothesis' scores use the model's untempered log-probabilities. ``generator`` (on the
    device of the log-probabilities) makes runs reproducible; ``None`` uses torch's global RNG.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    num_return: int = 1
    length_penalty: float = 1.0
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        _check_finite("temperature", self.temperature)
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        _check_int("top_k", self.top_k, 0)
        _check_finite("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        _check_int("num_return", self.num_return, 1)
        _check_finite("length_penalty", self.length_penalty)
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {self.generator!r}")

    @property
    def rows_per_group(self) -> int:
        return 1

    @property
    def groups_per_sentence(self) -> int:
        return self.num_return

    def select(self, log_probs: Tensor, scores: Tensor, prefixes: Tensor) -> Selection:
        model = log_probs[:, 0]  # (G, V)
        logits = self.truncate(self.temper(model))
        # A row whose every token is banned has nothing to sample; any token keeps score -inf.
        logits = logits.masked_fill(~torch.isfinite(logits).any(-1, keepdim=True), 0.0)
        tokens = torch.multinomial(logits.softmax(-1), 1, generator=self.generator)  # (G, 1)
        return Selection(
            tokens=tokens, origins=torch.zeros_like(tokens), log_probs=model.gather(1, tokens)
        )

    def temper(self, logits: Tensor) -> Tensor:
        """``(N, V)`` logits divided by the temperature, each row shifted to a maximum of 0
        first, so that a tiny temperature (or one whose quotient overflows) keeps the best
        tokens at 0 and sends the others to ``-inf`` instead of making NaNs."""
        if self.temperature == 1.0:
            return logits
        shifted = logits - logits.amax(-1, keepdim=True)
        return (shifted / self.temperature).masked_fill(shifted == 0, 0.0)

    def truncate(self, logits: Tensor) -> Tensor:
        """``(N, V)`` logits with the tokens outside the top-k / top-p sets set to ``-inf``."""
        if 0 < self.top_k < logits.size(-1):
            kth = logits.topk(self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        if self.top_p < 1:
            ordered, order = logits.sort(dim=-1, descending=True)
            probs = ordered.softmax(-1)
            # Drop a token once the more likely ones already reach top_p (never the best one:
            # nothing precedes it).
            drop = probs.cumsum(-1) - probs >= self.top_p
            logits = logits.masked_fill(drop.scatter(1, order, drop), -math.inf)
        return logits

    def is_done(
        self, finished: Sequence[float], best_live_log_prob: float, live_length: int, max_len: int
    ) -> bool:
        return len(finished) >= 1


StrategyName = Literal["greedy", "beam", "sample"]

STRATEGIES: dict[str, type[SearchStrategy]] = {
    "greedy": Greedy,
    "beam": BeamSearch,
    "sample": Sampling,
}


def make_strategy(name: StrategyName, **options: Any) -> SearchStrategy:
    """Build a strategy by name, e.g. ``make_strategy("beam", beam_size=4, length_penalty=0.6)``.

    The one place a strategy is built from settings (``GenerationConfig``, ``Seq2Seq.generate``
    and tests all call it). Options are the strategy's constructor fields; ``"sample"`` also
    takes ``seed`` (an int) instead of a ``generator``, so a strategy can be described by plain
    config values. A beam of one that stops at its first hypothesis and bans no n-grams is
    :class:`Greedy` (the same hypotheses without the beam bookkeeping). Unknown names and
    options raise ``ValueError`` listing the allowed ones.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    cls = STRATEGIES[name]
    allowed = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]
    if name == "sample" and "seed" in options:
        if options.get("generator") is not None:
            raise ValueError("give either seed or generator to the 'sample' strategy, not both")
        seed = check_generator_seed(options.pop("seed"))
        options["generator"] = torch.Generator().manual_seed(seed)
    unknown = sorted(set(options) - allowed)
    if unknown:
        extra = " (or seed)" if name == "sample" else ""
        raise ValueError(
            f"unknown option(s) {unknown} for strategy {name!r}; allowed: {sorted(allowed)}{extra}"
        )
    strategy = cls(**options)
    if (
        isinstance(strategy, BeamSearch)
        and strategy.beam_size == 1
        and strategy.early_stopping
        and strategy.no_repeat_ngram_size == 0
    ):
        return Greedy(length_penalty=strategy.length_penalty)
    return strategy
