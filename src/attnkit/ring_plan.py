"""Who holds which positions in a ring, and which (query piece, key piece) pairs do work.

Framework-free planning for ring attention over P devices or processes, shared by the
JAX (``attnkit.backends.jax.sharding``) and torch (``attnkit.backends.torch.
distributed``) front-ends. A sequence of length N is cut into pieces, each a contiguous
run of absolute positions. Two layouts (P = 2, N = 8; the positions each shard holds, in
its local order)::

    contiguous   shard 0: 0 1 2 3           shard 1: 4 5 6 7
    zigzag       shard 0: 0 1 | 6 7         shard 1: 2 3 | 4 5
                 (N cut into 2P chunks of N / 2P; shard r holds chunks r and 2P-1-r)

Under causal attention zigzag gives every shard the same number of allowed pairs: shard
r's early chunk sees few keys and its late chunk many. In ring step t shard r holds the
keys of shard (r - t) mod P, so the pairs of every step are known before any work; a pair
whose causal/window/structured-mask rule allows nothing is never computed (windowed ring
attention does O(pairs) work).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .masks import Geometry, Mask, Tile, causal, clip_ranges, sliding_window

__all__ = ["LAYOUTS", "Piece", "PlacedMask", "pair_is_empty", "ring_structure", "shard_pieces"]

#: The shard layouts: zigzag (load-balanced for causal) and contiguous.
LAYOUTS = ("zigzag", "contiguous")


@dataclass(frozen=True)
class Piece:
    """``length`` absolute positions from ``start``, stored from local row ``local`` of
    its shard."""

    start: int
    length: int
    local: int


def shard_pieces(layout: str, parts: int, n: int) -> list[list[Piece]]:
    """The pieces of each of ``parts`` shards of a sequence of length ``n`` (divisible by
    2 * parts for zigzag, by parts for contiguous: checked by the caller)."""
    if layout == "contiguous":
        size = n // parts
        return [[Piece(r * size, size, 0)] for r in range(parts)]
    c = n // (2 * parts)
    return [[Piece(r * c, c, 0), Piece((2 * parts - 1 - r) * c, c, c)] for r in range(parts)]


class PlacedMask(Mask):
    """A structure checked once against the whole call, then applied to pieces.

    It answers exactly as the wrapped mask does (positions are absolute, so a piece at its
    offsets gets the whole call's rule); only its per-call ``check`` is skipped, because
    some masks (``documents``) check that one call covers the whole laid-out sequence,
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
        return None  # checked once against the whole call by the front-end

    def __repr__(self) -> str:
        return repr(self.inner)


def ring_structure(
    is_causal: bool, window: Any, alignment: str = "top_left", attn_mask: Any = None
) -> Mask | None:
    """causal & window & a structured ``attn_mask`` as one Mask, for the skip table (the
    core builds the same rule from the same arguments for each pair); None when there is
    no structure."""
    parts: list[Mask] = []
    if is_causal:
        parts.append(causal(alignment))
    if isinstance(window, Mask):
        parts.append(window)
    elif window is not None:
        parts.append(sliding_window(window, alignment))
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
    ``k`` (the call's ``q_offset`` / ``kv_offset`` added to the pieces' starts), decided
    from the mask's static key ranges (a superset is allowed: a kept pair that turns out
    empty gives lse = -inf, which the merge ignores)."""
    if q.length == 0 or k.length == 0:
        return True
    if structure is None:
        return False
    g = Geometry(q.length, k.length, q_offset + q.start, kv_offset + k.start)
    return not clip_ranges(structure.key_ranges(g, 0, q.length), k.length)
