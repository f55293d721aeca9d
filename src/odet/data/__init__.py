"""Data: SentencePiece tokenizers, corpus readers, length filtering, token-budget batching and
dataset preparation.

The special token ids are fixed for the whole library: ``PAD_ID=0, UNK_ID=1, BOS_ID=2,
EOS_ID=3``. Synthetic-task and GEC helpers live in their own modules (``odet.data.m2``,
``odet.data.gec_noise``) and are imported by full path.
"""

from odet.data.batching import (
    Batch,
    ParallelDataset,
    TokenBudgetBatcher,
    collate,
    pad_tokens,
)
from odet.data.text import (
    DataError,
    FilterReport,
    LengthFilter,
    ReadReport,
    TextLines,
    TextPairs,
    read_jsonl_pairs,
    read_lines,
    read_parallel_text,
)
from odet.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerPair,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Batch",
    "DataError",
    "FilterReport",
    "LengthFilter",
    "ParallelDataset",
    "ReadReport",
    "TextLines",
    "TextPairs",
    "TokenBudgetBatcher",
    "Tokenizer",
    "TokenizerPair",
    "collate",
    "pad_tokens",
    "read_jsonl_pairs",
    "read_lines",
    "read_parallel_text",
]
