"""Data: SentencePiece tokenizers, corpus readers, length filtering, token-budget batching and
verified dataset preparation.

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
from odet.data.download import (
    DATASETS,
    ChecksumError,
    DataFile,
    DatasetSpec,
    DownloadError,
    prepare_dataset,
    prepare_dialogsum,
    prepare_jfleg,
    prepare_multi30k,
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
    "DATASETS",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Batch",
    "ChecksumError",
    "DataError",
    "DataFile",
    "DatasetSpec",
    "DownloadError",
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
    "prepare_dataset",
    "prepare_dialogsum",
    "prepare_jfleg",
    "prepare_multi30k",
    "read_jsonl_pairs",
    "read_lines",
    "read_parallel_text",
]
