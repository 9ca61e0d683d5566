"""Who holds which positions in a ring, and which (query piece, key piece) pairs do work.

Framework-free planning for ring attention over P devices or processes, shared by the
JAX and torch front-ends. Two layouts (P = 2, N = 8; the positions each shard holds)::

    contiguous   shard 0: 0 1 2 3           shard 1: 4 5 6 7
    zigzag       shard 0: 0 1 | 6 7         shard 1: 2 3 | 4 5
                 (N cut into 2P chunks of N / 2P; shard r holds chunks r and 2P-1-r)

Zigzag balances causal work; a (query piece, key piece) pair that allows nothing is
never computed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import array_api_compat as aac

from ..masks import Geometry, Mask, Tile, causal, clip_ranges, sliding_window
from ..masks.algebra import _Combined
from ..masks.arrays import _Segments

__all__ = [
    "LAYOUTS",
    "Piece",
    "PlacedMask",
    "Segments",
    "carries_arrays",
    "pair_is_empty",
    "ring_structure",
    "shard_pieces",
    "split_segments",
]

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


def carries_arrays(obj: Any) -> bool:
    """True when a mask holds arrays (segment ids, dense masks, array lengths), searched
    through ``&``/``|`` combinations. Such masks index their arrays by the call's local
    rows and columns, so a ring's pieces cannot take them as they are: ring front-ends
    refuse them."""
    if aac.is_array_api_obj(obj):
        return True
    if isinstance(obj, (tuple, list)):
        return any(carries_arrays(x) for x in obj)
    if isinstance(obj, PlacedMask):
        return carries_arrays(obj.inner)
    if isinstance(obj, Mask) and dataclasses.is_dataclass(obj):
        return any(carries_arrays(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    return False


@dataclass(frozen=True)
class Segments:
    """Segment ids of a ring call, taken out of ``attnkit.masks.segments``: ``q_ids``
    (..., 1, L) and ``kv_ids`` (..., 1, S) as the mask stores them (a head axis of 1
    added where the ids have leading dims), and the mask's leading dims ``lead``.

    In a ring the ids are sharded like the sequence they label: each shard's query ids
    stay, its key ids travel with K and V, and each (query piece, key piece) pair gets
    :meth:`piece`, the segments mask of the two pieces' ids."""

    q_ids: Any
    kv_ids: Any
    lead: tuple[int, ...]

    def piece(self, q_ids: Any, kv_ids: Any) -> Mask:
        """The segments mask of one pair: the query piece's ids (..., 1, n_q) against
        the key piece's (..., 1, n_k)."""
        return _Segments(q_ids, kv_ids, self.lead)


def split_segments(mask: Any) -> tuple[Segments | None, Any]:
    """(segment ids, the rest of the mask) of a ring's ``attn_mask``: ``segments(...)``
    alone gives (ids, None); ``segments(...) & positional`` gives (ids, positional);
    a mask without segment ids gives (None, mask). Any other mask that carries arrays
    (dense, array lengths, segments inside ``|``, two segment masks) gives (None, mask)
    and is for the caller to refuse (:func:`carries_arrays`)."""
    if isinstance(mask, _Segments):
        return Segments(mask.q_ids, mask.kv_ids, mask.lead), None
    if isinstance(mask, _Combined) and mask.op == "and":
        seg = [p for p in mask.parts if isinstance(p, _Segments)]
        rest = [p for p in mask.parts if not isinstance(p, _Segments)]
        if len(seg) == 1 and not any(carries_arrays(p) for p in rest):
            out = rest[0]
            for part in rest[1:]:
                out = out & part
            return Segments(seg[0].q_ids, seg[0].kv_ids, seg[0].lead), out
    return None, mask
