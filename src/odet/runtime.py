"""Process-wide settings for long CPU jobs: the C allocator keeps freed large blocks for reuse.

glibc serves every allocation above its mmap threshold (32 MiB at most) with a fresh ``mmap``
and gives it back with ``munmap`` on ``free``. A training step whose logits, their casts and
their gradients are tens of MiB each then page-faults through all of them again at every step,
most in bf16, where each exists twice (``benchmarks/RESULTS.md``, "The allocator").
:func:`keep_freed_memory` turns this off for the process: large
blocks come from the heap and stay there after ``free``, ready for the next step. The price is
that the process keeps its peak heap until it exits, which a training or decoding run does
anyway. jemalloc or tcmalloc through ``LD_PRELOAD`` do the same job from outside the process.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_MAX = -4
_TOP_PAD = 64 * 2**20
_TRIM_NEVER = 2**31 - 1
USER_SETTINGS = (
    "MALLOC_MMAP_MAX_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "GLIBC_TUNABLES",
)
"""Environment variables through which a user tunes glibc's allocator: any of them set means
the user has chosen, and :func:`keep_freed_memory` leaves the allocator alone."""

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` serve large blocks from the heap and never trim it (``mallopt``
    ``M_MMAP_MAX = 0``, ``M_TRIM_THRESHOLD`` at its maximum, the heap grown 64 MiB beyond each
    request so that small blocks do not split the room a large one needs); whether it is in
    effect.

    Does nothing (and returns False) off glibc Linux, when ``ODET_MALLOC=system`` is set, or
    when the user tunes the allocator through one of :data:`USER_SETTINGS`. Idempotent.
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("ODET_MALLOC", "").strip().lower() == "system":
        return False
    if not sys.platform.startswith("linux") or any(k in os.environ for k in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = all(
        mallopt(option, value) == 1
        for option, value in (
            (M_MMAP_MAX, 0),
            (M_TRIM_THRESHOLD, _TRIM_NEVER),
            (M_TOP_PAD, _TOP_PAD),
        )
    )
    return _applied


def freed_memory_kept() -> bool:
    """Whether :func:`keep_freed_memory` has been applied in this process (it is not applied
    here): what a run logs about its allocator."""
    return bool(_applied)
