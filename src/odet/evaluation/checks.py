"""Argument checks shared by the metrics: texts are sequences of strings, one per sentence, and
a corpus is not empty, so a wrong argument is a ``TypeError`` / ``ValueError`` naming it rather
than an ``AttributeError`` from inside a scorer or a perfect score for nothing scored."""

from __future__ import annotations

from collections.abc import Sequence


def check_texts(values: object, name: str) -> None:
    """``TypeError`` unless ``values`` is a sequence (not a string) whose entries are strings;
    the message names the first entry that is not."""
    if isinstance(values, str | bytes):
        raise TypeError(f"{name} must be a sequence of strings (one per sentence), not a string")
    if not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence (a list or tuple), got {type(values).__name__}")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(value).__name__}")


def check_references(references: object, name: str = "references") -> None:
    """``TypeError`` unless every entry of ``references`` is a string or a sequence of strings
    (the references of one sentence); the message names the first entry that is not."""
    if isinstance(references, str | bytes) or not isinstance(references, Sequence):
        raise TypeError(f"{name} must be a sequence with one entry per sentence")
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            continue
        if isinstance(refs, bytes) or not isinstance(refs, Sequence):
            raise TypeError(
                f"{name}[{i}] must be a string or a sequence of strings, got {type(refs).__name__}"
            )
        for k, ref in enumerate(refs):
            if not isinstance(ref, str):
                raise TypeError(f"{name}[{i}][{k}] must be a string, got {type(ref).__name__}")


def check_not_empty(values: Sequence[object]) -> None:
    """``ValueError`` for an empty corpus: there is nothing to score."""
    if not values:
        raise ValueError("cannot score an empty corpus")
