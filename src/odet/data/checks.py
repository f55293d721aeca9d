"""Argument checks at the public boundary of ``odet.data``: token ids are whole numbers, and
sizes, budgets and seeds are integers in range, so a float, a bool or a NaN is refused with the
argument's name instead of being truncated or compared into a silently wrong result."""

from __future__ import annotations

import numpy as np
import torch


def token_ids(values: object, what: str) -> np.ndarray:
    """``values`` (a sequence, array or tensor of token ids) as a 1-D ``int64`` array.

    Raises ``TypeError`` naming ``what`` when they are not integers (floats, bools, strings),
    and ``ValueError`` when they are not one-dimensional.
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    if isinstance(values, str | bytes):
        raise TypeError(f"{what} must be a sequence of token ids, not {type(values).__name__}")
    try:
        array = np.asarray(values)
    except ValueError:  # ragged nesting
        raise ValueError(f"{what} must be a flat sequence of token ids") from None
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"{what} must hold integer token ids, got {array.dtype} values")
    return array.astype(np.int64)


def check_int(value: object, name: str, low: int | None, high: int | None = None) -> None:
    """``TypeError`` unless ``value`` is an ``int`` (a bool is not); ``ValueError`` unless
    ``low <= value <= high`` (``None``: no such bound)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if (low is not None and value < low) or (high is not None and value > high):
        bound = (
            f"be <= {high}"
            if low is None
            else f"lie in [{low}, {high}]"
            if high is not None
            else f"be >= {low}"
        )
        raise ValueError(f"{name}={value} must {bound}")


def check_real(value: object, name: str) -> float:
    """``value`` as a float; ``TypeError`` unless it is a real number (a bool is not),
    ``ValueError`` when it is NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if value != value:
        raise ValueError(f"{name} must be a number, got NaN")
    return float(value)


def count_arrays(first: object, second: object, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Two 1-D arrays of equal shape holding non-negative integer counts, as ``int64``."""
    arrays = (np.asarray(first), np.asarray(second))
    if arrays[0].shape != arrays[1].shape or arrays[0].ndim != 1:
        raise ValueError(
            f"{what} arrays must be 1-D and equal in shape, got {arrays[0].shape} and "
            f"{arrays[1].shape}"
        )
    for array in arrays:
        if array.size and array.dtype.kind not in "iu":
            raise TypeError(f"{what}s must be integers, got {array.dtype} values")
        if array.size and array.min() < 0:
            raise ValueError(f"{what}s must be >= 0, got {array.min()}")
    return arrays[0].astype(np.int64), arrays[1].astype(np.int64)
