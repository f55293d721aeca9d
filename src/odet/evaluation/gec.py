"""Grammatical error correction metrics: JFLEG's GLEU and the CoNLL-14 MaxMatch (M2) F0.5.

Both are written here rather than wrapped. No maintained, pure-Python package provides the
MaxMatch scorer: the NUS ``m2scorer`` is a Python 2 script that is not on PyPI, and ``errant`` /
``gec-metrics`` need spaCy models. GLEU is a few lines of counting; writing it here lets it follow
JFLEG's script exactly, down to the Python 2 reference draws, which move the second decimal.
Both follow the official scripts step by step (tie-breaking included), so that scores are
comparable with published numbers.

Texts are whitespace-tokenized (``str.split``), as in both official scripts: pass tokenized
sentences. Scores are ×100.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from odet.data.checks import check_int, check_real
from odet.data.m2 import M2Sentence
from odet.evaluation.checks import check_not_empty, check_references, check_texts

__all__ = [
    "GLEUResult",
    "M2Result",
    "corpus_gleu",
    "m2_score",
    "sentence_gleu",
]

# --------------------------------------------------------------------------------------------
# GLEU (Napoles et al. 2015, updated 2016 for multiple references; JFLEG's eval/gleu.py)
# --------------------------------------------------------------------------------------------

_Ngrams = Counter[tuple[str, ...]]


@dataclass(frozen=True)
class GLEUResult:
    """Corpus GLEU: mean and standard deviation over the reference-sampling iterations, ×100."""

    score: float
    std: float
    ci95: tuple[float, float]  # normal-approximation 95% interval, as the official script prints
    num_iterations: int
    num_sentences: int

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 100.0 + 1e-9:
            raise ValueError(f"GLEU score must lie in [0, 100], got {self.score}")
        if self.num_iterations < 1 or self.num_sentences < 1:
            raise ValueError(
                f"need >= 1 iteration and sentence, got {self.num_iterations}, {self.num_sentences}"
            )


def _ngrams(tokens: Sequence[str], n: int) -> _Ngrams:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) + 1 - n))


def _gleu_stats(
    source: Sequence[str], hypothesis: Sequence[str], reference: Sequence[str], order: int
) -> list[int]:
    """``[c, r, m_1, d_1, ..., m_order, d_order]`` for one hypothesis and one reference.

    ``m_n = max(0, |H ∩ R| − |H ∩ (S \\ R)|)``, where ``S \\ R`` keeps the source n-grams whose
    type never occurs in the reference (with their source counts) and ∩ is clipped (min) counting;
    ``d_n = max(0, c + 1 − n)``: precision is over the hypothesis n-grams.
    """
    stats = [len(hypothesis), len(reference)]
    for n in range(1, order + 1):
        h, s, r = _ngrams(hypothesis, n), _ngrams(source, n), _ngrams(reference, n)
        source_only = Counter({g: k for g, k in s.items() if g not in r})
        matched = sum((h & r).values()) - sum((h & source_only).values())
        stats += [max(matched, 0), max(len(hypothesis) + 1 - n, 0)]
    return stats


def _gleu_from_stats(stats: Sequence[float], order: int, smooth: bool = False) -> float:
    """GLEU in [0, 1] from (summed) statistics: BLEU-style brevity penalty × geometric mean."""
    if smooth:
        stats = [s if s != 0 else 1 for s in stats]
    if any(s == 0 for s in stats):
        return 0.0
    c, r = stats[0], stats[1]
    log_precision = sum(math.log(m / d) for m, d in zip(stats[2::2], stats[3::2], strict=True))
    return math.exp(min(0.0, 1.0 - r / c) + log_precision / order)


def _check_parallel(
    sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[Sequence[str]]
) -> None:
    check_texts(sources, "sources")
    check_texts(hypotheses, "hypotheses")
    check_references(references)
    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(
            f"got {len(sources)} sources, {len(hypotheses)} hypotheses and "
            f"{len(references)} reference entries; they must be line-aligned"
        )
    if not sources:
        raise ValueError("cannot score an empty corpus")
    for i, refs in enumerate(references):
        if isinstance(refs, str) or not refs:
            raise ValueError(
                f"references[{i}] must be a non-empty sequence of reference strings, got {refs!r}"
            )


def _reference_choices(num_refs: Sequence[int], num_iterations: int) -> np.ndarray:
    """``(iterations, sentences)`` reference indices, exactly as JFLEG's gleu.py draws them.

    Iteration ``j`` reseeds Python's Mersenne Twister with ``j * 101`` and draws one index per
    sentence with ``random.randint(0, R - 1)``. The published numbers were computed under
    Python 2, whose ``randint`` is ``int(random() * R)``; Python 3's ``randint`` draws
    differently from the same seed, so the Python 2 rule is reproduced explicitly.
    """
    choices = np.empty((num_iterations, len(num_refs)), dtype=np.int64)
    for j in range(num_iterations):
        rng = random.Random(j * 101)
        choices[j] = [int(rng.random() * r) for r in num_refs]
    return choices


def corpus_gleu(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    num_iterations: int = 500,
    order: int = 4,
) -> GLEUResult:
    """Corpus GLEU of JFLEG's official ``eval/gleu.py`` (the 2016 multi-reference version).

    Algorithm, as in the script (default mode, not ``--sent``):

    1. For every sentence ``i`` and each of its references ``r``, collect
       ``[c, r, m_1, d_1, ..., m_4, d_4]`` (`_gleu_stats`): hypothesis and reference lengths,
       and per order ``n`` the hypothesis n-grams found in the reference *minus* those that occur
       in the source but not in the reference (the penalty for keeping an error the reference
       corrected), over the number of hypothesis n-grams.
    2. For each of ``num_iterations`` iterations, pick one reference per sentence at random
       (seed ``101 * iteration``, Python 2 ``randint``; deterministic), sum the statistics of the
       picked references over the corpus, and compute
       ``GLEU = min(1, exp(1 − r/c)) · exp(mean_n log(m_n / d_n))`` (0 if any statistic is 0).
    3. Report the mean over iterations (and the population std and normal 95% interval).

    ``references[i]`` holds the references of sentence ``i`` (JFLEG: 4 per sentence). With one
    reference, every iteration is identical. The script always divides the log-precision sum by
    4; here it is divided by ``order`` (identical at the default ``order=4``).
    """
    _check_parallel(sources, hypotheses, references)
    check_int(num_iterations, "num_iterations", None)
    check_int(order, "order", None)
    if num_iterations < 1 or order < 1:
        raise ValueError(f"need num_iterations >= 1 and order >= 1, got {num_iterations}, {order}")
    width = 2 + 2 * order
    max_refs = max(len(refs) for refs in references)
    # (N, R, width): statistics of every sentence against each of its references (0-padded).
    per_ref = np.zeros((len(sources), max_refs, width), dtype=np.int64)
    for i, (src, hyp, refs) in enumerate(zip(sources, hypotheses, references, strict=True)):
        s, h = src.split(), hyp.split()
        for k, ref in enumerate(refs):
            per_ref[i, k] = _gleu_stats(s, h, ref.split(), order)
    choices = _reference_choices([len(refs) for refs in references], num_iterations)  # (J, N)
    totals = per_ref[np.arange(len(sources))[None, :], choices].sum(axis=1)  # (J, width)
    scores = np.array([_gleu_from_stats(t.tolist(), order) for t in totals])
    mean, std = float(scores.mean()), float(scores.std())
    half = 1.959963984540054 * std  # scipy.stats.norm.interval(0.95, mean, std)
    return GLEUResult(
        score=100.0 * mean,
        std=100.0 * std,
        ci95=(100.0 * (mean - half), 100.0 * (mean + half)),
        num_iterations=num_iterations,
        num_sentences=len(sources),
    )


def sentence_gleu(
    source: str, hypothesis: str, references: Sequence[str], *, order: int = 4
) -> float:
    """Sentence GLEU of the script's ``--sent`` mode, ×100.

    The mean over references of the smoothed single-reference GLEU (zero statistics, lengths
    included, are replaced by 1 before the formula).
    """
    _check_parallel([source], [hypothesis], [references])
    check_int(order, "order", 1)
    s, h = source.split(), hypothesis.split()
    values = [
        _gleu_from_stats(_gleu_stats(s, h, ref.split(), order), order, smooth=True)
        for ref in references
    ]
    return 100.0 * sum(values) / len(values)


# --------------------------------------------------------------------------------------------
# MaxMatch (M2) scorer (Dahlmeier & Ng 2012; the CoNLL-2013/14 official scorer)
# --------------------------------------------------------------------------------------------

Vertex = tuple[int, int]  # (source position, hypothesis position) in the Levenshtein matrix
Arc = tuple[Vertex, Vertex]
# (kind, start, end, original, correction, unchanged words): kind in ins / del / sub / noop.
_Edit = tuple[str, int, int, str, str, int]
_Gold = tuple[int, int, str, tuple[str, ...]]  # (start, end, original, corrections)
_EPSILON = 0.001


@dataclass(frozen=True)
class M2Result:
    """Corpus MaxMatch precision, recall and F_beta (×100) with the edit counts behind them."""

    precision: float
    recall: float
    f_score: float
    beta: float
    correct: int
    proposed: int
    gold: int

    def __post_init__(self) -> None:
        if not 0 <= self.correct <= self.gold or self.proposed < 0:
            raise ValueError(
                f"need 0 <= correct <= gold and proposed >= 0; got {self.correct}, "
                f"{self.proposed}, {self.gold}"
            )
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


def _levenshtein_lattice(
    source: Sequence[str], hypothesis: Sequence[str], sub_cost: int
) -> tuple[list[Vertex], list[Arc], dict[Arc, _Edit]]:
    """Arcs of all minimal-cost alignments (insertion/deletion cost 1), found from the end back.

    Vertices are listed in breadth-first order from the end vertex; every arc has length 1.
    Insertions before the first source token are anchored at position 0.
    """
    n, m = len(source), len(hypothesis)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    back: dict[Vertex, list[tuple[Vertex, _Edit]]] = {}
    for i in range(1, n + 1):
        cost[i][0] = i
        back[(i, 0)] = [((i - 1, 0), ("del", i - 1, i, source[i - 1], "", 0))]
    for j in range(1, m + 1):
        cost[0][j] = j
        back[(0, j)] = [((0, j - 1), ("ins", 0, 0, "", hypothesis[j - 1], 0))]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            same = source[i - 1] == hypothesis[j - 1]
            diagonal = cost[i - 1][j - 1] + (0 if same else sub_cost)
            deletion, insertion = cost[i - 1][j] + 1, cost[i][j - 1] + 1
            best = min(diagonal, deletion, insertion)
            cost[i][j] = best
            options = back[(i, j)] = []
            if diagonal == best:
                kind, unchanged = ("noop", 1) if same else ("sub", 0)
                edit = (kind, i - 1, i, source[i - 1], hypothesis[j - 1], unchanged)
                options.append(((i - 1, j - 1), edit))
            if deletion == best:
                options.append(((i - 1, j), ("del", i - 1, i, source[i - 1], "", 0)))
            if insertion == best:
                options.append(((i, j - 1), ("ins", i, i, "", hypothesis[j - 1], 0)))
    vertices: list[Vertex] = []
    arcs: list[Arc] = []
    edits: dict[Arc, _Edit] = {}
    queue = [(n, m)]
    seen: set[Vertex] = set()
    while queue:
        v = queue.pop(0)
        if v in seen:
            continue
        seen.add(v)
        vertices.append(v)
        for u, edit in back.get(v, []):
            arcs.append((u, v))
            edits[(u, v)] = edit
            if u not in queue:
                queue.append(u)
    return vertices, arcs, edits


def _merge_edits(first: _Edit, second: _Edit) -> _Edit:
    """The edit of two consecutive arcs (official ``merge_edits``): spans and strings joined."""
    kind1, start, _, orig1, corr1, unchanged1 = first
    kind2, _, end, orig2, corr2, unchanged2 = second
    kind = kind1 if kind1 == kind2 and kind1 in ("ins", "del", "noop") else "sub"
    original = " ".join(x for x in (orig1, orig2) if x)
    correction = " ".join(x for x in (corr1, corr2) if x)
    return (kind, start, end, original, correction, unchanged1 + unchanged2)


def _edit_lattice(
    source: Sequence[str], hypothesis: Sequence[str], max_unchanged_words: int
) -> tuple[list[Vertex], list[Arc], dict[Arc, float], dict[Arc, _Edit]]:
    """The MaxMatch edit lattice: both Levenshtein lattices merged, plus transitive arcs.

    As in the official scorer: the lattices of substitution cost 1 and 2 are merged (arcs present
    in both are listed twice, which only scales the gold weight and doubles the epsilon of such
    arcs), every chain ``u → k → w`` shorter than the known ``u → w`` distance becomes an arc
    carrying the merged edit if it keeps at most ``max_unchanged_words`` unchanged tokens, and
    multi-token ``noop`` arcs are then dropped.
    """
    v1, a1, e1 = _levenshtein_lattice(source, hypothesis, sub_cost=1)
    v2, a2, e2 = _levenshtein_lattice(source, hypothesis, sub_cost=2)
    vertices = sorted(set(v1) | set(v2))
    arcs = sorted(a1 + a2)
    edits = {**e2, **e1}
    dist: dict[Arc, float] = dict.fromkeys(edits, 1.0)
    preds: dict[Vertex, set[Vertex]] = {v: set() for v in vertices}
    succs: dict[Vertex, set[Vertex]] = {v: set() for v in vertices}
    for u, w in edits:
        preds[w].add(u)
        succs[u].add(w)
    order = {v: k for k, v in enumerate(vertices)}
    for k in vertices:  # Floyd–Warshall-style closure, in the official vertex order
        for u in sorted(preds[k], key=order.__getitem__):
            for w in sorted(succs[k], key=order.__getitem__):
                d = dist[(u, k)] + dist[(k, w)]
                if d < dist.get((u, w), math.inf):
                    merged = _merge_edits(edits[(u, k)], edits[(k, w)])
                    if merged[5] <= max_unchanged_words:
                        arcs.append((u, w))
                        dist[(u, w)] = d
                        edits[(u, w)] = merged
                        preds[w].add(u)
                        succs[u].add(w)
    # The official scorer removes these arcs from the list it is iterating over, which skips the
    # element after each removal; reproduced so that ties between equal paths break identically.
    idx = 0
    while idx < len(arcs):
        arc = arcs[idx]
        edit = edits.get(arc)
        if edit is not None and edit[0] == "noop" and dist[arc] > 1:
            arcs.remove(arc)
            dist[arc] = math.inf
            del edits[arc]
        idx += 1
    return vertices, arcs, dist, edits


def _matches(edit: _Edit, gold: _Gold) -> bool:
    return (edit[1], edit[2], edit[3]) == gold[:3] and edit[4] in gold[3]


def _weights(
    arcs: list[Arc], dist: dict[Arc, float], edits: dict[Arc, _Edit], gold: Sequence[_Gold]
) -> dict[Arc, float]:
    """Arc weights for one annotator: ``−|arcs|`` on arcs matching a gold edit, +ε on other edits.

    Insertions at one position are matched to that position's gold insertions by the official
    two-ended scan (alternately from the left and the right, each gold edit used at most once),
    so that a single gold insertion does not reward several parallel hypothesis arcs.
    """
    weights = dict(dist)
    by_span: dict[tuple[int, int], list[Arc]] = {}
    for arc in arcs:
        by_span.setdefault(edits[arc][1:3], []).append(arc)
    gold_by_span: dict[tuple[int, int], list[_Gold]] = {}
    for g in gold:
        gold_by_span.setdefault(g[:2], []).append(g)
    for span in sorted(by_span):
        group = sorted(by_span[span])
        golds = gold_by_span.get(span, [])
        if span[0] != span[1]:  # deletion or substitution: any matching gold edit will do
            for arc in group:
                if any(_matches(edits[arc], g) for g in golds):
                    weights[arc] = -len(arcs)
                elif edits[arc][0] != "noop":
                    weights[arc] += _EPSILON
            continue
        left, right, cur = 0, len(group) - 1, 0
        g_left, g_right = 0, len(golds) - 1
        while left <= right:
            arc = group[cur]
            candidates = range(g_left, g_right + 1)
            hit = None
            for gi in candidates if cur == left else reversed(candidates):
                if _matches(edits[arc], golds[gi]):
                    hit = gi
                    break
            if hit is None:
                weights[arc] += _EPSILON
                if cur == left:
                    left += 1
                    cur = right
                else:
                    right -= 1
                    cur = left
                continue
            weights[arc] = -len(arcs)
            if cur == left:
                g_left = hit + 1
                left += 1
                while left < len(group) and group[left][0] != group[cur][1]:
                    weights[group[left]] += _EPSILON
                    left += 1
                cur = left
            else:
                g_right = hit - 1
                right -= 1
                while right >= 0 and group[right][1] != group[cur][0]:
                    weights[group[right]] += _EPSILON
                    right -= 1
                cur = right
    return weights


def _best_edit_sequence(
    vertices: list[Vertex], arcs: list[Arc], weights: dict[Arc, float], edits: dict[Arc, _Edit]
) -> list[tuple[int, int, str, str]]:
    """Shortest path from (0, 0) to the end vertex (Bellman–Ford), as edits from right to left."""
    distance = dict.fromkeys(vertices, math.inf)
    distance[(0, 0)] = 0.0
    parent: dict[Vertex, Vertex] = {}
    for _ in range(len(vertices) - 1):
        changed = False
        for arc in arcs:
            u, w = arc
            if distance[u] + weights[arc] < distance[w]:
                distance[w] = distance[u] + weights[arc]
                parent[w] = u
                changed = True
        if not changed:
            break
    sequence = []
    v = vertices[-1]
    while v in parent:
        u = parent[v]
        kind, start, end, original, correction, _ = edits[(u, v)]
        if kind != "noop":
            sequence.append((start, end, original, correction))
        v = u
    return sequence


def _count_correct(sequence: list[tuple[int, int, str, str]], gold: Sequence[_Gold]) -> int:
    """Matched system edits; gold edits are consumed left to right (official ``matchSeq``)."""
    correct, last = 0, 0
    for edit in reversed(sequence):
        for gi in range(last, len(gold)):
            g = gold[gi]
            if (edit[0], edit[1], edit[2]) == g[:3] and edit[3] in g[3]:
                correct += 1
                last = gi + 1
    return correct


def _f_beta_from_counts(correct: int, proposed: int, gold: int, beta: float) -> float:
    """F_beta written on counts, as the official scorer compares annotators (1 when 0/0).

    Equal to the P/R form mathematically but not to the last bit, and annotator ties are decided
    on exact equality, so the official expression is kept.
    """
    denominator = beta * beta * gold + proposed
    return (1.0 + beta * beta) * correct / denominator if denominator else 1.0


def _gold_edits(sentence: M2Sentence) -> dict[int, list[_Gold]]:
    tokens = sentence.tokens
    return {
        a: [
            (e.start, e.end, " ".join(tokens[e.start : e.end]), e.corrections)
            for e in sentence.edits_of(a)
        ]
        for a in sentence.annotators
    }


def m2_score(
    hypotheses: Sequence[str],
    gold: Sequence[M2Sentence],
    *,
    beta: float = 0.5,
    max_unchanged_words: int = 2,
) -> M2Result:
    """Corpus MaxMatch P, R, F_beta of tokenized ``hypotheses`` against M2 ``gold`` blocks.

    Per sentence, as in the official ``m2scorer`` (``batch_multi_pre_rec_f1``):

    1. Build the edit lattice between source and hypothesis tokens (`_edit_lattice`): all
       minimum-cost Levenshtein alignments, extended with transitive arcs that merge adjacent
       edits (at most ``max_unchanged_words`` unchanged tokens inside one edit).
    2. For each annotator, weight arcs that match one of its gold edits (same span, same
       original, correction among the alternatives) by ``−|arcs|`` and other edits by ``1 + ε``,
       and take the shortest path: the system's edit sequence that matches the most gold edits,
       with the fewest and smallest edits among those.
    3. Keep the annotator that maximises the *corpus* F_beta accumulated so far (ties: more
       correct edits, then fewer proposed + beta² · gold), and add its counts.

    ``noop`` annotations contribute no gold edit (the sentence needs no change), so proposing
    edits there costs precision only. Returns ×100 scores and the integer counts.
    """
    check_texts(hypotheses, "hypotheses")
    for i, sentence in enumerate(gold):
        if not isinstance(sentence, M2Sentence):
            raise TypeError(f"gold[{i}] must be an M2Sentence, got {type(sentence).__name__}")
    if len(hypotheses) != len(gold):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses for {len(gold)} M2 sentences; they must be aligned"
        )
    check_not_empty(hypotheses)
    check_real(beta, "beta")
    check_int(max_unchanged_words, "max_unchanged_words", None)
    if not 0 < beta < math.inf or max_unchanged_words < 0:
        raise ValueError(
            f"need beta > 0 and max_unchanged_words >= 0, got {beta}, {max_unchanged_words}"
        )
    total_correct = total_proposed = total_gold = 0
    for hypothesis, sentence in zip(hypotheses, gold, strict=True):
        vertices, arcs, dist, edits = _edit_lattice(
            sentence.tokens, hypothesis.split(), max_unchanged_words
        )
        best: tuple[int, int, int] | None = None
        best_key = (-1.0, -1.0, -math.inf)
        for gold_edits in _gold_edits(sentence).values():
            weights = _weights(arcs, dist, edits, gold_edits)
            sequence = _best_edit_sequence(vertices, arcs, weights, edits)
            counts = (_count_correct(sequence, gold_edits), len(sequence), len(gold_edits))
            c, p, g = total_correct + counts[0], total_proposed + counts[1], total_gold + counts[2]
            key = (_f_beta_from_counts(c, p, g, beta), c, -(p + beta * beta * g))
            if key > best_key:
                best, best_key = counts, key
        assert best is not None
        total_correct += best[0]
        total_proposed += best[1]
        total_gold += best[2]
    precision = total_correct / total_proposed if total_proposed else 1.0
    recall = total_correct / total_gold if total_gold else 1.0
    denominator = beta * beta * precision + recall
    f_score = (1 + beta * beta) * precision * recall / denominator if denominator else 0.0
    return M2Result(
        precision=100.0 * precision,
        recall=100.0 * recall,
        f_score=100.0 * f_score,
        beta=beta,
        correct=total_correct,
        proposed=total_proposed,
        gold=total_gold,
    )
