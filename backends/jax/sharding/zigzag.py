"""The zigzag (load-balanced) order of a sequence and its inverse.

N is cut into 2P chunks; in zigzag order shard r holds chunks r and 2P-1-r (P = 2)::

    natural   0 1 2 3 4 5 6 7        chunks [0 1] [2 3] [4 5] [6 7]
    zigzag    0 1 6 7 | 2 3 4 5      shard 0 = chunks 0, 3; shard 1 = chunks 1, 2

``zigzag_unshard(zigzag_shard(x, P), P) == x``; both are a gather along one axis.
"""

from __future__ import annotations

from typing import Any

from attnkit.errors import ParameterError, ShapeError

__all__ = ["zigzag_order", "zigzag_shard", "zigzag_unshard"]


def zigzag_order(parts: int) -> list[int]:
    """The chunk order of zigzag: [0, 2P-1, 1, 2P-2, ..., P-1, P]."""
    return [c for r in range(parts) for c in (r, 2 * parts - 1 - r)]


def _permute_chunks(x: Any, parts: int, axis: int, order: list[int], what: str) -> Any:
    import jax.numpy as jnp

    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ParameterError(
            f"{what} needs parts, a positive int (the device count), got {parts!r}."
        )
    ndim = getattr(x, "ndim", None)
    if ndim is None or not -ndim <= axis < ndim:
        raise ShapeError(
            f"{what} got x of shape {tuple(getattr(x, 'shape', ()))} and axis={axis}; pass an "
            "array and an axis inside its rank (the sequence axis, -2 by default)."
        )
    n = x.shape[axis]
    if n % (2 * parts):
        raise ShapeError(
            f"{what} got x of shape {tuple(x.shape)}: its length {n} on axis {axis} does not "
            f"divide by 2 x parts = {2 * parts}; pad it to a multiple of {2 * parts} "
            f"({n + (-n) % (2 * parts)})."
        )
    moved = jnp.moveaxis(x, axis, 0)  # (N, ...)
    chunks = jnp.reshape(moved, (2 * parts, n // (2 * parts), *moved.shape[1:]))  # (2P, N/2P, ...)
    chunks = jnp.take(chunks, jnp.asarray(order), axis=0)  # (2P, N/2P, ...) reordered
    return jnp.moveaxis(jnp.reshape(chunks, moved.shape), 0, axis)  # x's shape


def zigzag_shard(x: Any, parts: int, axis: int = -2) -> Any:
    """``x`` (..., N, F) in zigzag order for ``parts`` devices along ``axis`` (same shape):
    block r of N / P positions holds chunks r and 2 parts - 1 - r of N / (2 parts)."""
    return _permute_chunks(x, parts, axis, zigzag_order(parts), "zigzag_shard")


def zigzag_unshard(x: Any, parts: int, axis: int = -2) -> Any:
    """The inverse of :func:`zigzag_shard`: natural order back (same shape)."""
    order = zigzag_order(parts)
    inverse = [order.index(c) for c in range(2 * parts)]
    return _permute_chunks(x, parts, axis, inverse, "zigzag_unshard")
