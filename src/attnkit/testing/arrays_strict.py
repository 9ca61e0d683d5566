"""array-api-strict arrays to and from float64 NumPy, for :mod:`attnkit.testing.arrays`
(the strictest array API library: attnkit's own conformance matrix checks on it)."""

from __future__ import annotations

from typing import Any

import array_api_strict as xp
import numpy as np

__all__ = ["device_of", "from_numpy", "to_numpy"]


def device_of(x: Any) -> str:
    return str(x.device)


def to_numpy(x: Any) -> np.ndarray:
    return np.asarray(x.to_device(xp.Device("CPU_DEVICE")))


def from_numpy(a: np.ndarray, dtype: str, device: Any, transposed: bool) -> Any:
    x = xp.asarray(np.asarray(a, dtype=dtype), device=device)
    return xp.matrix_transpose(xp.matrix_transpose(x)) if transposed else x
