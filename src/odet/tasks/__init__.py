"""Task pipelines beyond translation: DialogSum summarization and grammatical error correction.

``odet.tasks.summarization``: one-line dialogues for ``odet generate``, input reports (skipped
records, long dialogues, truncation) and the LEAD extractive baselines.
``odet.tasks.gec``: synthetic (corrupted → clean) training pairs from clean English text, and
M2 → parallel text for users with real GEC corpora.
"""

from odet.tasks.gec import (
    JFLEG_NOISE,
    GECDataReport,
    M2ConversionReport,
    build_gec_data,
    m2_to_parallel,
)
from odet.tasks.summarization import (
    SPEAKER_TAGS,
    DialogSumReport,
    Lead,
    LeadScore,
    read_dialogsum,
    score_leads,
    truncation_report,
    write_dialogsum_lines,
)

__all__ = [
    "JFLEG_NOISE",
    "SPEAKER_TAGS",
    "DialogSumReport",
    "GECDataReport",
    "Lead",
    "LeadScore",
    "M2ConversionReport",
    "build_gec_data",
    "m2_to_parallel",
    "read_dialogsum",
    "score_leads",
    "truncation_report",
    "write_dialogsum_lines",
]
