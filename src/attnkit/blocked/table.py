"""The tile table of a call: which (query block, key block) tiles it attends, and how.

The L x S pairs are cut into tiles of ``rows`` x ``cols`` (blocks counted from position 0
of the call), each one of::

    empty     no pair allowed                    never computed
    full      every pair allowed                 computed without a mask
    partial   some pairs allowed                 computed with the tile's mask

as FlexAttention's ``BlockMask``, built from the structure; for masks held as data
:func:`live_tiles` reads at run time which tiles hold a pair.

    causal, L = S = 4 blocks        documents([2 blocks, 2 blocks]) & causal
    P . . .                         P . . .
    F P . .                         F P . .
    F F P .                         . . P .
    F F F P                         . . F P
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..masks import EMPTY, FULL, clip_ranges, tile_any
from ..problem import Problem

__all__ = ["TileTable", "band_width", "build_band", "build_table", "live_tiles", "tile_ids"]


@dataclass(frozen=True)
class TileTable:
    """The tiles a call attends: ``full`` and ``partial`` list (i, j), query block i
    (rows [i * rows, (i + 1) * rows)) against key block j (columns [j * cols, (j + 1) *
    cols)), in row-major order. ``dynamic``: the partial tiles' liveness is read from
    the mask's data at run time (:func:`live_tiles`). ``band``: one tile per query block
    whose columns start where its rows' keys do (j is then that first column, not a
    block index): a window's query blocks each read one run of keys of the same width,
    in one trip of the loop rather than two or three tiles of the grid."""

    rows: int
    cols: int
    L: int
    S: int
    full: tuple[tuple[int, int], ...]
    partial: tuple[tuple[int, int], ...]
    dynamic: bool = False
    band: bool = False

    @property
    def n_q(self) -> int:
        return -(-self.L // self.rows)

    @property
    def n_k(self) -> int:
        return -(-self.S // self.cols)

    def key_start(self, j: int) -> int:
        """The first key column of the tiles of column j."""
        return j if self.band else j * self.cols

    def tile_id(self, i: int, j: int) -> int:
        """A tile's number in the call (its dropout stream): i * n_k + j on the grid, i in
        a band (one tile per query block)."""
        return i if self.band else i * self.n_k + j

    @property
    def padded_keys(self) -> int:
        """The key rows the loop's slices reach: S padded to whole tiles."""
        if not self.band:
            return self.n_k * self.cols
        ends = [self.key_start(j) + self.cols for _, j in (*self.full, *self.partial)]
        return max([self.S, *ends])

    @property
    def tiles(self) -> int:
        return len(self.full) + len(self.partial)

    @property
    def skipped(self) -> int:
        """Tiles of the L x S grid never computed (statically empty); in a band, the
        query blocks that reach no key."""
        return (self.n_q if self.band else self.n_q * self.n_k) - self.tiles


def band_width(p: Problem, rows: int) -> int | None:
    """The widest run of key columns a query block of ``rows`` reads, where every block
    reads one run (a band: windows, with either alignment and any offsets) and the call
    has no mask data or ``attn_mask`` array; else None."""
    s = p.structure
    if s is None or not s.banded or s.holds_data or p.mask is not None:
        return None
    widest = 0
    for q_lo in range(0, p.L, rows):
        ranges = clip_ranges(s.key_ranges(p.geometry, q_lo, min(p.L, q_lo + rows)), p.S)
        if len(ranges) > 1:
            return None
        if ranges:
            widest = max(widest, ranges[0][1] - ranges[0][0])
    return widest


def build_band(p: Problem, rows: int, cols: int) -> TileTable:
    """One tile of ``rows`` x ``cols`` per query block that reaches a key, starting at
    its first key (moved left to end by S where it would pass it); ``cols`` at least
    :func:`band_width`."""
    s, g = p.structure, p.geometry
    full: list[tuple[int, int]] = []
    partial: list[tuple[int, int]] = []
    for i in range(-(-p.L // rows)):
        q_lo, q_hi = i * rows, min(p.L, (i + 1) * rows)
        ranges = clip_ranges(s.key_ranges(g, q_lo, q_hi), p.S)
        if not ranges:
            continue
        start = min(ranges[0][0], max(0, p.S - cols))
        kind = s.tile_kind(g, q_lo, q_hi, start, min(p.S, start + cols))
        if kind == EMPTY:
            continue
        ragged = start + cols > p.S  # padded keys: masked
        (full if kind == FULL and not ragged else partial).append((i, start))
    return TileTable(rows, cols, p.L, p.S, tuple(full), tuple(partial), band=True)


def build_table(p: Problem, rows: int, cols: int, padded: bool = False) -> TileTable:
    """The table of ``p`` in tiles of ``rows`` x ``cols``. ``padded``: the loop pads the
    keys to whole tiles (a compiled loop's uniform slices), so a last key block shorter
    than ``cols`` is partial (its padded columns are masked)."""
    s, g = p.structure, p.geometry
    n_q, n_k = -(-p.L // rows), -(-p.S // cols)
    data = p.mask is not None or (s is not None and s.holds_data)
    ragged = padded and p.S % cols != 0
    full: list[tuple[int, int]] = []
    partial: list[tuple[int, int]] = []
    for i in range(n_q):
        q_lo, q_hi = i * rows, min(p.L, (i + 1) * rows)
        if s is None:
            js = range(n_k)
        else:
            ranges = clip_ranges(s.key_ranges(g, q_lo, q_hi), p.S)
            js = sorted({j for lo, hi in ranges for j in range(lo // cols, -(-hi // cols))})
        for j in js:
            k_lo, k_hi = j * cols, min(p.S, (j + 1) * cols)
            kind = FULL if s is None else s.tile_kind(g, q_lo, q_hi, k_lo, k_hi)
            if kind == EMPTY:
                continue
            if kind == FULL and not data and not (ragged and j == n_k - 1):
                full.append((i, j))
            else:
                partial.append((i, j))
    return TileTable(rows, cols, p.L, p.S, tuple(full), tuple(partial), data)


def live_tiles(p: Problem, ops: Any, rows: int, cols: int, user_mask: bool = True) -> Any:
    """Bool (n_q, n_k) of the tiles of ``rows`` x ``cols`` whose mask data allows some
    pair (the structure's :meth:`~attnkit.masks.Mask.tile_live`, and with ``user_mask``
    the ``attn_mask`` array's, ANDed), in the call's namespace (traced under
    ``jax.jit``), or None where nothing is read at run time."""
    xp = p.xp
    live = None
    if p.structure is not None:
        live = p.structure.tile_live(xp, p.device, p.geometry, rows, cols)
    if user_mask and ops.allowed_mask is not None:
        user = tile_any(xp, ops.allowed_mask, rows, cols)
        live = user if live is None else live & user
    if live is None:
        return None
    return xp.broadcast_to(live, (-(-p.L // rows), -(-p.S // cols)))


def tile_ids(table: TileTable, tiles: tuple[tuple[int, int], ...]) -> list[int]:
    """Each tile's number (:meth:`TileTable.tile_id`): its dropout stream and, on the
    grid, its place in the flattened liveness."""
    return [table.tile_id(i, j) for i, j in tiles]
