"""Rounding float64 to float16, bfloat16 and float32, exactly as those formats store
values (bfloat16 without NumPy support for it: by float32 bits)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["round_to"]

_NUMPY_FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _round_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float64 to bfloat16 (round to nearest even), by float32 bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        # float64 -> float32 with round-to-odd, so that the second rounding
        # (float32 -> bfloat16) cannot double-round: truncate, then set the
        # last bit of every inexact result.
        bits = f.view(np.uint32)
        inexact = f.astype(np.float64) != x
        too_big = np.abs(f.astype(np.float64)) > np.abs(x)
        bits = np.where(inexact & too_big, bits - np.uint32(1), bits)
        bits = np.where(inexact, bits | np.uint32(1), bits).astype(np.uint64)
    # Round to nearest even on the upper 16 bits (inf stays inf; overflow to inf).
    lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = (bits + np.uint64(0x7FFF) + lsb) & np.uint64(0xFFFF0000)
    quiet_nan = (bits | np.uint64(0x00400000)) & np.uint64(0xFFFF0000)
    rounded = np.where(np.isnan(x), quiet_nan, rounded).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)


def round_to(x: Any, dtype_name: str) -> np.ndarray:
    """Round to ``dtype_name`` ("float16", "bfloat16", "float32", "float64").

    Returns a float64 array (same shape) of values exactly representable in
    that format.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype_name == "bfloat16":
        return _round_bfloat16(x)
    if dtype_name not in _NUMPY_FLOATS:
        raise ValueError(f"unknown dtype_name {dtype_name!r}")
    with np.errstate(over="ignore"):
        return x.astype(_NUMPY_FLOATS[dtype_name]).astype(np.float64)
