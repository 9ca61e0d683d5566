"""Who holds which positions in a ring, and which (query shard, key shard) pairs do work.

A sequence of length N split over P devices along a mesh axis is cut into pieces, each
a contiguous run of absolute positions. Two layouts (P = 2, N = 8 shown; digits are
the positions each shard holds, in its local order)::

    contiguous   shard 0: 0 1 2 3           shard 1: 4 5 6 7
    zigzag       shard 0: 0 1 | 6 7         shard 1: 2 3 | 4 5
                 (N cut into 2P chunks of N / 2P; shard r holds chunks r and 2P-1-r)

Under causal attention the zigzag layout gives every shard the same number of allowed
pairs: shard r's early chunk sees few keys and its late chunk many.

The skip table is static: in step t of the ring, device r holds the keys of shard
(r - t) mod P, so every (query piece, key piece) pair of every device and step is known
in Python before tracing. A pair whose structure (causal, window, ``attnkit.masks``)
allows no (query, key) pair is never computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import attnkit as ak
from attnkit.masks import Geometry, Mask, Tile, clip_ranges

__all__ = [
    "Piece",
    "PlacedMask",
    "pair_is_empty",
    "pair_is_full",
    "ring_structure",
    "shard_pieces",
]

#: Pairs up to this many (query, key) positions are tested for being fully allowed.
FULL_TEST_LIMIT = 2**24


@dataclass(frozen=True)
class Piece:
    """A run of ``length`` absolute positions from ``start``, stored from local row
    ``local`` of its shard."""

    start: int
    length: int
    local: int


def shard_pieces(layout: str, parts: int, n: int) -> list[list[Piece]]:
    """The pieces of each of ``parts`` shards of a sequence of length ``n`` (divisible
    by 2 * parts for zigzag, by parts for contiguous: checked by the caller)."""
    if layout == "contiguous":
        size = n // parts
        return [[Piece(r * size, size, 0)] for r in range(parts)]
    chunk = n // (2 * parts)
    return [
        [Piece(r * chunk, chunk, 0), Piece((2 * parts - 1 - r) * chunk, chunk, chunk)]
        for r in range(parts)
    ]


class PlacedMask(Mask):
    """A structure already checked against the whole (global) call, applied to pieces.

    It answers exactly as the wrapped mask does (positions are absolute, so a piece at
    its offsets gets the whole call's rule); only its per-call ``check`` is skipped,
    because some masks (``documents``) check that one call covers the laid-out sequence,
    which a piece does not."""

    def __init__(self, inner: Mask) -> None:
        self.inner = inner
        self.lead = inner.lead
        self.translation_invariant = inner.translation_invariant
        self.keys_only = inner.keys_only

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> list[tuple[int, int]]:
        return self.inner.key_ranges(g, q_lo, q_hi)

    def tile(self, t: Tile) -> Any:
        return self.inner.tile(t)

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        return self.inner.key_alive(xp, device, g)

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        return None  # checked once against the global call (attnkit.explain)

    def __repr__(self) -> str:
        return repr(self.inner)


def ring_structure(is_causal: bool, window: Any, alignment: str, attn_mask: Any) -> Mask | None:
    """causal & window & a structured ``attn_mask`` as one Mask, for the skip table
    (the core builds the same rule from the same arguments for each piece)."""
    parts: list[Mask] = []
    if is_causal:
        parts.append(ak.masks.causal(alignment))
    if isinstance(window, Mask):
        parts.append(window)
    elif window is not None:
        parts.append(ak.masks.sliding_window(window, alignment))
    if isinstance(attn_mask, Mask):
        parts.append(attn_mask)
    if not parts:
        return None
    out = parts[0]
    for part in parts[1:]:
        out = out & part
    return out


def pair_is_empty(
    structure: Mask | None, q: Piece, k: Piece, q_offset: int, kv_offset: int
) -> bool:
    """True when the structure allows no pair between query piece ``q`` and key piece
    ``k`` (whole-call offsets ``q_offset``, ``kv_offset`` added to the pieces' starts).
    Decided from the mask's static key ranges (a superset is allowed: a pair that is
    kept but empty is computed and gives lse = -inf, which the merge ignores)."""
    if q.length == 0 or k.length == 0:
        return True
    if structure is None:
        return False
    g = Geometry(q.length, k.length, q_offset + q.start, kv_offset + k.start)
    return not clip_ranges(structure.key_ranges(g, 0, q.length), k.length)


def pair_is_full(structure: Mask | None, q: Piece, k: Piece, q_offset: int, kv_offset: int) -> bool:
    """True when the structure allows every pair between the two pieces (then the piece
    is computed with no structure at all, and every such pair of a step shares one
    traced computation). Tested on the materialized NumPy mask of the pair (at most
    ``FULL_TEST_LIMIT`` positions; larger pairs count as not full, which is still right)."""
    if structure is None:
        return True
    if q.length * k.length > FULL_TEST_LIMIT:
        return False
    import array_api_compat.numpy as xp

    allowed = structure.materialize(
        xp, q.length, k.length, q_offset=q_offset + q.start, kv_offset=kv_offset + k.start
    )  # (..., Lq, Sk) bool
    return bool(xp.all(allowed))
