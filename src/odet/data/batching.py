"""Encoded parallel datasets, padded batches, and a resumable token-budget batch sampler.

Conventions (the model relies on them): token tensors are ``torch.long``, right-padded with
``PAD_ID``; the source is ``tokens + [EOS]``, the decoder input ``[BOS] + tokens`` and the
decoder target ``tokens + [EOS]``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Sampler
from tqdm.auto import tqdm

from odet.data.checks import check_int, count_arrays, token_ids
from odet.data.text import DataError, FilterReport, LengthFilter
from odet.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair

Tokens = Sequence[int] | np.ndarray


def pad_tokens(
    sequences: Sequence[Tokens], *, prepend_bos: bool = False, append_eos: bool = False
) -> torch.Tensor:
    """Right-pad token sequences with ``PAD_ID`` into a ``(B, L)`` long tensor, optionally
    framing each one with BOS and/or EOS first.

    Each sequence must hold non-negative integer ids (``TypeError`` / ``ValueError`` naming it).
    """
    return _pad(_checked_ids(sequences), prepend_bos=prepend_bos, append_eos=append_eos)


def _checked_ids(sequences: Sequence[Tokens]) -> list[np.ndarray]:
    """``sequences`` as ``int64`` arrays, each checked once: integer, non-negative ids."""
    if isinstance(sequences, str) or not sequences:
        raise ValueError("pad_tokens needs a non-empty list of token sequences")
    arrays = []
    for i, seq in enumerate(sequences):
        ids = token_ids(seq, f"sequence {i}")
        if ids.size and ids.min() < 0:
            raise ValueError(f"sequence {i} holds a negative token id {int(ids.min())}")
        arrays.append(ids)
    return arrays


def _pad(arrays: Sequence[np.ndarray], *, prepend_bos: bool, append_eos: bool) -> torch.Tensor:
    head = [BOS_ID] if prepend_bos else []
    tail = [EOS_ID] if append_eos else []
    rows = [torch.tensor([*head, *ids.tolist(), *tail], dtype=torch.long) for ids in arrays]
    return pad_sequence(rows, batch_first=True, padding_value=PAD_ID)


@dataclass(frozen=True, eq=False)
class Batch:
    """One padded training batch.

    ``src (B, S)``: source + EOS; ``tgt_in (B, T)``: BOS + target; ``tgt_out (B, T)``: target +
    EOS; ``ids (B,)``: dataset indices of the rows (batches are length-sorted, so outputs are
    put back in corpus order with them). ``num_src_tokens`` / ``num_tgt_tokens`` count the
    non-pad positions of ``src`` / ``tgt_out`` (the loss normaliser).
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    ids: torch.Tensor
    num_src_tokens: int
    num_tgt_tokens: int

    def __post_init__(self) -> None:
        tensors = {"src": self.src, "tgt_in": self.tgt_in, "tgt_out": self.tgt_out}
        for name, tensor in tensors.items():
            if tensor.dtype != torch.long or tensor.dim() != 2:
                raise ValueError(
                    f"Batch.{name} must be a 2-D torch.long tensor, got {tensor.dtype} "
                    f"of shape {tuple(tensor.shape)}"
                )
        if self.tgt_in.shape != self.tgt_out.shape:
            raise ValueError(
                f"Batch.tgt_in {tuple(self.tgt_in.shape)} and tgt_out "
                f"{tuple(self.tgt_out.shape)} must have the same shape"
            )
        if not self.src.shape[0] == self.tgt_in.shape[0] == self.ids.shape[0]:
            raise ValueError(
                f"Batch sizes disagree: src {self.src.shape[0]}, tgt {self.tgt_in.shape[0]}, "
                f"ids {self.ids.shape[0]}"
            )

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Batch:
        """The same batch with every tensor on ``device``."""
        return Batch(
            src=self.src.to(device, non_blocking=non_blocking),
            tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
            tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
            ids=self.ids.to(device, non_blocking=non_blocking),
            num_src_tokens=self.num_src_tokens,
            num_tgt_tokens=self.num_tgt_tokens,
        )

    def pin_memory(self) -> Batch:
        """The same batch in pinned host memory (for asynchronous copies to the GPU)."""
        return Batch(
            src=self.src.pin_memory(),
            tgt_in=self.tgt_in.pin_memory(),
            tgt_out=self.tgt_out.pin_memory(),
            ids=self.ids.pin_memory(),
            num_src_tokens=self.num_src_tokens,
            num_tgt_tokens=self.num_tgt_tokens,
        )


