"""Checks the mask kinds share: of what a mask is built from (arrays, lengths) when it is
made, and of the positions a call shows it, before any work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import array_api_compat as aac

from ..checks import is_int
from ..errors import ArgumentTypeError, DeviceMismatchError, NamespaceMismatchError, ParameterError
from .geometry import Geometry

__all__ = [
    "array_namespace_of",
    "check_no_negative",
    "check_position_range",
    "check_same_library",
    "int_lengths",
]


def check_position_range(xp: Any, device: Any, g: Geometry, name: str, mask: Any) -> None:
    """Refuse absolute positions that the namespace's index dtype cannot hold (JAX without
    64-bit mode indexes in int32): the mask would compare wrapped-around positions."""
    largest = max(abs(g.q_offset) + g.L + abs(g.S - g.L), abs(g.kv_offset) + g.S)
    if largest < 2**31:
        return
    dtype = xp.arange(1, device=device).dtype
    if xp.iinfo(dtype).max >= largest:
        return
    raise ParameterError(
        f"{name} {mask!r} sees absolute positions up to {largest} (q_offset={g.q_offset}, "
        f"kv_offset={g.kv_offset}), beyond this array library's {dtype} indices; enable 64-bit "
        "mode (jax.config.update('jax_enable_x64', True)) or pass smaller offsets."
    )


def check_no_negative(g: Geometry, name: str, mask: Any) -> None:
    """Structures laid out from position 0 define no negative positions."""
    if g.q_offset < 0 or g.kv_offset < 0:
        raise ParameterError(
            f"{name} {mask!r} is laid out from position 0 and defines no negative positions, "
            f"got q_offset={g.q_offset} and kv_offset={g.kv_offset}; pass offsets >= 0 (the "
            "absolute positions of the first query and key in the laid-out sequence)."
        )


def check_same_library(xp: Any, device: Any, x: Any, what: str) -> None:
    """``x`` (an array a mask carries) must share the inputs' library and device."""
    if aac.array_namespace(x) is not xp:
        raise NamespaceMismatchError(
            f"{what} is a {type(x).__module__}.{type(x).__name__} but the query comes from "
            f"{getattr(xp, '__name__', xp)}; build the mask from arrays of the query's library "
            "(convert it first, e.g. torch.as_tensor(array) or jax.numpy.asarray(array))."
        )
    other = aac.device(x)
    if device is not None and other is not None and other != device:
        raise DeviceMismatchError(
            f"{what} is on device {other} but the query is on {device}; move it to the "
            "query's device."
        )


def array_namespace_of(x: Any, what: str) -> Any:
    """The array-API namespace of ``x``, or an ArgumentTypeError where it is no array."""
    if not aac.is_array_api_obj(x):
        raise ArgumentTypeError(
            f"{what} must be an array (NumPy, PyTorch, JAX or any array-API array), got "
            f"{type(x).__name__}; convert it first, e.g. numpy.asarray(...)."
        )
    return aac.array_namespace(x)


def int_lengths(lengths: Any, what: str) -> list[int]:
    """A sequence of Python ints (or an array's ``tolist()``), refusing fractions and bools."""
    values = lengths.tolist() if hasattr(lengths, "tolist") else lengths
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ArgumentTypeError(
            f"{what} needs a sequence of int lengths, got {type(lengths).__name__} {lengths!r}."
        )
    if not all(is_int(n) for n in values):
        raise ParameterError(f"{what} lengths must be ints, got {list(values)!r}.")
    return [int(n) for n in values]
