"""Who holds which positions in a ring, and which (query shard, key shard) pairs do work.

The plan (pieces, the skip rule, the placed mask) is the core's, :mod:`attnkit.ring_plan`,
shared with torch; here what JAX adds: whether a pair is fully allowed (then every such
pair of a step shares one traced computation). A sequence of length N split over P
devices along a mesh axis is cut into pieces, each a contiguous run of absolute
positions. Two layouts (P = 2, N = 8 shown; digits are
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

from attnkit.masks import Mask
from attnkit.ring_plan import Piece, PlacedMask, pair_is_empty, ring_structure, shard_pieces

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
