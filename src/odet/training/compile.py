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
reports what a run compiled, and ``check_compilable`` lets a trainer refuse before any work
where inductor cannot build code (no working C++ compiler for a CPU run).
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


def check_compilable(
    device: torch.device, setting: str = "train.compile", off: str = "set train.compile: false"
) -> None:
    """Raise ``ValueError`` (one line, naming ``setting`` and how to turn it ``off``) where
    ``torch.compile``'s inductor cannot build code for ``device``. On CPU inductor compiles
    C++, so it needs a working C++ compiler (looked for as inductor itself does); elsewhere the
    first compilation tells."""
    if device.type != "cpu":
        return
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # a torch without this helper: the first compilation tells
        return
    try:
        get_cpp_compiler()
    except Exception as err:  # InvalidCxxCompiler, whose module differs between torch versions
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"{setting} needs a working C++ compiler on CPU (torch.compile builds C++ there): "
            f"{reason}; install one (e.g. g++) or {off}"
        ) from None


def compile_counts() -> dict[str, int]:
    """Graphs compiled and frames recompiled in this process so far (``torch._dynamo``'s
    counters), for a run's log."""
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "recompiles": int(sum(counters["recompiles"].values())),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
