"""The :class:`Mask` protocol every mask kind implements, and masks combined by ``&``
and ``|``.

A mask answers, for query rows ``[q_lo, q_hi)``, which key columns may hold an allowed
pair (:meth:`Mask.key_ranges`, static ints) and which pairs inside them are allowed
(:meth:`Mask.tile`, a bool array, or None when all are). From those two answers alone it
can be materialized, counted (:meth:`Mask.density`) and combined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError, ParameterError
from ..shapes import broadcast_shapes, prod
from .geometry import (
    EMPTY,
    FULL,
    PARTIAL,
    Geometry,
    Ranges,
    Tile,
    clip_ranges,
    intersect_ranges,
    merge_ranges,
)
from .validation import check_position_range

__all__ = ["Mask", "and_tiles"]


def and_tiles(a: Any, b: Any) -> Any:
    """``a & b`` for tiles where None means every pair is allowed."""
    return b if a is None else (a if b is None else a & b)


class Mask:
    """Base class: a bool relation between query and key positions (True = may attend)."""

    #: Leading dims the mask carries beyond (L, S), e.g. (B, 1) for per-batch padding.
    lead: tuple[int, ...] = ()
    #: True when a tile depends only on key position minus query position (windows,
    #: causal): the executor then reuses one tile for every block with the same shape.
    translation_invariant: bool = False
    #: True for key padding (``key_padding(lengths)``): whether a key may be attended
    #: depends on the key alone, never on the query, and :meth:`key_alive` is the whole
    #: mask. Attention without query-key structure (the approximations) accepts these.
    keys_only: bool = False
    #: True when each query row attends one range of keys whose ends never decrease from
    #: row to row, and :meth:`key_ranges` of a single row is exactly that range (windows,
    #: causal, and their intersections): the executor's pair loop then tells full, partial
    #: and empty (query block, key block) tiles from the first and last rows' ranges.
    banded: bool = False
    #: True when which pairs are allowed depends on arrays the mask holds (segment ids,
    #: padding lengths as an array, a dense bool array): its tiles are decided at run
    #: time (:meth:`tile_live`), not by :meth:`tile_kind` alone.
    holds_data: bool = False

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        """Key columns [lo, hi) that rows [q_lo, q_hi) may attend (a superset is fine)."""
        return [(0, g.S)]

    def tile(self, t: Tile) -> Any:
        """Bool (..., Bq, Sk) for the tile, or None when every pair in it is allowed.
        ``t`` is a :class:`Tile` (static rows and key ranges) or a
        :class:`attnkit.masks.LoopTile` (a loop's tile, its position possibly traced)."""
        raise NotImplementedError

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        """What the mask allows among rows [q_lo, q_hi) x columns [k_lo, k_hi) (local
        indices, inside the call), from static ints alone: ``EMPTY`` (no pair), ``FULL``
        (every pair) or ``PARTIAL`` (some, or not known without the mask's data). The
        default: PARTIAL where :meth:`key_ranges` reaches the columns, else EMPTY."""
        for lo, hi in self.key_ranges(g, q_lo, q_hi):
            if lo < k_hi and hi > k_lo:
                return PARTIAL
        return EMPTY

    def tile_live(self, xp: Any, device: Any, g: Geometry, rows: int, cols: int) -> Any:
        """Bool (n_q|1, n_k|1): False for the (query block, key block) tiles of ``rows`` x
        ``cols`` (blocks from position 0 of the call, n_q = ceil(L / rows), n_k =
        ceil(S / cols)) where the mask's *data* allows no pair in any leading slice
        (segment ids, padding lengths or a bool array given as arrays: computed at run
        time, so that a traced mask skips tiles too); None where the mask has no data
        to read (its static :meth:`tile_kind` says all). A superset of the live tiles
        is fine."""
        return None

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        """Bool (..., 1, S): False on key columns no query may ever attend (padding); None
        if the mask has no such columns to declare."""
        return None

    def flatten(self) -> tuple[Any, tuple[Any, ...]]:
        """``(key, arrays)``: a hashable key of everything the mask is but the arrays it
        holds (their shapes and dtypes included), and those arrays, so that a compiled
        program can take them as arguments (:meth:`unflatten` puts them back)."""
        return self, ()

    def unflatten(self, arrays: tuple[Any, ...]) -> Mask:
        """This mask holding ``arrays`` (of :meth:`flatten`'s shapes) instead of its own."""
        return self

    #: How many arrays :meth:`flatten` gives.
    arrays_held: int = 0

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        """Raise an attnkit error, before any work, where this mask cannot describe a call
        of geometry ``g`` on arrays of namespace ``xp`` and ``device`` (passed as the
        argument ``name``): arrays of another library or device, shapes that do not fit
        L or S, lengths beyond the keys, positions the mask does not define."""
        check_position_range(xp, device, g, name, self)

    def materialize(
        self, xp: Any, L: int, S: int, *, device: Any = None, q_offset: int = 0, kv_offset: int = 0
    ) -> Any:
        """The dense bool mask (..., L, S) (leading dims as the mask carries them)."""
        t = Tile(xp, device, Geometry(L, S, q_offset, kv_offset), 0, L, [(0, S)])
        allowed = self.tile(t) if L and S else None
        if allowed is None:
            return xp.ones((*self.lead, L, S), dtype=xp.bool, device=device)
        return xp.broadcast_to(allowed, (*self.lead, L, S))

    def density(
        self, xp: Any, L: int, S: int, *, device: Any = None, q_offset: int = 0, kv_offset: int = 0
    ) -> float:
        """Fraction of allowed (query, key) pairs, averaged over the mask's leading dims.

        Counted tile by tile over the key ranges, so memory stays O(rows x S)."""
        if L == 0 or S == 0:
            return 0.0
        g = Geometry(L, S, q_offset, kv_offset)
        rows = max(1, 2**22 // max(S, 1))
        allowed = 0.0
        for q_lo in range(0, L, rows):
            q_hi = min(L, q_lo + rows)
            ranges = clip_ranges(self.key_ranges(g, q_lo, q_hi), S)
            if not ranges:
                continue
            tile = self.tile(Tile(xp, device, g, q_lo, q_hi, ranges))
            width = sum(hi - lo for lo, hi in ranges)
            if tile is None:
                allowed += (q_hi - q_lo) * width
            else:
                full = xp.broadcast_to(tile, (*self.lead, q_hi - q_lo, width))
                allowed += float(xp.count_nonzero(full)) / max(1, prod(self.lead))
        return allowed / (L * S)

    def __and__(self, other: Mask) -> Mask:
        return _Combined("and", (self, _check_mask(other)))

    def __or__(self, other: Mask) -> Mask:
        return _Combined("or", (self, _check_mask(other)))


def _check_mask(other: Any) -> Mask:
    if not isinstance(other, Mask):
        raise ArgumentTypeError(
            f"masks combine with other attnkit.masks objects, got {type(other).__name__}; wrap "
            "a bool array with attnkit.masks.dense(array)."
        )
    return other


def _broadcast_lead(*leads: tuple[int, ...]) -> tuple[int, ...]:
    lead = broadcast_shapes(*leads)
    if lead is None:
        raise ParameterError(f"combined masks carry leading dims that do not broadcast: {leads}.")
    return lead


@dataclass(frozen=True)
class _Combined(Mask):
    op: str
    parts: tuple[Mask, ...]

    def __post_init__(self) -> None:
        flat: list[Mask] = []
        for part in self.parts:  # (a & b) & c -> and(a, b, c)
            flat.extend(
                part.parts if isinstance(part, _Combined) and part.op == self.op else [part]
            )
        object.__setattr__(self, "parts", tuple(flat))

    @property
    def lead(self) -> tuple[int, ...]:  # type: ignore[override]
        return _broadcast_lead(*(p.lead for p in self.parts))

    @property
    def translation_invariant(self) -> bool:  # type: ignore[override]
        return all(p.translation_invariant for p in self.parts)

    @property
    def banded(self) -> bool:  # type: ignore[override]
        return self.op == "and" and all(p.banded for p in self.parts)

    @property
    def holds_data(self) -> bool:  # type: ignore[override]
        return any(p.holds_data for p in self.parts)

    def key_ranges(self, g: Geometry, q_lo: int, q_hi: int) -> Ranges:
        ranges = [p.key_ranges(g, q_lo, q_hi) for p in self.parts]
        if self.op == "or":
            return merge_ranges([r for rs in ranges for r in rs])
        out = ranges[0]
        for r in ranges[1:]:
            out = intersect_ranges(out, r)
        return out

    def flatten(self) -> tuple[Any, tuple[Any, ...]]:
        flat = [p.flatten() for p in self.parts]
        return ("combined", self.op, tuple(k for k, _ in flat)), tuple(
            a for _, x in flat for a in x
        )

    def unflatten(self, arrays: tuple[Any, ...]) -> Mask:
        parts, at = [], 0
        for p in self.parts:
            n = p.arrays_held
            parts.append(p.unflatten(tuple(arrays[at : at + n])))
            at += n
        return _Combined(self.op, tuple(parts))

    @property
    def arrays_held(self) -> int:  # type: ignore[override]
        return sum(p.arrays_held for p in self.parts)

    def tile_kind(self, g: Geometry, q_lo: int, q_hi: int, k_lo: int, k_hi: int) -> int:
        kinds = [p.tile_kind(g, q_lo, q_hi, k_lo, k_hi) for p in self.parts]
        if self.op == "or":
            return FULL if FULL in kinds else (EMPTY if all(k == EMPTY for k in kinds) else PARTIAL)
        if EMPTY in kinds or not clip_ranges(
            intersect_ranges(self.key_ranges(g, q_lo, q_hi), [(k_lo, k_hi)]), g.S
        ):
            return EMPTY
        return FULL if all(k == FULL for k in kinds) else PARTIAL

    def tile_live(self, xp: Any, device: Any, g: Geometry, rows: int, cols: int) -> Any:
        lives = [p.tile_live(xp, device, g, rows, cols) for p in self.parts]
        if self.op == "or" and any(x is None for x in lives):
            return None  # a part known only statically may attend any candidate tile
        out = None
        for x in lives:
            if x is not None:
                out = x if out is None else (out & x if self.op == "and" else out | x)
        return out

    def key_alive(self, xp: Any, device: Any, g: Geometry) -> Any:
        alive = [p.key_alive(xp, device, g) for p in self.parts]
        if self.op == "or" and any(a is None for a in alive):
            return None  # a part that declares nothing may attend any column
        out = None
        for a in alive:
            if a is not None:
                out = a if out is None else (out & a if self.op == "and" else out | a)
        return out

    def check(self, xp: Any, device: Any, g: Geometry, name: str) -> None:
        for part in self.parts:
            part.check(xp, device, g, name)

    def tile(self, t: Tile) -> Any:
        tiles = [p.tile(t) for p in self.parts]
        if self.op == "and":
            out = None
            for x in tiles:
                out = and_tiles(out, x)
            return out
        if any(x is None for x in tiles):
            return None
        out = tiles[0]
        for x in tiles[1:]:
            out = out | x
        return out

    def __repr__(self) -> str:
        return f" {'&' if self.op == 'and' else '|'} ".join(f"({p!r})" for p in self.parts)
