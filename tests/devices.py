"""Helpers of the device-parametrised tests (the ``device`` fixture of ``tests/conftest.py``)."""

from __future__ import annotations

import torch


def fp32_tolerance(device: torch.device) -> dict[str, float]:
    """``assert_close`` tolerances for one fp32 result computed two ways (cached and full-prefix
    decoding): 1e-5 on CPU; CUDA kernels choose their reduction order by shape, so 1e-4 there."""
    tol = 1e-5 if device.type == "cpu" else 1e-4
    return {"atol": tol, "rtol": tol}


def repeat_tolerance(device: torch.device) -> dict[str, float]:
    """``assert_close`` tolerances for one computation done twice: exact on CPU; CUDA backward
    kernels may accumulate with atomics, so the last bits can differ there."""
    tol = 0.0 if device.type == "cpu" else 1e-6
    return {"atol": tol, "rtol": tol}
