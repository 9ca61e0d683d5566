"""Who holds which positions in a torch.distributed ring, and which pairs do work.

A sequence of length N split over P processes is cut into pieces, each a contiguous run
of absolute positions. Two layouts (P = 2, N = 8 shown; digits are the positions each
process holds, in its local order)::

    contiguous   rank 0: 0 1 2 3           rank 1: 4 5 6 7
    zigzag       rank 0: 0 1 | 6 7         rank 1: 2 3 | 4 5
                 (N cut into 2P chunks of N / 2P; rank r holds chunks r and 2P-1-r)

Under causal attention zigzag gives every rank the same number of allowed pairs: rank
r's early chunk sees few keys and its late chunk many. In ring step t rank r holds the
keys of rank (r - t) mod P, so the (query piece, key piece) pairs of every step are known
before any work; a pair whose causal/window/structured-mask rule allows nothing is never
computed (windowed ring attention does O(pairs) work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnkit.errors import ArgumentTypeError, ParameterError, ShapeError
from attnkit.masks import Geometry, Mask, clip_ranges, sliding_window
from attnkit.masks import causal as causal_mask

__all__ = [
    "LAYOUTS",
    "Piece",
    "PlacedMask",
    "pair_is_empty",
    "ring_structure",
    "shard_pieces",
    "zigzag_shard",
    "zigzag_unshard",
]

LAYOUTS = ("zigzag", "contiguous")


@dataclass(frozen=True)
class Piece:
    """``length`` absolute positions from ``start``, stored from local row ``local``."""

    start: int
    length: int
    local: int


def shard_pieces(layout: str, world: int, n: int) -> list[list[Piece]]:
    """The pieces of each of ``world`` shards of a sequence of length ``n`` (divisible by
    2 * world for zigzag, by world for contiguous: checked by the caller)."""
    if layout == "contiguous":
        size = n // world
        return [[Piece(r * size, size, 0)] for r in range(world)]
    c = n // (2 * world)
    return [[Piece(r * c, c, 0), Piece((2 * world - 1 - r) * c, c, c)] for r in range(world)]


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


def ring_structure(is_causal: bool, window: Any, attn_mask: Any) -> Mask | None:
    """causal & window & a structured ``attn_mask`` (top-left aligned: bottom-right is
    turned into a q_offset by the caller) as one Mask, for the skip table; the core
    builds the same rule from the same arguments for each pair."""
    parts: list[Mask] = []
    if is_causal:
        parts.append(causal_mask("top_left"))
    if isinstance(window, Mask):
        parts.append(window)
    elif window is not None:
        parts.append(sliding_window(window, "top_left"))
    if isinstance(attn_mask, Mask):
        parts.append(attn_mask)
    out = parts[0] if parts else None
    for part in parts[1:]:
        out = out & part
    return out


def pair_is_empty(
    structure: Mask | None, q: Piece, k: Piece, q_offset: int, kv_offset: int
) -> bool:
    """True when ``structure`` allows no pair between query piece ``q`` and key piece
    ``k`` (the call's ``q_offset`` / ``kv_offset`` added to the pieces' starts), from the
    mask's static key ranges (a superset: a kept pair that turns out empty gives lse =
    -inf, which the merge ignores)."""
    if q.length == 0 or k.length == 0:
        return True
    if structure is None:
        return False
    g = Geometry(q.length, k.length, q_offset + q.start, kv_offset + k.start)
    return not clip_ranges(structure.key_ranges(g, 0, q.length), k.length)


class PlacedMask(Mask):
    """A structure checked once against the whole call, then applied to pieces: it
    answers as the wrapped mask does (positions are absolute); only its per-call
    ``check`` is skipped, since some masks (``documents``) check that one call covers
    the whole laid-out sequence, which a piece does not."""

    def __init__(self, inner: Mask) -> None:
        self.inner = inner
        self.lead = inner.lead
        self.translation_invariant = inner.translation_invariant
        self.keys_only = inner.keys_only

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> list[tuple[int, int]]:
        return self.inner.key_ranges(g, q_lo, q_hi)

    def tile(self, t: Any) -> Any:
        return self.inner.tile(t)

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        return self.inner.key_alive(xp, device, g)

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        return None  # checked against the whole call (distributed_checks)

    def __repr__(self) -> str:
        return repr(self.inner)
