"""The protocol through which a model exposes step-by-step decoding to the generation loop.

A model builds one decoder for a batch of ``B`` source sentences (its rows start as one row per
sentence, ``N = B``). The loop owns the token prefixes; the decoder owns whatever it caches
(self-attention keys/values, the encoder memory). After every step the loop tells the decoder
which rows survive, where they came from and how many consecutive rows decode one source
through :meth:`IncrementalDecoder.reorder`; this is how beam search duplicates a row into several
beams, and how finished sentences leave the batch so their rows are not recomputed.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class IncrementalDecoder(Protocol):
    """Next-token log-probabilities for ``N`` rows of growing prefixes, with reorderable state."""

    def step(self, prefix: Tensor) -> Tensor:
        """Log-probabilities ``(N, V)`` of the next token after each row of ``prefix``.

        ``prefix`` is ``(N, t)`` ``torch.long``, the tokens so far starting with BOS. The result
        is already log-softmaxed (float32 or float64) and a new tensor: the loop masks it in
        place, so a decoder must not keep or reuse it. A cached decoder reads only
        ``prefix[:, -1]`` and its state; an uncached one recomputes from the whole prefix; both
        must return the same values.
        """
        ...

    def reorder(self, index: Tensor, rows_per_source: int) -> None:
        """Keep or duplicate rows: new row ``i`` is old row ``index[i]``.

        ``index`` is ``(N',)`` ``torch.long``; ``N'`` may exceed ``N`` (expansion into beams or
        samples) or be smaller (finished sentences dropped). ``rows_per_source`` is the loop's
        promise about the new layout: the rows come in consecutive blocks of that many rows that
        decode the same source sentence (its beams, or its samples), so a decoder may keep
        per-source state such as the encoder memory once per block; 1 promises nothing. The
        loop skips the call when the rows are unchanged.
        """
        ...
