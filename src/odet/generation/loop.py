"""The decoding loop: runs any :class:`~odet.generation.strategies.SearchStrategy` on any
:class:`~odet.generation.decoder.IncrementalDecoder`.

The loop owns what every strategy shares, so that strategies only choose tokens:

- **Constraints.** PAD (and BOS, unless it doubles as EOS) are never generated. EOS is banned
  while fewer than ``min_len`` tokens have been generated. ``max_len`` is the maximum number of
  generated tokens *excluding* EOS: the step after ``max_len`` tokens allows only EOS, so a
  hypothesis cut there still ends with the model's own EOS log-probability in its score, and the
  decoder is called at most ``max_len + 1`` times.
- **Finished hypotheses.** EOS candidates ranked among the first ``K`` (rows per group) with a
  finite score become :class:`Hypothesis` objects, scored by the strategy's length
  normalisation where the length counts EOS; the first ``K`` non-EOS candidates become the next
  rows. A group stops when :meth:`SearchStrategy.is_done` says so, when no live row has a
  finite score left, or after the forced-EOS step.
- **Batch bookkeeping.** Rows are laid out group-major (``G_active × K``), the groups of a
  sentence next to each other. After each step the loop drops the groups the strategy declares
  done and calls ``decoder.reorder`` with, for every surviving row, the row it extends — one call
  that both follows beam origins and shrinks the batch, so finished sentences cost nothing
  afterwards — and with how many consecutive rows decode one sentence (``K`` times its kept
  groups when every sentence kept equally many, else ``K``). The first step runs on one row per
  group (all beams of a sentence would be identical), and the first reorder expands it to ``K``
  rows; strategies with several groups per sentence (sampling ``num_return``) get one reorder
  before the first step that duplicates each sentence's row.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from torch import Tensor

from odet.generation.decoder import IncrementalDecoder
from odet.generation.strategies import SearchStrategy

__all__ = ["Hypothesis", "generate"]


@dataclass(frozen=True)
class Hypothesis:
    """One finished output sequence.

    ``tokens`` excludes BOS and EOS; ``log_prob`` is the sum of the token log-probabilities
    including EOS; ``score`` the length-normalised value used for ranking (length = tokens + 1);
    ``token_log_probs`` (``len(tokens) + 1`` values, EOS last) when available.
    """

    tokens: list[int]
    score: float
    log_prob: float
    token_log_probs: list[float] | None = None

    def __post_init__(self) -> None:
        if self.token_log_probs is not None and len(self.token_log_probs) != len(self.tokens) + 1:
            raise ValueError(
                f"token_log_probs needs len(tokens) + 1 = {len(self.tokens) + 1} values (EOS "
                f"last), got {len(self.token_log_probs)}"
            )


def _check_ids(bos_id: int, eos_id: int, pad_id: int) -> None:
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if pad_id in (bos_id, eos_id):
        raise ValueError(
            f"pad_id ({pad_id}) must differ from bos_id ({bos_id}) and eos_id ({eos_id})"
        )


@torch.no_grad()
def generate(
    decoder: IncrementalDecoder,
    batch_size: int,
    strategy: SearchStrategy,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len: int,
    min_len: int = 0,
    device: torch.device | str = "cpu",
) -> list[list[Hypothesis]]:
    """Decode ``batch_size`` source sentences; returns each one's n-best list, best first.

    ``decoder`` starts with one row per sentence. Each list holds up to ``strategy.num_return``
    hypotheses; it is shorter only if the model gives probability zero to every allowed
    continuation. ``max_len``/``min_len`` bound the number of generated tokens excluding EOS
    (see the module docstring); ``device`` is where the prefix tensors live (the model's).
    Scores accumulate in the decoder's dtype (float16/bfloat16 are upcast to float32).
    """
    _check_ids(bos_id, eos_id, pad_id)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
        raise ValueError(f"batch_size must be a non-negative integer, got {batch_size!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValueError(f"max_len must be a non-negative integer, got {max_len!r}")
    if isinstance(min_len, bool) or not isinstance(min_len, int) or not 0 <= min_len <= max_len:
        raise ValueError(f"min_len must be an integer in [0, max_len={max_len}], got {min_len!r}")
    if batch_size == 0:
        return []

    per_sentence = strategy.groups_per_sentence
    K = strategy.rows_per_group
    num_groups = batch_size * per_sentence
    if per_sentence > 1:
        decoder.reorder(
            torch.arange(batch_size, device=device).repeat_interleave(per_sentence),
            rows_per_source=per_sentence,
        )
    finished: list[list[Hypothesis]] = [[] for _ in range(num_groups)]
    active = list(range(num_groups))  # group ids of the active groups, in row order
    prefix = torch.full((num_groups, 1), bos_id, dtype=torch.long, device=device)  # (N, t)
    token_lp: Tensor | None = None  # (N, t - 1) log-probabilities of the generated tokens
    scores: Tensor | None = None  # (G, K_cur) running log-probabilities
    k_cur = 1
    never = [pad_id] if bos_id == eos_id else [pad_id, bos_id]

    for length in range(max_len + 1):  # `length` tokens generated so far
        log_probs = decoder.step(prefix)
        N, V = prefix.size(0), log_probs.size(-1)
        if log_probs.shape != (N, V) or not log_probs.is_floating_point():
            raise ValueError(
                f"decoder.step must return floating (N={N}, V) log-probabilities, got "
                f"{log_probs.dtype} {tuple(log_probs.shape)}"
            )
        if max(bos_id, eos_id, pad_id) >= V:
            raise ValueError(
                f"special ids bos={bos_id}, eos={eos_id}, pad={pad_id} must be < vocabulary {V}"
            )
        if log_probs.dtype in (torch.float16, torch.bfloat16):
            log_probs = log_probs.float()  # running sums of half-precision values drift
        if scores is None or token_lp is None:
            scores = log_probs.new_zeros(len(active), 1)
            token_lp = log_probs.new_zeros(N, 0)
        log_probs = _mask_(
            log_probs,
            banned=never + [eos_id] * (length < min_len),
            force=eos_id if length == max_len else None,
        )

        G = len(active)
        sel = strategy.select(log_probs.view(G, k_cur, V), scores, prefix.view(G, k_cur, -1))
        if sel.tokens.size(0) != G or sel.tokens.size(1) < K:
            raise RuntimeError(
                f"{type(strategy).__name__}.select returned {tuple(sel.tokens.shape)} candidates; "
                f"needs (G={G}, M >= K={K})"
            )
        cand_scores = scores.gather(1, sel.origins) + sel.log_probs  # (G, M)
        rows = torch.arange(G, device=prefix.device).unsqueeze(1) * k_cur + sel.origins  # (G, M)
        is_eos = sel.tokens == eos_id

        # Finished hypotheses: EOS candidates in the first K ranks with a finite score.
        final = is_eos & torch.isfinite(cand_scores)
        final[:, K:] = False
        g_idx, m_idx = final.nonzero(as_tuple=True)
        if g_idx.numel():
            f_rows = rows[g_idx, m_idx]
            for g, tokens, history, eos_lp, total in zip(
                g_idx.tolist(),
                prefix[f_rows, 1:].tolist(),
                token_lp[f_rows].tolist(),
                sel.log_probs[g_idx, m_idx].tolist(),
                cand_scores[g_idx, m_idx].tolist(),
                strict=True,
            ):
                finished[active[g]].append(
                    Hypothesis(
                        tokens=tokens,
                        score=strategy.score(total, length + 1),
                        log_prob=total,
                        token_log_probs=[*history, eos_lp],
                    )
                )

        # Next rows: the first K non-EOS candidates of each group, in rank order.
        live = torch.sort(is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :K]  # (G, K)
        live_tokens = sel.tokens.gather(1, live)
        live_scores = cand_scores.gather(1, live)
        live_rows = rows.gather(1, live)
        live_lp = sel.log_probs.gather(1, live)

        if length == max_len:
            break
        best_live = live_scores.max(dim=1).values.tolist()
        # A group stops when its strategy says so, or when no live row has a finite score left.
        keep = [
            g
            for g in range(G)
            if best_live[g] > -math.inf
            and not strategy.is_done(
                sorted((h.score for h in finished[active[g]]), reverse=True),
                best_live[g],
                length + 1,
                max_len,
            )
        ]
        if not keep:
            break
        keep_t = torch.tensor(keep, dtype=torch.long, device=prefix.device)
        if bool((live_tokens[keep_t] == eos_id).any()):
            raise RuntimeError(
                f"{type(strategy).__name__}.select left fewer than K={K} non-EOS candidates for "
                "a group it did not declare done"
            )
        index = live_rows[keep_t].reshape(-1)  # (N',) the old row each new row extends
        if index.numel() != N or not torch.equal(index, torch.arange(N, device=index.device)):
            decoder.reorder(
                index, rows_per_source=K * _groups_per_source(active, keep, per_sentence)
            )
        prefix = torch.cat([prefix[index], live_tokens[keep_t].reshape(-1, 1)], dim=1)
        token_lp = torch.cat([token_lp[index], live_lp[keep_t].reshape(-1, 1)], dim=1)
        scores = live_scores[keep_t]
        active = [active[g] for g in keep]
        k_cur = K

    results = []
    for sentence in range(batch_size):
        groups = finished[sentence * per_sentence : (sentence + 1) * per_sentence]
        hyps = sorted((h for group in groups for h in group), key=lambda h: h.score, reverse=True)
        results.append(hyps[: strategy.num_return])
    return results


def _groups_per_source(active: list[int], keep: list[int], per_sentence: int) -> int:
    """Consecutive kept groups that decode one sentence: all of a sentence's kept groups when
    every sentence kept equally many, else 1 (each group stands alone)."""
    sizes = set(Counter(active[g] // per_sentence for g in keep).values())
    return sizes.pop() if len(sizes) == 1 else 1


def _mask_(log_probs: Tensor, banned: list[int], force: int | None) -> Tensor:
    """Set ``banned`` tokens (or all but ``force``) of the ``(N, V)`` log-probs to -inf, in
    place (the loop owns what ``decoder.step`` returns); returns ``log_probs``."""
    if force is not None:
        kept = log_probs[:, force].clone()
        log_probs.fill_(-math.inf)
        log_probs[:, force] = kept
        return log_probs
    log_probs[:, banned] = -math.inf
    return log_probs