def collate(
    source: Sequence[Tokens], target: Sequence[Tokens], ids: Sequence[int] | None = None
) -> Batch:
    """Build a ``Batch`` from token-id sequences without specials (``ids`` default 0..B-1)."""
    if len(source) != len(target):
        raise ValueError(f"collate got {len(source)} sources but {len(target)} targets")
    if ids is None:
        ids = range(len(source))
    elif len(ids) != len(source):
        raise ValueError(f"collate got {len(ids)} ids for {len(source)} examples")
    src, tgt = _checked_ids(source), _checked_ids(target)  # once, not once per padding
    return Batch(
        src=_pad(src, prepend_bos=False, append_eos=True),
        tgt_in=_pad(tgt, prepend_bos=True, append_eos=False),
        tgt_out=_pad(tgt, prepend_bos=False, append_eos=True),
        ids=torch.tensor(list(ids), dtype=torch.long),
        num_src_tokens=sum(len(seq) + 1 for seq in source),
        num_tgt_tokens=sum(len(seq) + 1 for seq in target),
    )


class _Ragged:
    """Variable-length int32 token sequences in one read-only flat buffer plus offsets."""

    def __init__(self, sequences: Sequence[Tokens], name: str) -> None:
        arrays = [token_ids(seq, f"{name} example {i}") for i, seq in enumerate(sequences)]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        self.offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        flat = np.empty(int(self.offsets[-1]), dtype=np.int64)
        for i, ids in enumerate(arrays):
            flat[self.offsets[i] : self.offsets[i + 1]] = ids
        bad = np.flatnonzero((flat < 0) | (flat > np.iinfo(np.int32).max))
        if bad.size:
            example = int(np.searchsorted(self.offsets, bad[0], side="right")) - 1
            raise ValueError(
                f"{name} example {example} holds token id {int(flat[bad[0]])} outside [0, 2**31)"
            )
        self.buffer = flat.astype(np.int32)
        self.buffer.flags.writeable = False

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.buffer[self.offsets[index] : self.offsets[index + 1]]


class ParallelDataset:
    """Encoded source/target pairs (token ids without specials), stored compactly.

    ``dataset[i]`` is ``(source_ids, target_ids)`` as int32 arrays; ``dataset.batch(indices)``
    collates a ``Batch``; ``source_sizes`` / ``target_sizes`` are the padded tensor lengths a
    ``TokenBudgetBatcher`` needs (token count + 1 for EOS/BOS).
    """

    def __init__(self, source: Sequence[Tokens], target: Sequence[Tokens]) -> None:
        if len(source) != len(target):
            raise ValueError(f"ParallelDataset got {len(source)} sources, {len(target)} targets")
        self._source = _Ragged(source, "source")
        self._target = _Ragged(target, "target")

    @classmethod
    def from_texts(
        cls,
        source: Sequence[str],
        target: Sequence[str],
        tokenizers: TokenizerPair,
        *,
        chunk_size: int = 4096,
        progress: bool = False,
    ) -> ParallelDataset:
        """Encode aligned source/target strings with ``tokenizers`` (in chunks, with an
        optional tqdm progress bar)."""
        if len(source) != len(target):
            raise ValueError(f"from_texts got {len(source)} sources but {len(target)} targets")
        if chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size} must be >= 1")
        src_ids: list[list[int]] = []
        tgt_ids: list[list[int]] = []
        with tqdm(total=len(source), desc="encoding", unit="pair", disable=not progress) as bar:
            for start in range(0, len(source), chunk_size):
                stop = start + chunk_size
                src_ids.extend(tokenizers.source.encode_batch(source[start:stop]))
                tgt_ids.extend(tokenizers.target.encode_batch(target[start:stop]))
                bar.update(min(stop, len(source)) - start)
        return cls(src_ids, tgt_ids)

    def __len__(self) -> int:
        return len(self._source.offsets) - 1

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise TypeError(f"a dataset index must be an int, got {type(index).__name__}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} examples")
        index %= len(self)
        return self._source[index], self._target[index]

    @property
    def source_lengths(self) -> np.ndarray:
        """Source token counts ``(N,)`` without specials."""
        return self._source.lengths

    @property
    def target_lengths(self) -> np.ndarray:
        """Target token counts ``(N,)`` without specials."""
        return self._target.lengths

    @property
    def source_sizes(self) -> np.ndarray:
        """Padded source lengths ``(N,)``: tokens + EOS."""
        return self.source_lengths + 1

    @property
    def target_sizes(self) -> np.ndarray:
        """Padded target lengths ``(N,)``: tokens + BOS (decoder input) or + EOS (target)."""
        return self.target_lengths + 1

    def select(self, indices: Sequence[int] | np.ndarray) -> ParallelDataset:
        """A new dataset holding the examples at ``indices``, in that order (negative indices
        count from the end); an index that is not an integer or is out of range raises."""
        indices = _indices(indices, len(self))
        return ParallelDataset(
            [self._source[i] for i in indices], [self._target[i] for i in indices]
        )

    def filter(self, length_filter: LengthFilter) -> tuple[ParallelDataset, FilterReport]:
        """The examples that pass ``length_filter``, and its report of what was dropped."""
        keep, report = length_filter.apply(self.source_lengths, self.target_lengths)
        return self.select(np.flatnonzero(keep)), report

    def batch(self, indices: Sequence[int]) -> Batch:
        """Collate the examples at ``indices`` (``Batch.ids`` are these indices)."""
        indices = _indices(indices, len(self)).tolist()
        pairs = [self[i] for i in indices]
        return collate([src for src, _ in pairs], [tgt for _, tgt in pairs], ids=list(indices))


