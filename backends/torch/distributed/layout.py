"""Zigzag sharding of torch tensors for a torch.distributed ring.

Who holds which positions (the zigzag and contiguous layouts: rank r holds chunks r and
2P-1-r of the sequence cut into 2P) and which (query piece, key piece) pairs do work is
the core's plan, :mod:`attnkit.ring.plan`, shared with JAX.
"""

from __future__ import annotations

from typing import Any

import torch

from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError

__all__ = ["zigzag_shard", "zigzag_unshard"]


def _check_split(x: Any, world: int, dim: int, name: str) -> tuple[int, int]:
    """(axis, chunk length) of ``x`` cut into 2 * world chunks along ``dim``."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(f"{name} takes a torch.Tensor, got {type(x).__name__}.")
    if type(world) is not int or world < 1:
        raise ParameterError(f"{name}: world must be a positive int, got {world!r}.")
    if not -x.ndim <= dim < x.ndim:
        raise ShapeError(f"{name}: dim={dim} is not an axis of a tensor of shape {tuple(x.shape)}.")
    axis = dim % x.ndim
    return axis, x.shape[axis]


def zigzag_shard(x: torch.Tensor, rank: int, world: int, dim: int = -2) -> torch.Tensor:
    """Rank ``rank``'s zigzag shard of the whole sequence ``x``: chunks ``rank`` and
    ``2*world-1-rank`` of 2 * world equal chunks along ``dim``, concatenated.

    Shapes: x (..., N, E) -> (..., N / world, E) (for the default dim=-2). Raises
    ``ShapeError`` when N does not divide by 2 * world (pad the sequence to a multiple,
    masking the padding, e.g. with ``attnkit.masks.key_padding``)."""
    axis, n = _check_split(x, world, dim, "zigzag_shard")
    if n % (2 * world):
        raise ShapeError(
            f"zigzag_shard: x has shape {tuple(x.shape)}, length {n} on axis {dim}, which "
            f"does not divide into 2 * world = {2 * world} chunks; pad the sequence to a "
            f"multiple of {2 * world} (and mask the padding) or use layout='contiguous'."
        )
    if type(rank) is not int or not 0 <= rank < world:
        raise ParameterError(f"zigzag_shard: rank must be an int in [0, {world}), got {rank!r}.")
    c = n // (2 * world)
    first = x.narrow(axis, rank * c, c)
    last = x.narrow(axis, (2 * world - 1 - rank) * c, c)
    return torch.cat([first, last], dim=axis)  # (..., 2c = N / world, E)


def zigzag_unshard(shards: list[torch.Tensor], dim: int = -2) -> torch.Tensor:
    """The whole sequence from every rank's zigzag shard (``shards[r]`` is rank r's, of
    length 2c on ``dim``): the inverse of :func:`zigzag_shard`.

    Shapes: world tensors (..., 2c, E) -> (..., 2c * world, E)."""
    if not isinstance(shards, (list, tuple)) or not shards:
        raise ArgumentTypeError("zigzag_unshard takes a non-empty list of every rank's shard.")
    world = len(shards)
    axis, n = _check_split(shards[0], world, dim, "zigzag_unshard")
    if n % 2 or any(tuple(s.shape) != tuple(shards[0].shape) for s in shards):
        raise ShapeError(
            f"zigzag_unshard needs shards of one shape with an even length on axis {dim}, got "
            f"{[tuple(s.shape) for s in shards]}; pass the shards zigzag_shard made."
        )
    c = n // 2
    firsts = [s.narrow(axis, 0, c) for s in shards]  # chunks 0 .. world-1
    lasts = [s.narrow(axis, c, c) for s in reversed(shards)]  # chunks world .. 2world-1
    return torch.cat(firsts + lasts, dim=axis)  # (..., N, E)
