"""Whether a (query shard, key shard) pair of a JAX ring is fully allowed (then every
such pair of a step shares one traced computation, with no structure at all).

Who holds which positions (the zigzag and contiguous layouts) and which pairs do work at
all is the core's plan, :mod:`attnkit.ring.plan`, shared with torch.
"""

from __future__ import annotations

from attnkit.masks import Mask
from attnkit.ring.plan import Piece

__all__ = ["pair_is_full"]

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