def _indices(indices: Sequence[int] | np.ndarray, size: int) -> np.ndarray:
    """``indices``, integers in ``[-size, size)``, as non-negative ``int64`` positions."""
    array = np.asarray(indices)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got {array.dtype} values")
    array = array.astype(np.int64).reshape(-1) if array.size else np.zeros(0, dtype=np.int64)
    outside = array[(array < -size) | (array >= size)]
    if outside.size:
        raise IndexError(f"index {int(outside[0])} out of range for {size} examples")
    return array % max(size, 1)


class TokenBudgetBatcher(Sampler[list[int]]):
    """Length-bucketed batches of example indices under a padded-token budget.

    Examples are sorted by padded size ``max(source_size, target_size)`` (then source size,
    target size, index) and cut greedily into batches with ``len(batch) * max(size) <=
    max_tokens`` and at most ``max_sentences`` rows. Batches are fixed at construction; each
    epoch visits them in an order shuffled with a seed derived from ``(seed, epoch)``
    (``shuffle=False``: shortest first).

    An example larger than ``max_tokens`` raises ``DataError`` at construction: the budget is a
    hard memory bound, and a ``LengthFilter`` is the place to drop over-long examples.

    Iterating yields the rest of the current epoch and then advances to the next epoch, so
    ``for epoch ...: for indices in batcher:`` needs no ``set_epoch``. ``state_dict()`` records
    the epoch and how many batches were handed out, so a new batcher loaded from it continues
    with exactly the remaining batches. The state counts batches *yielded*: collating in the
    training loop (``dataset.batch(indices)``) keeps it exact, whereas a ``DataLoader`` with
    workers draws batches ahead of training.

    Sharding for data parallelism: shard ``shard_index`` of ``num_shards`` takes every
    ``num_shards``-th batch of the epoch's order after truncating it to a multiple of
    ``num_shards``, so shards are disjoint and equal in length (up to ``num_shards - 1``
    batches per epoch are left out; with shuffling, different ones each epoch).
    """

    def __init__(
        self,
        source_sizes: Sequence[int] | np.ndarray,
        target_sizes: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_shards: int = 1,
        shard_index: int = 0,
    ) -> None:
        super().__init__()
        src, tgt = count_arrays(source_sizes, target_sizes, "size")
        if len(src) == 0:
            raise ValueError("TokenBudgetBatcher needs at least one example")
        check_int(max_tokens, "max_tokens", 1)
        if max_sentences is not None:
            check_int(max_sentences, "max_sentences", 1)
        check_int(seed, "seed", 0)
        check_int(num_shards, "num_shards", 1)
        check_int(shard_index, "shard_index", 0)
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        if num_shards < 1 or not 0 <= shard_index < num_shards:
            raise ValueError(
                f"need num_shards >= 1 and 0 <= shard_index < num_shards, got "
                f"num_shards={num_shards}, shard_index={shard_index}"
            )
        sizes = np.maximum(src, tgt)
        too_long = np.flatnonzero(sizes > max_tokens)
        if too_long.size:
            first = int(too_long[0])
            raise DataError(
                f"{too_long.size} example(s) exceed max_tokens={max_tokens} on their own "
                f"(e.g. index {first} with padded size {int(sizes[first])}); raise max_tokens "
                "or drop them with a LengthFilter"
            )
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.shuffle = shuffle
        self.seed = seed
        self.num_shards = num_shards
        self.shard_index = shard_index
        self._batches = _pack(np.lexsort((tgt, src, sizes)), sizes, max_tokens, max_sentences)
        if len(self._batches) < num_shards:
            raise DataError(
                f"{len(self._batches)} batch(es) cannot be split over num_shards={num_shards}"
            )
        digest = hashlib.blake2b(digest_size=16)
        for batch in self._batches:
            digest.update(batch.tobytes() + b"|")
        self._fingerprint = digest.hexdigest()
        self._epoch = 0
        self._position = 0

    @property
    def epoch(self) -> int:
        """The epoch the next yielded batch belongs to."""
        return self._epoch

    @property
    def num_batches(self) -> int:
        """Batches per epoch over all shards together (before truncation to the shards)."""
        return len(self._batches)

    def __len__(self) -> int:
        """Batches per epoch on this shard."""
        return len(self._batches) // self.num_shards

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch."""
        check_int(epoch, "epoch", 0)
        self._epoch = epoch
        self._position = 0

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All batches of ``epoch`` on this shard, in order (does not change the state)."""
        check_int(epoch, "epoch", 0)
        return [self._batches[b].tolist() for b in self._shard_order(epoch)]

    def __iter__(self) -> Iterator[list[int]]:
        order = self._shard_order(self._epoch)
        while self._position < len(order):
            batch = self._batches[order[self._position]]
            self._position += 1
            yield batch.tolist()
        self._epoch += 1
        self._position = 0

    def _shard_order(self, epoch: int) -> np.ndarray:
        order = np.arange(len(self._batches))
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(order)
        usable = len(self) * self.num_shards
        return order[:usable][self.shard_index :: self.num_shards]

    def state_dict(self) -> dict[str, int | str]:
        """Epoch, batches yielded in it on this shard, and what must match on resume."""
        return {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self.seed,
            "num_shards": self.num_shards,
            "shuffle": int(self.shuffle),
            "fingerprint": self._fingerprint,
        }

    def load_state_dict(self, state: dict[str, int | str]) -> None:
        """Resume from ``state_dict()``; the batches, seed, shuffling and number of shards must
        match (the shard index may differ: every shard is at the same position)."""
        expected = self.state_dict()
        for key in ("seed", "num_shards", "shuffle", "fingerprint"):
            if state.get(key) != expected[key]:
                raise ValueError(
                    f"batcher state does not match this batcher: {key}={state.get(key)!r}, "
                    f"expected {expected[key]!r} (different data, max_tokens or settings?)"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise ValueError(
                f"batcher state out of range: epoch={epoch}, position={position} "
                f"(batches per epoch: {len(self)})"
            )
        self._epoch = epoch
        self._position = position


def _pack(
    order: np.ndarray, sizes: np.ndarray, max_tokens: int, max_sentences: int | None
) -> list[np.ndarray]:
    """Greedily cut ``order`` (ascending ``sizes``) into batches within the budget."""
    batches: list[np.ndarray] = []
    start = 0
    width = 0
    limit = len(order) if max_sentences is None else max_sentences
    for position, index in enumerate(order):
        width = max(width, int(sizes[index]))
        rows = position - start + 1
        if rows > limit or rows * width > max_tokens:
            batches.append(order[start:position])
            start, width = position, int(sizes[index])
    batches.append(order[start:])
    return batches
