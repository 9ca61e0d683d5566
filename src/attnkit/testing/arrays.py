"""Arrays of any supported library, as the kit sees them: library, dtype and device, and
float64 NumPy copies of them and back.

``"numpy"``, ``"torch"``, ``"jax"`` and ``"array_api_strict"``, recognised by the module of
an array's type; conversions (``arrays_torch``, ``arrays_jax``, ``arrays_strict``) are
imported on first use.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "DTYPES",
    "LIBRARIES",
    "describe",
    "device_of",
    "dtype_name",
    "from_float64",
    "library_of",
    "precision",
    "to_float64",
]

LIBRARIES = ("numpy", "torch", "jax", "array_api_strict")
DTYPES = ("float16", "bfloat16", "float32", "float64")
_MODULES = {"torch": "torch", "jax": "jax", "jaxlib": "jax", "array_api_strict": "array_api_strict"}
_HELPERS = {"torch": "arrays_torch", "jax": "arrays_jax", "array_api_strict": "arrays_strict"}


def library_of(x: Any) -> str | None:
    """ "numpy", "torch", "jax", "array_api_strict", or None for anything else."""
    top = type(x).__module__.split(".")[0]
    if isinstance(x, np.ndarray | np.generic):
        return "numpy"
    return _MODULES.get(top)


def _helper(library: str) -> Any:
    return importlib.import_module(f"{__package__}.{_HELPERS[library]}")


def dtype_name(x: Any) -> str:
    """The array's dtype as a plain name: "float32", "bfloat16", "bool", ..."""
    return str(x.dtype).rsplit(".", 1)[-1].lower()


def device_of(x: Any) -> str:
    """The array's device, in words ("cpu" for NumPy)."""
    library = library_of(x)
    if library in (None, "numpy"):
        return "cpu"
    return str(_helper(library).device_of(x))


def describe(x: Any) -> str:
    """``torch.Tensor float32 (2, 2, 5, 8) on cpu``; the type alone for a non-array."""
    library = library_of(x)
    kind = f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"
    if library is None:
        return kind
    return f"{kind} {dtype_name(x)} {tuple(x.shape)} on {device_of(x)}"


def to_float64(x: Any, keep_bool: bool = False) -> np.ndarray:
    """A float64 NumPy copy of ``x`` (a bool array stays bool with ``keep_bool``)."""
    library = library_of(x)
    if library is not None and library != "numpy":
        x = _helper(library).to_numpy(x)
    a = np.array(x)
    if keep_bool and a.dtype == np.bool_:
        return a
    return a.astype(np.float64)


def from_float64(
    a: np.ndarray, library: str, dtype: str, device: Any = None, transposed: bool = False
) -> Any:
    """``a`` (float64 values exact in ``dtype``, or bool) as an array of ``library`` in
    ``dtype`` on ``device``; ``transposed``: a non-contiguous view with the same values
    (the transpose of a transposed copy; JAX, which has no views, gets a plain copy)."""
    if a.dtype == np.bool_:
        dtype = "bool"
    if library == "numpy":
        if dtype == "bfloat16":
            raise ValueError("NumPy has no bfloat16")
        if transposed and a.ndim >= 2:
            return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2), dtype=dtype), -1, -2)
        return np.array(a, dtype=dtype)
    return _helper(library).from_numpy(a, dtype, device, transposed)


@contextlib.contextmanager
def precision(library: str, dtype: str) -> Iterator[None]:
    """JAX computes float64 only with ``jax_enable_x64``: switched on within the block for
    float64 (and restored); every other library needs nothing."""
    if library != "jax" or dtype != "float64":
        yield
        return
    with _helper("jax").float64_enabled():
        yield
