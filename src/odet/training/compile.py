"""``train.compile``: the training step's forward pass and loss through ``torch.compile``.

Only the training forward (and its loss) is compiled; its backward follows through AOTAutograd.
Validation, decoding and checkpoints use the eager model, so a checkpoint's weights have the
same names (no ``_orig_mod.`` prefix) whether or not the run compiled, and compiled and eager
runs resume each other's checkpoints.

Translation batches vary in rows and lengths, so the translation trainer compiles with
``dynamic=True``: one graph with symbolic sizes serves every batch. With torch's default
(``dynamic=None``) the first batch's shape is compiled statically, used once, and the second
batch compiles again with symbolic sizes: twice the compile time for nothing. The language
model's windows have one shape, so it keeps the default, one static graph. ``compile_counts``
reports what a run compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch._dynamo.utils import counters

Step = TypeVar("Step", bound=Callable[..., object])


def compile_step(step: Step, *, dynamic: bool | None = None, backend: str = "inductor") -> Step:
    """``step`` compiled lazily (the first call compiles); the same callable to its callers.
    ``dynamic``: ``True`` for inputs whose shapes vary, ``None`` for fixed ones (see above).
    ``backend``: torch's, or ``"aot_eager"`` (tracing and AOTAutograd without code generation,
    which tests use to stay fast)."""
    return torch.compile(step, backend=backend, dynamic=dynamic)  # type: ignore[return-value]


def compile_counts() -> dict[str, int]:
    """Graphs compiled and frames recompiled in this process so far (``torch._dynamo``'s
    counters), for a run's log."""
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "recompiles": int(sum(counters["recompiles"].values())),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
