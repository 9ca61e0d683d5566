"""Small pure-Python helpers for shapes: broadcasting, sizes and readable descriptions
of arrays and objects for error messages (used by the math and by every backend)."""

from __future__ import annotations

from typing import Any

__all__ = ["broadcast_shapes", "describe", "prod", "type_name"]


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The array-API broadcast of ``shapes``, or None when they do not broadcast."""
    ndim = 0
    for shape in shapes:  # a loop, not max(genexpr): torch.compile traces it (attnkit.compiling)
        ndim = len(shape) if len(shape) > ndim else ndim
    out = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for axis, size in enumerate(shape):
            current = out[offset + axis]
            if current == 1:
                out[offset + axis] = size
            elif size != 1 and size != current:
                return None
    return tuple(out)


def prod(shape: tuple[int, ...]) -> int:
    result = 1
    for size in shape:
        result *= size
    return result


def describe(x: Any) -> str:
    """``float32 (2, 8, 4, 64)``: the dtype and shape of an array, for messages."""
    dtype = str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")
    return f"{dtype} {tuple(x.shape)}"


def type_name(obj: Any) -> str:
    """``torch.Generator``, ``numpy.ndarray``: an object's type with its module, for messages."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
